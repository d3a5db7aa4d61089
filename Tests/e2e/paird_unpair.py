#!/usr/bin/python3
# testbed: mode=plain timeout=300 wearables=strap
"""Issue scenario 8: `pairctl unpair` → the device is gone from BlueZ and from the state file;
a paird restart does not bring it back (nor does the wearable, still advertising)."""
import json

from bedlib import *


@scenario
def main():
    w = Wearable.start(name="Pulse-1", battery=87)
    p = Paird()
    c = Central("hci0")
    dev = c.device_path(w.address)
    with step("paird up, pairctl pair --service 180d"):
        p.start()
        pair_wearable(p)
        p.wait_state("connected", 10)
        check(w.address in open(PAIRD_STATE).read(), "the state file lists the wearable")

    seq = w.last_seq()
    with step("pairctl unpair → exit 0, gone from status, BlueZ and the state file"):
        rc, out, err = p.pairctl("unpair", w.address)
        check(rc == 0, f"exit 0 ({out.strip()} {err.strip()})")
        wait_for(lambda: dev not in c.devices(), 15, f"{dev} removed from BlueZ")
        check(p.status()["devices"] == [], "status lists no devices")
        doc = json.load(open(PAIRD_STATE))
        check(w.address not in json.dumps(doc), f"state file without the wearable: {json.dumps(doc)}")
        w.wait_event("disconnected", 15, since=seq)
    with step("unpair again → exit 7 (unknown device)"):
        rc, _, err = p.pairctl("unpair", w.address)
        check(rc == 7, f"exit 7 ({err.strip()})")

    seq = w.last_seq()
    with step("restart paird: nothing comes back"):
        p.restart()
        check(p.status()["devices"] == [], "status lists no devices after the restart")
    if not w.status()["advertising"]:
        w.cmd("come-back")
    wait_for(lambda: w.status()["advertising"], 10, "wearable advertising")
    bed_sleep(10, "10 s with the wearable advertising in range")
    with step("still gone: BlueZ, status, no connection to the wearable"):
        check(dev not in c.devices() or not c.prop(dev, "Paired"), "not paired in BlueZ")
        check(p.status()["devices"] == [], "status lists no devices")
        check([e for e in w.events(seq) if e["event"] == "connected"] == [], "the wearable saw no connection")
    # The wearable still holds its half of the old bond. What a wearable then does with a new
    # pairing request from the same central is the wearable's stack's choice: the BlueZ twin
    # rejects it (a user resets the wearable too), Bumble — like many real wearables — accepts
    # it and replaces its keys. Each implementation is held to what it does.
    if w.impl == "bluez":
        with step("pair while the wearable still holds the old bond → exit 6 (authentication failed), nothing kept"):
            rc, _, err = p.pairctl("pair", "--service", "180d", "--timeout", "20", timeout=90)
            check(rc == 6, f"exit 6 ({err.strip()})")
            check(p.status()["devices"] == [], "status lists no devices")
        with step("after the wearable forgets its half of the bond too, it can be paired again"):
            w.cmd("forget-bond")
            pair_wearable(p)
            p.wait_state("connected", 10)
    else:
        with step(f"pair while the {w.impl} {w.profile} still holds the old bond → it accepts the new pairing: exit 0, connected"):
            check(w.status()["bonds"], f"the wearable still holds a bond: {w.status()['bonds']}")
            pair_wearable(p)
            p.wait_state("connected", 10)
            check(w.status()["connected"], "the wearable sees a connection")

main()
