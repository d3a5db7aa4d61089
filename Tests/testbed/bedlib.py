"""bedlib: helpers for test-bed scenarios (run inside the VM by Tests/testbed/run-vm).

    from bedlib import *
    @scenario
    def main():
        w = Wearable.start(name="Pulse-1")
        c = Central()
        with step("discover the wearable"):
            dev = c.discover(uuid=HR_SVC, name="Pulse-1", deadline=20)

Rules: every wait has a deadline and a description (wait_for); never sleep to let something
happen — sleep only where the scenario itself means "time passes" (bed_sleep).
Each `step` prints "✓ <what> (1.23 s)" or "✗ <what> (1.23 s): <error>".
"""
import contextlib
import functools
import json
import os
import socket
import subprocess
import sys
import time
import traceback

import dbus
import dbus.mainloop.glib
import dbus.service
from gi.repository import GLib

dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)

TESTBED = os.path.dirname(os.path.abspath(__file__))
OUT = os.environ.get("BED_OUT", "/tmp")
MODE = os.environ.get("BED_MODE", "plain")
PAIRD_BIN = os.environ.get("PAIRD_BIN")
PAIRCTL_BIN = os.environ.get("PAIRCTL_BIN")

BLUEZ = "org.bluez"
PROPS = "org.freedesktop.DBus.Properties"
OM = "org.freedesktop.DBus.ObjectManager"
DEVICE = "org.bluez.Device1"
ADAPTER = "org.bluez.Adapter1"
CHR = "org.bluez.GattCharacteristic1"
BATTERY = "org.bluez.Battery1"

CENTRAL_ADDR = "00:AA:01:00:00:00"   # hci0
WEARABLE_ADDR = "00:AA:01:01:00:01"  # hci1

HR_SVC = "0000180d-0000-1000-8000-00805f9b34fb"
HR_MEAS = "00002a37-0000-1000-8000-00805f9b34fb"
BAT_SVC = "0000180f-0000-1000-8000-00805f9b34fb"
BAT_LVL = "00002a19-0000-1000-8000-00805f9b34fb"
VENDOR_SVC = "70616972-6400-4000-8000-77656172ab1e"
VENDOR_WRITE = "70616972-6401-4000-8000-77656172ab1e"
VENDOR_ECHO = "70616972-6402-4000-8000-77656172ab1e"

T0 = time.monotonic()


class BedError(AssertionError):
    pass


class BedFatal(BedError):
    """Raised inside a wait_for predicate: stop waiting at once."""


def now():
    return time.monotonic()


def log(msg):
    print(f"  [{now() - T0:7.2f}] {msg}", flush=True)


# ------------------------------------------------------------------ main loop and waiting
def _pump_once(interval):
    """Dispatch GLib/D-Bus events; block at most `interval` seconds for one to arrive."""
    ctx = GLib.MainContext.default()
    while ctx.pending():
        ctx.iteration(False)
    fired = []
    src = GLib.timeout_add(max(1, int(interval * 1000)), lambda: fired.append(1) and False)
    ctx.iteration(True)
    if not fired:
        GLib.source_remove(src)
    while ctx.pending():
        ctx.iteration(False)


def wait_for(predicate, deadline, what, interval=0.05):
    """Return predicate()'s first truthy value; raise BedError after `deadline` seconds.
    D-Bus signals are dispatched while waiting. Exceptions from predicate count as "not yet"
    (the last one is reported on timeout)."""
    start, last_exc = now(), None
    while True:
        try:
            v = predicate()
            if v:
                return v
        except BedFatal:
            raise
        except Exception as e:  # noqa: BLE001 - report on timeout
            last_exc = e
        if now() - start > deadline:
            msg = f"timed out after {deadline:g} s waiting for {what}"
            if last_exc is not None:
                msg += f" (last error: {type(last_exc).__name__}: {last_exc})"
            raise BedError(msg)
        _pump_once(interval)


def bed_sleep(seconds, why):
    """A deliberate passage of time (e.g. "the wearable stays away for 5 s"); events keep flowing."""
    log(f"waiting {seconds:g} s on purpose: {why}")
    end = now() + seconds
    while now() < end:
        _pump_once(min(0.1, max(0.001, end - now())))


def call(method, *args, timeout=60, what=None):
    """Call a dbus-python method asynchronously while the main loop keeps running (so our own
    agent/objects can answer bluetoothd meanwhile). Returns the reply or raises DBusException."""
    res = {}
    method(*args, reply_handler=lambda *r: res.setdefault("ok", r),
           error_handler=lambda e: res.setdefault("err", e), timeout=timeout)
    wait_for(lambda: res, timeout + 5, what or f"reply to {getattr(method, '_method_name', method)}")
    if "err" in res:
        raise res["err"]
    r = res["ok"]
    return r[0] if len(r) == 1 else (None if not r else r)


