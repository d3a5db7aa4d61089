#!/usr/bin/python3
# testbed: mode=plain timeout=360 wearables=strap twin=no-bumble-only controllers=3
"""A scan takes what advertises during it, and a bond goes only for a wearable the user named
(issue 30, item 2).

1. An old strap (hci1, Pulse-1) is bonded in BlueZ directly (Central: discovery, Pair(), as
   bluetoothctl does; no paird), then switched off (it stops advertising and drops its link).
2. A new strap (hci2, Pulse-2, its own address) advertises. `pairctl pair --service 180d` must
   pair the new one: the old one is only remembered by BlueZ (before, paird offered it as a
   candidate and could take it). Afterwards the old bond is still in BlueZ (Paired true) and
   paird does not manage it.
3. The new strap forgets its bond (factory reset) → needsRepair. While it advertises,
   `pairctl pair --service 180d` does not take it and does not remove its bond (it says why);
   once it is out of range, `pairctl pair --service 180d` (nothing else advertising) ends with
   exit 5 and leaves its bond in BlueZ where it is (before: "removing the old bond of …", gone)."""
from bedlib import *

NEW_ADDR = "F3:5A:B1:00:00:11"


def paired(c, address):
    d = c.device_by_address(address)
    return bool(d and c.prop(d, "Paired"))


@scenario
def main():
    old = Wearable.start(profile="strap", adapter="hci1", sock="/run/bed/old.sock")
    c = Central("hci0")
    with step("the old strap bonded in BlueZ without paird (discovery + Pair(), as bluetoothctl does)"):
        c.register_agent("NoInputNoOutput")
        dev = c.discover(uuid=HR_SVC, name="Pulse-1", deadline=20)
        c.pair(dev)
        check(c.prop(dev, "Paired"), "old strap: Paired=true")
        call(c.iface(dev, DEVICE).Disconnect, timeout=20, what="Disconnect()")
        c.iface("/org/bluez", "org.bluez.AgentManager1").UnregisterAgent(c.agent.path)

    with step("the old strap switched off: not advertising, no link"):
        old.cmd("walk-away")
        wait_for(lambda: not old.status()["advertising"] and not old.status()["connected"]
                 and not c.prop(dev, "Connected"), 10, "old strap silent and unlinked")
        check(paired(c, old.address), "BlueZ still holds the old strap's bond")

    new = Wearable.start(profile="strap", adapter="hci2", sock="/run/bed/new.sock", name="Pulse-2",
                         extra=["--address", NEW_ADDR])
    p = Paird()
    with step("paird up, knows no wearable"):
        p.start()
        check(p.status()["devices"] == [], "no devices")

    with step("pairctl pair --service 180d pairs the new strap, not the remembered old one"):
        t = now()
        lines = pair_wearable(p)
        log(f"pairctl pair --service 180d: {now() - t:.2f} s")
        check(any("Pulse-2" in l and new.address in l for l in lines), "found Pulse-2 at its address")
        check(not any(old.address in l for l in lines), "the old strap is not mentioned")
        p.wait_state("connected", 30, address=new.address)
        addrs = [d["address"] for d in p.status()["devices"]]
        check(addrs == [new.address], f"paird manages the new strap only: {addrs}")
        check(paired(c, old.address), "the old strap's bond is still in BlueZ (Paired true)")
        check(new.status()["bonds"], "the new strap holds a bond")

    with step("the new strap factory-reset → needsRepair"):
        t = now()
        new.cmd("forget-bond")
        p.wait_state("needsRepair", 150, address=new.address)
        log(f"needsRepair {now() - t:.2f} s after forget-bond")
        check(paired(c, new.address), "BlueZ still holds its (dead) bond")

    with step("needsRepair strap advertising, pairctl pair --service 180d: not taken, bond kept, says why"):
        wait_for(lambda: new.status()["advertising"] and not new.status()["connected"], 15, "the reset strap advertising")
        rc, out, err = p.pairctl("pair", "--service", "180d", "--timeout", "8", timeout=60)
        for line in out.splitlines():
            log(f"  | {line}")
        check(rc == 5, f"exit 5 (no device found), got {rc}: {err.strip()}")
        check(not any("removing the old bond" in l for l in out.splitlines()), "no bond removed")
        check(any("skipping" in l and new.address in l and "needs pairing again" in l for l in out.splitlines()),
              "pairctl says why the advertising strap is skipped")
        check(paired(c, new.address), "its bond is still in BlueZ")
        check(p.state(new.address) == "needsRepair", "still needsRepair")

    with step("needsRepair strap out of range, pairctl pair --service 180d: exit 5, its bond where it was"):
        new.cmd("walk-away")
        wait_for(lambda: not new.status()["advertising"] and not new.status()["connected"], 10, "the reset strap silent")
        rc, out, err = p.pairctl("pair", "--service", "180d", "--timeout", "8", timeout=60)
        for line in out.splitlines():
            log(f"  | {line}")
        check(rc == 5, f"exit 5 (no device found), got {rc}: {err.strip()}")
        check(not any("removing the old bond" in l for l in out.splitlines()), "no 'removing the old bond' line")
        check(paired(c, new.address), "the needsRepair strap's bond is still in BlueZ")
        check(paired(c, old.address), "the old strap's bond is still in BlueZ")
        check(p.state(new.address) == "needsRepair", "still needsRepair")
        check(p.device(old.address) is None, "paird does not manage the old strap")


main()
