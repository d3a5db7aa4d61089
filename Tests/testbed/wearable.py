#!/usr/bin/python3
"""Virtual BLE wearable for the test bed: a GATT peripheral on hci1 served by the bed's bluetoothd.

Run with Debian's /usr/bin/python3 (python3-dbus, python3-gi).

  wearable.py [--name Pulse-1] [--adapter hci1] [--socket /run/bed/wearable.sock] [--battery 87] [--away]

Advertises (LEAdvertisingManager1, connectable, LocalName=<name>) the services
  Heart Rate 0x180D  - Heart Rate Measurement 0x2A37 (notify; a new value every 1 s while
                       subscribed: flags 0x00, bpm 60..99)
  Battery    0x180F  - Battery Level 0x2A19 (read, notify)
  vendor     70616972-6400-4000-8000-77656172ab1e  ("paird" + "wear")
               ...ab1e's  write  characteristic 70616972-6401-4000-8000-77656172ab1e (write, write-without-response)
               echo/notify characteristic    70616972-6402-4000-8000-77656172ab1e (read, notify: echoes every write)
Registers a NoInputNoOutput agent as bluetoothd's *default* agent, so Just Works bonding works
(the peripheral side gets RequestAuthorization; we answer yes).  Re-registers advertisement,
GATT application and agent whenever bluetoothd comes back (NameOwnerChanged org.bluez).

Control: a UNIX stream socket (default /run/bed/wearable.sock); one command per line, one
reply line per command: "ok <json>" or "err <message>".  Commands:
  status                    {"impl": "bluez", "address", "identity_address", "advertising", "connected",
                             "central", "handle", "subscribed", "battery", "bonded", ...}
  walk-away                 stop advertising + HCI_Disconnect reason 0x08 (= supervision timeout)
  come-back                 advertise again
  reboot                    HCI_Disconnect reason 0x13 (remote user terminated), advertise again
  forget-bond               Adapter1.RemoveDevice(central) on our adapter: our keys are gone
  battery N                 set Battery Level (notifies if subscribed)
  disconnect [REASON]       HCI_Disconnect with REASON (hex, default 13), keep advertising
  events [SINCE]            events with seq > SINCE: [{"seq", "t", "event", ...}]
  quit                      unregister and exit
Events (also printed to stdout, one JSON per line): started, advertising, connected,
disconnected, subscribed, unsubscribed, write, read, bluez-gone, bluez-back, agent, ...
Shell: `wearablectl walk-away` (Tests/testbed/wearablectl).
"""
import argparse
import json
import os
import re
import socket
import subprocess
import sys
import time

import dbus
import dbus.exceptions
import dbus.mainloop.glib
import dbus.service
from gi.repository import GLib

from twin_objects import (ADV_PATH, AGENT_PATH, APP_PATH, BAT_LVL, BAT_SVC, BLUEZ, HR_MEAS, HR_SVC, OM, PROPS,
                          VENDOR_ECHO, VENDOR_SVC, VENDOR_WRITE, Advertisement, Agent, Application,
                          Characteristic, Service)

T0 = time.monotonic()


