#!/usr/bin/python3
# testbed: mode=systemd timeout=600 wearables=strap
"""Issue 22: a bluetoothd that exits at every start. bluetoothd crashes (kill -SEGV), and every
start paird makes fails (a bluetooth.service drop-in whose ExecStart exits 1): paird's tries
follow its backoff (at once, then 2, 4, 8, 16 s) and stop at the cap (5), and `pairctl status`
says it gave up. An administrator fixes it and starts bluetooth → the wearable is back."""
import json
import os

from bedlib import *

DROPIN = "/etc/systemd/system/bluetooth.service.d/zz-exit-at-start.conf"


@scenario
def main():
    w = Wearable.start(name="Pulse-1", battery=87)
    p = Paird(mode="systemd")
    with step("paird up (systemd, as shipped), pairctl pair --service 180d"):
        p.start()
        pair_wearable(p)
        p.wait_state("connected", 10)
    watch = p.watch()

    with step("bluetoothd now exits at every start; it crashes → paird's starts back off and stop at the cap"):
        with open(DROPIN, "w") as f:
            f.write("[Service]\nExecStart=\nExecStart=/bin/sh -c 'exit 1'\n")
        sh("systemctl daemon-reload")
        pid = int(sh("systemctl show -p MainPID --value bluetooth.service").strip())
        t0 = now()
        os.kill(pid, 11)
        st = wait_for(lambda: (lambda b: b if b and b.get("state") == "gave-up" else None)(p.status().get("bluetoothd")),
                      120, "paird gives up (status bluetoothd: gave-up)", interval=0.5)
        log(f"gave up {now() - t0:.2f} s after the crash; status --json bluetoothd: {json.dumps(st)}")
        entries = journal_entries(MSG_BLUETOOTHD_CRASHED)
        t_first = int(entries[0]["__MONOTONIC_TIMESTAMP"])
        for e in entries:
            log(f"  +{(int(e['__MONOTONIC_TIMESTAMP']) - t_first) / 1e6:6.2f} s  {e.get('PAIRD_BLUETOOTHD_EXIT')}: {e.get('PAIRD_BLUETOOTHD_ACTION')}")
        actions = [e.get("PAIRD_BLUETOOTHD_ACTION") for e in entries]
        check(actions == ["started again", "start 2 in 2.0 s", "start 3 in 4.0 s", "start 4 in 8.0 s", "start 5 in 16.0 s",
                          "gave up after 5 starts"], f"the tries: {actions}")
        rc, out, _ = p.pairctl("status")
        line = [l for l in out.splitlines() if l.startswith("bluetoothd:")]
        check(line and "gave-up" in line[0], f"pairctl status: {line[0] if line else out!r}")
        check(sh("systemctl is-active bluetooth.service", check=False).strip() != "active", "bluetoothd down")

    with step("fixed and started by an administrator → connected again, notifying"):
        os.remove(DROPIN)
        sh("systemctl daemon-reload")
        sh("systemctl reset-failed bluetooth.service", check=False)
        n = len(watch.lines("notify"))
        t = now()
        sh("systemctl start bluetooth.service", timeout=60)
        p.wait_state("connected", 60)
        wait_for(lambda: len(watch.lines("notify")) >= n + 1, 30, "a notification")
        log(f"first notification {now() - t:.2f} s after systemctl start")
        check((p.status().get("bluetoothd") or {}).get("state") == "running", "status bluetoothd: running")


main()
