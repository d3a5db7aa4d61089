#!/usr/bin/python3
# testbed: mode=plain timeout=300 wearables=strap
"""BlueZ versions (issue 19): paird uses `Device1.Disconnected(reason, message)` where BlueZ
sends it (new in 5.83) and infers the reason where it does not (5.66, 5.82). Decided by feature,
as paird does: the device object's introspection names the signal or not. The wearable walks
away (a link supervision timeout: bluetoothd logs `disconnected, reason 1`); with the signal,
paird's `lastDisconnect.reason` must be the signal's reason for that mgmt code ("timeout"); without
it, paird's own inference ("link-loss"). Fails if paird ignored the signal on a BlueZ that sends
it, or claimed a reason BlueZ never gave. Run it per version: BLUEZ=newest
Tests/testbed/e2e.sh versions/paird_disconnect_reason (not in the default set)."""
import os
import re
import subprocess

import dbus

from bedlib import *

# bluetoothd's MGMT_DEV_DISCONN_* codes → the org.bluez.Reason.* it sends (src/device.c,
# device_disconnected(), 5.83+) → paird's token for it (DisconnectClassifier.Reason.token)
MGMT_REASON = {0: "unknown", 1: "timeout", 2: "local", 3: "remote", 4: "authentication", 5: "suspend"}


def sends_disconnected_signal(path):
    xml = dbus.Interface(dbus.SystemBus().get_object("org.bluez", path),
                         "org.freedesktop.DBus.Introspectable").Introspect()
    iface = xml.split('<interface name="org.bluez.Device1">', 1)[1].split("</interface>", 1)[0]
    return '<signal name="Disconnected">' in iface


def last_mgmt_reason(address):
    with open(os.path.join(OUT, "bluetoothd.log"), errors="replace") as f:
        codes = re.findall(rf"Device {address} disconnected, reason (\d+)", f.read())
    return int(codes[-1]) if codes else None


@scenario
def main():
    w = Wearable.start(name="Pulse-1", battery=87)
    p = Paird()
    c = Central("hci0")
    with step("paird up, pairctl pair --service 180d"):
        p.start()
        pair_wearable(p)
        p.wait_state("connected", 10)
    signal = sends_disconnected_signal(c.device_path(w.address))
    log(f"  bluetoothd {subprocess.run(['/usr/libexec/bluetooth/bluetoothd', '--version'], capture_output=True, text=True).stdout.strip()}: "
        f"Device1.Disconnected signal {'present' if signal else 'absent'}")

    with step("walk-away → waitingForDevice; lastDisconnect.reason from the signal where BlueZ has it"):
        w.cmd("walk-away")
        d = p.wait_state("waitingForDevice", 30)
        got = d["lastDisconnect"]["reason"] if d["lastDisconnect"] else None
        code = wait_for(lambda: last_mgmt_reason(w.address), 10, "bluetoothd logged the disconnect reason")
        want = MGMT_REASON.get(code, "unknown") if signal else "link-loss"
        log(f"  mgmt reason {code}; paird lastDisconnect.reason = {got!r}, expected {want!r}")
        check(got == want, f"lastDisconnect.reason {got!r}, expected {want!r} (signal {'present' if signal else 'absent'}, mgmt reason {code})")

    with step("back → connected (the reason changed nothing of the wait)"):
        w.cmd("come-back")
        p.wait_state("connected", 60)


main()
