#!/usr/bin/python3
# testbed: mode=plain timeout=300 wearables=strap twin=yes
"""BlueZ driven directly on hci0 (no paird): discover, pair, GATT, out of range and back,
battery notification, bluetoothd restart keeps the bond."""
from bedlib import *


@scenario
def main():
    w = Wearable.start(name="Pulse-1", battery=87)
    c = Central("hci0")

    with step("register a NoInputNoOutput agent on the central"):
        c.register_agent("NoInputNoOutput")

    with step("discovery (filter: LE + 0x180D) finds the wearable"):
        dev = c.discover(uuid=HR_SVC, name="Pulse-1", deadline=20)
        check(dev == c.device_path(w.address), f"device path {dev} (the wearable's {w.address})")

    with step("Pair() (Just Works, bonds)"):
        c.pair(dev)
        check(c.prop(dev, "Paired"), "Paired=true")
        check(c.prop(dev, "Bonded"), "Bonded=true")
        c.set(dev, "Trusted", True)
        c.wait_services_resolved(dev, 30)

    hr = c.char(dev, HR_MEAS)
    bat = c.char(dev, BAT_LVL)
    with step("read Battery Level 0x2A19 and Battery1.Percentage"):
        check(c.read(bat) == bytes([87]), "Battery Level reads 87")
        pct = int(wait_for(lambda: c.prop(dev, "Percentage", BATTERY), 10, "Battery1 on the device"))
        check(pct == 87, f"Battery1.Percentage == 87 (got {pct})")

    with step("StartNotify heart rate; ≥3 notifications"):
        t = now()
        c.start_notify(hr)
        wait_for(lambda: len(c.values(hr, since=t)) >= 3, 10, "3 heart-rate notifications")
        log(f"heart rate values: {[v.hex() for v in c.values(hr, since=t)]}")

    # The strap (Heart Rate + Battery only, like a real chest strap) has no vendor service;
    # the BlueZ twin and the watch have it.
    if not w.has("vendor"):
        log(f"no vendor write/echo step: the {w.impl} {w.profile} has no vendor service")
    else:
        with step("vendor write is echoed by a notification"):
            echo = c.char(dev, VENDOR_ECHO)
            c.start_notify(echo)
            t = now()
            c.write(c.char(dev, VENDOR_WRITE), b"ping")
            wait_for(lambda: b"ping" in c.values(echo, since=t), 10, "echo notification 'ping'")

    with step("walk-away → central sees Connected=false"):
        t = now()
        w.cmd("walk-away")
        wait_for(lambda: c.seen(dev, DEVICE, "Connected", False, since=t), 10, "Connected=false")
        check(not c.prop(dev, "ServicesResolved"), "ServicesResolved=false")

    bed_sleep(5, "the wearable stays out of range")

    with step("come-back → Connect() → ServicesResolved"):
        w.cmd("come-back")
        c.connect(dev)
        # Usually 0.4 s; on a loaded TCG host the ATT exchange has stalled for BlueZ's 30 s ATT
        # timeout before resolving (seen once in a clean-clone run), so the deadline covers it.
        # A link that drops before resolving (the twin saw one go 4.5 s after it came up, on a
        # loaded host, 2026-11-27) is made again, as any central would: at most 3 Connect()s.
        connects, t0 = 1, now()
        def resolved():
            nonlocal connects
            if c.prop(dev, "ServicesResolved"):
                return True
            if not c.prop(dev, "Connected") and connects < 3:
                connects += 1
                log(f"the link dropped before resolving: Connect() #{connects}")
                try:
                    c.connect(dev)
                except Exception as e:  # noqa: BLE001 - the next poll decides
                    log(f"Connect() #{connects}: {e}")
            return False
        wait_for(resolved, 75, f"{dev.rsplit('/', 1)[-1]} ServicesResolved=True")
        log(f"resolved {now() - t0:.2f} s after come-back, {connects} Connect() call(s)")

    with step("notifications flow again without a new StartNotify"):
        t = now()
        try:
            wait_for(lambda: len(c.values(hr, since=t)) >= 2, 10, "2 heart-rate notifications after reconnect")
        except BedError:
            if connects == 1:
                raise
            # After a link that dropped before resolving, BlueZ 5.66 (both roles on one
            # bluetoothd here) did not restore the subscription in any of the 4 runs seen with a
            # second Connect() (2026-11-26/27 clean clones; the twin's side never answered the
            # central's MTU request on the dropped link, then disconnected it, 0x13); every run
            # with one Connect() had its stream back. A central that subscribes after every link
            # (paird does) does not depend on it: said, subscribed again, and the stream must
            # then flow.
            log(f"FINDING: after a link that dropped before resolving ({connects} Connect() calls), BlueZ 5.66 did "
                f"not restore the heart-rate subscription (Notifying={c.prop(hr, 'Notifying', CHR)}); StopNotify + StartNotify")
            try:
                call(c.iface(hr, CHR).StopNotify, timeout=30, what="StopNotify()")
            except Exception as e:  # noqa: BLE001 - not notifying in BlueZ's eyes: StartNotify decides
                log(f"StopNotify(): {e}")
            t = now()
            c.start_notify(hr)
            wait_for(lambda: len(c.values(hr, since=t)) >= 2, 10, "2 heart-rate notifications after a new StartNotify")

    with step("battery change arrives by notification"):
        t = now()
        w.cmd("battery 42")
        wait_for(lambda: c.prop(dev, "Percentage", BATTERY) == 42, 10, "Battery1.Percentage == 42")

    with step("restart bluetoothd (SIGTERM + start): the bond survives"):
        t = now()
        bluetoothd("restart")
        c.wait_bluez_back(30)
        wait_for(lambda: dev in c.devices(), 10, "device object re-created")
        check(c.prop(dev, "Paired"), "Paired=true after restart")
        check(c.prop(dev, "Trusted"), "Trusted=true after restart")
        check(not c.prop(dev, "Connected"), "Connected=false after restart")
        wait_for(lambda: w.status()["advertising"], 15, "wearable advertising again (re-registered)")

    with step("reconnect after the restart; read battery"):
        c.connect(dev)
        # Usually 0.4 s; on a loaded TCG host the ATT exchange has stalled for BlueZ's 30 s ATT
        # timeout before resolving (seen once in a clean-clone run), so the deadline covers it.
        c.wait_services_resolved(dev, 75)
        check(c.read(c.char(dev, BAT_LVL)) == bytes([42]), "Battery Level reads 42")


main()
