"""A wearable on an independent BLE stack: Google's Bumble (PyPI `bumble`, pinned by
install-deps.sh) on one of btvirt's controllers through the Linux HCI user channel, so the
central's bluetoothd talks to a host stack that is not BlueZ.

Run it with the bed's venv (install-deps.sh makes it): .build-testbed/bumble-venv/bin/python
  bumble_wearable.py --profile strap [--name Pulse-1] [--hci 1] [--socket /run/bed/wearable.sock]
                     [--battery 87] [--away] [--keystore FILE] [--bumble-log FILE]

Profiles (Tests/testbed/README.md has the table):
  strap          random static address, Just Works, Heart Rate 0x180D/0x2A37 notify 1 Hz,
                 Battery 0x180F/0x2A19 read+notify, advertising every 100 ms
  watch-passkey  resolvable private address rotating every --rpa-period s (IRK + identity
                 distributed), LE Secure Connections + MITM, DisplayOnly: shows a 6-digit passkey
                 (status "passkey", event "passkey"); vendor 128-bit service write + notify;
                 `firmware-update` adds a characteristic (handles move) and sends Service Changed
  watch-confirm  the same, DisplayYesNo: numeric comparison (status/event "compare")
  ring           advertising every 1-2 s (a rolling counter in its manufacturer data), drops its
                 link by itself every --drop-every s (HCI reason 0x08, as a supervision timeout),
                 battery draining by 5 % every --drain-every s down to 5 % (`drain S` changes it)

Control protocol: the same as wearable.py (the BlueZ twin), so bedlib.Wearable and wearablectl
drive either: a UNIX stream socket, one command per line, one reply "ok <JSON>" / "err <why>".
Events: one JSON line each on stdout (wearable.log), with a sequence number.
"""
import argparse
import asyncio
import errno
import json
import logging
import os
import random
import struct
import subprocess
import sys
import time

from bumble import gatt, hci
from bumble.core import AdvertisingData, UUID
from bumble.device import Device, DeviceConfiguration
from bumble.keys import JsonKeyStore
from bumble.pairing import PairingConfig, PairingDelegate
from bumble.transport import open_transport

T0 = time.monotonic()

HR_SVC, HR_MEAS = 0x180D, 0x2A37
BAT_SVC, BAT_LVL = 0x180F, 0x2A19
VENDOR_SVC = "70616972-6400-4000-8000-77656172ab1e"
VENDOR_WRITE = "70616972-6401-4000-8000-77656172ab1e"
VENDOR_ECHO = "70616972-6402-4000-8000-77656172ab1e"

IO = PairingDelegate.IoCapability
PROFILES = {
    # address = the identity address: random static (two top bits set), fixed per profile so a
    # bond survives a restart of the program (and the bed's cold-boot scenario).
    "strap": dict(name="Pulse-1", address="F3:5A:B1:00:00:01", io=IO.NO_OUTPUT_NO_INPUT,
                  mitm=False, privacy=False, services=("hr", "battery"), adv_ms=(100, 100),
                  readvertise=(1.0, 1.0), security="none"),
    "watch-passkey": dict(name="Watch-1", address="F3:5A:B1:00:00:02", io=IO.DISPLAY_OUTPUT_ONLY,
                          mitm=True, privacy=True, services=("vendor", "battery", "hr"),
                          adv_ms=(200, 300), readvertise=(1.0, 1.0), security="encrypted"),
    "watch-confirm": dict(name="Watch-1", address="F3:5A:B1:00:00:02",
                          io=IO.DISPLAY_OUTPUT_AND_YES_NO_INPUT, mitm=True, privacy=True,
                          services=("vendor", "battery", "hr"), adv_ms=(200, 300),
                          readvertise=(1.0, 1.0), security="encrypted"),
    "ring": dict(name="Ring-1", address="F3:5A:B1:00:00:03", io=IO.NO_OUTPUT_NO_INPUT, mitm=False,
                 privacy=False, services=("hr", "battery"), adv_ms=(1000, 2000),
                 readvertise=(1.0, 2.0), security="none", adv_counter=True),
}


def address_kind(a):
    if a.address_type == hci.Address.PUBLIC_DEVICE_ADDRESS:
        return "public"
    if a.is_static:
        return "static"
    return "rpa" if a.is_resolvable else "non-resolvable"


def addr_str(a):
    return a.to_string(with_type_qualifier=False) if a is not None else None


