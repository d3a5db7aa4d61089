#!/usr/bin/python3
# testbed: mode=plain timeout=10800 wearables=strap twin=no-bumble-only controllers=4
"""Flat over churn (issue 46, item 3), in the real-BlueZ test bed, real paird and pairctl: does
paird's memory stay flat across pairings, unpairings, walk-aways and bluetoothd restarts? A
benchmark: it prints figures and asserts nothing on time or memory. Three Bumble straps
(Pulse-1..3 on hci1..3, hence controllers=4) are paired, then step i = 1, 2, … does:
  1. while i <= BED_X_ROUNDS (200), a round: the next strap in turn (1, 2, 3, 1, …) is unpaired
     (`pairctl unpair`, until it is gone from `pairctl status`) and paired again (`pairctl pair
     --name`, until `pairctl watch` shows it connected and a notification after that), while
     the other two stay paired, connected and notifying (each must notify during the round).
     Unpair first, so that all three are paired between rounds; per strap it is the same chain,
     pair → notify → unpair → pair …;
  2. while i <= BED_X_WALKS (200), a walk: the strap after that one walks away (the wearable's
     `walk-away`), paird says waitingForDevice, it comes back at once (`come-back`), until
     connected and a notification after that;
  3. every BED_X_RESTART_EVERY (20) steps, a bluetoothd restart, until every strap is connected
     and notifying again; then SIGUSR1 to paird (it logs its loop's and bus's counts).
paird's VmRSS, RssAnon, RssFile (/proc/PID/status), open fds and threads are sampled after every
round and every walk into $BED_OUT/results.jsonl. Printed at the end: VmRSS and RssAnon at the
start, middle and end, and over the second half of the samples their least-squares slope (kB per
100 steps) and spread (max - min); the seconds a round, a walk and a restart took. Every wait
has a deadline; a failed round, walk or restart is logged and counted, the run goes on, and it
exits non-zero if any failed. If the guest kernel BUGs, it stops there and ends as a SKIP (as soak.py does).
BED_X_PAIRD_ARGS adds paird arguments.
The steady state (issue 46, item 2), before the rounds if BED_X_STEADY_S is set: paird with metrics on
(a textfile written every 15 s) and, with BED_X_RECORD (a record made by `HistoryBench generate`),
that record as its history; once the three straps notify, paird is restarted (it adopts the links)
as BED_X_BASE_PAIRD (another build, for comparison) if set, then as PAIRD_BIN, and each runs
BED_X_STEADY_S seconds with the three straps notifying at 1 Hz; VmRSS is sampled every 10 s from
its start (paird gives back its start-up code pages a minute after it starts: MappedText.swift).
Printed: VmRSS at 50 s, 70 s and the end, and the most after 70 s, per build. Each strap must notify
at least BED_X_STEADY_S / 2 - 30 times in each window (it notifies at 1 Hz). BED_X_ROUNDS=0 BED_X_WALKS=0 runs only that.
Run with release binaries (`make release`):
  BED_CONTROLLERS=4 PAIRD_BIN=$PWD/.build/release/paird PAIRCTL_BIN=$PWD/.build/release/pairctl \\
    Tests/testbed/run-vm --out testbed-out/soak-churn Tests/bench/soak_churn.py"""
import contextlib
import json
import os
import shutil
import signal
import statistics
import time

from bedlib import *  # noqa: F403

E = os.environ
ROUNDS = int(E.get("BED_X_ROUNDS", 200))
WALKS = int(E.get("BED_X_WALKS", 200))
RESTART_EVERY = int(E.get("BED_X_RESTART_EVERY", 20))
PAIRD_ARGS = E.get("BED_X_PAIRD_ARGS", "").split()
STEADY = int(E.get("BED_X_STEADY_S", 0))
BASE_PAIRD = E.get("BED_X_BASE_PAIRD", "")
RECORD = E.get("BED_X_RECORD", "")


def record(**kv):
    with open(os.path.join(OUT, "results.jsonl"), "a") as f:
        f.write(json.dumps(kv) + "\n")


def sample(pid):
    with open(f"/proc/{pid}/status") as f:
        st = dict(line.split(":", 1) for line in f if ":" in line)
    kb = lambda k: int(st[k].split()[0])   # noqa: E731
    return dict(pid=pid, vmrss=kb("VmRSS"), anon=kb("RssAnon"), file=kb("RssFile"),
                fds=len(os.listdir(f"/proc/{pid}/fd")), threads=int(st["Threads"]))


