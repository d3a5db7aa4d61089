#!/usr/bin/python3
# testbed: mode=plain timeout=600 wearables=strap
"""Issue 30, items 4 and 5, on the plain bed (no systemd on the bus: paird gets no word on why
bluetoothd left).
- paird started while bluetoothd is stopped: `status --json` says bluetoothd is not running
  (not "running" beside an absent adapter), then "running" once bluetoothd is started.
- bluetoothd killed with SIGSEGV while the strap is connected and notifying, started again by the
  scenario (nothing else starts it here): the kernel keeps the LE link, the new bluetoothd never
  resolves it, and paird drops it at once (unresolvable-after-bluetoothd-left, never a resolve
  deadline waited out); the strap notifies again. BED_X_REPS reps (default 3). The time from
  bluetoothd's return (org.bluez owned again) to the first notification is MEASURED and printed,
  with how many reps were within the issue's 5 s: a figure, not a check (tests assert no timing;
  two VMs at a time on a loaded host made it 7-9 s in CI's queue, 20 of 20 within 5 s alone).
Only bluetoothd is restarted here; the strap is a Bumble stack on its own controller."""
import os
import signal
import statistics

from bedlib import *

REPS = int(os.environ.get("BED_X_REPS", "3"))
LIMIT = 5.0
PIDF = "/run/bed/bluetoothd.pid"


def segv():
    """kill -SEGV the plain bed's bluetoothd; returns (pid, time of the kill) once it is gone."""
    pid = int(open(PIDF).read().strip())
    t = now()
    os.kill(pid, signal.SIGSEGV)
    wait_for(lambda: process_gone(pid) and not bluez_owned(), 15, f"bluetoothd {pid} gone after SIGSEGV", interval=0.05)
    os.unlink(PIDF)   # bluetoothd-ctl start would take a zombie's pid for a running bluetoothd
    return pid, t


@scenario
def main():
    w = Wearable.start(name="Pulse-1", battery=87)
    p = Paird()
    with step("bluetoothd stopped, then paird started: status --json does not say bluetoothd is running"):
        bluetoothd("stop")
        check(not bluez_owned(), "org.bluez has no owner")
        p.start()
        st = p.status()
        log(f"status --json: bluetoothd {st.get('bluetoothd')}, adapter {st.get('adapter')}")
        check(st["bluetoothd"]["state"] != "running", f"bluetoothd state {st['bluetoothd']['state']!r}, not 'running'")
        check(st["bluetoothd"]["state"] in ("unknown", "gone"), "unknown or gone")
        check(not (st.get("adapter") or {}).get("present"), "no adapter present")
        rc, out, _ = p.pairctl("status")
        log("pairctl status:\n" + "\n".join(f"  | {l}" for l in out.splitlines()))
        check(any(l.startswith("bluetoothd: ") and "running" not in l for l in out.splitlines()), "pairctl status has a bluetoothd line, not running")
    with step("bluetoothd started: running"):
        bluetoothd("start")
        wait_for(lambda: p.status()["bluetoothd"]["state"] == "running", 20, "status bluetoothd running")
        wait_for(lambda: p.status()["adapter"]["present"], 20, "adapter present")

    with step("pairctl pair --service 180d; notifying"):
        pair_wearable(p)
        p.wait_state("connected", 20)
        watch = p.watch()
        wait_for(lambda: len(watch.lines("notify")) >= 1, 30, "pairctl watch receiving")

    times = []
    for k in range(REPS):
        with step(f"rep {k + 1}/{REPS}: SIGSEGV while connected, bluetoothd started again → notifying again"):
            p.wait_state("connected", 60)
            n = len(watch.lines("notify"))
            wait_for(lambda: len(watch.lines("notify")) > n, 15, "notifying before the kill")
            n_state = len(watch.lines("state"))
            pid, tk = segv()
            log(f"bluetoothd {pid} gone {now() - tk:.2f} s after SIGSEGV")
            wait_for(lambda: "adapterUnavailable" in watch.states(n_state), 15, "paird saw it go (adapterUnavailable)")
            bluetoothd("start-nowait")
            t_back = wait_for(lambda: bluez_owned() and now(), 30, "org.bluez owned again", interval=0.02)
            n = len(watch.lines("notify"))
            t_notify = wait_for(lambda: len(watch.lines("notify")) > n and now(), 30, "a notification after bluetoothd's return",
                                interval=0.02)
            dt = t_notify - t_back
            times.append(dt)
            bluetoothd("wait-ready")
            log(f"MEASURED rep {k + 1}: back {t_back - tk:.2f} s after the kill; first notification {dt:.2f} s after the return; "
                f"states: {' → '.join(watch.states(n_state))}")

    with step(f"{REPS} reps: links that outlived bluetoothd dropped at once by paird, none waited out a resolve deadline"):
        within = sum(1 for t in times if t <= LIMIT)
        log(f"MEASURED {within} of {REPS} within {LIMIT:.0f} s; times {', '.join(f'{t:.2f}' for t in times)} s; "
            f"median {statistics.median(times):.2f} s, max {max(times):.2f} s")
        with open(os.path.join(OUT, "paird.log"), errors="replace") as f:
            text = f.read()
        dropped, waited = text.count("unresolvable-after-bluetoothd-left"), text.count("resolve-timeout")
        log(f"paird.log: unresolvable-after-bluetoothd-left {dropped} time(s), resolve-timeout {waited}, "
            f"unresolvable-after-crash {text.count('unresolvable-after-crash')}")
        # the kernel may end an orphaned link itself (2 s after the kill, seen with the old code):
        # then paird has nothing to drop in that rep; what may never happen is the wait
        check(dropped >= 1, f"paird dropped a link that outlived bluetoothd at once ({dropped} lines over {REPS} reps)")
        check(waited == 0, f"no link waited out its resolve deadline ({waited})")


main()