# ------------------------------------------------------------------ the wearable
class Wearable:
    def __init__(self, args):
        self.args = args
        self.bus = dbus.SystemBus()
        self.adapter_path = f"/org/bluez/{args.adapter}"
        self.events = []
        self.seq = 0
        self.want_adv = not getattr(args, "away", False)   # --away: start out of range
        self.advertising = False
        self.adv_pending = False
        self.register_tries = 0
        self.registered = False
        self.battery = args.battery
        self.bpm = 60
        self.hr_timer = None

        self.app = Application(self.bus, self)
        hr = Service(self.bus, 0, HR_SVC)
        self.hr = Characteristic(self.bus, self, hr, 0, HR_MEAS, ["notify"], b"\x00\x3c")
        bat = Service(self.bus, 1, BAT_SVC)
        self.bat = Characteristic(self.bus, self, bat, 0, BAT_LVL, ["read", "notify"], bytes([self.battery]))
        ven = Service(self.bus, 2, VENDOR_SVC)
        self.vwrite = Characteristic(self.bus, self, ven, 0, VENDOR_WRITE, ["write", "write-without-response"])
        self.vecho = Characteristic(self.bus, self, ven, 1, VENDOR_ECHO, ["read", "notify"])
        self.app.services = [hr, bat, ven]
        self.adv = Advertisement(self.bus, args.name, [HR_SVC, BAT_SVC, VENDOR_SVC])
        self.agent = Agent(self.bus, self)

        self.bus.add_signal_receiver(self.on_name_owner, "NameOwnerChanged", "org.freedesktop.DBus",
                                     arg0=BLUEZ)
        self.bus.add_signal_receiver(self.on_props, "PropertiesChanged", PROPS, BLUEZ,
                                     path_keyword="path")

    # -- events
    def event(self, _event, **kw):
        self.seq += 1
        ev = {"seq": self.seq, "t": round(time.monotonic() - T0, 3), "event": _event, **kw}
        self.events.append(ev)
        print(json.dumps(ev), flush=True)

    # -- bluez registration
    def bluez(self, path, iface):
        return dbus.Interface(self.bus.get_object(BLUEZ, path), iface)

    def register_all(self):
        """Agent + adapter settings (plain calls), then GATT application and advertisement
        asynchronously: bluetoothd calls back into us (GetManagedObjects, GetAll) before it
        replies, so a blocking call here would deadlock until the D-Bus timeout."""
        try:
            am = self.bluez("/org/bluez", "org.bluez.AgentManager1")
            am.RegisterAgent(AGENT_PATH, "NoInputNoOutput")
            am.RequestDefaultAgent(AGENT_PATH)
            ad = self.bluez(self.adapter_path, PROPS)
            ad.Set("org.bluez.Adapter1", "Powered", dbus.Boolean(True))
            ad.Set("org.bluez.Adapter1", "Pairable", dbus.Boolean(True))
            ad.Set("org.bluez.Adapter1", "Alias", dbus.String(self.args.name))
        except dbus.exceptions.DBusException as e:
            # A bluetoothd just back may still be powering its adapter (Set Powered: Busy) or not
            # show it yet: the twin tries again, as a real wearable's stack would, for up to 20 s.
            retriable = e.get_dbus_name() in ("org.bluez.Error.Busy", "org.bluez.Error.NotReady",
                                              "org.freedesktop.DBus.Error.UnknownObject",
                                              "org.freedesktop.DBus.Error.UnknownMethod")
            if retriable and self.register_tries < 40:
                self.register_tries += 1
                self.event("retry", where="register", error=str(e))
                GLib.timeout_add(500, lambda: self.register_all() and False)
                return False
            self.event("error", where="register", error=str(e))
            return False
        self.register_tries = 0

        def ok():
            self.registered = True
            self.event("registered", adapter=self.args.adapter)
            if self.want_adv:
                self.start_adv()

        self.bluez(self.adapter_path, "org.bluez.GattManager1").RegisterApplication(
            APP_PATH, {}, reply_handler=ok,
            error_handler=lambda e: self.event("error", where="RegisterApplication", error=str(e)))
        return True

    def start_adv(self):
        self.want_adv = True
        if self.advertising or self.adv_pending:
            return
        self.adv_pending = True

        def ok():
            self.adv_pending = False
            self.advertising = True
            self.event("advertising", on=True, name=self.args.name)

        def err(e):
            self.adv_pending = False
            self.event("error", where="RegisterAdvertisement", error=str(e))

        self.bluez(self.adapter_path, "org.bluez.LEAdvertisingManager1").RegisterAdvertisement(
            ADV_PATH, {}, reply_handler=ok, error_handler=err)

    def stop_adv(self, then=None):
        self.want_adv = False
        if not self.advertising:
            if then:
                then()
            return

        def done(e=None):
            if e is not None:
                self.event("error", where="UnregisterAdvertisement", error=str(e))
            self.advertising = False
            self.event("advertising", on=False)
            if then:
                then()

        self.bluez(self.adapter_path, "org.bluez.LEAdvertisingManager1").UnregisterAdvertisement(
            ADV_PATH, reply_handler=done, error_handler=done)

    def on_name_owner(self, name, old, new):
        if new:
            self.event("bluez-back")
            self.advertising = False
            GLib.idle_add(lambda: self.register_all() and False)
        else:
            self.event("bluez-gone")
            self.registered = self.advertising = False
            self.stop_hr()
            for c in (self.hr, self.bat, self.vecho):
                c.notifying = False

    # -- link state (the central's device object under our adapter)
    def central_path(self):
        om = self.bluez("/", OM)
        for path, ifaces in om.GetManagedObjects().items():
            d = ifaces.get("org.bluez.Device1")
            if d and path.startswith(self.adapter_path + "/") and (d.get("Connected") or d.get("Paired")):
                return str(path)
        return None

    def on_props(self, iface, changed, invalidated, path=None):
        if iface != "org.bluez.Device1" or not path.startswith(self.adapter_path + "/"):
            return
        if "Connected" in changed:
            self.event("connected" if changed["Connected"] else "disconnected", device=str(path))
            # No StopNotify on a link loss: for a bonded central bluetoothd keeps the CCC state
            # and resumes notifications on reconnect without a new StartNotify (values sent
            # meanwhile are dropped by bluetoothd).
        for k in ("Paired", "Bonded"):
            if k in changed:
                self.event(k.lower(), value=bool(changed[k]), device=str(path))

    # -- HCI helpers
    def acl_handle(self):
        out = subprocess.run(["hcitool", "-i", self.args.adapter, "con"], capture_output=True,
                             text=True, timeout=10).stdout
        m = re.search(r"handle (\d+)", out)
        return int(m.group(1)) if m else None

    def hci_disconnect(self, reason):
        h = self.acl_handle()
        if h is None:
            return None
        cmd = ["hcitool", "-i", self.args.adapter, "cmd", "0x01", "0x0006",
               f"{h & 0xff:02x}", f"{h >> 8:02x}", f"{reason:02x}"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {r.stderr.strip()}")
        self.event("hci-disconnect", handle=h, reason=f"0x{reason:02x}")
        return h

    # -- GATT behaviour
    def on_subscribe(self, chr_, on):
        if chr_ is self.hr:
            self.start_hr() if on else self.stop_hr()

    def start_hr(self):
        if self.hr_timer is None:
            self.hr_timer = GLib.timeout_add(1000, self.hr_tick)

    def stop_hr(self):
        if self.hr_timer is not None:
            GLib.source_remove(self.hr_timer)
            self.hr_timer = None

    def hr_tick(self):
        if not self.hr.notifying:
            self.hr_timer = None
            return False
        self.bpm = 60 + (self.bpm - 59) % 40
        self.hr.set_value(bytes([0x00, self.bpm]))
        return True

    def on_write(self, chr_, data):
        if chr_ is self.vwrite:
            self.vecho.set_value(data)

    def status(self):
        try:
            addr = str(self.bluez(self.adapter_path, PROPS).Get("org.bluez.Adapter1", "Address"))
        except dbus.exceptions.DBusException:
            addr = None
        st = {"impl": "bluez", "profile": "twin", "address": addr, "address_type": "public",
              "address_kind": "public", "identity_address": addr, "identity_address_type": "public",
              "services": ["hr", "battery", "vendor"],
              "name": self.args.name, "adapter": self.args.adapter, "registered": self.registered,
              "advertising": self.advertising, "battery": self.battery, "bpm": self.bpm,
              "subscribed": {"hr": self.hr.notifying, "battery": self.bat.notifying,
                             "echo": self.vecho.notifying},
              "last_seq": self.seq}
        try:
            cp = self.central_path()
            props = self.bluez(cp, PROPS).GetAll("org.bluez.Device1") if cp else {}
            st.update(central=cp, connected=bool(props.get("Connected", False)),
                      bonded=bool(props.get("Bonded", props.get("Paired", False))))
        except dbus.exceptions.DBusException as e:
            st.update(central=None, connected=False, bonded=False, error=str(e))
        st["handle"] = self.acl_handle()
        return st

    # -- control commands
    def command(self, line):
        parts = line.split()
        if not parts:
            raise ValueError("empty command")
        cmd, args = parts[0], parts[1:]
        if cmd == "status":
            return self.status()
        if cmd == "walk-away":
            h = self.acl_handle()
            self.stop_adv(then=lambda: self.hci_disconnect(0x08))
            return {"handle": h, "reason": "0x08"}
        if cmd == "come-back":
            t = round(time.monotonic() - T0, 3)
            self.start_adv()
            return {"advertising": "requested", "t": t}
        if cmd == "reboot":
            h = self.acl_handle()
            self.stop_adv(then=lambda: (self.hci_disconnect(0x13), self.start_adv()))
            return {"handle": h, "reason": "0x13"}
        if cmd == "disconnect":
            reason = int(args[0], 16) if args else 0x13
            return {"handle": self.hci_disconnect(reason), "reason": f"0x{reason:02x}"}
        if cmd == "forget-bond":
            cp = self.central_path()
            if cp is None:
                raise ValueError("no bonded/connected central under " + self.adapter_path)
            self.bluez(self.adapter_path, "org.bluez.Adapter1").RemoveDevice(cp)
            self.event("forgot-bond", device=cp)
            return {"removed": cp}
        if cmd == "battery":
            if len(args) != 1 or not args[0].isdigit() or int(args[0]) > 100:
                raise ValueError("usage: battery 0..100")
            self.battery = int(args[0])
            self.bat.set_value(bytes([self.battery]))
            self.event("battery", level=self.battery, notified=self.bat.notifying)
            return {"battery": self.battery, "notified": self.bat.notifying}
        if cmd == "events":
            since = int(args[0]) if args else 0
            return [e for e in self.events if e["seq"] > since]
        if cmd == "quit":
            GLib.idle_add(self.quit)
            return {"bye": True}
        raise ValueError(f"unknown command {cmd!r}")

    def quit(self):
        try:
            self.bluez(self.adapter_path, "org.bluez.GattManager1").UnregisterApplication(APP_PATH)
        except Exception:
            pass
        self.loop.quit()
        return False

    # -- control socket
    def serve(self, path):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(path)
        self.srv.listen(8)
        GLib.io_add_watch(self.srv.fileno(), GLib.IO_IN, self.on_accept)

    def on_accept(self, fd, cond):
        conn, _ = self.srv.accept()
        conn.setblocking(False)
        buf = bytearray()

        def on_data(_fd, _cond):
            try:
                chunk = conn.recv(4096)
            except BlockingIOError:
                return True
            if not chunk:
                conn.close()
                return False
            buf.extend(chunk)
            while b"\n" in buf:
                line, _, rest = bytes(buf).partition(b"\n")
                buf[:] = rest
                try:
                    reply = "ok " + json.dumps(self.command(line.decode().strip()))
                except Exception as e:  # report, never die
                    reply = f"err {type(e).__name__}: {e}"
                conn.setblocking(True)
                conn.sendall(reply.encode() + b"\n")
                conn.setblocking(False)
            return True

        GLib.io_add_watch(conn.fileno(), GLib.IO_IN | GLib.IO_HUP, on_data)
        return True

    # -- periodic advertising events
    def readvertise_tick(self):
        """A real wearable's advertising events repeat every ~100 ms-1 s; btvirt sends an
        advertising report only when scanning or advertising is (re)enabled, at once. The kernel
        drops a report that arrives while its discovery is still starting (state STARTING), and
        then never hears of the wearable during that scan: `pairctl pair` found nothing in 20 s
        in about half the runs. So while advertising and not connected, re-enable advertising at
        the HCI level (LE Set Advertising Enable 0, 1), which makes btvirt report it again to
        every scanning controller."""
        if self.want_adv and self.advertising and not self.adv_pending and self.acl_handle() is None:
            for on in ("00", "01"):
                subprocess.run(["hcitool", "-i", self.args.adapter, "cmd", "0x08", "0x000a", on],
                               capture_output=True, timeout=10)
        return True

    def run(self):
        self.loop = GLib.MainLoop()
        if self.args.readvertise > 0:
            GLib.timeout_add(int(self.args.readvertise * 1000), self.readvertise_tick)
        self.serve(self.args.socket)
        self.event("started", name=self.args.name, adapter=self.args.adapter, socket=self.args.socket)
        if self.bus.name_has_owner(BLUEZ):
            self.register_all()
        self.loop.run()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--name", default="Pulse-1")
    p.add_argument("--adapter", default="hci1")
    p.add_argument("--socket", default="/run/bed/wearable.sock")
    p.add_argument("--battery", type=int, default=87)
    p.add_argument("--away", action="store_true",
                   help="start out of range: registered but not advertising until `come-back`")
    p.add_argument("--readvertise", type=float, default=2.0,
                   help="seconds between advertising re-enables while not connected (0: never)")
    args = p.parse_args()
    dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
    Wearable(args).run()


if __name__ == "__main__":
    sys.exit(main())
