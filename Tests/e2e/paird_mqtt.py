#!/usr/bin/python3
# testbed: mode=plain timeout=300 wearables=strap twin=no-bumble-only
"""Issue 45 on the bed: paird's [MQTT] against a real mosquitto broker in the guest (Debian's,
unpacked by Tests/install-build-deps.sh into .build/mosquitto), with the Bumble strap notifying its
heart rate at 1 Hz over a real BlueZ link. A subscriber (mosquitto_sub) receives on
`<prefix>/<address>/heart_rate` the very values the strap sent, in order, none missing: the strap
counts its bpm up by one per notification (60..99, round again), so consecutive values prove that
nothing was lost or reordered, and the values equal those `pairctl watch` showed from the same
notifications. Across a walk-away, `available` says offline and then online, the state says
waitingForDevice and then connected, and the values go on from where they stopped (at most the
one notification the strap tried as its link went). Home Assistant's heart-rate config is there.
Printed, not asserted (tests never assert on timing): the largest gap between two received
values outside the walk-away, and paird's CPU and VmRSS over the same window with [MQTT] and
without it (the same paird restarted without it). BED_X_MQTT_STRAPS=N (default 1; BED_CONTROLLERS=N+1)
adds straps on hci2.., paired and notifying beside it, for the benchmark (BENCHMARKS §11).
BED_X_RSS_AT_S=S (default 0): each VmRSS is read only once that paird has run S seconds (65: after
it gave back its start-up code pages at 60 s, MappedText.swift), for the benchmark too."""
import os
import subprocess

from bedlib import *

PORT = 1883
PREFIX = "paird/bed"
WINDOW_S = 15   # each measuring window: ~15 notifications
STRAPS = int(os.environ.get("BED_X_MQTT_STRAPS", "1"))
RSS_AT_S = float(os.environ.get("BED_X_RSS_AT_S", "0"))


def rss_when_old_enough(pid, started):
    """VmRSS and the TLS libraries' resident kB, once paird has run RSS_AT_S seconds."""
    if now() - started < RSS_AT_S:
        bed_sleep(RSS_AT_S - (now() - started), f"paird {RSS_AT_S:.0f} s old before its VmRSS is read")
    return rss_kb(pid), lib_rss_kb(pid)
HR_LO, HR_N = 60, 40   # the strap's bpm: 60..99, +1 per notification (bumble_wearable.py hr_loop)


def mosquitto_bin():
    unpacked = os.path.join(REPO, ".build/mosquitto/usr/sbin/mosquitto")
    for b in (unpacked, "/usr/sbin/mosquitto"):
        if os.access(b, os.X_OK):
            return b
    raise BedError(f"no mosquitto at {unpacked} (Tests/install-build-deps.sh unpacks it) nor /usr/sbin")


