#!/usr/bin/python3
# testbed: mode=plain timeout=420 wearables=strap,watch-passkey,watch-confirm,ring twin=no-bumble-only
"""Bed self-test (no paird): each Bumble wearable profile, one after the other on hci1, as BlueZ
on hci0 (bedlib.Central) sees it.
  strap          a random static address (Device1.AddressType random, top bits 11), Just Works
  watch-passkey  an RPA at discovery; after bonding Device1.Address is the identity address; the
                 RPA rotates while away and bluetoothd keeps ONE device for it (found by Address,
                 never by path); passkey entry through the scenario's KeyboardDisplay agent
                 (RequestPasskey answered with what the watch shows); encrypted vendor write +
                 notify; firmware-update → Service Changed → the new characteristic shows up on
                 the central and the moved ones get new object paths
  watch-confirm  numeric comparison: RequestConfirmation's number is the one the watch shows;
                 a factory reset (forget-bond) + RemoveDevice, then paired again
  ring           slow advertising (1-2 s between advertisements, counted by the central through
                 the ring's rolling ManufacturerData), the ring drops its own link (the central's
                 bluetoothd logs reason 1 = connection timeout), battery notifications down to low
"""
import statistics

from bedlib import *

ADDR_TYPE = "AddressType"


def top_bits(addr):
    return int(addr.split(":")[0], 16) >> 6


def remove(c, dev):
    if dev in c.devices():
        c.iface(c.apath, ADAPTER).RemoveDevice(dev)
    wait_for(lambda: dev not in c.devices(), 10, f"{dev} removed on the central")


