#!/usr/bin/python3
# testbed: mode=plain timeout=300
"""Issue scenario 8: `pairctl unpair` → the device is gone from BlueZ and from the state file;
a paird restart does not bring it back (nor does the wearable, still advertising)."""
import json

from bedlib import *


@scenario
def main():
    w = Wearable.start(name="Pulse-1", battery=87)
    p = Paird()
    c = Central("hci0")
    dev = c.device_path(WEARABLE_ADDR)
    with step("paird up, pairctl pair --service 180d"):
        p.start()
        pair_wearable(p)
        p.wait_state("connected", 10)
        check(WEARABLE_ADDR in open(PAIRD_STATE).read(), "the state file lists the wearable")

    seq = w.last_seq()
    with step("pairctl unpair → exit 0, gone from status, BlueZ and the state file"):
        rc, out, err = p.pairctl("unpair", WEARABLE_ADDR)
        check(rc == 0, f"exit 0 ({out.strip()} {err.strip()})")
        wait_for(lambda: dev not in c.devices(), 15, f"{dev} removed from BlueZ")
        check(p.status()["devices"] == [], "status lists no devices")
        doc = json.load(open(PAIRD_STATE))
        check(WEARABLE_ADDR not in json.dumps(doc), f"state file without the wearable: {json.dumps(doc)}")
        w.wait_event("disconnected", 15, since=seq)
    with step("unpair again → exit 7 (unknown device)"):
        rc, _, err = p.pairctl("unpair", WEARABLE_ADDR)
        check(rc == 7, f"exit 7 ({err.strip()})")

    seq = w.last_seq()
    with step("restart paird: nothing comes back"):
        p.restart()
        check(p.status()["devices"] == [], "status lists no devices after the restart")
    wait_for(lambda: w.status()["advertising"] or w.cmd("come-back"), 10, "wearable advertising")
    bed_sleep(10, "10 s with the wearable advertising in range")
    with step("still gone: BlueZ, status, no connection to the wearable"):
        check(dev not in c.devices() or not c.prop(dev, "Paired"), "not paired in BlueZ")
        check(p.status()["devices"] == [], "status lists no devices")
        check([e for e in w.events(seq) if e["event"] == "connected"] == [], "the wearable saw no connection")
    # The wearable still holds its half of the old bond: BlueZ on the wearable's side rejects a
    # new pairing from the same central. A user would reset the wearable too; so do we (no link
    # is up, so no encryption failure).
    with step("pair while the wearable still holds the old bond → exit 6 (authentication failed), nothing kept"):
        rc, _, err = p.pairctl("pair", "--service", "180d", "--timeout", "20", timeout=90)
        check(rc == 6, f"exit 6 ({err.strip()})")
        check(p.status()["devices"] == [], "status lists no devices")
    with step("after the wearable forgets its half of the bond too, it can be paired again"):
        w.cmd("forget-bond")
        pair_wearable(p)
        p.wait_state("connected", 10)


main()