def start_broker():
    conf = "/tmp/bed-mosquitto.conf"
    with open(conf, "w") as f:
        f.write(f"listener {PORT} 127.0.0.1\nallow_anonymous true\nuser root\n"
                f"log_dest file {OUT}/mosquitto.log\nlog_type all\n")
    proc = subprocess.Popen([mosquitto_bin(), "-c", conf], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    at_exit(lambda: proc.poll() is None and proc.terminate())
    wait_for(lambda: subprocess.run(["/usr/bin/mosquitto_pub", "-h", "127.0.0.1", "-p", str(PORT), "-t", "probe",
                                     "-m", "x"], capture_output=True, timeout=10).returncode == 0,
             20, "mosquitto answering on 127.0.0.1:1883")
    return proc


class Subscriber:
    """mosquitto_sub writing `<unix time with ns> <topic> <payload>` lines to a file."""

    def __init__(self):
        self.path = os.path.join(OUT, "mqtt-sub.log")
        self.proc = subprocess.Popen(["/usr/bin/mosquitto_sub", "-h", "127.0.0.1", "-p", str(PORT),
                                      "-F", "%U %t %p", "-t", f"{PREFIX}/#", "-t", "homeassistant/#"],
                                     stdout=open(self.path, "w"), stderr=subprocess.STDOUT)
        at_exit(lambda: self.proc.poll() is None and self.proc.terminate())

    def messages(self, topic=None):
        """[(time, topic, payload)] received so far, for one topic or all."""
        out = []
        with open(self.path, errors="replace") as f:
            for line in f.read().splitlines():
                parts = line.split(" ", 2)
                if len(parts) < 2:
                    continue
                try:
                    t = float(parts[0])
                except ValueError:
                    continue
                m = (t, parts[1], parts[2] if len(parts) > 2 else "")
                if topic is None or m[1] == topic:
                    out.append(m)
        return out

    def last(self, topic):
        ms = self.messages(topic)
        return ms[-1][2] if ms else None


def hr_steps(values):
    """The steps between consecutive bpm values, in the strap's counting (60..99, round again)."""
    return [(b - a) % HR_N for a, b in zip(values, values[1:])]


def contiguous_in(part, whole):
    return any(whole[i:i + len(part)] == part for i in range(len(whole) - len(part) + 1))


def watch_bpms(watch, address):
    out = []
    for l in watch.lines("notify"):
        if f" {address} " in l and "(heart rate: " in l:
            out.append(int(l.split("(heart rate: ", 1)[1].split()[0]))
    return out


def lib_rss_kb(pid, names=("libmosquitto", "libssl", "libcrypto")):
    """Rss (kB) of the mappings of the libraries [MQTT] brings, from /proc/PID/smaps."""
    total, current = 0, None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split()
            if head and "-" in head[0] and len(head) >= 5:   # a mapping's first line
                current = head[5] if len(head) > 5 else ""
            elif line.startswith("Rss:") and current and any(n in current for n in names):
                total += int(head[1])
    return total


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


@scenario
def main():
    w = Wearable.start(name="Pulse-1", battery=87)
    start_broker()
    sub = Subscriber()
    p = Paird()
    p.write_config(f"[MQTT]\nBroker = mqtt://127.0.0.1:{PORT}\nTopicPrefix = {PREFIX}\n")
    hr_topic = lambda: f"{PREFIX}/{w.address}/heart_rate"   # noqa: E731

    with step("paird with [MQTT] up, the strap paired: status online, state connected, battery 87 on the broker"):
        p.start()
        started_on = now()
        pair_wearable(p)
        p.wait_state("connected", 20)
        wait_for(lambda: sub.last(f"{PREFIX}/status") == "online", 20, f"{PREFIX}/status online")
        wait_for(lambda: '"connected"' in (sub.last(f"{PREFIX}/{w.address}/state") or ""), 20, "state connected")
        wait_for(lambda: sub.last(f"{PREFIX}/{w.address}/available") == "online", 20, "available online")
        wait_for(lambda: sub.last(f"{PREFIX}/{w.address}/battery") == "87", 20, "battery 87")
        ident = "paird_" + w.address.replace(":", "").lower()
        cfg = sub.last(f"homeassistant/sensor/{ident}/heart_rate/config") or ""
        check('"bpm"' in cfg and '"measurement"' in cfg, f"Home Assistant's heart-rate config: {cfg[:200]}")
    others = []
    for i in range(2, STRAPS + 1):
        with step(f"strap {i} of {STRAPS} (hci{i}) paired, connected, its heart rate on the broker"):
            o = Wearable.start(name=f"Pulse-{i}", adapter=f"hci{i}", sock=f"/run/bed/strap{i}.sock", profile="strap",
                               extra=("--address", f"F3:5A:B1:00:01:{i:02X}"))
            rc, out, err = p.pairctl("pair", "--name", f"Pulse-{i}", "--timeout", "30", timeout=120)
            check(rc == 0, f"pairctl pair --name Pulse-{i}: exit {rc} {err.strip()}")
            p.wait_state("connected", 30, address=o.address)
            wait_for(lambda: sub.messages(f"{PREFIX}/{o.address}/heart_rate"), 20, f"Pulse-{i}'s heart_rate")
            others.append(o)

    watch = p.watch()
    with step(f"{WINDOW_S} s of 1 Hz notifications: the broker's heart_rate values are the strap's, in order, none missing"):
        n0 = len(sub.messages(hr_topic()))
        cpu0 = p.cpu()[0]
        t0 = now()
        wait_for(lambda: len(sub.messages(hr_topic())) >= n0 + 3, 20, "3 heart_rate messages")
        bed_sleep(max(0.0, WINDOW_S - (now() - t0)), "the strap notifies at 1 Hz; the window is measured")
        cpu_on, dt_on = p.cpu()[0] - cpu0, now() - t0
        rss_on, libs_on = rss_when_old_enough(p.pid(), started_on)
        got = [int(m[2]) for m in sub.messages(hr_topic())]
        check(len(got) >= 5, f"at least 5 values on {hr_topic()}: {got}")
        check(all(HR_LO <= v < HR_LO + HR_N for v in got), f"every value one the strap sends (60..99): {got}")
        steps = hr_steps(got)
        check(all(s == 1 for s in steps), f"each value the strap's next one (+1): {got}")
        # pairctl watch started after the first values: what it saw (less its last, which may be
        # ahead of the subscriber's file by a moment) is a run of the broker's values
        seen = watch_bpms(watch, w.address)[:-1]
        check(len(seen) >= 3 and contiguous_in(seen, got),
              f"the values pairctl watch showed from the same notifications are the broker's, in order: "
              f"watch {seen}, broker {got}")
        log(f"{len(got)} values received, {len(seen) + 1} seen by pairctl watch meanwhile")

    with step("walk-away → available offline, state waitingForDevice; back → online, connected, values go on"):
        before = len(sub.messages(hr_topic()))
        t_away = now()
        w.cmd("walk-away")
        p.wait_state("waitingForDevice", 20, address=w.address)
        wait_for(lambda: sub.last(f"{PREFIX}/{w.address}/available") == "offline", 15, "available offline")
        wait_for(lambda: '"waitingForDevice"' in (sub.last(f"{PREFIX}/{w.address}/state") or ""), 15,
                 "state waitingForDevice")
        bed_sleep(5, "the strap stays away 5 s")
        w.cmd("come-back")
        p.wait_state("connected", 60, address=w.address)
        wait_for(lambda: sub.last(f"{PREFIX}/{w.address}/available") == "online", 15, "available online again")
        wait_for(lambda: len(sub.messages(hr_topic())) >= before + 5, 30, "5 heart_rate values after the return")
        t_back = now()
        msgs = sub.messages(hr_topic())
        got = [int(m[2]) for m in msgs]
        steps = hr_steps(got)
        times = [m[0] for m in msgs]
        # the walk-away is the longest silence (5 s away and the return); a value in flight as the
        # strap left may land after the count above, so it is found by time, not by index
        gap_at = max(range(len(times) - 1), key=lambda i: times[i + 1] - times[i])
        check(gap_at >= before - 2, f"the longest silence is the walk-away's (after value {gap_at + 1}, "
                                    f"{before} before it): {[round(b - a, 1) for a, b in zip(times, times[1:])]}")
        check(all(s == 1 for i, s in enumerate(steps) if i != gap_at),
              f"every value the strap's next one, but across the walk-away: {got}")
        check(steps[gap_at] in (1, 2), f"across the walk-away the values go on (+1, or +2 for the one the "
                                       f"strap tried as its link went): {got[max(0, gap_at - 2):gap_at + 4]}")
        gaps = [(b - a, i) for i, (a, b) in enumerate(zip(times, times[1:])) if i != gap_at]
        big = max(gaps)[0] if gaps else 0.0
        log(f"MEASURED heart_rate at the subscriber: {len(got)} values, the largest gap outside the walk-away "
            f"{big:.2f} s, {sum(1 for g, _ in gaps if g > 2.0)} gap(s) over 2 s; away → back {t_back - t_away:.1f} s")

    with step(f"paird without [MQTT] (restarted, the link adopted): its CPU and VmRSS over {WINDOW_S} s beside the window above"):
        p.stop()
        os.remove(p.config)
        p.config = None
        p.start()
        started_off = now()
        for x in [w] + others:
            p.wait_state("connected", 30, address=x.address)
        cpu0 = p.cpu()[0]
        t0 = now()
        bed_sleep(WINDOW_S, "the strap notifies at 1 Hz; paird without [MQTT]")
        cpu_off, dt_off = p.cpu()[0] - cpu0, now() - t0
        rss_off = rss_when_old_enough(p.pid(), started_off)[0]
        log(f"MEASURED paird at 1 Hz, {STRAPS} strap(s), under TCG: with [MQTT] {cpu_on:.2f} CPU-s in {dt_on:.1f} s, "
            f"VmRSS {rss_on / 1024:.1f} MB (libmosquitto, libssl and libcrypto resident {libs_on / 1024:.1f} MB of it); "
            f"without {cpu_off:.2f} CPU-s in {dt_off:.1f} s, VmRSS {rss_off / 1024:.1f} MB "
            f"(libmosquitto is loaded only with [MQTT])")
        with open(f"/proc/{p.pid()}/maps") as f:
            check("libmosquitto" not in f.read(), "without [MQTT] paird has no libmosquitto mapped")


main()
