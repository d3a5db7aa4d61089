"""bedlib_bluez: BlueZ's D-Bus API on the central's side (part of bedlib): the Agent, Central,
and what org.bluez says about bonds, adapters and its own owner."""
import dbus
import dbus.service

from bedlib_core import (ADAPTER, BLUEZ, BedError, CHR, DEVICE, OM, PROPS, call, now, sh, wait_for)


# ------------------------------------------------------------------ central side (BlueZ on hci0)
class Agent(dbus.service.Object):
    """The central's agent: accepts everything. Registered as NoInputNoOutput by default; as
    KeyboardDisplay it answers RequestPasskey with `passkey()` (e.g. what the wearable shows)
    and accepts RequestConfirmation (the scenario compares the number from `calls`)."""

    def __init__(self, bus, path="/org/bedtest/central_agent"):
        super().__init__(bus, path)
        self.path = path
        self.calls = []
        self.passkey = None      # callable → int, for RequestPasskey

    @dbus.service.method("org.bluez.Agent1", in_signature="o", out_signature="u")
    def RequestPasskey(self, dev):
        if self.passkey is None:
            self._c("RequestPasskey", str(dev), None)
            raise dbus.exceptions.DBusException("no passkey source", name="org.bluez.Error.Rejected")
        key = int(self.passkey())
        self._c("RequestPasskey", str(dev), key)
        return dbus.UInt32(key)

    @dbus.service.method("org.bluez.Agent1", in_signature="ouq")
    def DisplayPasskey(self, dev, passkey, entered):
        self._c("DisplayPasskey", str(dev), int(passkey))

    def _c(self, *a):
        self.calls.append(a)

    @dbus.service.method("org.bluez.Agent1")
    def Release(self):
        self._c("Release")

    @dbus.service.method("org.bluez.Agent1", in_signature="o")
    def RequestAuthorization(self, dev):
        self._c("RequestAuthorization", str(dev))

    @dbus.service.method("org.bluez.Agent1", in_signature="os")
    def AuthorizeService(self, dev, uuid):
        self._c("AuthorizeService", str(dev), str(uuid))

    @dbus.service.method("org.bluez.Agent1", in_signature="ou")
    def RequestConfirmation(self, dev, passkey):
        self._c("RequestConfirmation", str(dev), int(passkey))

    @dbus.service.method("org.bluez.Agent1")
    def Cancel(self):
        self._c("Cancel")