class Watch:
    """bedlib's PairctlWatch, its file read incrementally (re-reading a file that grows for hours
    at every poll would cost the emulated guest more than paird): per address, the states seen,
    each with the count of that address's notify lines before it."""

    def __init__(self, p):
        self.f = open(p.watch().path, errors="replace")
        self.rest, self.states, self.notifies = "", {}, {}

    def poll(self):
        self.rest += self.f.read()
        *done, self.rest = self.rest.split("\n")
        for f in (line.split() for line in done):
            if len(f) >= 4 and f[2] == "state":
                self.states.setdefault(f[1], []).append((f[3], self.notifies.get(f[1], 0)))
            elif len(f) >= 3 and f[2] == "notify":
                self.notifies[f[1]] = self.notifies.get(f[1], 0) + 1
        return self

    def mark(self, a):
        self.poll()
        return len(self.states.get(a, [])), self.notifies.get(a, 0)

    def saw(self, a, state, since):
        """[the notify count at the first `state` line of `a` after mark `since`], else None."""
        return next(([n] for s, n in self.poll().states.get(a, [])[since[0]:] if s == state), None)

    def flowing(self, a, since, deadline, what):
        """Until `a` is connected after mark `since` and a notification of it came after that."""
        n = wait_for(lambda: self.saw(a, "connected", since), deadline, f"{what}: state connected", interval=0.1)[0]
        wait_for(lambda: self.poll().notifies.get(a, 0) > n, 20, f"{what}: a notification", interval=0.1)


def pair(p, w):
    rc, _, err = p.pairctl("pair", "--name", w.label, "--timeout", "30", timeout=120)
    if rc != 0:
        raise BedError(f"pairctl pair --name {w.label}: exit {rc}: {err.strip()}")


