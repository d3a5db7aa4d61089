"""The Bumble wearable's control socket (a part of bumble_wearable.py, which runs it): status and
the commands, one per line, one reply "ok <JSON>" / "err <why>" (the same protocol as wearable.py)."""
import asyncio
import json
import time

from bumble import gatt

from bumble_profiles import T0, addr_str, address_kind


class Control:
    """The Wearable's control commands (a mixin of bumble_wearable.Wearable)."""

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
        if cmd == "pair-delay":
            # the wearable takes S s to answer the next pairing requests (a slow firmware; a
            # scenario that must act while the central's Pair() is in flight), 0: at once
            if len(args) != 1:
                raise ValueError("usage: pair-delay SECONDS")
            self.pair_delay = float(args[0])
            return {"pair_delay": self.pair_delay}
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