class Central:
    """BlueZ D-Bus helper for the central role on `adapter` (hci0). Records every
    PropertiesChanged / InterfacesAdded / InterfacesRemoved / NameOwnerChanged(org.bluez)
    in self.history as (time, kind, path, data) so scenarios can ask what was seen."""

    def __init__(self, adapter="hci0"):
        self.bus = dbus.SystemBus()
        self.adapter = adapter
        self.apath = f"/org/bluez/{adapter}"
        self.history = []
        self.agent = None
        b = self.bus
        b.add_signal_receiver(self._pc, "PropertiesChanged", PROPS, BLUEZ, path_keyword="path")
        b.add_signal_receiver(self._ia, "InterfacesAdded", OM, BLUEZ)
        b.add_signal_receiver(self._ir, "InterfacesRemoved", OM, BLUEZ)
        b.add_signal_receiver(self._noc, "NameOwnerChanged", "org.freedesktop.DBus", arg0=BLUEZ)

    # -- signal bookkeeping
    def _pc(self, iface, changed, invalidated, path=None):
        self.history.append((now(), "props", str(path), (str(iface), dict(changed))))

    def _ia(self, path, ifaces):
        self.history.append((now(), "added", str(path), list(map(str, ifaces))))

    def _ir(self, path, ifaces):
        self.history.append((now(), "removed", str(path), list(map(str, ifaces))))

    def _noc(self, name, old, new):
        self.history.append((now(), "owner", BLUEZ, (str(old), str(new))))

    def seen(self, path, iface, prop, value, since=0.0):
        """Time of the first PropertiesChanged(iface.prop == value) on path after `since`."""
        for t, kind, p, data in self.history:
            if t >= since and kind == "props" and p == path and data[0] == iface \
                    and prop in data[1] and data[1][prop] == value:
                return t
        return None

    def values(self, path, since=0.0):
        """Notified/read values (bytes) of characteristic `path` after `since`."""
        return [bytes(d[1]["Value"]) for t, k, p, d in self.history
                if t >= since and k == "props" and p == path and d[0] == CHR and "Value" in d[1]]

    # -- plain D-Bus access (fresh proxies: bluetoothd may have restarted)
    def iface(self, path, iface):
        return dbus.Interface(self.bus.get_object(BLUEZ, path), iface)

    def objects(self):
        return self.iface("/", OM).GetManagedObjects()

    def props(self, path, iface=DEVICE):
        return self.iface(path, PROPS).GetAll(iface)

    def prop(self, path, name, iface=DEVICE):
        return self.iface(path, PROPS).Get(iface, name)

    def set(self, path, name, value, iface=DEVICE):
        self.iface(path, PROPS).Set(iface, name, value)

    def wait_prop(self, path, name, value, deadline, iface=DEVICE):
        return wait_for(lambda: self.prop(path, name, iface) == value, deadline,
                        f"{path.rsplit('/', 1)[-1]} {name}={value}")

    def bluez_up(self):
        return self.bus.name_has_owner(BLUEZ)

    # -- setup
    def register_agent(self, capability="NoInputNoOutput", default=False):
        if self.agent is None:
            self.agent = Agent(self.bus)
        am = self.iface("/org/bluez", "org.bluez.AgentManager1")
        am.RegisterAgent(self.agent.path, capability)
        if default:
            am.RequestDefaultAgent(self.agent.path)
        return self.agent

    def devices(self):
        return {str(p): i[DEVICE] for p, i in self.objects().items()
                if DEVICE in i and str(p).startswith(self.apath + "/")}

    def device_path(self, address):
        """The object path BlueZ gives a device first seen at `address`. A device with
        resolvable private addresses keeps the path of the first RPA seen until bluetoothd
        restarts: find those with device_by_address()."""
        return f"{self.apath}/dev_{address.upper().replace(':', '_')}"

    def device_by_address(self, address):
        """The path of the device whose Device1.Address is `address` (an identity address
        after bonding), or None: key on Address, never on the path."""
        for p, d in self.devices().items():
            if str(d.get("Address", "")).upper() == address.upper():
                return p
        return None

    def discover(self, uuid=None, name=None, deadline=20):
        """SetDiscoveryFilter(UUIDs, Transport=le) + StartDiscovery; return the device path."""
        ad = self.iface(self.apath, ADAPTER)
        flt = {"Transport": "le"}
        if uuid:
            flt["UUIDs"] = dbus.Array([uuid], signature="s")
        ad.SetDiscoveryFilter(flt)
        ad.StartDiscovery()
        try:
            def found():
                for p, d in self.devices().items():
                    if (name is None or d.get("Name") == name or d.get("Alias") == name) and \
                            (uuid is None or uuid in [str(u) for u in d.get("UUIDs", [])]):
                        return p
            return wait_for(found, deadline, f"discovery of {name or uuid} on {self.adapter}")
        finally:
            try:
                ad.StopDiscovery()
            except dbus.exceptions.DBusException:
                pass

    def char(self, dev, uuid):
        for p, i in self.objects().items():
            if str(p).startswith(dev + "/") and CHR in i and str(i[CHR]["UUID"]) == uuid:
                return str(p)
        raise BedError(f"no characteristic {uuid} under {dev}")

    def pair(self, dev, timeout=60):
        return call(self.iface(dev, DEVICE).Pair, timeout=timeout, what="Pair()")

    def connect(self, dev, timeout=60):
        return call(self.iface(dev, DEVICE).Connect, timeout=timeout, what="Connect()")

    def read(self, char, timeout=30):
        return bytes(call(self.iface(char, CHR).ReadValue, dbus.Dictionary({}, signature="sv"),
                          timeout=timeout, what="ReadValue()"))

    def write(self, char, data, type_="request", timeout=30):
        return call(self.iface(char, CHR).WriteValue, dbus.Array(data, signature="y"),
                    dbus.Dictionary({"type": type_}, signature="sv"), timeout=timeout, what="WriteValue()")

    def start_notify(self, char, timeout=30):
        return call(self.iface(char, CHR).StartNotify, timeout=timeout, what="StartNotify()")

    def wait_services_resolved(self, dev, deadline=30):
        return self.wait_prop(dev, "ServicesResolved", True, deadline)

    def wait_bluez_back(self, deadline=30):
        """After a bluetoothd restart: org.bluez owned again and our adapter powered."""
        return wait_for(lambda: self.bluez_up() and self.prop(self.apath, "Powered", ADAPTER),
                        deadline, f"bluetoothd back with {self.adapter} powered")


def bluez_owned():
    """Whether org.bluez has an owner on the system bus now (asked of the bus, not of BlueZ)."""
    return sh("dbus-send --system --print-reply --dest=org.freedesktop.DBus / org.freedesktop.DBus.NameHasOwner "
              "string:org.bluez", check=False).find("boolean true") >= 0


def paired_in_bluez(address, adapter="hci0"):
    """Whether bluetoothd holds a bond for `address` on the central's adapter."""
    c = Central(adapter)
    d = c.device_by_address(address)
    return bool(d and c.prop(d, "Paired"))


def bluez_adapters():
    """{name: {"address", "powered"}} of the adapters bluetoothd has on org.bluez now (a
    controller a Bumble wearable holds through the HCI user channel is not among them)."""
    om = dbus.Interface(dbus.SystemBus().get_object(BLUEZ, "/"), OM)
    return {str(p).rsplit("/", 1)[1]: {"address": str(i[ADAPTER]["Address"]), "powered": bool(i[ADAPTER]["Powered"])}
            for p, i in om.GetManagedObjects().items() if ADAPTER in i}
