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

import bumble_dc_cache
bumble_dc_cache.install(os.environ.get("BED_BUMBLE_DC_CACHE"))   # before Bumble: see its docstring

from bumble import hci
from bumble.core import AdvertisingData, UUID
from bumble.device import Device, DeviceConfiguration
from bumble.keys import JsonKeyStore
from bumble.pairing import PairingConfig
from bumble.transport import open_transport

from bumble_control import Control
from bumble_profiles import (BAT_SVC, HR_SVC, PROFILES, T0, VENDOR_SVC, Delegate, GattDatabase, addr_str)


class Wearable(GattDatabase, Control):
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
        self.pair_delay = 0.0   # `pair-delay S`: seconds before answering a pairing request
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
            self.spawn(self.readvertise_after_drop())

    async def readvertise_after_drop(self):
        # --readvertise-delay: on the host (bumble_host.py) the wearable would be advertising again
        # within ~60 ms of a drop, while the bed's bluetoothd, under TCG, takes ~0.5 s to handle
        # that drop; the kernel's auto-connect then links again before bluetoothd is done with the
        # old link, and bluetoothd never sets the new one up ("No matching connection"). On real
        # hardware bluetoothd is done within milliseconds, before a wearable's next advertisement:
        # the delay keeps that order (in the guest Bumble itself took 0.4-0.9 s).
        if self.args.readvertise_delay > 0:
            await asyncio.sleep(self.args.readvertise_delay)
        if self.want_adv and self.conn is None:
            await self.start_adv()

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
        if self.args.transport and self.args.transport.startswith("fd:"):
            # on the host (bumble_host.py): hciN's user channel, taken in the guest by
            # bed-hci-relay, as an H4 stream on this socket
            transport = await open_fd_transport(int(self.args.transport[3:]))
            self.event("controller", hci=f"hci{self.args.hci}", user_channel=True,
                       tries=self.args.relayed_tries, on="host")
            # the relay gone (killed, or the VM ended): nothing is left to talk to
            transport.source.terminated.add_done_callback(
                lambda _: (self.event("relay-gone"), os._exit(3)))
        elif self.args.transport:  # a controller outside the kernel (the arm64 probe: Bumble's own link layer)
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


async def open_fd_transport(fd):
    """An H4 stream on an inherited, connected socket (bumble_host.py's link to the guest)."""
    import socket
    from bumble.transport.common import StreamPacketSink, StreamPacketSource, Transport

    class Source(StreamPacketSource):
        def connection_lost(self, exc):
            self.on_transport_lost()

    t, source = await asyncio.get_running_loop().connect_accepted_socket(Source, sock=socket.socket(fileno=fd))
    return Transport(source, StreamPacketSink(t))


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
    p.add_argument("--transport", help="a Bumble HCI transport (tcp-client:HOST:PORT) instead of hciN's user channel; "
                   "fd:N: an H4 stream on socket N (bumble_host.py, the wearable on the host)")
    p.add_argument("--relayed-tries", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--readvertise-delay", type=float, default=0.0,
                   help="s to wait after a link drop before advertising again (bumble_host.py: 0.5)")
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