def summary(samples, key, what):
    half = samples[len(samples) // 2:]
    fig = lambda s: f"{s[key]} kB (step {s['x']:g})"   # noqa: E731
    slope = statistics.linear_regression([s["x"] for s in half], [s[key] for s in half]).slope * 100 \
        if len({s["x"] for s in half}) > 1 else 0.0
    spread = max(s[key] for s in half) - min(s[key] for s in half)
    log(f"RESULT {what}: start {fig(samples[0])}, middle {fig(samples[len(samples) // 2])}, end {fig(samples[-1])}; "
        f"second half ({len(half)} samples): slope {slope:+.1f} kB per 100 steps (a round and a walk each), "
        f"spread {spread} kB")
    return dict(start=samples[0][key], middle=samples[len(samples) // 2][key], end=samples[-1][key],
                slope_per_100=round(slope, 2), spread=spread)


def steady(p, straps):
    import bedlib_paird
    figures = {}
    for label, binary in ([("base", BASE_PAIRD)] if BASE_PAIRD else []) + [("paird", PAIRD_BIN)]:  # noqa: F405
        with step(f"steady state, {label} ({binary}): {STEADY} s with three straps notifying"):
            p.stop()
            bedlib_paird.PAIRD_BIN = binary
            p.start(extra_args=PAIRD_ARGS)
            t0 = now()
            for w in straps:
                p.wait_state("connected", 60, address=w.address)
            watch = p.watch(name=f"watch-{label}")
            rows = []
            while now() - t0 < STEADY:
                time.sleep(max(0.0, 10 - (now() - t0) % 10))
                rows.append(dict(phase="steady", build=label, t=round(now() - t0, 1), **sample(p.pid())))
                record(**rows[-1])
            quiet = {w.label: n for w in straps
                     if (n := len([ln for ln in watch.lines("notify") if ln.split()[1] == w.address])) < STEADY / 2 - 30}
            watch.stop()
            at = lambda t: min(rows, key=lambda r: abs(r["t"] - t))["vmrss"]   # noqa: E731
            after = [r["vmrss"] for r in rows if r["t"] >= 70]
            figures[label] = dict(at50=at(50), at70=at(70), end=rows[-1]["vmrss"], max_after70=max(after, default=None),
                                  anon_end=rows[-1]["anon"], file_end=rows[-1]["file"])
            log(f"RESULT steady {label}: VmRSS at 50 s {figures[label]['at50']} kB, at 70 s {figures[label]['at70']} kB, "
                f"end ({rows[-1]['t']:.0f} s) {figures[label]['end']} kB (RssAnon {figures[label]['anon_end']}, "
                f"RssFile {figures[label]['file_end']}), most after 70 s {figures[label]['max_after70']} kB")
            check(not quiet, f"every strap notified through the window (fewer than {STEADY / 2 - 30:.0f}: {quiet})")
    record(part="steady", seconds=STEADY, record=RECORD, **figures)
    bedlib_paird.PAIRD_BIN = PAIRD_BIN   # noqa: F405


@scenario
def main():
    straps = [Wearable.start(name=f"Pulse-{i}", adapter=f"hci{i}", sock=f"/run/bed/strap{i}.sock", profile="strap",
                             extra=() if i == 1 else ("--address", f"F3:5A:B1:00:01:{i:02X}")) for i in (1, 2, 3)]
    for i, w in enumerate(straps, 1):
        w.label = f"Pulse-{i}"   # its advertised name (Wearable.name asks its control socket)
    p = Paird()
    if STEADY:
        p.write_config("[Metrics]\nTextfile = /run/bed/paird.prom\nInterval = 15\n")
    if RECORD:
        shutil.copy(RECORD, os.path.join(os.path.dirname(p.state_file), "history.jsonl"))
    with step("paird up, the three straps paired, connected and notifying"):
        p.start(extra_args=PAIRD_ARGS)
        watch = Watch(p)
        for w in straps:
            m = watch.mark(w.address)
            pair(p, w)
            watch.flowing(w.address, m, 60, w.label)
    if STEADY:
        steady(p, straps)
        watch = Watch(p)
    samples, failed, took, bug = [], {"round": [], "walk": [], "restart": []}, {"round": [], "walk": [], "restart": []}, None

    def recover(w):
        if not p.running():
            log("paird is not running: starting it again")
            p.start(extra_args=PAIRD_ARGS)
        with contextlib.suppress(BedError):
            if not w.status()["connected"]:
                w.cmd("come-back")
            if p.device(w.address) is None:
                pair(p, w)

    def attempt(kind, i, w, action):
        t = now()
        try:
            action()
        except BedError as e:
            failed[kind].append(i)
            log(f"{kind} {i} ({w.label if w else 'all'}) FAILED: {e}")
            p.diagnose()
            return kernel_bug()
        took[kind].append(now() - t)
        if kind != "restart":
            samples.append(dict(kind=kind, i=i, x=i + (kind == "walk") / 2, t=round(now() - T0, 1),
                                seconds=round(now() - t, 2), **sample(p.pid())))
            record(**samples[-1])
        return None

    def round_(w, others):
        marks = {o.address: watch.mark(o.address) for o in others}
        rc, _, err = p.pairctl("unpair", w.address)
        if rc != 0:
            raise BedError(f"pairctl unpair {w.label}: exit {rc}: {err.strip()}")
        wait_for(lambda: p.device(w.address) is None, 30, f"{w.label} gone from pairctl status", interval=0.5)
        m = watch.mark(w.address)
        pair(p, w)
        watch.flowing(w.address, m, 60, f"{w.label} paired again")
        quiet = [o.label for o in others if watch.poll().notifies.get(o.address, 0) <= marks[o.address][1]]
        if quiet:
            raise BedError(f"no notification during the round from {quiet}")

    def walk(w):
        m = watch.mark(w.address)
        w.cmd("walk-away")
        wait_for(lambda: watch.saw(w.address, "waitingForDevice", m), 30,
                 f"{w.label}: waitingForDevice", interval=0.1)
        m = watch.mark(w.address)
        w.cmd("come-back")
        watch.flowing(w.address, m, 90, f"{w.label} back")

    def restart():
        marks = {w.address: watch.mark(w.address) for w in straps}
        bluetoothd("restart")
        for w in straps:
            watch.flowing(w.address, marks[w.address], 90, f"{w.label} after the bluetoothd restart")
        # paird's own counts into its log (timers, fds, pending calls, signal subscriptions,
        # exported objects): the trail of anything that grows with the restarts
        os.kill(p.pid(), signal.SIGUSR1)

    steps = max(ROUNDS, WALKS)
    log(f"{ROUNDS} rounds, {WALKS} walks, a bluetoothd restart every {RESTART_EVERY} steps: {steps} steps")
    for i in range(1, steps + 1):
        w, v = straps[(i - 1) % 3], straps[i % 3]
        if i <= ROUNDS and (bug := attempt("round", i, w, lambda: round_(w, [o for o in straps if o is not w]))):
            break
        if i in failed["round"]:
            recover(w)
        if i <= WALKS and (bug := attempt("walk", i, v, lambda: walk(v))):
            break
        if i in failed["walk"]:
            recover(v)
        if RESTART_EVERY and i % RESTART_EVERY == 0:
            if (bug := attempt("restart", i, None, restart)):
                break
            if i in failed["restart"]:
                with contextlib.suppress(BedError):
                    if bluetoothd("status") != "active":
                        bluetoothd("start")
        if samples:
            s = samples[-1]
            log(f"step {i}: VmRSS {s['vmrss']} kB, RssAnon {s['anon']} kB, RssFile {s['file']} kB, {s['fds']} fds, "
                f"{s['threads']} threads; failed so far {sum(map(len, failed.values()))}")

    for kind, t in took.items():
        if t:
            log(f"RESULT {kind}s: {len(t)} done in {sum(t):.0f} s: median {statistics.median(t):.2f} s, "
                f"max {max(t):.2f} s each")
    for kind, f in failed.items():
        log(f"RESULT {kind}s failed: {len(f)}" + (f" ({f})" if f else ""))
    result = dict(part="summary", failed=failed, rounds=len(took["round"]), walks=len(took["walk"]))
    if len(samples) >= 4:
        result.update(vmrss=summary(samples, "vmrss", "VmRSS"), anon=summary(samples, "anon", "RssAnon"))
        log(f"RESULT fds {samples[0]['fds']} → {samples[-1]['fds']}, threads {samples[0]['threads']} → "
            f"{samples[-1]['threads']}, RssFile {samples[0]['file']} → {samples[-1]['file']} kB")
    record(**result)
    if bug:
        skip(f"blocked by kernel bug ({bug}): the run stopped there; see the RESULT lines")
    check(not any(failed.values()), "every round, walk and bluetoothd restart succeeded")


main()
