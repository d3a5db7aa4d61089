#!/usr/bin/python3
# testbed: mode=plain timeout=300 wearables=strap,ring twin=no-bumble-only controllers=4
"""Issue 32, part 3: two adapters for the central, a wearable bonded on each.

The bed (controllers=4): bluetoothd has two central adapters, hci0 (btvirt's controller 0,
00:AA:01:00:00:00, the one that can be unplugged) and hci2 (00:AA:01:02:00:02); the strap holds
hci1 and the ring hci3 through the HCI user channel (Bumble), so bluetoothd does not see those.
All four are on one simulated air: each central adapter hears both wearables.

paird runs with `[General] Adapter = hci0 hci2`. `pairctl pair --adapter hci0` pairs the strap on
hci0, `pairctl pair --adapter hci2` the ring on hci2: each one's bondAdapter (status --json) is
that adapter's address, and BlueZ holds the bond under that adapter only. Both connected and
notifying. Then hci0 is unplugged (btvirt's SIGUSR2): the strap goes adapterUnavailable (never
needsRepair) while the ring stays connected and its heart-rate notifications go on without a gap
(Bumble counts bpm up by one per notification) and without a state change; `adapters` in status
--json lists hci0's address as not present and hci2 as present. hci0's index is held meanwhile
(IndexHolder), so the plug-in comes back under another index with the same address: both
connected and notifying without any pairctl command (printed, MEASURED: plug-in → the strap's
first notification). `pairctl pair --adapter hci9` (and an address no adapter has) exits non-zero
naming it. The record: the strap one adapter-gone drop, the ring none."""
import json
import os
import signal

import dbus

from bedlib import *

HR = HR_MEAS


def next_bpm(v):
    return 60 + (v - 59) % 40      # bumble_wearable.py hr_loop


def complete_lines(watch):
    """pairctl watch's lines so far, without a last one still being written."""
    with open(watch.path, errors="replace") as f:
        text = f.read()
    return text[:text.rfind("\n") + 1].splitlines()


def hr_of(lines, address):
    """Heart-rate values of `address` in `pairctl watch` lines
    (`<time> <address> notify <uuid> [(decoded)] <hex>`)."""
    return [int(l.split()[-1][2:], 16) for l in lines
            if " notify " in l and l.split()[1] == address and l.split()[3] == HR]


def states_of(lines, address):
    """States of `address` in `pairctl watch` lines (`<time> <address> state <state> [reason]`)."""
    return [l.split()[3] for l in lines if " state " in l and l.split()[1] == address]


def gaps(values):
    return [(a, b) for a, b in zip(values, values[1:]) if b != next_bpm(a)]


