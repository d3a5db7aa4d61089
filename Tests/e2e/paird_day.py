#!/usr/bin/python3
# testbed: mode=plain timeout=300 wearables=strap
"""Issue 33, "What it must show", first bullet: a scripted day (seconds, not hours) whose every
event's time the scenario takes itself, against what `pairctl history --json` reports.

The day, on the Bumble strap, in this order: two walks away of known lengths (2 s, 5 s), a
bluetoothd crash (SIGSEGV; the scenario starts it again), a user disconnect (`pairctl disconnect`,
2 s, `pairctl connect`), a battery drain across [Alerts] BatteryLow (30 → 20 → 14 → 9 with
BatteryLow 15), a stall (the strap drops its heart-rate subscription and leaves ATT unanswered on
the live link: paird's silence watch probes, the probe times out, paird ends the link, the strap's
next link works), a paird restart (SIGTERM; the new paird adopts the link). Then `pairctl history
--json --since <a moment after the first connect>` must give:
- exactly these drops, in order, with their reasons: link-loss, link-loss, bluetoothd-gone, user,
  link-loss (detail probe-timeout); nothing for the restart (a stop and a start, the time between
  left out as unknown) nor for the battery (readings). The plain bed has no systemd to tell paird
  that bluetoothd *crashed*, so its reason here is bluetoothd-gone (`bluetoothd-crash` is
  paird_bluetoothd_crash's, in systemd mode).
- each drop's instant within 1 s of the script's: a walk's is the strap's own `disconnected` event
  (the strap's clock is the guest's CLOCK_MONOTONIC less its start, calibrated against a command's
  reply to a few ms, then wall time); bluetoothd's is the moment SIGSEGV was sent (the kernel keeps
  the link: the strap sees nothing then); the user's lies between `pairctl disconnect`'s start
  and its return (paird records the user's choice when it answers the call: pairctl's own start
  took over 1 s under load in a clean clone, so no fixed tolerance; BlueZ ends the link up to 2 s
  later); the
  stall's is the stall sent + 4 s: the strap's last notification (within 1 s before) + SilencePeriods
  2 × its 1 s period + ProbeTimeout 2 s, when paird gives up on the link.
- each outage (the record's drop → its next `up`, what availability counts) within 1 s of the
  script's: that drop instant → the moment the scenario received paird's sd_notify STATUS
  "… connected" (another channel than the record). For the two walks also: the record's link-up
  instant (`up` less its `latency`) within 1 s of the strap's own `connected` event.
- the battery: each level sent recorded once, in order; history's first, last and count.
- availability, with no tolerance that grows with the number of intervals: the reported seconds
  equal the record's own instants (to the ms): away + down = the record's outages (each drop → its
  next `up`, the user's return → its `up`, the strap's first line after the restart → its `up`),
  not wanted = the user's drop → the user's return, unknown (left out) = the restart's `stop` →
  the strap's first line after the `start` (paird knows nothing of it before); wanted =
  connected + away + down, the window = wanted + left out, availability = connected / wanted.
  Those instants against the script's, each bracketed by two instants the script took itself
  (load cannot widen them): the user's drop within `pairctl disconnect`, its return within
  `pairctl connect`, the `stop` line between SIGTERM and paird's exit, the `start` line between the
  new paird's launch and its READY, and its link by paird's STATUS connected.

kill -9 in the middle of a record write (BED_X_KILLS times: 5 by default, within the 120 s budget,
about 2.5-4 s a kill; BED_X_KILLS=10 passed too): a thread sends the strap `battery` levels, at most
10 a second (each one notified, each a `battery` line paird writes), and strace holds
paird's every fsync at its entry for 1 s: the scenario waits until /proc says paird is inside fsync of history.jsonl (its
line written, not yet synced), reads the file, kills paird with SIGKILL then. After each: the bytes
read before are a prefix of the file after (the line being written included: nothing lost or
changed); every line with its newline is whole; paird started again keeps every whole line (cuts
at most a torn tail), appends its `start` first and goes on appending; at the end `pairctl history
--json` reads it all with no skipped line.
What this proves: a SIGKILL between a record's write and its fsync, every time at the same
point of paird's append, loses nothing written before and the restart goes on. What it does not:
power loss or a kernel crash (the bed's /var/lib is a tmpfs overlay: fsync reaches no disk), and a
torn line from a kill (Linux does not tear one small write(2) to a regular file on SIGKILL, so none
appears here: cutting a torn tail and `pairctl history` skipping a torn line are HistoryStoreTests'
and the HistoryRecord parse tests')."""
import contextlib
import datetime
import json
import os
import signal
import subprocess
import threading
import time

