#!/usr/bin/python3
# testbed: mode=systemd timeout=420 wearables=strap
"""Issue scenario 10: paird under systemd (systemd/paird.service as shipped, user paird, a
drop-in with WatchdogSec=3s): `systemctl start` returns once READY=1 arrived (Type=notify);
StatusText shows the STATUS= line; `journalctl -u paird -o json` carries MESSAGE_ID and
PAIRD_DEVICE/PAIRD_STATE after a pair; a stalled loop (SIGSTOP) is killed by the watchdog
(Result=watchdog) and restarted (Restart=on-failure), and the restarted paird adopts the link."""
import json

from bedlib import *

MSG_PAIRED = "ab55ea673df149f5b792fb9662ee1185"
MSG_CONNECTED = "abee842ca2994f9c8320d023b52878aa"
MSG_STARTED = "0e1c4f5ba0c84a2c8e6f2bd09ed7c4a1"


def show(prop):
    return sh(f"systemctl show -p {prop} --value paird.service").strip()


def journal():
    out = sh("journalctl -u paird.service -o json --no-pager", check=False)
    return [json.loads(l) for l in out.splitlines() if l.startswith("{")]


@scenario
def main():
    w = Wearable.start(name="Pulse-1", battery=87)
    p = Paird(mode="systemd", unit_dropin="WatchdogSec=3s\n")
    with step("systemctl start paird → active through READY=1 (Type=notify), as user paird"):
        t = now()
        sh("systemctl start paird.service", timeout=60)
        log(f"systemctl start returned after {now() - t:.2f} s")
        check(show("ActiveState") == "active" and show("SubState") == "running", "active (running)")
        check(show("Type") == "notify", "Type=notify")
        check(show("WatchdogUSec") in ("3s", "3000000"), f"WatchdogUSec={show('WatchdogUSec')}")
        pid = p.pid()
        uid = [l.split()[1] for l in open(f"/proc/{pid}/status") if l.startswith("Uid:")][0]
        check(sh(f"id -u paird").strip() == uid, f"runs as user paird (uid {uid})")
    with step("StatusText / systemctl status show the STATUS= line"):
        st = show("StatusText")
        check(st != "", f"StatusText = {st!r}")
        out = sh("systemctl status --no-pager paird.service", check=False)
        check(f'Status: "{st}"' in out, "systemctl status shows it")
    with step("journal: started entry with MESSAGE_ID"):
        wait_for(lambda: any(e.get("MESSAGE_ID") == MSG_STARTED for e in journal()), 10, "MESSAGE_ID started")

    with step("pairctl pair --service 180d; StatusText follows"):
        pair_wearable(p)
        p.wait_state("connected", 10)
        wait_for(lambda: "connected" in show("StatusText"), 10, "StatusText mentions connected")
        log(f"StatusText = {show('StatusText')!r}")
    with step("journalctl -o json: paired/connected entries with MESSAGE_ID, PAIRD_DEVICE, PAIRD_STATE"):
        def entry(mid):
            return [e for e in journal() if e.get("MESSAGE_ID") == mid]
        paired = wait_for(lambda: entry(MSG_PAIRED), 10, "a 'paired' entry")[-1]
        check(paired.get("PAIRD_DEVICE") == w.address, f"PAIRD_DEVICE={paired.get('PAIRD_DEVICE')}")
        check(paired.get("PAIRD_STATE"), f"PAIRD_STATE={paired.get('PAIRD_STATE')}")
        check(paired.get("PRIORITY") in ("5", "6"), f"PRIORITY={paired.get('PRIORITY')}")
        log(f"paired entry: MESSAGE={paired.get('MESSAGE')!r} PAIRD_STATE={paired.get('PAIRD_STATE')}")
        conn = wait_for(lambda: entry(MSG_CONNECTED), 10, "a 'connected' entry")[-1]
        check(conn.get("PAIRD_STATE") == "connected", f"connected entry PAIRD_STATE={conn.get('PAIRD_STATE')}")
    bed_sleep(7, "the watchdog (3 s) must not fire while paird's loop runs")
    with step("still active after 7 s with WatchdogSec=3s"):
        check(show("ActiveState") == "active" and show("NRestarts") == "0", "active, NRestarts=0")

    with step("kill -STOP MAINPID → killed by the watchdog (Result=watchdog), restarted"):
        old = p.pid()
        t = now()
        sh(f"kill -STOP {old}")
        wait_for(lambda: show("NRestarts") == "1", 30, "NRestarts=1")
        log(f"restarted {now() - t:.2f} s after SIGSTOP")
        out = sh("journalctl -u paird.service --no-pager -o cat", check=False)
        check("Watchdog timeout" in out, "journal: Watchdog timeout")
        check("Failed with result 'watchdog'" in out, "journal: Failed with result 'watchdog'")
        wait_for(lambda: show("ActiveState") == "active" and p.pid() not in (0, old), 20, "active with a new MainPID")
        log(f"journal excerpt: {[l for l in out.splitlines() if 'atchdog' in l][:3]}")
    with step("the restarted paird adopts the link: connected"):
        p.wait_state("connected", 30)
        check(w.status()["connected"], "the wearable is connected")


main()