@scenario
def main():
    if not os.environ.get("BED_BTVIRT"):
        raise BedFatal("needs the bed's patched btvirt (one handle per link, and the replug on SIGUSR2; "
                       "run-vm builds it with Tests/testbed/btvirt/build): BED_BTVIRT=stock was given or the build failed")
    strap = Wearable.start(profile="strap", adapter="hci1", sock="/run/bed/strap.sock")
    ring = Wearable.start(profile="ring", adapter="hci3", sock="/run/bed/ring.sock",
                          extra=["--drop-every", "0", "--drain-every", "0"])   # a steady stream
    names = {strap.address: "Pulse-1", ring.address: "Ring-1"}

    with step("the bed: bluetoothd has two central adapters, hci0 and hci2, powered; the ring heard from hci2"):
        def both_powered():
            a = bluez_adapters()
            return a if all(a.get(h, {}).get("powered") for h in ("hci0", "hci2")) else None
        ads = wait_for(both_powered, 20, "hci0 and hci2 powered on org.bluez")
        log(f"org.bluez adapters: {ads}; the kernel's controllers: {controllers()}")
        check(sorted(ads) == ["hci0", "hci2"], f"bluetoothd has hci0 and hci2 only (hci1, hci3: the wearables'): {sorted(ads)}")
        check(ads["hci0"]["address"] == CENTRAL_ADDR, f"hci0 is btvirt's controller 0, {CENTRAL_ADDR}: {ads['hci0']}")
        addr_a, addr_b = ads["hci0"]["address"], ads["hci2"]["address"]
        check(addr_b != addr_a, f"hci2 has an address of its own ({addr_b})")
        c2 = Central("hci2")
        dev = c2.discover(name="Ring-1", deadline=20)
        log(f"hci2 hears the ring: {dev}")
        c2.iface(c2.apath, ADAPTER).RemoveDevice(dev)   # no leftover object for paird to meet

    p = Paird()
    p.write_config("[General]\nAdapter = hci0 hci2\n")
    with step("paird (Adapter = hci0 hci2) up"):
        p.start()
    pw = p.watch()

    def pair(adapter, name):
        rc, out, err = p.pairctl("pair", "--adapter", adapter, "--service", "180d", "--name", name,
                                 "--timeout", "30", timeout=120)
        for line in (out + err).splitlines():
            log(f"  | {line}")
        check(rc == 0, f"pairctl pair --adapter {adapter} --name {name}: exit 0, got {rc}: {err.strip()}")

    def bonds(address):
        """The adapters under which BlueZ holds a bond (a Device1 with Paired) for `address`."""
        om = dbus.Interface(dbus.SystemBus().get_object(BLUEZ, "/"), OM)
        return sorted(str(path).split("/")[3] for path, i in om.GetManagedObjects().items()
                      if DEVICE in i and str(i[DEVICE]["Address"]).upper() == address.upper() and i[DEVICE]["Paired"])

    with step("pairctl pair --adapter hci0: the strap bonded on hci0 (status and BlueZ), connected"):
        pair("hci0", "Pulse-1")
        d = p.wait_state("connected", 30, address=strap.address)
        check(d.get("bondAdapter") == addr_a, f"the strap's bondAdapter is hci0's address {addr_a}: {d.get('bondAdapter')}")
        b = bonds(strap.address)
        check(b == ["hci0"], f"BlueZ holds the strap's bond under /org/bluez/hci0 only: {b}")
    with step("pairctl pair --adapter hci2: the ring bonded on hci2 (status and BlueZ), connected; the strap still connected"):
        pair("hci2", "Ring-1")
        d = p.wait_state("connected", 30, address=ring.address)
        check(d.get("bondAdapter") == addr_b, f"the ring's bondAdapter is hci2's address {addr_b}: {d.get('bondAdapter')}")
        b = bonds(ring.address)
        check(b == ["hci2"], f"BlueZ holds the ring's bond under /org/bluez/hci2 only: {b}")
        check(p.state(strap.address) == "connected", "the strap still connected")

    with step("both connected and notifying; status --json lists both adapters, hci0 the default"):
        for w in (strap, ring):
            n = len(hr_of(complete_lines(pw), w.address))
            wait_for(lambda: len(hr_of(complete_lines(pw), w.address)) >= n + 2, 15,
                     f"2 more heart-rate notifications from {names[w.address]}")
            check(w.status()["connected"], f"{names[w.address]} sees its link")
        st = p.status()
        log(f"status: adapter {st.get('adapter')}, adapters {st.get('adapters')}")
        got = sorted((a.get("name"), a.get("address"), a.get("powered"), a.get("present")) for a in st.get("adapters") or [])
        check(got == [("hci0", addr_a, True, True), ("hci2", addr_b, True, True)],
              f"adapters: hci0 {addr_a} and hci2 {addr_b}, both powered and present: {got}")
        a = st.get("adapter") or {}
        check(a.get("name") == "hci0" and a.get("address") == addr_a, f"the default adapter is hci0: {a}")
        for w in (strap, ring):
            check(p.state(w.address) == "connected", f"{names[w.address]} connected")

    btvirt = btvirt_pid()
    lines = complete_lines(pw)   # one read: the split between before and after is exact
    mark, ring_before = len(lines), hr_of(lines, ring.address)
    with step("unplug hci0: the strap adapterUnavailable (not needsRepair), the ring connected and notifying"):
        seq = strap.last_seq()
        t_unplug = now()
        os.kill(btvirt, signal.SIGUSR2)
        wait_for(lambda: 0 not in controllers(), 10, "hci0 gone from /sys/class/bluetooth")
        log(f"hci0 gone {now() - t_unplug:.2f} s after the unplug")
        strap.wait_event("disconnected", 10, since=seq)
        d = p.wait_state("adapterUnavailable", 15, address=strap.address)
        log(f"the strap adapterUnavailable {now() - t_unplug:.2f} s after the unplug")
        check(d["wanted"] == "connected", "the strap still wanted connected")
        n_unplug = len(complete_lines(pw))
        wait_for(lambda: len(hr_of(complete_lines(pw)[n_unplug:], ring.address)) >= 3, 20,
                 "3 heart-rate notifications from the ring after the strap went adapterUnavailable")
        st = p.status()
        ads = {a.get("address"): a for a in st.get("adapters") or []}
        check(ads.get(addr_a, {}).get("present") is False, f"adapters: hci0's {addr_a} not present: {ads.get(addr_a)}")
        check(ads.get(addr_b, {}).get("present") is True and ads[addr_b].get("powered") is True,
              f"adapters: hci2's {addr_b} present and powered: {ads.get(addr_b)}")
        check(p.state(ring.address) == "connected", "the ring connected")
        check(ring.status()["connected"], "the ring sees its link")
    with step("hold hci0's index while the dongle is out"):
        IndexHolder(0)
        bed_sleep(2, "the dongle stays out 2 s")
        check(p.state(strap.address) == "adapterUnavailable", f"the strap still adapterUnavailable ({p.state(strap.address)})")
        check(p.state(ring.address) == "connected", "the ring still connected")
        during = hr_of(complete_lines(pw)[mark:], ring.address)
        log(f"MEASURED the ring's notifications since the unplug ({now() - t_unplug:.1f} s ago): {len(during)}")
        check(len(during) >= 3, f"the ring kept notifying while hci0 was out ({len(during)} notifications)")

    with step("plug hci0 back in (another index, same address): both connected and notifying, no pairctl command"):
        before = set(controllers())
        n = len(complete_lines(pw))
        t_plug = now()
        os.kill(btvirt, signal.SIGUSR2)

        def new_controller():
            c = controllers()
            new = [i for i in c if i not in before and c[i] == addr_a]
            return new[0] if new else None
        new = wait_for(new_controller, 15, f"a new controller with address {addr_a}")
        check(new != 0, f"plugged in as hci{new}, not hci0")
        log(f"plugged in as hci{new} {now() - t_plug:.2f} s after the plug-in")
        wait_for(lambda: hr_of(complete_lines(pw)[n:], strap.address), 60,
                 "a heart-rate notification from the strap after the plug-in", interval=0.05)
        log(f"MEASURED plug-in → the strap's first notification {now() - t_plug:.2f} s (hci0 → hci{new})")
        for w in (strap, ring):
            p.wait_state("connected", 15, address=w.address)
        check(strap.status()["connected"], "the strap sees its link")
        b = bonds(strap.address)
        check(b == [f"hci{new}"], f"BlueZ holds the strap's bond under /org/bluez/hci{new} only: {b}")
        st = p.status()
        ads = {a.get("address"): a for a in st.get("adapters") or []}
        log(f"status: adapter {st.get('adapter')}, adapters {st.get('adapters')}")
        check(ads.get(addr_a, {}).get("present") is True and ads[addr_a].get("powered") is True
              and ads[addr_a].get("name") == f"hci{new}",
              f"adapters: {addr_a} present and powered again, as hci{new}: {ads.get(addr_a)}")
        check(ads.get(addr_b, {}).get("present") is True, f"adapters: {addr_b} still present: {ads.get(addr_b)}")
        k = len(hr_of(complete_lines(pw)[n:], strap.address))
        wait_for(lambda: len(hr_of(complete_lines(pw)[n:], strap.address)) >= k + 2, 15, "2 more notifications from the strap")

    with step("across unplug and plug-in: the ring's stream without a gap and without a state change; the strap never needsRepair"):
        lines = complete_lines(pw)
        vals = ring_before[-1:] + hr_of(lines[mark:], ring.address)
        log(f"the ring: {len(vals) - 1} notifications across the unplug and the plug-in, gaps {gaps(vals)}")
        check(ring_before and not gaps(vals), f"the ring: no missed notification ({gaps(vals)})")
        check(not states_of(lines[mark:], ring.address), f"the ring: no state change ({states_of(lines[mark:], ring.address)})")
        s = states_of(lines[mark:], strap.address)
        log(f"the strap: {' → '.join(s)}")
        check("adapterUnavailable" in s and "needsRepair" not in s, f"the strap: adapterUnavailable, never needsRepair: {s}")

    with step("pairctl pair --adapter on an adapter not in use: non-zero exit naming it; nothing disturbed"):
        for bad in ("hci9", "00:AA:01:09:00:09"):
            rc, out, err = p.pairctl("pair", "--adapter", bad, "--service", "180d", "--timeout", "5", timeout=60)
            log(f"  | pairctl pair --adapter {bad}: exit {rc}: {(out + err).strip()}")
            check(rc != 0, f"--adapter {bad}: a non-zero exit ({rc})")
            # both words: a pairctl without --adapter takes the value for the wearable's address and
            # says '"hci9" is not a Bluetooth address' (exit 64), or scans for that address
            text = (out + err).lower()
            check(bad.lower() in text and "adapter" in text, f"--adapter {bad}: the error is about that adapter")
        check(p.status()["pairing"] is None, "no pairing left running")
        for w in (strap, ring):
            check(p.state(w.address) == "connected", f"{names[w.address]} still connected")

    with step("the record: the strap one adapter-gone drop, the ring none"):
        rc, out, err = p.pairctl("history", "--json")
        check(rc == 0, f"pairctl history --json: exit {rc} ({err.strip()})")
        h = {d["address"]: d for d in json.loads(out)["devices"]}
        for w in (strap, ring):
            log(f"history {names[w.address]}: drops {h[w.address]['dropsByReason']}, "
                f"availability {h[w.address]['availabilityPercent']}%")
        check(h[strap.address]["dropsByReason"] == {"adapter-gone": 1},
              f"the strap: one adapter-gone drop ({h[strap.address]['dropsByReason']})")
        check(not h[ring.address]["dropsByReason"], f"the ring: no drop ({h[ring.address]['dropsByReason']})")
        with open(PAIRD_STATE) as f:
            log(f"state file adapters: {json.load(f).get('adapters')}")


main()
