"""The Bumble wearable's profiles and GATT database (a part of bumble_wearable.py, which runs it):
the UUIDs, PROFILES, address helpers, the pairing Delegate, the event clock T0 and GattDatabase,
the Wearable's GATT methods."""
import asyncio
import time

from bumble import gatt, hci
from bumble.core import UUID
from bumble.pairing import PairingDelegate

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
        delay = self.w.pair_delay
        self.w.event("pairing-request", **({"delay": delay} if delay else {}))
        if delay:   # `pair-delay S`: the central's Pair() stays in flight meanwhile
            await asyncio.sleep(delay)
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



class GattDatabase:
    """The Wearable's GATT database: its services per profile, battery reads, vendor writes, who is
    subscribed (a mixin of bumble_wearable.Wearable)."""

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
