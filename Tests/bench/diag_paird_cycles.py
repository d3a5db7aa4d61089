#!/usr/bin/python3
# testbed: mode=plain timeout=600
"""Diagnostic (not a benchmark): paird through several walk-away / come-back cycles, printing
after each return what paird says (`pairctl status --json`, timed), whether its loop still
pings the watchdog, its threads' states, and BlueZ's view.  Env: BED_X_CYCLES (4), BED_X_HR (0.1)."""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.environ.get("BED_REPO", "/work/main"), "Tests", "bench"))
from bedlib import *  # noqa: E402,F403
from benchlib import *  # noqa: E402,F403

CYCLES = int(os.environ.get("BED_X_CYCLES", 4))
QUICK = float(os.environ.get("BED_X_QUICK", 0))
stuck = []


@scenario
def main():
    w = start_wearable(hr_interval=float(os.environ.get("BED_X_HR", 0.1)))
    m = Monitor()
    c = Central("hci0")
    p = PairdApproach(m)
    p.start()
    p.pair()
    m.hr_path = find_hr_path(c)
    p.wait_flowing(30)
    pid = p.main_pid()
    if os.environ.get("BED_X_QUIET"):
        w.cmd("hr-interval 0")          # subscribed, but the wearable sends nothing
        bed_sleep(2, "last notification delivered")
    t = wall()
    bed_sleep(float(os.environ.get("BED_X_STEADY", 20)), "steady state: paird forwarding time per notification")
    fw, last = [], {}
    for x, k, v in m.ev:
        if x < t:
            continue
        if k == "bluez-hr":
            last[v] = x
        elif k == "paird-hr" and v in last:
            fw.append(x - last.pop(v))
    p.drain()
    pings = [x - t for x, n in p.notes if n == "WATCHDOG=1" and x >= t]
    log(f"WATCHDOG_USEC=10 s: WATCHDOG=1 pings during the {os.environ.get('BED_X_STEADY', 20)} s window at "
        f"+{', +'.join(f'{x:.1f}' for x in pings) or 'none'} s; paird {proc_sample(pid)[1]} context switches so far")
    record(bench="watchdog", hr=float(os.environ.get("BED_X_HR", 0.1)), pings=pings)
    fw.sort()
    if fw:
        log(f"steady state, heart rate every {os.environ.get('BED_X_HR', 0.1)} s: paird Notification − BlueZ Value "
            f"median {fw[len(fw) // 2] * 1000:.0f} ms, max {fw[-1] * 1000:.0f} ms, n={len(fw)}; "
            f"BlueZ values {m.count('bluez-hr', t)}, paird notifications {m.count('paird-hr', t)}")
        record(bench="forwarding", hr=float(os.environ.get("BED_X_HR", 0.1)), deltas=fw)
    for i in range(1, CYCLES + 1):
        t = wall()
        w.cmd("walk-away")
        wait_for(lambda: m.first("Connected", t, False), 20, "Connected=false")
        bed_sleep(5, "away")
        tb = wall()
        w.cmd("come-back")
        if QUICK:
            # walk away again as soon as paird says connected (+ BED_X_QUICK s): the reconnect
            # bench's "stuck after a quick second walk-away" finding
            try:
                wait_for(lambda: any(k == "paird-state" and v == "connected" and x >= tb for x, k, v in m.ev),
                         45, "paird: connected after the return")
            except Exception as e:  # noqa: BLE001
                log(f"cycle {i}: STUCK: {e} (boottime {time.clock_gettime(time.CLOCK_BOOTTIME):.3f}); "
                    f"returned at {tb:.3f} wall; SIGUSR1 to paird for its loop/D-Bus dump")
                os.kill(pid, signal.SIGUSR1)
                stuck.append(i)
            bed_sleep(QUICK, "connected; walking away again soon")
            if i not in stuck:
                continue
        else:
            bed_sleep(12, "back; let everything settle")
        p.drain()
        pings = [x for x, n in p.notes if n == "WATCHDOG=1" and x >= tb]
        t0 = wall()
        r = subprocess.run([PAIRCTL_BIN, "status", "--json"], capture_output=True, text=True, timeout=30)
        dt = wall() - t0
        try:
            d = json.loads(r.stdout)["devices"][0]
            st = f"state={d['state']} attempts={d['reconnectAttempts']} since={d['since']}"
        except Exception as e:  # noqa: BLE001
            st = f"unparsable ({e}): {r.stdout[:200]} {r.stderr[:200]}"
        threads = []
        for tid in sorted(os.listdir(f"/proc/{pid}/task")):
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                s = f.read().rsplit(")", 1)
            with open(f"/proc/{pid}/task/{tid}/wchan") as f:
                wch = f.read()
            threads.append(f"{tid}:{s[1].split()[0]}:{wch}")
        props = c.props(DEV_PATH)
        log(f"cycle {i}: pairctl status ({dt * 1000:.0f} ms, rc {r.returncode}): {st}")
        log(f"         BlueZ: Connected={bool(props['Connected'])} ServicesResolved={bool(props['ServicesResolved'])}; "
            f"paird Notification signals since return: {m.count('paird-hr', tb)}, BlueZ values: "
            f"{m.count('bluez-hr', tb)}; paird states: {[v for x, k, v in m.ev if k == 'paird-state' and x >= t]}")
        log(f"         WATCHDOG=1 pings since return: {len(pings)}; threads: {' '.join(threads)}")
    if QUICK:
        log(f"{CYCLES} quick cycles, stuck in: {stuck or 'none'}")


main()
