#!/usr/bin/python3
# testbed: mode=systemd timeout=900 wearables=strap
"""Issue 22: bluetoothd crashes (kill -SEGV) under paird as shipped, with systemd as PID 1 and
Debian's bluetooth.service (no Restart=): bluetoothd is back without a command (paird starts it by
bus activation), the wearable is connected again and notifying; crashes at varied moments
(connected, away, while its link is being set up). Each crash: one journal entry with its own
MESSAGE_ID; `pairctl status` shows the last one. Then `systemctl stop bluetooth` → paird does not
start it and says so; `systemctl start bluetooth` → connected again.
Prints crash → bluetoothd back and crash → first notification for each crash, median and max.
BED_X_CRASHES (default 6) sets how many crashes."""
import json
import os
import statistics

from bedlib import *

CRASHES = int(os.environ.get("BED_X_CRASHES", "6"))
MOMENTS = ["connected", "discovering", "away"]


def segv():
    """kill -SEGV bluetoothd's main process; returns (pid, time of the kill)."""
    pid = bluetoothd_pid()
    check(pid > 0, f"bluetoothd running (pid {pid})")
    t = now()
    os.kill(pid, 11)
    return pid, t


def wait_back(pid, t):
    """bluetoothd back with a new pid, started by nobody but paird; returns seconds since t."""
    wait_for(lambda: bluetoothd_active() and bluetoothd_pid() not in (0, pid), 60, "bluetoothd active again, new pid", interval=0.1)
    return now() - t


@scenario
def main():
    w = Wearable.start(name="Pulse-1", battery=87)
    p = Paird(mode="systemd")
    with step("paird up (systemd, as shipped), pairctl pair --service 180d"):
        p.start()
        pair_wearable(p)
        p.wait_state("connected", 10)
        log(f"bluetooth.service Restart={sh('systemctl show -p Restart --value bluetooth.service').strip()}")
    watch = p.watch()
    wait_for(lambda: len(watch.lines("notify")) >= 1, 30, "pairctl watch receiving")

    back_times, notify_times = [], []
    for k in range(CRASHES):
        moment = MOMENTS[k % len(MOMENTS)]
        with step(f"crash {k + 1}/{CRASHES} ({moment}): kill -SEGV bluetoothd → back without a command, wearable notifying"):
            p.wait_state("connected", 60)
            n_state, n_notify = len(watch.lines("state")), len(watch.lines("notify"))
            crashes_before = len(journal_entries(MSG_BLUETOOTHD_CRASHED))
            if moment == "away":
                w.cmd("walk-away")
                p.wait_state("waitingForDevice", 20)
                pid, t = segv()
            elif moment == "discovering":
                # A new link: away and back; the kill as soon as paird reports the set-up.
                w.cmd("walk-away")
                p.wait_state("waitingForDevice", 20)
                n_state = len(watch.lines("state"))
                w.cmd("come-back")
                wait_for(lambda: "discovering" in watch.states(n_state) or "connected" in watch.states(n_state),
                         30, "the link being set up (discovering)")
                pid, t = segv()
                log(f"killed after states {' → '.join(watch.states(n_state))}")
            else:
                wait_for(lambda: len(watch.lines("notify")) >= n_notify + 1, 15, "notifying before the crash")
                n_notify = len(watch.lines("notify"))
                pid, t = segv()
            back = wait_back(pid, t)
            back_times.append(back)
            log(f"bluetoothd back {back:.2f} s after the crash (pid {pid} → {bluetoothd_pid()})")
            if moment == "away":
                wait_for(lambda: p.status()["adapter"]["powered"], 30, "adapter back in paird's status")
                bed_sleep(1, "away a moment longer")
                n_notify = len(watch.lines("notify"))
                t_back = now()
                w.cmd("come-back")
            p.wait_state("connected", 60)
            wait_for(lambda: len(watch.lines("notify")) >= n_notify + 1, 30, "a notification after the crash")
            dt = now() - (t_back if moment == "away" else t)
            if moment != "away":
                notify_times.append(dt)
            log(f"first notification {dt:.2f} s after {'come-back' if moment == 'away' else 'the crash'}; "
                f"states: {' → '.join(watch.states(n_state))}")
            e = wait_for(lambda: journal_entries(MSG_BLUETOOTHD_CRASHED)[crashes_before:], 10, "a crash journal entry")
            check(len(e) == 1, f"one crash entry: {e[0].get('MESSAGE')!r} "
                  f"(RESULT={e[0].get('PAIRD_BLUETOOTHD_RESULT')}, EXIT={e[0].get('PAIRD_BLUETOOTHD_EXIT')})")
            check(e[0].get("PAIRD_BLUETOOTHD_EXIT") == "SIGSEGV", "the journal names SIGSEGV")

    with step("pairctl status shows the last crash"):
        rc, out, _ = p.pairctl("status")
        line = [l for l in out.splitlines() if l.startswith("bluetoothd:")]
        check(rc == 0 and line and "SIGSEGV" in line[0], f"status: {line[0] if line else out!r}")
        st = p.status()
        log(f"status --json bluetoothd: {json.dumps(st.get('bluetoothd'))}")
        check(st["devices"][0]["state"] == "connected", "the wearable connected")

    with step("systemctl stop bluetooth → paird does not start it and says so"):
        n_down = len(journal_entries(MSG_BLUETOOTHD_DOWN))
        sh("systemctl stop bluetooth.service", timeout=60)
        e = wait_for(lambda: journal_entries(MSG_BLUETOOTHD_DOWN)[n_down:], 15, "paird's 'bluetoothd gone, not started' entry")
        log(f"journal: {e[0].get('MESSAGE')!r}")
        wait_for(lambda: (p.status().get("bluetoothd") or {}).get("state") == "stopped", 10, "status bluetoothd: stopped")
        check(not bluetoothd_active(), "bluetooth.service still inactive after paird decided")
        check(p.status()["devices"][0]["state"] == "adapterUnavailable", "the wearable adapterUnavailable")
    with step("systemctl start bluetooth → connected again, notifying"):
        n_notify = len(watch.lines("notify"))
        t = now()
        sh("systemctl start bluetooth.service", timeout=60)
        p.wait_state("connected", 60)
        wait_for(lambda: len(watch.lines("notify")) >= n_notify + 1, 30, "a notification")
        log(f"first notification {now() - t:.2f} s after systemctl start")

    def summary(name, xs):
        if xs:
            log(f"{name}: n={len(xs)} median {statistics.median(xs):.2f} s, max {max(xs):.2f} s "
                f"({', '.join(f'{x:.2f}' for x in xs)})")
    summary("crash → bluetoothd back", back_times)
    summary("crash → first notification (connected/discovering crashes)", notify_times)


main()