class Delegate(PairingDelegate):
    """The wearable's side of pairing: shows the passkey / the number to compare through
    events and status (a scenario reads them and answers on the central)."""

    def __init__(self, w, io):
        super().__init__(io_capability=io)
        self.w = w

    async def accept(self):
        self.w.event("pairing-request")
        return True

    async def confirm(self, auto=False):
        # Just Works. A watch requires MITM protection: it refuses a pairing that cannot give it
        # (the central has no display/keyboard: NoInputNoOutput), as a real one does. Bumble
        # then sends SMP Pairing Failed 0x04 (a stack checking it up front would send 0x03).
        ok = not self.w.p["mitm"]
        self.w.event("confirm", auto=auto, accepted=ok,
                     **({} if ok else {"why": "Just Works refused: this profile requires MITM"}))
        return ok

    async def compare_numbers(self, number, digits):
        self.w.compare = f"{number:0{digits}d}"
        self.w.event("compare", number=self.w.compare)
        return not self.w.args.reject_compare

    async def display_number(self, number, digits):
        self.w.passkey = f"{number:0{digits}d}"
        self.w.event("passkey", passkey=self.w.passkey)

    async def generate_passkey(self):
        # --passkey: a fixed one (a wearable whose manual prints it), else Bumble's random one
        if self.w.args.passkey is not None:
            return self.w.args.passkey
        return await super().generate_passkey()

    async def get_number(self):
        self.w.event("error", where="pairing", error="asked to enter a number (no keyboard)")
        return None


