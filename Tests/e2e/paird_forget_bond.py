#!/usr/bin/python3
# testbed: mode=plain timeout=360 wearables=strap twin=yes
"""Issue scenario 6: the wearable forgets its bond (factory reset) → paird marks it needsRepair
after SetupFailuresBeforeRepair (3) failed link setups, makes no reconnect loop, and
`pairctl pair ADDRESS` repairs it in one command (paird removes the stale bond from BlueZ itself).

KNOWN PROBLEM (Tests/testbed/README.md): the bed's kernel 6.1 BUGs (list_del corruption in
hci_chan_del) when the central's encryption fails with the stale key, and bluetoothd dies with
it. When that happens this scenario reports it and SKIPs (exit 0, counted as skipped by e2e.sh);
it never pretends to pass."""
from bedlib import *


def blocked_by_kernel_bug():
    line = kernel_bug()
    if line:
        log(f"dmesg: {line}")
        skip("blocked by kernel bug: the bed's kernel 6.1 hit 'list_del corruption' (hci_chan_del) on the "
             "central's encryption failure after the wearable forgot the bond; bluetoothd died with it "
             "(see dmesg.log). needsRepair could not be observed.")


@scenario
def main():
    w = Wearable.start(name="Pulse-1", battery=87)
    p = Paird()
    with step("paird up, pairctl pair --service 180d"):
        p.start()
        pair_wearable(p)
        p.wait_state("connected", 10)

    with step("wearable forget-bond → paird marks needsRepair (or the kernel BUG hits)"):
        t = now()
        w.cmd("forget-bond")
        wait_for(lambda: w.status()["advertising"] or w.cmd("come-back"), 10, "wearable advertising")

        def outcome():
            if kernel_bug():
                return "kernel-bug"
            d = p.device()
            return "needsRepair" if d and d["state"] == "needsRepair" else None
        try:
            what = wait_for(outcome, 150, "needsRepair (or a kernel BUG)", interval=0.5)
        except BedError:
            blocked_by_kernel_bug()
            c = Central("hci0")
            dev = c.device_path(w.address)
            bz = c.props(dev)
            log(f"BlueZ on the central: Connected={bool(bz['Connected'])} ServicesResolved="
                f"{bool(bz['ServicesResolved'])} Paired={bool(bz['Paired'])}; paird: {p.state()}")
            if bz["Connected"] and not bz["ServicesResolved"] and p.state() == "connected":
                raise BedError("paird gap: after forget-bond BlueZ 5.66 keeps the central's link "
                               "Connected=true with ServicesResolved=false (GATT gone) and paird still "
                               "says connected: ServicesResolved turning false is not an event of the machine")
            raise
        if what == "kernel-bug":
            blocked_by_kernel_bug()
        log(f"needsRepair {now() - t:.2f} s after forget-bond; lastDisconnect={p.device()['lastDisconnect']}")

    conn0 = bluez_connect_attempts()
    bed_sleep(60, "needsRepair for 60 s with the wearable advertising: no reconnect loop")
    with step("no reconnect loop: ≤ 1 Connect attempt in 60 s, still needsRepair"):
        n = bluez_connect_attempts() - conn0
        log(f"Device1.Connect attempts in 60 s: {n}")
        blocked_by_kernel_bug()
        check(n <= 1, f"≤ 1 Connect attempt (got {n})")
        check(p.state() == "needsRepair", "still needsRepair")
        rc, _, err = p.pairctl("connect")
        check(rc == 10, f"pairctl connect → 10 needs repair ({err.strip()})")
    with step("one pairctl pair ADDRESS repairs it: the old bond removed by paird, new keys, connected"):
        # By address, as status says: paird removes a bond only for a wearable the user named
        # (a scan by service leaves a needsRepair wearable's bond alone: paird_pair_present_only).
        rc, out, err = p.pairctl("pair", w.address, "--timeout", "20", timeout=120)
        lines = out.splitlines()
        for line in lines:
            log(f"  | {line}")
        check(rc == 0, f"pairctl pair {w.address}: exit 0, got {rc}: {err.strip()}")
        check(any("removing the old bond" in l for l in lines), "pairctl says paird removed the old bond itself")
        p.wait_state("connected", 30)
        c = Central("hci0")
        devs = [d for d in c.devices() if str(c.prop(d, "Address")).upper() == w.address.upper()]
        check(len(devs) == 1 and c.prop(devs[0], "Paired"), f"BlueZ: one bonded Device1 for {w.address} ({devs})")
        if w.impl == "bumble":
            check(w.status()["bonds"], f"the wearable holds a new bond: {w.status()['bonds']}")
        rc, out, _ = p.pairctl("status")
        check(rc == 0 and "needs pairing again" not in out, "status no longer says needs pairing again")


main()
