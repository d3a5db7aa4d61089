"""The BlueZ twin's D-Bus objects (a part of wearable.py, which runs it): the names and UUIDs it
uses, its GATT application (services, characteristics), its advertisement and its agent."""
import dbus
import dbus.exceptions
import dbus.service

BLUEZ = "org.bluez"
OM = "org.freedesktop.DBus.ObjectManager"
PROPS = "org.freedesktop.DBus.Properties"
GATT_SVC = "org.bluez.GattService1"
GATT_CHR = "org.bluez.GattCharacteristic1"

HR_SVC = "0000180d-0000-1000-8000-00805f9b34fb"
HR_MEAS = "00002a37-0000-1000-8000-00805f9b34fb"
BAT_SVC = "0000180f-0000-1000-8000-00805f9b34fb"
BAT_LVL = "00002a19-0000-1000-8000-00805f9b34fb"
VENDOR_SVC = "70616972-6400-4000-8000-77656172ab1e"
VENDOR_WRITE = "70616972-6401-4000-8000-77656172ab1e"
VENDOR_ECHO = "70616972-6402-4000-8000-77656172ab1e"

APP_PATH = "/org/bedtest/wearable"
ADV_PATH = APP_PATH + "/adv0"
AGENT_PATH = APP_PATH + "/agent"


class Failed(dbus.exceptions.DBusException):
    _dbus_error_name = "org.bluez.Error.Failed"


class NotPermitted(dbus.exceptions.DBusException):
    _dbus_error_name = "org.bluez.Error.NotPermitted"


# ------------------------------------------------------------------ GATT application
class Application(dbus.service.Object):
    def __init__(self, bus, w):
        super().__init__(bus, APP_PATH)
        self.services = []

    @dbus.service.method(OM, out_signature="a{oa{sa{sv}}}")
    def GetManagedObjects(self):
        res = {}
        for s in self.services:
            res[s.path] = s.props()
            for c in s.chars:
                res[c.path] = c.props()
        return res


class Service(dbus.service.Object):
    def __init__(self, bus, idx, uuid):
        self.path = f"{APP_PATH}/service{idx}"
        self.uuid = uuid
        self.chars = []
        super().__init__(bus, self.path)

    def props(self):
        return {GATT_SVC: {"UUID": self.uuid, "Primary": dbus.Boolean(True),
                           "Characteristics": dbus.Array([c.path for c in self.chars], signature="o")}}

    @dbus.service.method(PROPS, in_signature="s", out_signature="a{sv}")
    def GetAll(self, iface):
        return self.props()[GATT_SVC]


class Characteristic(dbus.service.Object):
    def __init__(self, bus, w, svc, idx, uuid, flags, value=b""):
        self.path = f"{svc.path}/char{idx}"
        self.w, self.svc, self.uuid, self.flags = w, svc, uuid, flags
        self.value = bytes(value)
        self.notifying = False
        super().__init__(bus, self.path)
        svc.chars.append(self)

    def props(self):
        return {GATT_CHR: {"Service": dbus.ObjectPath(self.svc.path), "UUID": self.uuid,
                           "Flags": dbus.Array(self.flags, signature="s"),
                           "Descriptors": dbus.Array([], signature="o")}}

    @dbus.service.method(PROPS, in_signature="s", out_signature="a{sv}")
    def GetAll(self, iface):
        return self.props()[GATT_CHR]

    def set_value(self, value):
        self.value = bytes(value)
        if self.notifying:
            self.PropertiesChanged(GATT_CHR, {"Value": dbus.Array(self.value, signature="y")}, [])

    @dbus.service.method(GATT_CHR, in_signature="a{sv}", out_signature="ay")
    def ReadValue(self, options):
        if "read" not in self.flags:
            raise NotPermitted("Read not permitted")
        self.w.event("read", uuid=self.uuid, device=str(options.get("device", "")))
        return dbus.Array(self.value[int(options.get("offset", 0)):], signature="y")

    @dbus.service.method(GATT_CHR, in_signature="aya{sv}")
    def WriteValue(self, value, options):
        if not ({"write", "write-without-response"} & set(self.flags)):
            raise NotPermitted("Write not permitted")
        data = bytes(value)
        self.w.event("write", uuid=self.uuid, hex=data.hex(), type=str(options.get("type", "")))
        self.w.on_write(self, data)

    @dbus.service.method(GATT_CHR)
    def StartNotify(self):
        if self.notifying:
            return
        self.notifying = True
        self.w.event("subscribed", uuid=self.uuid)
        self.w.on_subscribe(self, True)

    @dbus.service.method(GATT_CHR)
    def StopNotify(self):
        if not self.notifying:
            return
        self.notifying = False
        self.w.event("unsubscribed", uuid=self.uuid)
        self.w.on_subscribe(self, False)

    @dbus.service.signal(PROPS, signature="sa{sv}as")
    def PropertiesChanged(self, iface, changed, invalidated):
        pass


# ------------------------------------------------------------------ advertisement + agent
class Advertisement(dbus.service.Object):
    def __init__(self, bus, name, uuids):
        self.name, self.uuids = name, uuids
        super().__init__(bus, ADV_PATH)

    @dbus.service.method(PROPS, in_signature="s", out_signature="a{sv}")
    def GetAll(self, iface):
        return {"Type": "peripheral", "ServiceUUIDs": dbus.Array(self.uuids, signature="s"),
                "LocalName": dbus.String(self.name), "Discoverable": dbus.Boolean(True)}

    @dbus.service.method("org.bluez.LEAdvertisement1")
    def Release(self):
        pass


class Agent(dbus.service.Object):
    """NoInputNoOutput default agent: says yes to everything (Just Works)."""

    def __init__(self, bus, w):
        self.w = w
        super().__init__(bus, AGENT_PATH)

    def _ev(self, what, dev="", **kw):
        self.w.event("agent", call=what, device=str(dev), **kw)

    @dbus.service.method("org.bluez.Agent1")
    def Release(self):
        self._ev("Release")

    @dbus.service.method("org.bluez.Agent1", in_signature="o")
    def RequestAuthorization(self, dev):
        self._ev("RequestAuthorization", dev)

    @dbus.service.method("org.bluez.Agent1", in_signature="os")
    def AuthorizeService(self, dev, uuid):
        self._ev("AuthorizeService", dev, uuid=str(uuid))

    @dbus.service.method("org.bluez.Agent1", in_signature="ou")
    def RequestConfirmation(self, dev, passkey):
        self._ev("RequestConfirmation", dev, passkey=int(passkey))

    @dbus.service.method("org.bluez.Agent1", in_signature="o", out_signature="s")
    def RequestPinCode(self, dev):
        self._ev("RequestPinCode", dev)
        return "0000"

    @dbus.service.method("org.bluez.Agent1", in_signature="o", out_signature="u")
    def RequestPasskey(self, dev):
        self._ev("RequestPasskey", dev)
        return dbus.UInt32(0)

    @dbus.service.method("org.bluez.Agent1", in_signature="ouq")
    def DisplayPasskey(self, dev, passkey, entered):
        pass

    @dbus.service.method("org.bluez.Agent1", in_signature="os")
    def DisplayPinCode(self, dev, pin):
        pass

    @dbus.service.method("org.bluez.Agent1")
    def Cancel(self):
        self._ev("Cancel")