class Wearable:
    def __init__(self, args):
        self.args = args
        self.p = dict(PROFILES[args.profile])
        self.name = args.name or self.p["name"]
        self.events, self.seq = [], 0
        self.battery = args.battery
        self.bpm = 60
        self.fw = 1
        self.want_adv = not args.away
        self.advertising = False
        self.conn = None
        self.passkey = self.compare = None
        self.pending_service_changed = False
        self.adv_reports = 0
        self.rotations = []
        self.lock = asyncio.Lock()       # advertising / address changes, one at a time
        self.tasks = []
        # fault injection (issue 18): ATT requests dropped unanswered on the next link
        # (`stall-att next`) or the current one (`stall-att now`), until that link ends
        self.stall_next = False
        self.stall_conn = None
        self.att_dropped = 0

    # ------------------------------------------------------------------ events
    def event(self, _event, **kw):
        self.seq += 1
        ev = {"seq": self.seq, "t": round(time.monotonic() - T0, 3), "event": _event, **kw}
        self.events.append(ev)
        print(json.dumps(ev), flush=True)

    # ------------------------------------------------------------------ the GATT database
    def build_services(self):
        sec = self.p["security"]
        rd = gatt.Characteristic.Permissions.READABLE
        wr = gatt.Characteristic.Permissions.WRITEABLE
        if sec == "encrypted":
            rd = gatt.Characteristic.Permissions.READ_REQUIRES_ENCRYPTION
            wr = gatt.Characteristic.Permissions.WRITE_REQUIRES_ENCRYPTION
        P = gatt.Characteristic.Properties
        out = []
        for s in self.p["services"]:
            if s == "hr":
                self.hr = gatt.Characteristic(UUID.from_16_bits(HR_MEAS), P.NOTIFY, rd,
                                              bytes([0, self.bpm]))
                out.append(gatt.Service(UUID.from_16_bits(HR_SVC), [self.hr]))
            elif s == "battery":
                self.bat = gatt.Characteristic(
                    UUID.from_16_bits(BAT_LVL), P.READ | P.NOTIFY, rd,
                    gatt.CharacteristicValue(read=self.read_battery))
                out.append(gatt.Service(UUID.from_16_bits(BAT_SVC), [self.bat]))
            elif s == "vendor":
                self.vwrite = gatt.Characteristic(
                    UUID(VENDOR_WRITE), P.WRITE | P.WRITE_WITHOUT_RESPONSE, wr,
                    gatt.CharacteristicValue(write=self.on_vendor_write))
                self.vecho = gatt.Characteristic(UUID(VENDOR_ECHO), P.READ | P.NOTIFY, rd, b"")
                chars = [self.vwrite, self.vecho]
                # each firmware update adds one (…6403 with firmware 2, …6404 with 3, …) in
                # front of the others: every later handle moves
                for k in range(self.fw, 1, -1):
                    chars.insert(0, gatt.Characteristic(UUID(f"70616972-64{k + 1:02x}-4000-8000-77656172ab1e"),
                                                        P.READ, rd, f"fw{self.fw}".encode()))
                out.append(gatt.Service(UUID(VENDOR_SVC), chars))
        return out

    def install_db(self):
        srv = self.device.gatt_server
        srv.attributes.clear()
        srv.attributes_by_handle.clear()
        srv.services.clear()
        self.device.add_default_services()
        self.gatt_changed_from = srv.next_handle()   # GAP + GATT keep their handles
        self.device.add_services(self.build_services())
        self.sc_char = self.device.gatt_service.service_changed_characteristic

    def read_battery(self, connection):
        self.event("read", uuid=f"{BAT_LVL:04x}", device=addr_str(connection.peer_address))
        return bytes([self.battery])

    def on_vendor_write(self, connection, value):
        value = bytes(value)
        self.event("write", uuid=VENDOR_WRITE, hex=value.hex())
        self.vecho.value = value
        self.spawn(self.device.notify_subscribers(self.vecho, value))

    def subscribed(self, char):
        if char is None or self.conn is None:
            return False
        cccd = self.device.gatt_server.subscribers.get(self.conn, {}).get(char.handle)
        return bool(cccd and cccd[0] & 0x03)

    # ------------------------------------------------------------------ advertising
    def adv_data(self):
        uuids16 = [UUID.from_16_bits(u) for s, u in (("hr", HR_SVC), ("battery", BAT_SVC))
                   if s in self.p["services"]]
        parts = [(AdvertisingData.FLAGS, bytes([0x06])),
                 (AdvertisingData.COMPLETE_LIST_OF_16_BIT_SERVICE_CLASS_UUIDS,
                  b"".join(bytes(u) for u in uuids16))]
        if "vendor" in self.p["services"]:
            parts.append((AdvertisingData.COMPLETE_LIST_OF_128_BIT_SERVICE_CLASS_UUIDS,
                          bytes(UUID(VENDOR_SVC))))
        if self.p.get("adv_counter"):
            # a rolling advertising counter (company 0xFFFF, "none"): each advertisement differs,
            # so a central can count them (bluetoothd updates ManufacturerData per report)
            parts.append((AdvertisingData.MANUFACTURER_SPECIFIC_DATA,
                          b"\xff\xff" + bytes([self.adv_reports & 0xFF])))
        name = (AdvertisingData.COMPLETE_LOCAL_NAME, self.name.encode())
        adv = bytes(AdvertisingData(parts + [name]))
        if len(adv) <= 31:
            return adv, bytes(AdvertisingData([name]))
        # legacy advertising carries 31 bytes: the name goes to the scan response (a central's
        # active scan, as bluetoothd's discovery does, gets both)
        return bytes(AdvertisingData(parts)), bytes(AdvertisingData([name]))

    async def start_advertising(self):
        lo, hi = self.p["adv_ms"]
        adv, scan = self.adv_data()
        await self.device.start_advertising(advertising_data=adv, scan_response_data=scan,
                                            advertising_interval_min=lo, advertising_interval_max=hi)

    async def adv_on(self):
        await self.start_advertising()
        if not self.advertising:
            self.advertising = True
            self.event("advertising", on=True, name=self.name, address=addr_str(self.device.random_address))

    async def adv_off(self):
        await self.device.stop_advertising()
        if self.advertising:
            self.advertising = False
            self.event("advertising", on=False)

    async def start_adv(self):
        self.want_adv = True
        async with self.lock:
            if self.conn is None:
                await self.adv_on()

    async def stop_adv(self):
        self.want_adv = False
        async with self.lock:
            await self.adv_off()

    async def readvertise_loop(self):
        """btvirt reports an advertiser to scanners only when advertising (or scanning) is
        (re)enabled; it has no advertising events of its own. So while advertising and not
        connected, re-enable advertising every profile period: that is the bed's stand-in for
        the profile's advertising interval (a strap's 100 ms is capped at 1 s: under TCG
        faster re-enables only cost CPU)."""
        while True:
            lo, hi = self.p["readvertise"]
            await asyncio.sleep(random.uniform(lo, hi))
            if self.want_adv and self.conn is None and self.advertising:
                async with self.lock:
                    if self.conn is None and self.advertising:
                        s = self.device.legacy_advertising_set
                        try:
                            if self.p.get("adv_counter"):
                                self.adv_reports += 1
                                await self.start_advertising()   # new data each time
                                continue
                            if s is not None:
                                await s.stop()
                                await s.start()
                            else:
                                await self.start_advertising()
                            self.adv_reports += 1
                        except Exception as e:  # noqa: BLE001 - a connection raced the re-enable
                            logging.info("re-enable advertising: %s", e)

    async def rotate_rpa(self, why="timer"):
        """Bumble 0.0.236's update_rpa() sets the old address; do it here: a new RPA from our
        IRK, set while advertising is off (the controller refuses it otherwise)."""
        async with self.lock:
            old = self.device.random_address
            new = hci.Address.generate_private_address(self.device.irk)
            was = self.advertising and self.conn is None
            if was:
                await self.device.stop_advertising()
            await self.device.send_sync_command(hci.HCI_LE_Set_Random_Address_Command(random_address=new))
            self.device.random_address = new
            if was:
                await self.start_advertising()
            self.rotations.append(addr_str(new))
            self.event("rpa", old=addr_str(old), new=addr_str(new), why=why)
            return addr_str(new)

    async def rpa_loop(self):
        while True:
            await asyncio.sleep(self.args.rpa_period)
            if self.conn is None:   # a real device keeps its address while connected
                await self.rotate_rpa()

    # ------------------------------------------------------------------ link
    def on_connection(self, connection):
        self.conn = connection
        if self.stall_next:
            self.stall_next = False
            self.stall_conn = connection
            self.event("att-stalling", handle=connection.handle)
        self.advertising = False
        self.passkey = self.compare = None
        self.event("connected", device=addr_str(connection.peer_address), handle=connection.handle,
                   address=addr_str(connection.self_address))
        connection.on("disconnection", lambda reason: self.on_disconnection(connection, reason))
        connection.on("pairing", lambda keys: self.event("paired", device=addr_str(connection.peer_address), sc=connection.sc))
        connection.on("pairing_failure", lambda r: self.on_pairing_failure(connection, r))
        connection.on("connection_encryption_change", lambda: self.on_encryption(connection))
        connection.on("connection_encryption_failure",
                      lambda e: self.event("encryption-failed", error=str(e)))
        if self.args.drop_every > 0:
            self.spawn(self.ring_drop(connection))

    def on_encryption(self, connection):
        self.event("encrypted", on=bool(connection.encryption), authenticated=bool(connection.authenticated))
        if self.pending_service_changed:
            self.spawn(self.send_service_changed(force=True))

    def on_disconnection(self, connection, reason):
        if self.conn is connection:
            self.conn = None
        if self.stall_conn is connection:
            self.stall_conn = None
        self.event("disconnected", device=addr_str(connection.peer_address), reason=f"0x{int(reason):02x}")
        if self.want_adv:
            self.spawn(self.start_adv())

    def on_pairing_failure(self, connection, reason):
        self.event("pairing-failed", reason=f"0x{int(reason):02x}")
        # A watch ends the link after a failed pairing (many wearables do). Bumble 0.0.236 also
        # needs it: a second pairing on a link whose first one failed stalls before its key
        # distribution (seen on the bed: encryption on, no keys, SMP timeout after 30 s).
        if self.p["mitm"] and self.conn is connection:
            self.spawn(self.hci_disconnect(0x13))

    async def hci_disconnect(self, reason):
        c = self.conn
        if c is None:
            return None
        h = c.handle
        self.event("hci-disconnect", handle=h, reason=f"0x{reason:02x}")
        try:
            await asyncio.wait_for(c.disconnect(reason), 10)
        except Exception as e:  # noqa: BLE001 - report it
            self.event("error", where="disconnect", error=f"{type(e).__name__}: {e}")
        return h

    async def ring_drop(self, connection):
        """The ring loses its link by itself now and then: from the central's side exactly a
        supervision timeout (HCI reason 0x08), then it is away --drop-away s."""
        await asyncio.sleep(self.args.drop_every * random.uniform(0.8, 1.2))
        if self.conn is connection:
            self.event("link-lost", why="ring drops its link by itself")
            self.want_adv = False
            async with self.lock:
                await self.adv_off()
            await self.hci_disconnect(0x08)
            await asyncio.sleep(self.args.drop_away)
            await self.start_adv()

    # ------------------------------------------------------------------ periodic data
    async def hr_loop(self):
        while True:
            await asyncio.sleep(1.0)
            if self.hr is not None and self.subscribed(self.hr):
                self.bpm = 60 + (self.bpm - 59) % 40
                self.hr.value = bytes([0, self.bpm])
                try:
                    await self.device.notify_subscribers(self.hr, self.hr.value)
                except Exception as e:  # noqa: BLE001
                    logging.info("hr notify: %s", e)

    async def drain_loop(self):
        while self.args.drain_every > 0:
            await asyncio.sleep(self.args.drain_every)
            if self.battery > 5:
                await self.set_battery(max(5, self.battery - 5))
        self.drain_task = None

    async def flood_loop(self, hz, seconds):
        """The battery level alternating between two values at `hz` for `seconds`, paced by the
        loop's clock (one notification each; a notification that is late is sent at once, none
        is skipped): issue 43's flood. One event at the start and one at the end, not one each."""
        n, t0, base = int(hz * seconds), time.monotonic(), self.battery
        self.event("flood", state="started", hz=hz, seconds=seconds, count=n)
        sent = 0
        for i in range(n):
            delay = t0 + i / hz - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            self.battery = base + (1 if i % 2 == 0 else 0) if base < 100 else base - (i % 2)
            if self.subscribed(self.bat):
                await self.device.notify_subscribers(self.bat, bytes([self.battery]))
                sent += 1
        self.flood = {"count": n, "notified": sent, "took": round(time.monotonic() - t0, 3)}
        self.event("flood", state="done", **self.flood)

    async def set_battery(self, n):
        self.battery = n
        notified = self.subscribed(self.bat)
        if notified:
            await self.device.notify_subscribers(self.bat, bytes([n]))
        self.event("battery", level=n, notified=notified, low=n <= 15)
        return notified

    async def send_service_changed(self, force=False):
        value = struct.pack("<HH", self.gatt_changed_from, 0xFFFF)
        if self.conn is None:
            self.pending_service_changed = True
            self.event("service-changed", sent=False, pending=True)
            return False
        subscribed = self.subscribed(self.sc_char)
        if not subscribed and not force:
            self.pending_service_changed = True
            self.event("service-changed", sent=False, pending=True, why="central not subscribed")
            return False
        self.pending_service_changed = False
        await self.device.indicate_subscriber(self.conn, self.sc_char, value, force=True)
        self.event("service-changed", sent=True, confirmed=True, range=[self.gatt_changed_from, 0xFFFF])
        return True

    # ------------------------------------------------------------------ commands
    def status(self):
        d = self.device
        c = self.conn
        st = {"impl": "bumble", "profile": self.args.profile, "name": self.name,
              "adapter": f"hci{self.args.hci}", "registered": True,
              "advertising": self.advertising, "battery": self.battery, "bpm": self.bpm,
              "address": addr_str(c.self_address if c else d.random_address),
              "address_type": "random", "address_kind": address_kind(d.random_address),
              "identity_address": addr_str(d.static_address), "identity_address_type": "random",
              "io_capability": self.p["io"].name, "services": list(self.p["services"]),
              "firmware": self.fw, "passkey": self.passkey, "compare": self.compare,
              "rpa_rotations": len(self.rotations), "adv_reenables": self.adv_reports,
              "subscribed": {"hr": self.subscribed(getattr(self, "hr", None)),
                             "battery": self.subscribed(getattr(self, "bat", None)),
                             "echo": self.subscribed(getattr(self, "vecho", None)),
                             "service_changed": self.subscribed(self.sc_char)},
              "central": addr_str(c.peer_address) if c else None, "connected": c is not None,
              "handle": c.handle if c else None,
              "encrypted": bool(c and c.encryption), "authenticated": bool(c and c.authenticated),
              "bonded": bool(self.bonds), "bonds": self.bonds, "last_seq": self.seq,
              "flood": getattr(self, "flood", None)}
        return st

    async def refresh_bonds(self):
        self.bonds = [name for name, _ in await self.device.keystore.get_all()]

    async def command(self, line):
        parts = line.split()
        if not parts:
            raise ValueError("empty command")
        cmd, args = parts[0], parts[1:]
        if cmd == "status":
            await self.refresh_bonds()
            return self.status()
        if cmd == "walk-away":
            await self.stop_adv()
            h = await self.hci_disconnect(0x08)
            return {"handle": h, "reason": "0x08"}
        if cmd == "come-back":
            # t: on the event clock, taken before advertising starts (the kernel's auto-connect can
            # link while start_adv still awaits), so a bench can time the link from it (stall.py)
            t = round(time.monotonic() - T0, 3)
            await self.start_adv()
            return {"advertising": self.advertising, "t": t}
        if cmd == "reboot":
            await self.stop_adv()
            h = await self.hci_disconnect(0x13)
            await self.start_adv()
            return {"handle": h, "reason": "0x13"}
        if cmd == "disconnect":
            reason = int(args[0], 16) if args else 0x13
            return {"handle": await self.hci_disconnect(reason), "reason": f"0x{reason:02x}"}
        if cmd == "forget-bond":
            # a factory reset: the keys are gone and the device restarts (the link drops)
            names = [name for name, _ in await self.device.keystore.get_all()]
            await self.device.keystore.delete_all()
            await self.device.refresh_resolving_list()
            self.event("forgot-bond", removed=names)
            h = await self.hci_disconnect(0x13)
            await self.refresh_bonds()
            return {"removed": names, "handle": h}
        if cmd == "battery":
            if len(args) != 1 or not args[0].isdigit() or int(args[0]) > 100:
                raise ValueError("usage: battery 0..100")
            notified = await self.set_battery(int(args[0]))
            return {"battery": self.battery, "notified": notified}
        if cmd == "flood":
            # the battery level alternates at HZ for SECONDS (issue 43's flood); returns at once,
            # `status`'s "flood" says when it is done
            if len(args) != 2:
                raise ValueError("usage: flood HZ SECONDS")
            self.flood = None
            self.spawn(self.flood_loop(float(args[0]), float(args[1])))
            return {"flood": "started"}
        if cmd == "drain":
            # the battery drains by 5 % every S s down to 5 % (0 stops it)
            if len(args) != 1:
                raise ValueError("usage: drain SECONDS (0 = stop)")
            self.args.drain_every = float(args[0])
            if self.args.drain_every > 0 and self.drain_task is None:
                self.drain_task = self.spawn(self.drain_loop())
            return {"drain_every": self.args.drain_every, "battery": self.battery}
        if cmd == "request-pairing":
            # the wearable starts pairing on its own (SMP Security Request from the peripheral):
            # whatever the central's host answers, nobody asked it to pair
            if self.conn is None:
                raise ValueError("not connected")
            self.event("requesting-pairing")
            conn = self.conn

            async def pair():
                try:
                    await conn.pair()
                    self.event("requested-pairing-done", ok=True)
                except Exception as e:   # noqa: BLE001 (the outcome is the event)
                    self.event("requested-pairing-done", ok=False, error=type(e).__name__ + ": " + str(e))
            self.spawn(pair())
            return {"requested": True}
        if cmd == "rotate-rpa":
            if not self.p["privacy"]:
                raise ValueError(f"profile {self.args.profile} has a static address")
            return {"address": await self.rotate_rpa(why="command")}
        if cmd == "firmware-update":
            if "vendor" not in self.p["services"]:
                raise ValueError(f"profile {self.args.profile} has no firmware update")
            before = {str(a.uuid): a.handle for a in self.device.gatt_server.attributes
                      if isinstance(a, gatt.Characteristic)}
            self.fw += 1
            keep = {}
            if self.conn is not None:   # the Service Changed subscription survives, the rest not
                old = self.device.gatt_server.subscribers.get(self.conn, {})
                if self.sc_char.handle in old:
                    keep[self.sc_char.handle] = old[self.sc_char.handle]
            self.install_db()
            if self.conn is not None:
                self.device.gatt_server.subscribers[self.conn] = keep
            after = {str(a.uuid): a.handle for a in self.device.gatt_server.attributes
                     if isinstance(a, gatt.Characteristic)}
            self.event("firmware-update", firmware=self.fw, handles_before=before, handles_after=after)
            sent = await self.send_service_changed()
            return {"firmware": self.fw, "service_changed_sent": sent,
                    "handles_before": before, "handles_after": after}
        if cmd == "drop-subscription":
            # the wearable forgets the central's CCC for a characteristic (as if it had been
            # written 0): no more notifications while the link stays up, and the central is not told
            what = args[0] if args else "hr"
            char = {"hr": self.hr, "battery": self.bat, "echo": self.vecho}.get(what)
            if char is None or self.conn is None:
                raise ValueError("usage: drop-subscription hr|battery|echo (while connected)")
            was = self.subscribed(char)
            self.device.gatt_server.subscribers.get(self.conn, {}).pop(char.handle, None)
            self.event("dropped-subscription", uuid=str(char.uuid), was_subscribed=was)
            return {"dropped": what, "was_subscribed": was}
        if cmd == "stall-att":
            # ATT requests from the central go unanswered: on the next link (`next`) or the current
            # one (`now`) until it ends; `off` answers again
            mode = args[0] if args else "next"
            if mode == "next":
                self.stall_next = True
            elif mode == "now":
                if self.conn is None:
                    raise ValueError("not connected")
                self.stall_conn = self.conn
            elif mode == "off":
                self.stall_next, self.stall_conn = False, None
            else:
                raise ValueError("usage: stall-att next|now|off")
            self.event("stall-att", mode=mode)
            return {"stall": mode, "dropped": self.att_dropped}
        if cmd == "events":
            since = int(args[0]) if args else 0
            return [e for e in self.events if e["seq"] > since]
        if cmd == "quit":
            asyncio.get_running_loop().call_soon(self.stopping.set)
            return {"bye": True}
        raise ValueError(f"unknown command {cmd!r}")

    async def on_client(self, reader, writer):
        try:
            while line := await reader.readline():
                try:
                    reply = "ok " + json.dumps(await self.command(line.decode().strip()))
                except Exception as e:  # noqa: BLE001 - report, never die
                    reply = f"err {type(e).__name__}: {e}"
                writer.write(reply.encode() + b"\n")
                await writer.drain()
        finally:
            writer.close()

    def spawn(self, coro):
        t = asyncio.ensure_future(coro)
        self.tasks.append(t)
        t.add_done_callback(lambda t: self.tasks.remove(t) if t in self.tasks else None)
        return t

    # ------------------------------------------------------------------ start-up
    async def take_controller(self):
        """The controller belongs to bluetoothd until it is powered off: power it off through
        mgmt and bind the HCI user channel, retrying on EBUSY (bluetoothd powers an index back
        on whenever the kernel re-adds it) every 0.3 s, deadline --take-deadline s."""
        hcidev = f"hci{self.args.hci}"
        end = time.monotonic() + self.args.take_deadline
        tries = 0
        while True:
            tries += 1
            subprocess.run(["btmgmt", "--index", str(self.args.hci), "power", "off"],
                           capture_output=True, timeout=10)
            subprocess.run(["hciconfig", hcidev, "down"], capture_output=True, timeout=10)
            try:
                t = await open_transport(f"hci-socket:{self.args.hci}")
                self.event("controller", hci=hcidev, user_channel=True, tries=tries)
                return t
            except OSError as e:
                if e.errno != errno.EBUSY or time.monotonic() > end:
                    raise RuntimeError(f"cannot open the HCI user channel on {hcidev} after {tries} "
                                       f"tries: {e}") from e
            await asyncio.sleep(0.3)

    async def run(self):
        self.stopping = asyncio.Event()
        self.event("starting", profile=self.args.profile, name=self.name, hci=f"hci{self.args.hci}")
        if self.args.transport:  # a controller outside the kernel (the arm64 probe: Bumble's own link layer)
            transport = await open_transport(self.args.transport)
            self.event("controller", transport=self.args.transport)
        else:
            transport = await self.take_controller()
        cfg = DeviceConfiguration()
        cfg.name = self.name
        cfg.address = hci.Address(self.args.address or self.p["address"], hci.Address.RANDOM_DEVICE_ADDRESS)
        cfg.irk = bytes.fromhex(self.args.irk) if self.args.irk else (b"bed-irk-" + bytes(cfg.address) + bytes(2))[:16]
        cfg.le_privacy_enabled = self.p["privacy"]
        cfg.le_rpa_timeout = 0               # rotated by rpa_loop (update_rpa is broken in 0.0.236)
        cfg.identity_address_type = hci.Address.RANDOM_DEVICE_ADDRESS
        cfg.keystore = f"JsonKeyStore:{self.args.keystore}"
        cfg.io_capability = self.p["io"]
        self.device = Device.from_config_with_hci(cfg, transport.source, transport.sink)
        self.hr = self.bat = self.vecho = None
        self.bonds = []
        self.install_db()
        delegate = Delegate(self, self.p["io"])
        self.device.pairing_config_factory = lambda conn: PairingConfig(
            sc=True, mitm=self.p["mitm"], bonding=True, delegate=delegate,
            identity_address_type=PairingConfig.AddressType.RANDOM)
        self.device.on("connection", self.on_connection)
        srv = self.device.gatt_server
        answer = srv.on_gatt_pdu

        def maybe_stall(bearer, att_pdu):
            if self.stall_conn is not None and bearer is self.stall_conn:
                self.att_dropped += 1
                self.event("att-dropped", pdu=att_pdu.name, dropped=self.att_dropped)
                return
            answer(bearer, att_pdu)
        srv.on_gatt_pdu = maybe_stall
        await self.device.power_on()
        await self.refresh_bonds()
        self.event("powered", address=addr_str(self.device.random_address),
                   identity=addr_str(self.device.static_address), bonds=self.bonds,
                   public=addr_str(self.device.public_address))
        os.makedirs(os.path.dirname(self.args.socket), exist_ok=True)
        if os.path.exists(self.args.socket):
            os.unlink(self.args.socket)
        server = await asyncio.start_unix_server(self.on_client, path=self.args.socket)
        self.event("started", name=self.name, adapter=f"hci{self.args.hci}", socket=self.args.socket,
                   profile=self.args.profile)
        for coro in (self.readvertise_loop(), self.hr_loop()):
            self.spawn(coro)
        if self.p["privacy"] and self.args.rpa_period > 0:
            self.spawn(self.rpa_loop())
        self.drain_task = self.spawn(self.drain_loop()) if self.args.drain_every > 0 else None
        if self.want_adv:
            await self.start_adv()
        self.event("registered", adapter=f"hci{self.args.hci}")
        await self.stopping.wait()
        server.close()
        for t in list(self.tasks):
            t.cancel()
        try:
            if self.conn is not None:
                await self.hci_disconnect(0x13)
            await self.adv_off()
        except Exception as e:  # noqa: BLE001 - going away anyway; say so
            self.event("error", where="shutdown", error=f"{type(e).__name__}: {e}")
        await transport.close()
        self.event("stopped")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--profile", default="strap", choices=sorted(PROFILES))
    p.add_argument("--name")
    p.add_argument("--hci", type=int, default=1, help="controller index (hciN) to take")
    p.add_argument("--socket", default="/run/bed/wearable.sock")
    p.add_argument("--battery", type=int, default=87)
    p.add_argument("--away", action="store_true", help="start out of range (no advertising until come-back)")
    p.add_argument("--address", help="identity address (random static); default: the profile's")
    p.add_argument("--irk", help="IRK, 32 hex digits; default: derived from the address")
    p.add_argument("--keystore", help="JSON key store (default /var/lib/bed-wearable/<profile>-hciN.json)")
    p.add_argument("--bumble-log", help="Bumble's own log (DEBUG)")
    p.add_argument("--rpa-period", type=float, default=30.0, help="RPA rotation period in s (watch)")
    p.add_argument("--drop-every", type=float, default=None,
                   help="ring: drop the link by itself after ~S s connected (default 20; 0 = never)")
    p.add_argument("--drop-away", type=float, default=3.0, help="ring: s without advertising after a drop")
    p.add_argument("--drain-every", type=float, default=None,
                   help="battery -5 %% every S s down to 5 %% (ring default 10; 0 = never)")
    p.add_argument("--reject-compare", action="store_true", help="watch-confirm: answer 'no'")
    p.add_argument("--passkey", type=int, default=None, help="watch-passkey: show this passkey (0..999999), not a random one")
    p.add_argument("--take-deadline", type=float, default=15.0)
    p.add_argument("--transport", help="a Bumble HCI transport (tcp-client:HOST:PORT) instead of hciN's user channel")
    args = p.parse_args()
    ring = args.profile == "ring"
    if args.drop_every is None:
        args.drop_every = 20.0 if ring else 0.0
    if args.drain_every is None:
        args.drain_every = 10.0 if ring else 0.0
    args.keystore = args.keystore or f"/var/lib/bed-wearable/{args.profile}-hci{args.hci}.json"
    os.makedirs(os.path.dirname(args.keystore), exist_ok=True)
    if args.bumble_log:
        logging.basicConfig(filename=args.bumble_log, level=logging.DEBUG,
                            format="%(relativeCreated)9.0f %(levelname).1s %(name)s: %(message)s")
    w = Wearable(args)
    try:
        asyncio.run(w.run())
    except Exception as e:  # noqa: BLE001 - say it in the event log, exit non-zero
        w.event("fatal", error=f"{type(e).__name__}: {e}")
        logging.exception("fatal")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
