#!/usr/bin/python3
"""Minimal BlueZ clients used as reconnect baselines (run in the bed, Debian's python3-dbus).

  notify_client.py --profile ADDR     approach (a) "kernel auto-connect alone": Trusted=true, a
                                      GattProfile1 (UUIDs [180d]) registered through
                                      GattManager1.RegisterApplication on hci0 (this arms
                                      bluetoothd's LE auto-connect), StartNotify on 0x2A37 once.
                                      Nothing else: no Connect() call ever.
  notify_client.py ADDR               the StartNotify holder used with the `bluetoothctl connect`
                                      loop (approach b): StartNotify on 0x2A37 once, nothing else.
  notify_client.py --paird ADDR       paird's client: logs paird's Notification signals (0x2A37),
                                      what `pairctl watch` receives. Touches nothing in BlueZ.

Every heart-rate notification is logged (JSON line, wall clock) to --log."""
import argparse
import json
import sys
import time

import dbus
import dbus.mainloop.glib
import dbus.service
from gi.repository import GLib

BLUEZ, OM, PROPS = "org.bluez", "org.freedesktop.DBus.ObjectManager", "org.freedesktop.DBus.Properties"
HR_SVC = "0000180d-0000-1000-8000-00805f9b34fb"
HR_MEAS = "00002a37-0000-1000-8000-00805f9b34fb"
APP = "/org/bench/autoconnect"


class Profile(dbus.service.Object):
    @dbus.service.method("org.bluez.GattProfile1")
    def Release(self):
        pass


class App(dbus.service.Object):
    @dbus.service.method(OM, out_signature="a{oa{sa{sv}}}")
    def GetManagedObjects(self):
        return {dbus.ObjectPath(APP + "/profile"): {"org.bluez.GattProfile1": {
            "UUIDs": dbus.Array([HR_SVC], signature="s")}}}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("address")
    p.add_argument("--profile", action="store_true")
    p.add_argument("--paird", action="store_true")
    p.add_argument("--adapter", default="hci0")
    p.add_argument("--log", default="/dev/stdout")
    a = p.parse_args()
    dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
    bus = dbus.SystemBus()
    logf = open(a.log, "a", buffering=1)

    def log(kind, **kw):
        logf.write(json.dumps({"wall": time.time(), "kind": kind, **kw}) + "\n")

    if a.paird:
        def on_paird(addr, characteristic, value):
            if "2a37" in str(characteristic).lower():
                log("notification", value=bytes(value).hex())
        bus.add_signal_receiver(on_paird, "Notification", "org.paird1.Manager1")
        log("started", paird=True)
        GLib.MainLoop().run()
        return
    dev = f"/org/bluez/{a.adapter}/dev_{a.address.upper().replace(':', '_')}"
    bus.get_object(BLUEZ, dev).Set("org.bluez.Device1", "Trusted", dbus.Boolean(True), dbus_interface=PROPS)
    if a.profile:
        App(bus, APP)
        Profile(bus, APP + "/profile")
        bus.get_object(BLUEZ, f"/org/bluez/{a.adapter}").RegisterApplication(
            dbus.ObjectPath(APP), dbus.Dictionary({}, signature="sv"), dbus_interface="org.bluez.GattManager1",
            reply_handler=lambda: log("profile-registered"),
            error_handler=lambda e: log("error", where="RegisterApplication", error=str(e)))

    state = {"chr": None}

    def on_value(iface, changed, invalidated, path=None):
        if path == state["chr"] and "Value" in changed:
            log("notification", value=bytes(changed["Value"]).hex())

    bus.add_signal_receiver(on_value, "PropertiesChanged", PROPS, BLUEZ, path_keyword="path")

    def try_subscribe():
        """StartNotify once, as soon as the characteristic exists (the link is up)."""
        if state["chr"] is not None:
            return False
        objs = bus.get_object(BLUEZ, "/").GetManagedObjects(dbus_interface=OM)
        for path, ifs in objs.items():
            c = ifs.get("org.bluez.GattCharacteristic1")
            if c and str(path).startswith(dev + "/") and str(c["UUID"]) == HR_MEAS:
                if not objs[dev]["org.bluez.Device1"].get("ServicesResolved"):
                    return True
                state["chr"] = str(path)
                bus.get_object(BLUEZ, path).StartNotify(
                    dbus_interface="org.bluez.GattCharacteristic1",
                    reply_handler=lambda: log("subscribed", path=str(path)),
                    error_handler=lambda e: (log("error", where="StartNotify", error=str(e)),
                                             state.update(chr=None)))
                return False
        return True

    if try_subscribe():
        GLib.timeout_add(200, try_subscribe)   # only until the first StartNotify succeeds
    log("started", profile=a.profile)
    GLib.MainLoop().run()


if __name__ == "__main__":
    sys.exit(main())
