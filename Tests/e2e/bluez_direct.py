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

    # Our StartNotify() calls on the heart-rate characteristic: the count is what "without a new
    # StartNotify" is checked against.
    hr_start_notifies = 0

    def start_notify_hr():
        nonlocal hr_start_notifies
        hr_start_notifies += 1
        c.start_notify(hr)

    with step("StartNotify heart rate; ≥3 notifications"):
        t = now()
        start_notify_hr()
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

    def away_and_back(k):
        """The wearable walks away, stays away 5 s, comes back; Connect() until ServicesResolved.
        Returns the number of Connect() calls it took."""
        with step(f"walk-away{k} → central sees Connected=false"):
            t = now()
            w.cmd("walk-away")
            wait_for(lambda: c.seen(dev, DEVICE, "Connected", False, since=t), 10, "Connected=false")
            check(not c.prop(dev, "ServicesResolved"), "ServicesResolved=false")

        bed_sleep(5, "the wearable stays out of range")

        with step(f"come-back{k} → Connect() → ServicesResolved"):
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
        return connects

    # The claim below is about a reconnect made by one Connect(). After a link that dropped before
    # resolving, BlueZ 5.66 (both roles on one bluetoothd here) did not restore the subscription in
    # any of the 4 runs seen with a second Connect() (2026-11-26/27 clean clones; the twin's side
    # never answered the central's MTU request on the dropped link, then disconnected it, 0x13);
    # every run with one Connect() had its stream back. Such a reconnect is said (FINDING), its
    # stream brought back by a new StartNotify in a step named so, and the wearable goes away and
    # back again (at most 3 times in all) until one Connect() does it.
    tries = 1
    connects = away_and_back("")
    while connects > 1:
        with step(f"after a link that dropped before resolving ({connects} Connect() calls): "
                  "the stream back, by a new StartNotify if BlueZ did not restore it"):
            t = now()
            try:
                wait_for(lambda: len(c.values(hr, since=t)) >= 2, 10, "2 heart-rate notifications after reconnect")
            except BedError:
                log(f"FINDING: after a link that dropped before resolving ({connects} Connect() calls), BlueZ 5.66 did "
                    f"not restore the heart-rate subscription (Notifying={c.prop(hr, 'Notifying', CHR)}); StopNotify + StartNotify")
                try:
                    call(c.iface(hr, CHR).StopNotify, timeout=30, what="StopNotify()")
                except Exception as e:  # noqa: BLE001 - not notifying in BlueZ's eyes: StartNotify decides
                    log(f"StopNotify(): {e}")
                t = now()
                start_notify_hr()
                wait_for(lambda: len(c.values(hr, since=t)) >= 2, 10, "2 heart-rate notifications after a new StartNotify")
        check(tries < 3, f"a reconnect by one Connect() within 3 tries (this one took {connects})")
        tries += 1
        connects = away_and_back(f" (again, try {tries})")

    with step("notifications flow again without a new StartNotify"):
        # no StartNotify() in this step, nor since this reconnect: the stream must come by itself
        t = now()
        wait_for(lambda: len(c.values(hr, since=t)) >= 2, 10, "2 heart-rate notifications after reconnect")
        check(c.prop(hr, "Notifying", CHR), "Notifying=true, as it was before the link went")
        log(f"{hr_start_notifies} StartNotify() call(s) on heart rate in all; the reconnect took one Connect()")

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