from bedlib import *

HISTORY = "/var/lib/paird/history.jsonl"
KILLS = int(os.environ.get("BED_X_KILLS", "5"))
PIDF = "/run/bed/bluetoothd.pid"
AWAYS = (2.0, 5.0)
USER_OFF = 2.0
LEVELS = (30, 20, 14, 9)
TOL = 1.0
SLOP = 0.05   # the record's instants are in ms; the script's wall() and paird's clock are the same guest clock
WALL = time.time() - time.monotonic()   # wall = monotonic + WALL (the guest's clock does not step here)


def wall(t_mono):
    return t_mono + WALL


def iso(t_wall):
    return datetime.datetime.fromtimestamp(t_wall, datetime.timezone.utc).isoformat(timespec="milliseconds")


def parse_iso(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


class StrapClock:
    """The strap's event times (`t`: its time.monotonic() less its own T0) on this clock: T0 from
    the reply of a command whose event `t` is taken while we wait, the shortest of 5 round trips."""

    def __init__(self, w):
        best = None
        for _ in range(5):
            seq = w.last_seq()
            m0 = now()
            w.cmd("battery 87")
            m1 = now()
            e = [e for e in w.events(seq) if e["event"] == "battery"][-1]
            if best is None or m1 - m0 < best[0]:
                best = (m1 - m0, (m0 + m1) / 2 - e["t"])
        self.rtt, self.t0 = best
        log(f"strap clock: offset {self.t0:.3f} s, ±{self.rtt / 2 * 1000:.1f} ms (half the best round trip)")

    def wall(self, e):
        return wall(self.t0 + e["t"])


def connected_note(p, w, after):
    """paird's STATUS "… (addr) connected" received after monotonic `after`: (time, line)."""
    return wait_for(lambda: next(((t, n) for t, n in list(p.notes) if t >= after and n.startswith("STATUS=")
                                  and n.endswith(f"({w.address}) connected")), None), 60, "paird's STATUS … connected")


def paird_connected(p, w, after):
    """When the scenario received paird's STATUS "… (addr) connected" (sd_notify, read by a thread
    as it arrives), the first after monotonic `after`."""
    return connected_note(p, w, after)[0]


def last_event(w, seq, name):
    ev = [e for e in w.events(seq) if e["event"] == name]
    return ev[-1] if ev else None


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


@scenario
def main():
    w = Wearable.start(name="Pulse-1", battery=87)
    p = Paird()
    p.write_config("[Health]\nSilencePeriods = 2\nSilenceMinimum = 1\nProbeTimeout = 2\n"
                   "[Alerts]\nBatteryLow = 15\nBatteryHysteresis = 5\n"
                   # every battery level a line: the day's drain and the kill -9 part's writes
                   # (paird's default records a change of 5 % at most every 10 min)
                   "[History]\nBatteryStep = 1\nBatteryInterval = 0\n")
    with step("paird up, the strap paired and connected; the strap's clock calibrated"):
        p.start()
        pair_wearable(p)
        p.wait_state("connected", 20)
        clock = StrapClock(w)
        bed_sleep(1, "connected a moment before the day starts")
        since = wall(now())
        log(f"the day starts at {iso(since)} (pairctl history --since)")

    # The script's own account: drops (expected reason, drop instant, return instant), and the
    # intervals that are not "connected": (kind, start, end) with kind away/down/unwanted/unknown.
    drops, intervals = [], []

    def away_and_back(secs):
        seq = w.last_seq()
        w.cmd("walk-away")
        w.wait_event("disconnected", 10, since=seq)
        bed_sleep(secs, f"the strap stays away {secs:g} s")
        m = now()
        w.cmd("come-back")
        off = clock.wall(w.wait_event("disconnected", 5, since=seq))
        back = wall(paird_connected(p, w, m))
        link = clock.wall(last_event(w, seq, "connected"))
        log(f"strap: away {link - off:.2f} s (disconnected → connected events; scripted {secs:g} s, come-back sent "
            f"{wall(m) - off:.2f} s after its disconnect); paird connected {back - link:.2f} s after the strap's link")
        drops.append(("link-loss", None, off, back, link))
        intervals.append(("away", off, back))

    for k, secs in enumerate(AWAYS):
        with step(f"walk {k + 1}: away {secs:g} s and back"):
            away_and_back(secs)

    with step("bluetoothd crash (SIGSEGV), started again by the scenario → connected"):
        seq = w.last_seq()
        pid = int(open(PIDF).read().strip())
        tk = now()
        os.kill(pid, signal.SIGSEGV)
        wait_for(lambda: process_gone(pid) and not bluez_owned(), 15, f"bluetoothd {pid} gone", interval=0.05)
        os.unlink(PIDF)
        p.wait_state("adapterUnavailable", 15)
        bluetoothd("start")
        back = wall(paird_connected(p, w, tk))
        link = clock.wall(last_event(w, seq, "connected"))
        log(f"bluetoothd killed → the strap's new link {link - wall(tk):.2f} s later, paird connected {back - wall(tk):.2f} s later")
        drops.append(("bluetoothd-gone", None, wall(tk), back, link))
        intervals.append(("down", wall(tk), back))

    with step(f"user: pairctl disconnect, {USER_OFF:g} s, pairctl connect → connected"):
        seq = w.last_seq()
        td = now()
        rc, _, err = p.pairctl("disconnect")
        user_call = (wall(td), wall(now()))   # paird records the choice within the call
        check(rc == 0, f"pairctl disconnect exit 0 ({err.strip()})")
        p.wait_state("disconnected", 15)
        link_off = clock.wall(w.wait_event("disconnected", 10, since=seq))
        off = wall(td)
        log(f"pairctl disconnect started → the strap's disconnect {link_off - off:.2f} s")
        bed_sleep(USER_OFF, "disconnected by the user")
        tc = now()
        rc, _, err = p.pairctl("connect")
        connect_call = (wall(tc), wall(now()))   # paird records the user's return within the call
        check(rc == 0, f"pairctl connect exit 0 ({err.strip()})")
        back = wall(paird_connected(p, w, tc))
        link = clock.wall(last_event(w, seq, "connected"))
        drops.append(("user", None, off, back, link))
        intervals.append(("unwanted", off, wall(tc)))
        intervals.append(("away", wall(tc), back))

    with step(f"battery drain across BatteryLow 15: {' → '.join(map(str, LEVELS))}"):
        for level in LEVELS:
            w.cmd(f"battery {level}")
            wait_for(lambda: p.device().get("battery") == level, 20, f"battery {level} in status")

    with step("stall: the strap drops its subscription and stalls ATT on the live link → paird probes, ends the link"):
        tw = now()
        wait_for(lambda: (p.device().get("health") or {}).get("check") == "silence", 30, "the silence watch on")
        log(f"the silence watch was on after {now() - tw:.2f} s")
        seq = w.last_seq()
        ts = now()
        w.cmd("drop-subscription hr")
        w.cmd("stall-att now")
        d = w.wait_event("disconnected", 40, since=seq)
        # paird ends the link when its probe times out: the strap's last notification (within 1 s
        # before the stall) + SilencePeriods 2 × its 1 s period + ProbeTimeout 2 s, so at most
        # 4 s after the stall (the record's drop is that decision; the strap sees the link end
        # when BlueZ's Disconnect() gets through, later)
        off = wall(ts) + 4.0
        log(f"stall sent → the strap's disconnect {clock.wall(d) - wall(ts):.2f} s")
        seq2 = d["seq"]
        wait_for(lambda: last_event(w, seq2, "connected"), 60, "the strap's next link")
        back = wall(paird_connected(p, w, clock.t0 + d["t"]))
        link = clock.wall(last_event(w, seq2, "connected"))
        log(f"stall: link ended by paird, the next link {link - off:.2f} s later, paird connected {back - link:.2f} s after it")
        drops.append(("link-loss", "probe-timeout", off, back, link))
        intervals.append(("away", off, back))

    with step("paird restart (SIGTERM) while connected: the new paird adopts the link, no drop"):
        seq = w.last_seq()
        tt = now()
        check(p.stop() == 0, "paird exit 0")
        t_gone = wall(now())   # paird gone (its stop line written); the new one launched next
        t_ready = p.start()
        t_conn, _ = connected_note(p, w, t_ready - 1)
        log(f"paird: SIGTERM → READY {t_ready - tt:.2f} s, READY → connected {t_conn - t_ready:.2f} s")
        check(last_event(w, seq, "disconnected") is None, "the strap saw no disconnect")
        intervals.append(("unknown", wall(tt), wall(t_ready)))
        restart = (wall(tt), wall(t_ready), wall(t_conn))
        intervals.append(("down", wall(t_ready), wall(t_conn)))

    with step("pairctl history --json: the drops, their reasons and instants, the outages, battery, availability"):
        bed_sleep(1, "connected a moment after the day")
        rc, out, err = p.pairctl("history", "--json", "--since", iso(since))
        check(rc == 0, f"pairctl history exit 0 ({err.strip()})")
        doc = json.loads(out)
        with open(os.path.join(OUT, "history-day.json"), "w") as f:
            f.write(out)
        devs = [d for d in doc["devices"] if d["address"] == w.address]
        check(len(devs) == 1, f"one device in the record: {[d['address'] for d in doc['devices']]}")
        h = devs[0]
        until = parse_iso(doc["until"])
        check(doc["skippedLines"] == 0, f"no skipped line ({doc['skippedLines']})")
        got = [(d["reason"], d.get("detail")) for d in h["drops"]]
        log(f"record's drops: {got}")
        log(f"script's drops: {[(r, d) for r, d, *_ in drops]}")
        check([r for r, _ in got] == [r for r, *_ in drops], "exactly the script's drops, in order, with their reasons")
        for (reason, detail, *_), (_, gd) in zip(drops, got):
            if detail:
                check(gd == detail, f"{reason}: detail {gd!r} = {detail!r}")
        # the record's own up instants, from the file (pairctl history gives drops, not returns)
        recs = [json.loads(l) for l in read_bytes(HISTORY).decode().splitlines() if l.startswith("{")]
        what = ["the strap's disconnect"] * len(AWAYS) + ["SIGSEGV sent", "pairctl disconnect run",
                                                          "the stall sent + 4 s (its expected end)"]
        ups = [(parse_iso(r["at"]), r.get("latency")) for r in recs if r["type"] == "up" and r.get("device") == w.address]
        for i, ((reason, _, s_off, s_back, s_link), d) in enumerate(zip(drops, h["drops"])):
            r_off = parse_iso(d["at"])
            r_back, lat = min(u for u in ups if u[0] > r_off)
            log(f"drop {i + 1} {reason}: record {iso(r_off)} → up {iso(r_back)} ({r_back - r_off:.2f} s, latency {lat}); "
                f"script: {what[i] if i < len(what) else '?'} {iso(s_off)} → "
                f"paird's STATUS connected {iso(s_back)} ({s_back - s_off:.2f} s), the strap linked {iso(s_link)}; "
                f"drop Δ {r_off - s_off:+.3f} s, return Δ {r_back - s_back:+.3f} s")
            if reason == "user":
                check(user_call[0] - SLOP <= r_off <= user_call[1] + SLOP,
                      f"drop {i + 1} (user) within the pairctl disconnect call ({r_off - user_call[0]:+.3f} s after its start, "
                      f"{r_off - user_call[1]:+.3f} s after its return)")
            else:
                check(abs(r_off - s_off) <= TOL, f"drop {i + 1} ({reason}) within {TOL:g} s of the script's instant ({r_off - s_off:+.3f} s)")
            if reason != "user":
                check(abs((r_back - r_off) - (s_back - s_off)) <= TOL,
                      f"outage {i + 1} ({reason}) within {TOL:g} s of the script's ({(r_back - r_off) - (s_back - s_off):+.3f} s)")
            if reason == "link-loss" and i < len(AWAYS):
                # the record's own set-up time: its link-up instant (up − latency) is the strap's link
                check(lat is not None and abs((r_back - lat) - s_link) <= TOL,
                      f"drop {i + 1}: the record's link-up (up − latency {lat}) within {TOL:g} s of the strap's connected event "
                      f"({(r_back - (lat or 0)) - s_link:+.3f} s)")
        # battery
        b = h.get("battery") or {}
        levels = [r["level"] for r in recs if r["type"] == "battery" and parse_iso(r["at"]) >= since]
        log(f"battery: {b}; readings in the file since the day started {levels}")
        check(levels == list(LEVELS), f"each level sent recorded once, in order: {levels}")
        check((b.get("first"), b.get("last"), b.get("readings")) == (LEVELS[0], LEVELS[-1], len(LEVELS)),
              f"history battery first {LEVELS[0]}, last {LEVELS[-1]}, {len(LEVELS)} readings")
        # Availability, with no band that widens per interval (issue 48): the record's own figures
        # are checked against the record's own instants (ms apart at most), and those instants
        # against the script's, each once: the drops and outages above; the user's time and the
        # restart here, each between two instants the script took itself (load cannot move them).
        mine = [r for r in recs if r.get("device") == w.address or r["type"] in ("start", "stop")]
        after = lambda t, kinds: min((parse_iso(r["at"]) for r in mine if r["type"] in kinds and parse_iso(r["at"]) > t), default=None)
        u_drop = parse_iso(h["drops"][[r for r, *_ in drops].index("user")]["at"])
        u_wanted = after(u_drop, ("change", "up"))      # pairctl connect: wanted again
        u_up = after(u_drop, ("up",))
        r_stop = max((parse_iso(r["at"]) for r in mine if r["type"] == "stop" and parse_iso(r["at"]) <= restart[1]), default=None)
        r_start = after(r_stop or 0, ("start",))
        # after a start paird knows nothing of the strap until its first line for it (reconciliation)
        r_known = after(r_start or 0, ("up", "down", "change"))
        r_start_up = after(r_start or 0, ("up",))
        check(None not in (u_wanted, u_up, r_stop, r_start, r_known, r_start_up),
              f"the record has the user's return, the restart's stop and start, the strap's first line and link after it "
              f"({u_wanted}, {u_up}, {r_stop}, {r_start}, {r_known}, {r_start_up})")
        log(f"record: user off {u_wanted - u_drop:.3f} s, then {u_up - u_wanted:.3f} s to the link; paird away "
            f"{r_start - r_stop:.3f} s (stop → start), start → the strap's first line {r_known - r_start:.3f} s → link "
            f"{r_start_up - r_known:.3f} s")
        outages = [min(u[0] for u in ups if u[0] > parse_iso(d["at"])) - parse_iso(d["at"])
                   for d in h["drops"] if d["reason"] != "user"]
        rec_not_conn = sum(outages) + (u_up - u_wanted) + (r_start_up - r_known)
        lf = h["leftOut"]
        EPS = 0.01 * (len(outages) + 2)   # the record's instants are whole ms
        log(f"availability: reported {h['availabilityPercent']} % (wanted {h['wantedSeconds']} s, connected "
            f"{h['connectedSeconds']} s, away {h['awaySeconds']} s, down {h['downSeconds']} s, left out {lf}); "
            f"the record's own outages {rec_not_conn:.3f} s in {len(outages) + 2} intervals")
        check(abs(h["awaySeconds"] + h["downSeconds"] - rec_not_conn) <= EPS,
              f"away + down {h['awaySeconds'] + h['downSeconds']:.3f} s = the record's outages {rec_not_conn:.3f} s")
        check(abs(lf["notWantedSeconds"] - (u_wanted - u_drop)) <= EPS,
              f"not wanted {lf['notWantedSeconds']} s = the record's user time {u_wanted - u_drop:.3f} s")
        check(abs(lf["unknownSeconds"] - (r_known - r_stop)) <= EPS,
              f"unknown {lf['unknownSeconds']} s = the record's stop → the strap's first line after the start {r_known - r_stop:.3f} s")
        wanted = h["connectedSeconds"] + h["awaySeconds"] + h["downSeconds"]
        check(abs(h["wantedSeconds"] - wanted) <= EPS and abs(wanted + lf["notWantedSeconds"] + lf["unknownSeconds"] - (until - since)) <= EPS,
              f"wanted = connected + away + down, and with the left-out time the whole window ({until - since:.3f} s)")
        check(abs(h["availabilityPercent"] - h["connectedSeconds"] / h["wantedSeconds"] * 100) <= 0.01,
              f"availability {h['availabilityPercent']} % = connected / wanted")
        # ... and those instants against the script's
        check(user_call[0] - SLOP <= u_drop <= user_call[1] + SLOP and connect_call[0] - SLOP <= u_wanted <= connect_call[1] + SLOP,
              f"the user's time: the record's {u_wanted - u_drop:.3f} s, its end within the pairctl connect call "
              f"({u_wanted - connect_call[0]:+.3f} s after its start, {u_wanted - connect_call[1]:+.3f} s after its return)")
        check(restart[0] - SLOP <= r_stop <= t_gone + SLOP and t_gone - SLOP <= r_start <= restart[1] + SLOP,
              f"the restart: stop line between SIGTERM and paird's exit ({r_stop - restart[0]:+.3f} s after SIGTERM), start "
              f"line between the new paird's launch and its READY ({r_start - t_gone:+.3f} s after the launch)")
        check(r_known <= r_start_up <= restart[2] + SLOP,
              f"the link after the restart recorded by paird's STATUS connected ({r_start_up - restart[2]:+.3f} s)")

    kill_nine(p, w)


def held_in_history_fsync(pid):
    """Whether a thread of `pid` is inside fsync(2) (74 on x86_64) of the history file: its
    /proc/<pid>/task/<tid>/syscall names the call and its first argument, the descriptor."""
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/syscall") as f:
                parts = f.read().split()
            if parts and parts[0] == "74" and os.readlink(f"/proc/{pid}/fd/{int(parts[1], 16)}") == HISTORY:
                return True
    return False


def complete(b):
    """The bytes up to and including the last newline."""
    i = b.rfind(b"\n")
    return b[:i + 1]


def kill_nine(p, w):
    stop = threading.Event()
    sent = [0]

    def pump():
        level = 40
        while not stop.is_set():
            level = 41 if level == 40 else 40
            try:
                w.cmd(f"battery {level}", timeout=5)
                sent[0] += 1
                # at most 10 a second, the rate the strap managed when Bumble ran in the guest
                # (333 in the five kills): a Bumble on the host answers at once, and a faster
                # flood only outruns the bed's bluetoothd under TCG (paird's fsync is held 1 s
                # each anyway, so more levels would not make more of its writes)
                time.sleep(0.1)
            except Exception:  # noqa: BLE001 - the strap busy or reconnecting: go on
                time.sleep(0.05)
    th = threading.Thread(target=pump, daemon=True)
    th.start()
    at_exit(stop.set)
    caught = 0
    try:
        for k in range(KILLS):
            with step(f"kill -9 {k + 1}/{KILLS} while paird writes battery lines: nothing earlier lost, paird goes on"):
                pid = p.pid()
                # strace holds every fsync of paird's at its entry for 1 s (the state file's too):
                # paird's append has written its line(s) and not yet synced them when it is killed
                tracer = subprocess.Popen(["strace", "-qq", "-f", "-p", str(pid), "-e", "trace=fsync",
                                           "-e", "inject=fsync:delay_enter=1000000", "-o", "/dev/null"])
                at_exit(lambda t=tracer: t.poll() is None and t.kill())
                held = wait_for(lambda: held_in_history_fsync(pid), 15, "paird inside fsync of history.jsonl", interval=0.01)
                before = read_bytes(HISTORY)
                os.kill(pid, signal.SIGKILL)
                wait_for(lambda: p.proc.poll() is not None, 10, "paird gone")
                caught += bool(held)
                try:
                    tracer.wait(5)
                except subprocess.TimeoutExpired:
                    tracer.kill()
                after = read_bytes(HISTORY)
                log(f"killed inside fsync of the history, after its write; file {len(before)} bytes read just before, "
                    f"{len(after)} after")
                check(after.startswith(before), "the bytes read before the kill are a prefix of the file after it")
                lines = after.split(b"\n")
                torn = lines[-1]
                check(all(l.startswith(b"{") and l.endswith(b"}") for l in lines[:-1] if l),
                      "every line with its newline is whole")
                if torn:
                    log(f"a torn last line ({len(torn)} bytes): {torn[:80]!r}")
                kept = complete(after)
                n_lines = kept.count(b"\n")
                p.start()
                wait_for(lambda: read_bytes(HISTORY).count(b"\n") > n_lines + 1, 30, "paird appending again after its restart")
                again = read_bytes(HISTORY)
                check(again.startswith(kept), "the restarted paird kept every whole line (cut at most the torn tail)")
                new = again[len(kept):].split(b"\n")
                check(b'"type":"start"' in new[0], f"its first line is its start: {new[0][:80]!r}")
        with step("after the kills: pairctl history reads the record whole, paird connected"):
            rc, out, err = p.pairctl("history", "--json")
            check(rc == 0, f"pairctl history exit 0 ({err.strip()})")
            doc = json.loads(out)
            check(doc["skippedLines"] == 0, f"no skipped line ({doc['skippedLines']})")
            nl = read_bytes(HISTORY).count(b"\n")
            log(f"{KILLS} kills, {caught} inside paird's fsync of the history; the strap sent {sent[0]} battery levels; "
                f"the record holds {nl} lines")
            p.wait_state("connected", 30)
    finally:
        stop.set()
        th.join(10)


main()