@scenario
def main():
    c = Central("hci0")
    agent = c.register_agent("KeyboardDisplay")

    # ---------------------------------------------------------------- strap
    w = Wearable.start(profile="strap", impl="bumble")
    with step("strap: discovered at its random static address; Just Works pair; heart rate"):
        dev = c.discover(uuid=HR_SVC, name="Pulse-1")
        p = c.props(dev)
        check(str(p[ADDR_TYPE]) == "random", f"AddressType random ({p[ADDR_TYPE]})")
        check(str(p["Address"]) == w.address and top_bits(w.address) == 0b11,
              f"Address {p['Address']} is the strap's static address (top bits 11)")
        n = len(agent.calls)
        c.pair(dev)
        c.wait_services_resolved(dev)
        check(not [x for x in agent.calls[n:] if x[0] in ("RequestPasskey", "RequestConfirmation")],
              "Just Works: the agent was asked nothing")
        hr = c.char(dev, HR_MEAS)
        t = now()
        c.start_notify(hr)
        wait_for(lambda: len(c.values(hr, since=t)) >= 2, 10, "2 heart-rate notifications")
        remove(c, dev)
    w.stop()

    # ---------------------------------------------------------------- watch-passkey
    w = Wearable.start(profile="watch-passkey", impl="bumble", extra=["--rpa-period", "12"])
    ident = w.address
    with step("watch: discovered at a resolvable private address (top bits 01), not its identity"):
        dev = c.discover(uuid=VENDOR_SVC, name="Watch-1")
        first = str(c.prop(dev, "Address"))
        check(top_bits(first) == 0b01 and first != ident, f"RPA {first} (identity {ident})")
        check(first == w.status()["address"], "the address the watch advertises with")
    with step("watch-passkey: LE SC passkey entry through the central's KeyboardDisplay agent"):
        agent.passkey = lambda: int(wait_for(lambda: w.status()["passkey"], 10, "the watch's passkey"))
        n = len(agent.calls)
        c.pair(dev)
        asked = [x for x in agent.calls[n:] if x[0] == "RequestPasskey"]
        check(len(asked) == 1 and asked[0][2] == int(w.status()["passkey"]),
              f"RequestPasskey answered with the watch's passkey {w.status()['passkey']} ({asked})")
        check(w.status()["authenticated"], "the watch's link is authenticated (MITM)")
        c.set(dev, "Trusted", True)
        c.wait_services_resolved(dev)
        addr = str(c.prop(dev, "Address"))
        check(addr == ident, f"after bonding Device1.Address is the identity address {ident} (got {addr}); "
              f"the path stays {dev.rsplit('/', 1)[-1]}")
    with step("watch: encrypted vendor write is echoed by a notification"):
        echo = c.char(dev, VENDOR_ECHO)
        c.start_notify(echo)
        t = now()
        c.write(c.char(dev, VENDOR_WRITE), b"ping")
        wait_for(lambda: b"ping" in c.values(echo, since=t), 10, "echo notification 'ping'")
    rpas = {first}
    for i in (1, 2):
        with step(f"watch: away, its RPA rotates, back: the same single device reconnects (round {i})"):
            seq = w.last_seq()
            t = now()
            w.cmd("walk-away")
            wait_for(lambda: c.seen(dev, DEVICE, "Connected", False, since=t), 10, "Connected=false")
            ev = w.wait_event("rpa", 20, since=seq)
            check(ev["new"] not in rpas and top_bits(ev["new"]) == 0b01, f"a new RPA {ev['new']} (before: {sorted(rpas)})")
            rpas.add(ev["new"])
            w.cmd("come-back")
            check(w.status()["address"] == ev["new"], f"advertising as {ev['new']}")
            c.connect(dev)
            c.wait_services_resolved(dev, 40)
            same = [p for p, d in c.devices().items() if str(d.get("Address")) == ident]
            check(same == [dev], f"one Device1 with Address {ident}: {same}")
            check(len(c.devices()) == 1, f"no second device for the new RPA: {list(c.devices())}")
            check(w.status()["connected"] and w.status()["central"] == CENTRAL_ADDR, "the watch is connected to hci0")
    with step("watch: firmware-update → Service Changed → a new characteristic, moved ones re-exported"):
        hr_before = c.char(dev, HR_MEAS)
        t = now()
        r = w.cmd("firmware-update")
        check(r["service_changed_sent"], f"the watch indicated Service Changed (confirmed): {r}")
        fw = wait_for(lambda: c.char(dev, "70616972-6403-4000-8000-77656172ab1e"), 20,
                      "the new firmware characteristic on the central")
        hr_after = c.char(dev, HR_MEAS)
        check(hr_after != hr_before, f"heart rate moved: {hr_before.rsplit('/', 2)[-2:]} → {hr_after.rsplit('/', 2)[-2:]}")
        check(any(k == "removed" and p.startswith(dev + "/") for tt, k, p, _ in c.history if tt >= t),
              "bluetoothd removed the changed services' objects")
        check(c.read(fw) == b"fw2", "the new characteristic reads fw2")
    with step("watch: a firmware update while away → Service Changed indicated and confirmed on the next link"):
        t = now()
        w.cmd("walk-away")
        wait_for(lambda: c.seen(dev, DEVICE, "Connected", False, since=t), 10, "Connected=false")
        r = w.cmd("firmware-update")
        check(not r["service_changed_sent"], "not sent while away (pending for the next link)")
        seq = w.last_seq()
        fails = bluetoothd_log_count("Failed to initialize gatt-client")
        w.cmd("come-back")
        c.connect(dev)
        ev = w.wait_event("service-changed", 20, since=seq, sent=True)
        check(ev.get("confirmed"), f"the central confirmed the indication: {ev}")

        # What bluetoothd 5.66 makes of it is BlueZ's business, reported as measured: seen here,
        # the indication arrives right after encryption while bluetoothd re-discovers because
        # the Database Hash changed; it logs "service disappeared" for the changed services and
        # "Failed to initialize gatt-client", and the new database is not exported on this link
        # (README, Known problems). Either outcome is written down; the link is dropped after.
        def outcome():
            if bluetoothd_log_count("Failed to initialize gatt-client") > fails:
                return "bluetoothd: Failed to initialize gatt-client (new database not exported)"
            try:
                c.char(dev, "70616972-6404-4000-8000-77656172ab1e")
                return "the new database is exported"
            except BedError:
                return None
        log(f"MEASURED BlueZ 5.66 after a firmware update while away: "
            f"{wait_for(outcome, 20, 'bluetoothd to export the new database or give up')}")
    remove(c, dev)
    w.stop()

    # ---------------------------------------------------------------- watch-confirm
    w = Wearable.start(profile="watch-confirm", impl="bumble", extra=["--rpa-period", "0"])
    with step("watch-confirm: LE SC numeric comparison: RequestConfirmation shows the watch's number"):
        dev = c.discover(uuid=VENDOR_SVC, name="Watch-1")
        n = len(agent.calls)
        c.pair(dev)
        asked = [x for x in agent.calls[n:] if x[0] == "RequestConfirmation"]
        shown = w.status()["compare"]
        check(len(asked) == 1 and shown is not None and asked[0][2] == int(shown),
              f"RequestConfirmation({asked and asked[0][2]}) == the watch's number {shown}")
        check(w.status()["authenticated"], "authenticated link (MITM)")
        c.wait_services_resolved(dev)
    with step("watch-confirm: factory reset (forget-bond) and the central forgets too → paired again"):
        t = now()
        r = w.cmd("forget-bond")
        check(r["removed"], f"the watch deleted its keys: {r['removed']}")
        wait_for(lambda: c.seen(dev, DEVICE, "Connected", False, since=t), 10, "Connected=false")
        check(w.status()["bonds"] == [], "no bond left on the watch")
        remove(c, dev)
        dev = c.discover(uuid=VENDOR_SVC, name="Watch-1")
        n = len(agent.calls)
        c.pair(dev)
        asked = [x for x in agent.calls[n:] if x[0] == "RequestConfirmation"]
        check(len(asked) == 1 and asked[0][2] == int(w.status()["compare"]), "numeric comparison again")
        check(str(c.prop(dev, "Address")) == w.address and w.status()["bonds"], "bonded again (identity address)")
        remove(c, dev)
    w.stop()

    # ---------------------------------------------------------------- ring
    w = Wearable.start(profile="ring", impl="bumble", battery=30,
                       extra=["--drop-every", "14", "--drop-away", "3", "--drain-every", "0"])
    with step("ring: advertises slowly (1-2 s apart, counted on the central)"):
        ad = c.iface(c.apath, ADAPTER)
        ad.SetDiscoveryFilter({"Transport": "le", "DuplicateData": True})
        t = now()
        ad.StartDiscovery()
        try:
            dev = wait_for(lambda: next((p for p, d in c.devices().items() if d.get("Name") == "Ring-1"), None),
                           20, "the ring discovered")

            def counters():
                return [(tt, bytes(d[1]["ManufacturerData"][0xFFFF])) for tt, k, p, d in c.history
                        if tt >= t and k == "props" and p == dev and d[0] == DEVICE and "ManufacturerData" in d[1]]
            wait_for(lambda: len(counters()) >= 6, 30, "6 advertisements with new counters")
        finally:
            ad.StopDiscovery()
        times = [tt for tt, _ in counters()]
        gaps = [b - a for a, b in zip(times, times[1:])]
        med = statistics.median(gaps)
        log(f"MEASURED ring advertisement gaps on the central: {[round(g, 2) for g in gaps]} (median {med:.2f} s)")
        check(0.8 <= med <= 2.6, f"median gap {med:.2f} s within the ring's 1-2 s (+ bed jitter)")
    with step("ring: pair; it drops the link by itself (central: reason 1 = connection timeout)"):
        reason1 = bluetoothd_log_count("disconnected, reason 1")
        c.pair(dev)
        c.set(dev, "Trusted", True)
        c.wait_services_resolved(dev)
        bat = c.char(dev, BAT_LVL)
        t_sub = now()
        c.start_notify(bat)
        w.cmd("drain 1.5")      # from 30 %: 25, 20, 15 … while the link is up
        t = now()
        seq = w.last_seq()
        wait_for(lambda: c.seen(dev, DEVICE, "Connected", False, since=t), 20, "the ring dropping its link")
        check(any(e["event"] == "link-lost" for e in w.events(seq)), "the ring says it dropped the link itself")
        wait_for(lambda: bluetoothd_log_count("disconnected, reason 1") > reason1, 5,
                 "bluetoothd logging the drop as reason 1 (connection timeout)")
    with step("ring: battery notifications going down; back after its drop, the level reads low"):
        # The ring drains on its own clock, linked or not, and drops its link by itself: under a
        # loaded host the drop may come before the level reaches low, so the notifications are
        # held to going down, and "low" is read on the next link.
        def notified():
            return [v[0] for v in c.values(bat, since=t_sub) if v]
        wait_for(lambda: len(set(notified())) >= 2, 30, "two different battery notifications")
        vals = notified()
        log(f"battery values notified: {vals}")
        check(vals == sorted(vals, reverse=True), f"going down: {vals}")
        wait_for(lambda: w.status()["advertising"], 15, "the ring advertising again")
        wait_for(lambda: w.status()["battery"] <= 15, 30, "the ring's battery at 15 % or below")
        c.connect(dev)
        c.wait_services_resolved(dev, 40)
        level = c.read(bat)[0]
        check(level <= 15, f"Battery Level reads {level} % (low)")
        remove(c, dev)
    w.stop()


main()
