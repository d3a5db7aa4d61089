#!/usr/bin/python3
# testbed: mode=plain timeout=1800
"""Start-up and idle cost of paird, next to the bleak keeper, in the real-BlueZ test bed.
Run by Tests/bench/bench.sh; prints figures and writes $BED_OUT/results.jsonl.

Start-up (BED_X_STARTS reps, default 20), the wearable bonded, known in the state file, and its
link up: exec of paird (our NOTIFY_SOCKET, WATCHDOG_USEC=10 s as under paird.service) → READY=1,
and exec → paird's StateChanged "connected" (adoption of the live link), counting the
`disconnected` events the wearable saw (should be 0), then SIGTERM.

Idle (BED_X_WINDOW s per phase, default 90): CPU (schedstat ns, threads summed), context switches
(voluntary+nonvoluntary, threads summed) → wake-ups/s, VmRSS and open fds, for
  connected-1hz    link up, heart-rate notifications every second (the stock wearable)
  connected-quiet  link up, subscribed, the wearable sends nothing (bench wearable hr-interval 0)
  absent           the wearable walked away and stays away
for the bleak keeper first, then paird (see main() for why in that order)."""
import contextlib
import json
import os
import sys

sys.path.insert(0, os.path.join(os.environ.get("BED_REPO", "/work/main"), "Tests", "bench"))
from bedlib import *  # noqa: E402,F403
from benchlib import *  # noqa: E402,F403

E = os.environ
STARTS = int(E.get("BED_X_STARTS", 20))
WINDOW = float(E.get("BED_X_WINDOW", 90))


@scenario
def main():
    w = start_wearable(hr_interval=1.0)
    m = Monitor()
    c = Central("hci0")
    def window(who, phase, pids):
        m.trim(wall() - 5)
        a = {p: proc_sample(p) for p in pids}
        t = wall()
        bed_sleep(WINDOW, f"{who}: idle window ({phase})")
        dt = wall() - t
        b = {p: proc_sample(p) for p in pids}
        cpu = sum(b[p][0] - a[p][0] for p in pids)
        sw = sum(b[p][1] - a[p][1] for p in pids)
        rss = sum(b[p][2] for p in pids)
        fds = sum(b[p][3] for p in pids)
        r = dict(bench="idle", who=who, phase=phase, window=dt, cpu_s=cpu, cpu_s_per_hour=cpu / dt * 3600,
                 switches=sw, wakeups_per_s=sw / dt, rss_kb=rss, fds=fds,
                 anon_kb=sum(proc_anon_kb(p) or 0 for p in pids))
        record(**r)
        log(f"{who:8s} {phase:16s}: {r['cpu_s_per_hour']:8.2f} CPU-s/h  {r['wakeups_per_s']:6.2f} wake-ups/s  "
            f"RSS {rss / 1024:6.1f} MB  fds {fds}  ({dt:.0f} s window)")
        return r

    def phases(who, a):
        a.wait_flowing(60)
        w.cmd("hr-interval 1")
        a.wait_flowing(30)
        window(who, "connected-1hz", [a.main_pid()])
        w.cmd("hr-interval 0")
        bed_sleep(3, "last notification delivered")
        window(who, "connected-quiet", [a.main_pid()])
        t = wall()
        w.cmd("walk-away")
        wait_for(lambda: m.first("Connected", t, False), 20, "Connected=false")
        bed_sleep(5, "the client settles into waiting")
        window(who, "absent", [a.main_pid()])
        w.cmd("come-back")
        w.cmd("hr-interval 1")
        a.wait_flowing(120)

    paird = PairdApproach(m)
    with step("the wearable bonded through BlueZ alone"):
        pair_directly(c)
        m.hr_path = find_hr_path(c)
    # bleak first: once paird has registered its GattProfile1 the wearable stays on the kernel's
    # auto-connect list (see reconnect.py), which would change what bleak has to do.
    bleak = BleakKeeper(m)
    with step("bleak keeper idle windows"):
        bleak.start()
        phases("bleak", bleak)
    bleak.stop()
    with step("paird adopts the bonded wearable (state file) and the live link"):
        paird.adopt_bond()
        paird.start()
        paird.wait_flowing(60)

    # ---------------------------------------------------------------- start-up
    ready, adopt, drops = [], [], []
    for i in range(1, STARTS + 1):
        paird.stop()
        wait_for(lambda: w.status()["connected"], 10, "link still up after paird stopped")
        seq = w.last_seq()
        t0, t_ready = paird.start()
        t_conn = wait_for(lambda: m.first("paird-state", t0, "connected"), 60, "paird connected (adopted)",
                          interval=0.005)
        paird.wait_flowing(30, n=1)
        lost = [e for e in w.events(seq) if e["event"] == "disconnected"]
        ready.append(t_ready - t0)
        adopt.append(t_conn - t0)
        drops.append(len(lost))
        states = [v for t, k, v in m.ev if k == "paird-state" and t >= t0]
        record(bench="startup", rep=i, exec_to_ready=t_ready - t0, exec_to_connected=t_conn - t0,
               wearable_disconnects=len(lost), states=states)
        log(f"start {i:2d}: exec→READY=1 {(t_ready - t0) * 1000:6.1f} ms, exec→connected "
            f"{(t_conn - t0) * 1000:6.1f} ms, wearable saw {len(lost)} disconnect(s), states {states}")
    print(f"\nstart-up, {len(ready)} reps: exec→READY=1 {summary(ready)}\n"
          f"                   exec→connected (adopted) {summary(adopt)}\n"
          f"                   disconnects seen by the wearable: {sum(drops)} in total", flush=True)

    # ---------------------------------------------------------------- idle
    with step("paird idle windows"):
        phases("paird", paird)
    paird.stop()

    rows = [json.loads(x) for x in open(RESULTS)]
    print("\nidle cost (TCG-emulated guest: CPU seconds are inflated):", flush=True)
    for r in rows:
        if r.get("bench") == "idle":
            print(f"  {r['who']:6s} {r['phase']:16s} {r['cpu_s_per_hour']:8.2f} CPU-s/h  "
                  f"{r['wakeups_per_s']:6.2f} wake-ups/s  RSS {r['rss_kb'] / 1024:6.1f} MB  fds {r['fds']}", flush=True)


main()