_steps = []


@contextlib.contextmanager
def step(what):
    t = now()
    try:
        yield
    except BaseException as e:
        dt = now() - t
        _steps.append((what, dt, False))
        print(f"✗ {what} ({dt:.2f} s): {type(e).__name__}: {e}", flush=True)
        raise
    dt = now() - t
    _steps.append((what, dt, True))
    print(f"✓ {what} ({dt:.2f} s)", flush=True)


_cleanups = []


def at_exit(fn):
    _cleanups.append(fn)
    return fn


def scenario(fn):
    """Decorator for a scenario's main(): runs it, prints a summary, exits 0/1."""
    @functools.wraps(fn)
    def run():
        print(f"scenario {os.path.basename(sys.argv[0])} ({MODE} mode)", flush=True)
        rc = 0
        try:
            fn()
        except BaseException as e:  # noqa: BLE001
            rc = 1
            print("\nFAILED:", f"{type(e).__name__}: {e}", file=sys.stderr, flush=True)
            traceback.print_exc()
        for c in reversed(_cleanups):
            try:
                c()
            except Exception as e:  # noqa: BLE001
                print(f"(cleanup {c.__name__} failed: {e})", file=sys.stderr)
        ok = sum(1 for s in _steps if s[2])
        print(f"\n{ok}/{len(_steps)} steps passed in {now() - T0:.1f} s", flush=True)
        sys.exit(rc)
    return run


def check(cond, what):
    if not cond:
        raise BedError(f"check failed: {what}")
    log(f"checked: {what}")


# ------------------------------------------------------------------ bluetoothd
def bluetoothd(action, timeout=40):
    """start | stop | restart | kill | status — via guest/bluetoothd-ctl (plain or systemd)."""
    r = subprocess.run([os.path.join(TESTBED, "guest", "bluetoothd-ctl"), action],
                       capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise BedError(f"bluetoothd-ctl {action} failed: {r.stderr.strip() or r.stdout.strip()}")
    return r.stdout.strip()


# ------------------------------------------------------------------ the virtual wearable
class Wearable:
    """Handle on Tests/testbed/wearable.py (started here as a child process, log in $BED_OUT)."""

    def __init__(self, sock, proc=None):
        self.sock, self.proc = sock, proc

    @classmethod
    def start(cls, name="Pulse-1", adapter="hci1", battery=87, sock="/run/bed/wearable.sock",
              deadline=20):
        logf = open(os.path.join(OUT, "wearable.log"), "a")
        proc = subprocess.Popen(["/usr/bin/python3", "-u", os.path.join(TESTBED, "wearable.py"),
                                 "--name", name, "--adapter", adapter, "--battery", str(battery),
                                 "--socket", sock], stdout=logf, stderr=subprocess.STDOUT)
        w = cls(sock, proc)
        at_exit(w.stop)

        def up():
            if proc.poll() is not None:
                raise BedFatal(f"wearable.py exited with {proc.returncode} (see wearable.log)")
            st = w.cmd("status", timeout=5)
            return st if st["advertising"] else None
        wait_for(up, deadline, f"wearable {name} advertising on {adapter}")
        return w

    def cmd(self, line, timeout=30):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        try:
            s.connect(self.sock)
            s.sendall(line.encode() + b"\n")
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
        finally:
            s.close()
        reply = buf.decode().strip()
        if not reply.startswith("ok"):
            raise BedError(f"wearable {line!r}: {reply or 'no reply'}")
        return json.loads(reply[3:])

    def status(self):
        return self.cmd("status")

    def events(self, since=0):
        return self.cmd(f"events {since}")

    def last_seq(self):
        return self.status()["last_seq"]

    def wait_event(self, event, deadline, since=0, **match):
        """Wait for an event named `event` (with fields equal to `match`) after seq `since`."""
        def found():
            for e in self.events(since):
                if e["event"] == event and all(e.get(k) == v for k, v in match.items()):
                    return e
            return None
        return wait_for(found, deadline, f"wearable event {event} {match or ''}".strip(), interval=0.1)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            try:
                self.cmd("quit", timeout=5)
                self.proc.wait(5)
            except Exception:  # noqa: BLE001
                self.proc.kill()
                self.proc.wait(5)


# ------------------------------------------------------------------ central side (BlueZ on hci0)
class Agent(dbus.service.Object):
    """NoInputNoOutput agent that accepts everything."""

    def __init__(self, bus, path="/org/bedtest/central_agent"):
        super().__init__(bus, path)
        self.path = path
        self.calls = []

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
        return f"{self.apath}/dev_{address.upper().replace(':', '_')}"

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


__all__ = [n for n in dir() if not n.startswith("_") and n not in (
    "contextlib", "functools", "json", "os", "socket", "subprocess", "sys", "time", "traceback")]
