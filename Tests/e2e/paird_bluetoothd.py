#!/usr/bin/python3
# testbed: mode=plain timeout=360 wearables=strap twin=yes
"""Issue scenario 7: bluetoothd restarted → paird shows adapterUnavailable, then connected again
without help; the adapter powered off and on (btmgmt) → the same."""
from bedlib import *


@scenario
def main():
    w = Wearable.start(name="Pulse-1", battery=87)
    p = Paird()
    with step("paird up, pairctl pair --service 180d"):
        p.start()
        pair_wearable(p)
        p.wait_state("connected", 10)
    watch = p.watch()
    # pairctl watch is subscribed once it prints: a heart-rate line comes every second.
    wait_for(lambda: len(watch.lines("notify")) >= 1, 30, "pairctl watch receiving")

    with step("bluetoothd restart → adapterUnavailable → connected (no pairctl command)"):
        n = len(watch.lines("state"))
        t = now()
        bluetoothd("restart")
        log(f"bluetoothd back after {now() - t:.2f} s")
        wait_for(lambda: "adapterUnavailable" in watch.states(n), 20, "state adapterUnavailable in pairctl watch")
        p.wait_state("connected", 60)
        log(f"connected {now() - t:.2f} s after the restart began; states: {' → '.join(watch.states(n))}")
        check(p.status()["adapter"]["present"], "adapter present again")
    with step("notifications after the bluetoothd restart"):
        m = len(watch.lines("notify"))
        wait_for(lambda: len(watch.lines("notify")) >= m + 2, 20, "2 new notify lines")

    with step("adapter powered off (btmgmt) → adapterUnavailable, powered: false"):
        n = len(watch.lines("state"))
        sh("btmgmt --index 0 power off")
        wait_for(lambda: "adapterUnavailable" in watch.states(n), 20, "adapterUnavailable")
        st = p.status()
        check(st["adapter"]["powered"] is False, f"status adapter: {st['adapter']}")
        check(st["devices"][0]["state"] == "adapterUnavailable", f"device state {st['devices'][0]['state']}")
    with step("adapter powered on → connected (no pairctl command)"):
        t = now()
        sh("btmgmt --index 0 power on")
        p.wait_state("connected", 60)
        log(f"connected {now() - t:.2f} s after power on; states: {' → '.join(watch.states(n))}")
        m = len(watch.lines("notify"))
        wait_for(lambda: len(watch.lines("notify")) >= m + 2, 20, "2 new notify lines")

    with step("Adapter1.Powered=false/true over D-Bus → the same"):
        c = Central("hci0")
        n = len(watch.lines("state"))
        c.set(c.apath, "Powered", dbus.Boolean(False), iface=ADAPTER)
        wait_for(lambda: "adapterUnavailable" in watch.states(n), 20, "adapterUnavailable")
        t = now()
        c.set(c.apath, "Powered", dbus.Boolean(True), iface=ADAPTER)
        p.wait_state("connected", 60)
        log(f"connected {now() - t:.2f} s after Powered=true")


main()
