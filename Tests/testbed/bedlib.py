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
import re
import signal
import socket
import subprocess
import sys
import shutil
import threading
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


def trace(mark):
    """A phase mark in /bed/out/boot-trace.log (guest uptime, as stage2 and run-scenario write
    them): run-vm's bed-timing reads wearable-start/-up and paird-start/-ready pairs from it to
    split a run's time into boot, stack, wearable, paird, the scenario's own steps and tear-down."""
    with contextlib.suppress(OSError), open("/proc/uptime") as u, open(os.path.join(OUT, "boot-trace.log"), "a") as f:
        f.write(f"{u.read().split()[0]} {mark}\n")


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

# ------------------------------------------------------------------ kernel BUGs
# A kernel BUG excuses a failed step only in a scenario that declared it expects one
# (expects_kernel_bug) and only when the BUG was already in dmesg when the failing step began: a
# BUG that fires inside the step is the step's to survive (on 6.1 that is paird's job: issue 49).
# _span is the step under way (or the gap after one) and the BUG line dmesg held when it began.
_KERNEL_BUG_EXPECTED = None
_span = {"what": "(before the first step)", "bug": None}


def expects_kernel_bug(why):
    """Declare that this scenario may meet a kernel BUG (why: which, and on which kernel). Only then
    can a BUG excuse a failure, and only a BUG that preceded the failing step (e2e.sh counts
    the run apart, "excused by a kernel BUG", and prints the BUG in its summary)."""
    global _KERNEL_BUG_EXPECTED
    _KERNEL_BUG_EXPECTED = why
    _span["bug"] = kernel_bug()


def _begin_span(what):
    _span["what"] = what
    _span["bug"] = kernel_bug() if _KERNEL_BUG_EXPECTED else None


@contextlib.contextmanager
def step(what):
    _begin_span(what)
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
    _begin_span(f"(after the step '{what}')")


_cleanups = []


def at_exit(fn):
    _cleanups.append(fn)
    return fn


def _state_at_failure():
    """What the wearable and paird say at the moment a step failed, in the scenario's output (CI
    shows only part of a run's logs): bounded, and never a second failure."""
    for w in getattr(Wearable, "started", []):
        try:
            if w.proc is not None and w.proc.poll() is not None:
                continue   # stopped by the scenario
            st = w.cmd("status", timeout=5)
            keep = ("name", "address", "advertising", "connected", "registered", "bonds", "subscribed")
            print("state at failure, wearable: " + json.dumps({k: st.get(k) for k in keep}), flush=True)
        except Exception as e:  # noqa: BLE001
            print(f"state at failure, wearable: no answer ({type(e).__name__}: {e})", flush=True)
    if PAIRCTL_BIN:
        try:
            r = subprocess.run([PAIRCTL_BIN, "status"], capture_output=True, text=True, timeout=10,
                               stdin=subprocess.DEVNULL)
            print(f"state at failure, pairctl status (exit {r.returncode}):", flush=True)
            for line in (r.stdout + r.stderr).splitlines()[:20]:
                print(f"  | {line}", flush=True)
        except Exception as e:  # noqa: BLE001
            print(f"state at failure, pairctl status: {type(e).__name__}: {e}", flush=True)


def scenario(fn):
    """Decorator for a scenario's main(): runs it, prints a summary, exits 0/1."""
    @functools.wraps(fn)
    def run():
        print(f"scenario {os.path.basename(sys.argv[0])} ({MODE} mode)", flush=True)
        rc = 0
        skipped = None
        try:
            fn()
        except _Skip as e:
            skipped = str(e)
        except BaseException as e:  # noqa: BLE001
            bug = kernel_bug() if not isinstance(e, KeyboardInterrupt) else None
            if bug and _KERNEL_BUG_EXPECTED and _span["bug"]:
                # A BUG this scenario declared it may meet, already in dmesg when the failing step
                # began: bluetoothd is dead or wedged since, so this step's outcome says nothing
                # about the code under test. Not a pass: e2e.sh counts it apart and prints the BUG.
                skipped = (f"kernel-bug: {_span['bug']} | expected: {_KERNEL_BUG_EXPECTED} | it preceded "
                           f"the failing step {_span['what']!r}, which then failed with {type(e).__name__}: {e}")
                print(f"\nEXCUSED BY A KERNEL BUG: {skipped}", flush=True)
            else:
                rc = 1
                print("\nFAILED:", f"{type(e).__name__}: {e}", file=sys.stderr, flush=True)
                traceback.print_exc()
                if bug:
                    why = ("this scenario does not declare it expects one" if not _KERNEL_BUG_EXPECTED
                           else f"it was not yet in dmesg when the failing step {_span['what']!r} began")
                    print(f"the kernel BUGged ({bug}); no excuse: {why}", file=sys.stderr, flush=True)
                _state_at_failure()
        for c in reversed(_cleanups):
            try:
                c()
            except Exception as e:  # noqa: BLE001
                print(f"(cleanup {c.__name__} failed: {e})", file=sys.stderr)
        ok = sum(1 for s in _steps if s[2])
        print(f"\n{ok}/{len(_steps)} steps passed in {now() - T0:.1f} s", flush=True)
        if skipped is not None and rc == 0:
            print(f"SKIPPED: {skipped}", flush=True)
            with contextlib.suppress(OSError), open(os.path.join(OUT, "SKIPPED"), "w") as f:
                f.write(skipped + "\n")
        sys.exit(rc)
    return run


def check(cond, what):
    if not cond:
        raise BedError(f"check failed: {what}")
    log(f"checked: {what}")


# ------------------------------------------------------------------ bluetoothd
# run-vm's boots=N: what a boot keeps for the next lives here; stage2 puts it back in /var/lib
PERSIST = os.path.join(OUT, "persist")


def keep_var_lib():
    """At the end of a boot (boots=N): keep bluetoothd's bonds, paird's state file and, with a
    Bumble wearable, its own key store (a real wearable keeps its bond in flash) in PERSIST, as a
    disk would; run-vm's stage2 restores all three before the next boot's stack starts. Returns
    paird's kept state file, parsed."""
    shutil.rmtree(PERSIST, ignore_errors=True)
    for d in ("bluetooth", "paird", "bed-wearable"):
        if os.path.isdir(f"/var/lib/{d}"):
            shutil.copytree(f"/var/lib/{d}", os.path.join(PERSIST, d), symlinks=True)
    with open(os.path.join(PERSIST, "paird", "state.json")) as f:
        return json.load(f)


def bluetoothd(action, timeout=90):
    """start | stop | restart | kill | status — via guest/bluetoothd-ctl (plain or systemd)."""
    r = subprocess.run([os.path.join(TESTBED, "guest", "bluetoothd-ctl"), action],
                       capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise BedError(f"bluetoothd-ctl {action} failed: {r.stderr.strip() or r.stdout.strip()}")
    return r.stdout.strip()


# ------------------------------------------------------------------ the virtual wearable
CENTRAL_ADDR = "00:AA:01:00:00:00"   # hci0
WEARABLE_ADDR = "00:AA:01:01:00:01"  # hci1's public address: the BlueZ twin's (wearable.py) only
# Which wearable implementation Wearable.start() runs unless told: "bumble" (an independent
# stack, Tests/testbed/bumble_wearable.py, the default) or "bluez" (wearable.py: the bed's own
# bluetoothd on hci1, the BlueZ-to-BlueZ reference). e2e.sh sets it per run.
WEARABLE_IMPL = os.environ.get("BED_WEARABLE", "bumble")
BUMBLE_PY = os.environ.get("BED_BUMBLE_PYTHON") or os.path.join(
    os.path.dirname(os.path.dirname(TESTBED)), ".build-testbed", "bumble-venv", "bin", "python")
# the Bumble wearables' key stores (a disk on a real device: paird_cold_boot keeps it)
WEARABLE_STATE_DIR = "/var/lib/bed-wearable"


class Wearable:
    """Handle on a virtual wearable started here as a child process (events in
    $BED_OUT/wearable.log): Bumble (bumble_wearable.py, a profile) or the BlueZ twin
    (wearable.py). Both speak the same control protocol."""

    current = None   # the last one started: Paird's default device address
    started = []     # every one started (the state-at-failure dump asks each still running)

    def __init__(self, sock, proc=None, impl=None, profile=None):
        self.sock, self.proc, self.impl, self.profile = sock, proc, impl, profile
        self.identity = None

    @classmethod
    def start(cls, name=None, adapter="hci1", battery=87, sock="/run/bed/wearable.sock",
              deadline=None, away=False, profile="strap", impl=None, extra=()):
        """Starts a wearable and waits until it advertises (away=True: until it is up but out
        of range: not advertising until `come-back`). impl: "bumble" | "bluez" (default
        $BED_WEARABLE, else bumble); profile: strap | watch-passkey | watch-confirm | ring
        (Bumble; the twin has one layout of its own: HR + battery + vendor, public address)."""
        impl = impl or WEARABLE_IMPL
        tag = "" if sock == "/run/bed/wearable.sock" else "-" + os.path.basename(sock).rsplit(".", 1)[0]
        logf = open(os.path.join(OUT, f"wearable{tag}.log"), "a")
        if impl == "bluez":
            name = name or "Pulse-1"
            args = ["/usr/bin/python3", "-u", os.path.join(TESTBED, "wearable.py"),
                    "--name", name, "--adapter", adapter, "--battery", str(battery), "--socket", sock]
            deadline = deadline or 20
        elif impl == "bumble":
            if not os.access(BUMBLE_PY, os.X_OK):
                raise BedError(f"no Bumble venv at {BUMBLE_PY} (run Tests/testbed/install-deps.sh)")
            args = [BUMBLE_PY, "-u", os.path.join(TESTBED, "bumble_wearable.py"), "--profile", profile,
                    "--hci", adapter.removeprefix("hci"), "--battery", str(battery), "--socket", sock,
                    "--bumble-log", os.path.join(OUT, f"bumble{tag}.log")] + (["--name", name] if name else [])
            # Bumble's start-up under TCG: 2.7-3.7 s, 7.9 s seen under load (README)
            deadline = deadline or 45
        else:
            raise BedError(f"unknown wearable implementation {impl!r} (BED_WEARABLE=bumble|bluez)")
        args += (["--away"] if away else []) + list(extra)
        log(f"wearable: {impl} {profile if impl == 'bumble' else 'twin'} on {adapter}")
        trace("wearable-start")
        proc = subprocess.Popen(args, stdout=logf, stderr=subprocess.STDOUT)
        w = cls(sock, proc, impl, profile if impl == "bumble" else "twin")
        at_exit(w.stop)

        def up():
            if proc.poll() is not None:
                raise BedFatal(f"the {impl} wearable exited with {proc.returncode} (see {logf.name})")
            st = w.cmd("status", timeout=5)
            return st if (st["registered"] if away else st["advertising"]) else None
        st = wait_for(up, deadline, f"{impl} wearable {name or profile} "
                      f"{'up (away)' if away else 'advertising'} on {adapter}")
        trace("wearable-up")
        w.identity = st["identity_address"]
        log(f"wearable up: {st['name']} identity {st['identity_address']} ({st['identity_address_type']}), "
            f"advertising as {st['address']} ({st.get('address_kind', st['address_type'])})")
        Wearable.current = w
        Wearable.started.append(w)
        return w

    @property
    def address(self):
        """The identity address: what BlueZ's Device1.Address says once bonded, and paird's key."""
        return self.identity

    @property
    def name(self):
        return self.status()["name"]

    def has(self, service):
        """Whether the wearable's GATT database has `service` ("hr", "battery", "vendor")."""
        return service in self.status()["services"]

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

    def links(self, since=0):
        """Links the wearable itself saw come up after seq `since` (its own `connected` events).
        They count every link, the kernel's auto-connect too, which bluetoothd's Connect() counter
        (bluez_connect_attempts) cannot see: a "no loop" claim counts both."""
        return sum(1 for e in self.events(since) if e["event"] == "connected")

    def come_back(self, deadline=10):
        """Advertise again (after walk-away, forget-bond, a disconnect) and wait until it does, or
        until a central already linked to it (a linked wearable stops advertising)."""
        self.cmd("come-back")
        return wait_for(lambda: (lambda st: st["advertising"] or st["connected"])(self.status()), deadline,
                        "the wearable advertising (or linked) after come-back")

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



# ------------------------------------------------------------------ paird (the daemon under test)
REPO = os.environ.get("BED_REPO", os.path.dirname(os.path.dirname(TESTBED)))
PAIRD_STATE_DIR = "/var/lib/paird"
PAIRD_STATE = f"{PAIRD_STATE_DIR}/state.json"
PAIRD_UNIT = "/etc/systemd/system/paird.service"
PAIRD_UNIT_BIN = "/usr/local/sbin/paird"   # ExecStart= of systemd/paird.service


@at_exit
def _keep_record():
    """The run's availability record beside its logs (testbed-out/<run>/history.jsonl), copied
    last, after paird stopped: what Tests/testbed/tokens.py compares across runs."""
    with contextlib.suppress(OSError):
        shutil.copy(f"{PAIRD_STATE_DIR}/history.jsonl", os.path.join(OUT, "history.jsonl"))


def sh(cmd, timeout=30, check=True):
    """Run a shell command; return its stdout (raise BedError on failure when check)."""
    r = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise BedError(f"`{cmd}` exited {r.returncode}: {(r.stderr or r.stdout).strip()}")
    return r.stdout


def kernel_bug():
    """The kernel's dmesg line if it hit a BUG / list corruption (see README: Known problems)."""
    out = subprocess.run(["dmesg"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if "list_del corruption" in line or "kernel BUG" in line or "Oops" in line:
            return line.strip()
    return None


def bluetoothd_crash():
    """The last dmesg line of a bluetoothd crash, if there is one: bluetoothd 5.66 dies now and
    then on the 6.12 bed (README: Known problems), as a `segfault` or a `general protection fault`."""
    out = subprocess.run(["dmesg"], capture_output=True, text=True).stdout
    lines = [x.strip() for x in out.splitlines()
             if "bluetoothd[" in x and ("segfault" in x or "protection fault" in x)]
    return lines[-1] if lines else None


def revive_bluetoothd(w):
    """If bluetoothd is gone: start it again and wait until the wearable `w` registered with it
    (it does so by itself on NameOwnerChanged). Returns why it was gone (the dmesg line), None if
    it was running. Callers say so loudly: the crash is BlueZ's, never hidden."""
    if bluetoothd("status") == "active":
        return None
    why = bluetoothd_crash() or "gone without a segfault or protection-fault line in dmesg"
    bluetoothd("start")
    wait_for(lambda: w.status()["registered"], 60, "the wearable registered with the new bluetoothd")
    return why


def skip(why, detail=""):
    """End the scenario as skipped: exit 0 with a loud SKIP line. `why` is a fixed sentence: e2e.sh
    counts a skip as a failure unless (scenario, why) is on Tests/testbed/skip-allowlist, each
    entry with its justification. `detail` (a dmesg line, a measured value) goes on the next line."""
    print(f"\nSKIP: {why}" + (f"\n  {detail}" if detail else ""), flush=True)
    raise _Skip(why + ("\n" + detail if detail else ""))


class _Skip(BaseException):
    pass


def write_alert_scripts(directory, scripts):
    """Writes each `{name: body}` as a script in `directory` for paird's alert scripts
    ([Alerts] DispatcherDir): the directory and the scripts owned by root, mode 0755 (paird
    runs none from a directory or file others may write)."""
    os.makedirs(directory, exist_ok=True)
    os.chmod(directory, 0o755)
    for name, body in scripts.items():
        path = os.path.join(directory, name)
        with open(path, "w") as f:
            f.write(body)
        os.chmod(path, 0o755)


def bluetoothd_log_count(text):
    """Lines of bluetoothd's debug log (bluetoothd -d) so far that contain `text`. A missing log
    is an error, never 0: a counter that cannot see must not vouch for "none"."""
    path = os.path.join(OUT, "bluetoothd.log")
    try:
        with open(path, errors="replace") as f:
            return sum(1 for line in f if text in line)
    except FileNotFoundError:
        raise BedError(f"{path} is missing: bluetoothd's debug log is what this counter reads") from None


def bluez_connect_attempts():
    """Device1.Connect attempts bluetoothd logged so far (bluetoothd -d: device_connect_le)."""
    return bluetoothd_log_count("device_connect_le()")


def prove_connect_counter(p, w):
    """Positive control for bluez_connect_attempts() in this very run (a counter that has never
    been seen to count proves nothing): the wearable walks away; `pairctl connect` while paird
    waits on the auto-connect is one Device1.Connect() now (PairingMachine+Intent: userConnect →
    fallbackConnect); the counter must see it. Then the wearable comes back and the link is up."""
    w.cmd("walk-away")
    p.wait_state("waitingForDevice", 20)
    n0 = bluez_connect_attempts()
    rc, out, err = p.pairctl("connect")
    check(rc == 0, f"pairctl connect while away: exit 0 ({out.strip()} {err.strip()})")
    n = wait_for(lambda: bluez_connect_attempts() - n0, 15, "pairctl connect's Device1.Connect() in bluetoothd's log")
    check(n >= 1, f"positive control: bluez_connect_attempts() counted paird's Connect() ({n})")
    w.come_back()
    p.wait_state("connected", 60)


LINK_SETUP_STATES = ("connecting", "discovering")   # paird's states while a link is being set up


def crash_landing(states, deadline=30):
    """Where a kill of bluetoothd landed, from paird's own states (`states()`: its `pairctl watch`
    states since the kill's run began): from the link's first set-up or connected state (a late line
    of the wait before it is no reaction) up to paird's reaction to the crash (its first state that
    is neither), a `connected` means the link had been set up before bluetoothd died ("connected");
    none means it died during the set-up ("set-up"). Waits for that reaction."""
    live = LINK_SETUP_STATES + ("connected",)

    def link_then_reaction():
        seen = states()
        i0 = next((i for i, s in enumerate(seen) if s in live), None)
        if i0 is None:
            return None
        upto = next((i for i in range(i0, len(seen)) if seen[i] not in live), None)
        return seen[i0:upto] if upto is not None else None
    link = wait_for(link_then_reaction, deadline, "paird's reaction to the crash in pairctl watch")
    return "connected" if "connected" in link else "set-up"


def bluez_double_connections():
    """Times bluetoothd saw a second link to a device it had one with: a Connect() that raced the
    kernel's auto-connect (BENCHMARKS.md findings 14, 16), 'device_add_connection() … is already
    connected'."""
    return bluetoothd_log_count("is already connected")


class Paird:
    """paird under test. plain mode: a child process (log: $BED_OUT/paird.log, sd_notify
    messages received on our own NOTIFY_SOCKET); systemd mode: systemd/paird.service (user
    paird, binary bind-mounted at its ExecStart path). `pairctl()` runs the real pairctl."""

    def __init__(self, mode=None, state_file=PAIRD_STATE, config=None, adapter=None, unit_dropin=None):
        self.mode = mode or MODE
        self.state_file, self.config, self.adapter = state_file, config, adapter
        self.unit_dropin = unit_dropin
        self.proc = None
        self.notify = None      # plain mode: our NOTIFY_SOCKET
        self.notes = []         # (time, "READY=1" / "STATUS=…" …) received on it
        self.starts = 0
        if not PAIRD_BIN or not PAIRCTL_BIN:
            raise BedError("PAIRD_BIN and PAIRCTL_BIN must be set (e2e.sh defaults them to .build/release)")
        self.install()
        at_exit(self.cleanup)

    # -- setup
    def install(self):
        """D-Bus policy into /etc/dbus-1/system.d + ReloadConfig, user paird, state directory."""
        if subprocess.run(["getent", "passwd", "paird"], capture_output=True).returncode != 0:
            sh("useradd --system --user-group --no-create-home --home-dir /nonexistent "
               "--shell /usr/sbin/nologin paird")
        os.makedirs("/etc/dbus-1/system.d", exist_ok=True)
        sh(f"cp {REPO}/etc/dbus-1/system.d/org.paird1.conf /etc/dbus-1/system.d/org.paird1.conf")
        sh("dbus-send --system --print-reply --type=method_call --dest=org.freedesktop.DBus / "
           "org.freedesktop.DBus.ReloadConfig")
        os.makedirs(os.path.dirname(self.state_file), mode=0o700, exist_ok=True)
        # every D-Bus message to/from bluetoothd and paird, for post-mortems ($BED_OUT/dbus-monitor.log)
        mon = subprocess.Popen(["dbus-monitor", "--system", "sender='org.bluez'", "destination='org.bluez'",
                                "sender='org.paird1'", "destination='org.paird1'"],
                               stdout=open(os.path.join(OUT, "dbus-monitor.log"), "w"), stderr=subprocess.STDOUT)
        at_exit(lambda: mon.poll() is None and mon.terminate())
        if self.mode == "systemd":
            sh(f"touch {PAIRD_UNIT_BIN} && mount --bind {PAIRD_BIN} {PAIRD_UNIT_BIN}")
            sh(f"cp {REPO}/systemd/paird.service {PAIRD_UNIT}")
            d = PAIRD_UNIT + ".d"
            os.makedirs(d, exist_ok=True)
            extra = [f"ExecStart={PAIRD_UNIT_BIN}" + (f" --config {self.config}" if self.config else "")
                     + (f" --adapter {self.adapter}" if self.adapter else "")]
            with open(f"{d}/bed.conf", "w") as f:
                f.write("[Service]\nExecStart=\n" + "\n".join(extra) + "\n" + (self.unit_dropin or ""))
            sh("systemctl daemon-reload")
        log(f"paird installed ({self.mode} mode): policy reloaded, user paird, {self.state_file}")

    def write_config(self, text, path="/etc/paird/bed.conf"):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        self.config = path
        return path

    # -- lifecycle
    def start(self, wait=True, deadline=30, extra_args=()):
        self.starts += 1
        trace("paird-start")
        if self.mode == "systemd":
            sh("systemctl start --no-block paird.service")
        else:
            if self.notify is None:
                self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                path = "/run/bed/paird-notify.sock"
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
                self.notify.bind(path)
                # Read it all the time: a unix datagram socket queues only 10 messages
                # (net.unix.max_dgram_qlen) and then sd_notify() blocks paird's loop in sendmsg.
                threading.Thread(target=self._reader, daemon=True).start()
            args = [PAIRD_BIN, "--state-file", self.state_file]
            if self.config:
                args += ["--config", self.config]
            if self.adapter:
                args += ["--adapter", self.adapter]
            args += list(extra_args)
            logf = open(os.path.join(OUT, "paird.log"), "a")
            logf.write(f"=== paird start #{self.starts} at {now() - T0:.2f}: {' '.join(args)}\n")
            logf.flush()
            env = dict(os.environ, NOTIFY_SOCKET="/run/bed/paird-notify.sock")
            # What the previous paird sent is not this one's: a marker sent now is read after it.
            marker = f"BED-MARK={self.starts}"
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as m:
                m.sendto(marker.encode(), "/run/bed/paird-notify.sock")
            wait_for(lambda: any(n == marker for _, n in self.notes), 5, "the notify reader caught up")
            self.notes = []
            self.proc = subprocess.Popen(args, stdout=logf, stderr=subprocess.STDOUT, env=env)
        if wait:
            return self.wait_ready(deadline)
        return None

    def _reader(self):
        while True:
            msg = self.notify.recv(4096).decode(errors="replace")
            for line in msg.splitlines():
                self.notes.append((now(), line))

    def _drain(self):
        """Datagrams are read by a thread as they arrive (self.notes); nothing to do here."""

    def ready(self):
        if self.mode == "systemd":
            return sh("systemctl is-active paird.service", check=False).strip() == "active"
        self._drain()
        if self.proc.poll() is not None:
            raise BedFatal(f"paird exited with {self.proc.returncode} (see paird.log)")
        return any(n == "READY=1" for _, n in self.notes)

    def wait_ready(self, deadline=30):
        """Wait for READY=1; returns when it was received (plain: the datagram's arrival)."""
        t = now()
        wait_for(self.ready, deadline, "paird READY=1")
        trace("paird-ready")
        t_ready = next((tn for tn, n in self.notes if n == "READY=1"), now())
        log(f"paird ready (pid {self.pid()}) after {t_ready - t:.2f} s")
        return t_ready

    def wait_note(self, pred, deadline, what):
        """plain mode: wait for an sd_notify line (e.g. "STATUS=…") matching pred; returns
        (time received, line). Receipt times are accurate to the wait's 50 ms polling."""
        def found():
            self._drain()
            return next(((tn, n) for tn, n in self.notes if pred(n)), None)
        return wait_for(found, deadline, what)

    def pid(self):
        if self.mode == "systemd":
            return int(sh("systemctl show -p MainPID --value paird.service").strip() or 0)
        return self.proc.pid if self.proc and self.proc.poll() is None else 0

    def running(self):
        if self.mode == "systemd":
            return sh("systemctl is-active paird.service", check=False).strip() == "active"
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig="TERM", deadline=15):
        """SIGTERM (or KILL) and wait for the process to end; returns its exit status (plain)."""
        if self.mode == "systemd":
            if sig == "KILL":
                sh("systemctl kill -s KILL paird.service")
            else:
                sh("systemctl stop paird.service", timeout=deadline + 5)
            return None
        if not self.running():
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(getattr(__import__("signal"), f"SIG{sig}"))
        wait_for(lambda: self.proc.poll() is not None, deadline, f"paird to exit after SIG{sig}")
        log(f"paird stopped (SIG{sig}): exit status {self.proc.returncode}")
        return self.proc.returncode

    def restart(self, deadline=30):
        self.stop()
        self.start(deadline=deadline)

    def cleanup(self):
        if self.mode == "plain" and self.running():
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def logtext(self):
        if self.mode == "systemd":
            return sh("journalctl -u paird.service -o cat --no-pager", check=False)
        with open(os.path.join(OUT, "paird.log"), errors="replace") as f:
            return f.read()

    # -- pairctl
    def pairctl(self, *args, user=None, groups=None, timeout=120):
        """Run pairctl; returns (rc, stdout, stderr). user="nobody": as nobody:nogroup, no
        supplementary groups unless `groups` (comma-separated names, e.g. "bluetooth")."""
        cmd = [PAIRCTL_BIN, *args]
        if user:
            cmd = ["setpriv", f"--reuid={user}", "--regid=nogroup",
                   f"--groups={groups}" if groups else "--clear-groups", *cmd]
        t = now()
        # stdin: never a terminal (a script's pairctl); Terminal runs one on a pseudo-terminal
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        log(f"pairctl {' '.join(args)}{' (as ' + user + (', groups ' + groups if groups else '') + ')' if user else ''} → exit {r.returncode} "
            f"in {now() - t:.2f} s")
        return r.returncode, r.stdout, r.stderr

    def status(self):
        rc, out, err = self.pairctl("status", "--json")
        if rc != 0:
            raise BedError(f"pairctl status --json exited {rc}: {err.strip()}")
        return json.loads(out)

    @staticmethod
    def _addr(address):
        if address:
            return address
        return Wearable.current.address if Wearable.current else WEARABLE_ADDR

    def device(self, address=None):
        address = self._addr(address)
        for d in self.status()["devices"]:
            if d["address"] == address:
                return d
        return None

    def state(self, address=None):
        d = self.device(address)
        return d["state"] if d else None

    def wait_state(self, state, deadline, address=None):
        """Poll `pairctl status --json` until the device is in `state`; returns the device dict."""
        address = self._addr(address)
        seen = []

        def check_state():
            d = self.device(address)
            s = d["state"] if d else None
            if not seen or seen[-1] != s:
                seen.append(s)
            return d if s == state else None
        try:
            return wait_for(check_state, deadline, f"{address} state {state}", interval=0.2)
        except BedError:
            self.diagnose()
            raise
        finally:
            log(f"states seen while waiting for {state}: {' → '.join(map(str, seen))}")

    def diagnose(self):
        """Log what paird's process is doing (for a paird that stopped answering)."""
        pid = self.pid()
        if not pid:
            log("diagnose: paird is not running")
            return
        with contextlib.suppress(OSError):
            stat = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            cpu, sw = self.cpu()
            wchan = open(f"/proc/{pid}/wchan").read()
            log(f"diagnose: paird pid {pid} state {stat[0]}, {cpu:.2f} CPU-s, {sw} switches, wchan {wchan}")
            for tid in os.listdir(f"/proc/{pid}/task"):
                with contextlib.suppress(OSError):
                    log(f"  task {tid}: {open(f'/proc/{pid}/task/{tid}/stat').read().rsplit(')', 1)[1].split()[0]} "
                        f"{open(f'/proc/{pid}/task/{tid}/stack').read().strip().replace(chr(10), ' | ')[:300]}")
        line = kernel_bug()
        if line:
            log(f"diagnose: the kernel hit a BUG: {line}")

    def watch(self, name="watch"):
        """Start `pairctl watch` in the background; returns a PairctlWatch."""
        return PairctlWatch(name)

    def cpu(self):
        """(CPU seconds, context switches) of paird so far: utime+stime of the process,
        voluntary+nonvoluntary switches summed over its threads."""
        pid = self.pid()
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        switches = 0
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(FileNotFoundError), open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                        switches += int(line.split()[1])
        return cpu, switches


class PairctlWatch:
    """`pairctl watch` running in the background, its lines in $BED_OUT/pairctl-<name>.log."""

    def __init__(self, name):
        self.path = os.path.join(OUT, f"pairctl-{name}.log")
        self.file = open(self.path, "w")
        self.proc = subprocess.Popen([PAIRCTL_BIN, "watch"], stdout=self.file, stderr=subprocess.STDOUT)
        at_exit(self.stop)

    def lines(self, kind=None, since=0):
        with open(self.path, errors="replace") as f:
            ls = f.read().splitlines()[since:]
        return [line for line in ls if kind is None or f" {kind} " in f" {line} "]

    def states(self, since=0):
        """The states of the `state` lines after the first `since` of them."""
        return [l.split(" state ", 1)[1].split()[0] for l in self.lines("state")[since:]]

    def count(self):
        return len(self.lines())

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(5)


MSG_BLUETOOTHD_CRASHED = "d0a3d6329a8b43d596a93330a3ea7cba"   # paird's MESSAGE_IDs (Systemd.swift)
MSG_BLUETOOTHD_DOWN = "9fe0a6f8edf440708400f4e405af5550"


def journal_entries(message_id, unit="paird.service"):
    """The unit's journal entries (systemd mode) with this MESSAGE_ID, as dicts."""
    out = sh(f"journalctl -u {unit} -o json --no-pager", check=False)
    return [e for e in (json.loads(l) for l in out.splitlines() if l.startswith("{")) if e.get("MESSAGE_ID") == message_id]


def bluez_owned():
    """Whether org.bluez has an owner on the system bus now (asked of the bus, not of BlueZ)."""
    return sh("dbus-send --system --print-reply --dest=org.freedesktop.DBus / org.freedesktop.DBus.NameHasOwner "
              "string:org.bluez", check=False).find("boolean true") >= 0


def process_gone(pid):
    """The process is gone, or a zombie nobody has reaped yet (stage2 is PID 1 in plain mode)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return any(l.startswith("State:") and "Z" in l.split()[1] for l in f)
    except FileNotFoundError:
        return True


def bluetoothd_pid():
    """bluetooth.service's main PID (systemd mode); 0 when it is not running."""
    return int(sh("systemctl show -p MainPID --value bluetooth.service").strip() or 0)


def bluetoothd_active():
    return sh("systemctl is-active bluetooth.service", check=False).strip() == "active"


def bluetoothd_segv():
    """kill -SEGV bluetoothd's main process (systemd mode); returns (pid, time of the kill)."""
    pid = bluetoothd_pid()
    check(pid > 0, f"bluetoothd running (pid {pid})")
    t = now()
    os.kill(pid, signal.SIGSEGV)
    return pid, t


def wait_bluetoothd_replaced(pid, deadline=60):
    """Until bluetooth.service is active with a main PID other than `pid` (and not 0)."""
    wait_for(lambda: bluetoothd_active() and bluetoothd_pid() not in (0, pid), deadline,
             "bluetoothd active again, new pid", interval=0.1)


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


# ------------------------------------------------------------------ a dongle unplugged and plugged back in
# The bed's btvirt (btvirt/btvirt-replug.patch): `kill -USR2` unplugs controller 0 (hci0,
# CENTRAL_ADDR) and, sent again, plugs it back in with the same address (README, "btvirt,
# patched: a replug").
def controllers():
    """{index: address} of the controllers the kernel has (sysfs also lists links: hci0:42)."""
    out = {}
    for n in os.listdir("/sys/class/bluetooth"):
        if re.fullmatch(r"hci\d+", n):
            m = re.search(r"BD Address: ([0-9A-F:]{17})", sh(f"hciconfig {n}", check=False))
            out[int(n[3:])] = m.group(1) if m else None
    return out


def btvirt_pid():
    pids = sh("pidof btvirt", check=False).split()
    check(len(pids) == 1, f"one btvirt running (pidof: {pids})")
    return int(pids[0])


class IndexHolder:
    """A vhci of our own: `\\xff\\x00` creates a primary controller (hci_vhci.c: the vendor
    packet, opcode 0x00) with the lowest free index. Nobody answers it: the kernel's HCI Reset
    times out (`Opcode 0x0c03 failed: -110`), the controller never reaches mgmt (bluetoothd
    does not see it), and it keeps its index until the fd is closed. Held while a dongle is out,
    it makes the plug-in come back under another index."""

    def __init__(self, want):
        def take():
            fd = os.open("/dev/vhci", os.O_RDWR)
            os.write(fd, b"\xff\x00")
            rsp = os.read(fd, 4)
            index = rsp[2] | rsp[3] << 8
            if index == want:
                return (fd, index)
            os.close(fd)   # the unplugged index not free yet (its release is deferred)
            return None
        self.fd, self.index = wait_for(take, 10, f"a placeholder vhci holding index {want}", interval=0.2)
        at_exit(self.close)
        log(f"holding hci{self.index} with a placeholder vhci")

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class Terminal:
    """A command run on a pseudo-terminal (stdin, stdout and stderr), as a person at a terminal
    runs it: `expect` waits for text on the screen, `type` sends a line."""

    def __init__(self, *cmd):
        import pty
        self.cmd = cmd
        self.master, slave = pty.openpty()
        self.t0 = now()
        self.proc = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave, close_fds=True,
                                     start_new_session=True)
        os.close(slave)
        self.screen = ""
        self.lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()
        at_exit(self.kill)
        log(f"terminal: {' '.join(os.path.basename(c) if i == 0 else c for i, c in enumerate(cmd))}")

    def _read(self):
        while True:
            try:
                b = os.read(self.master, 4096)
            except OSError:
                return
            if not b:
                return
            with self.lock:
                self.screen += b.decode(errors="replace").replace("\r\n", "\n")

    def text(self):
        with self.lock:
            return self.screen

    def expect(self, pattern, deadline, what=None):
        """Waits until `pattern` (a regex) is on the screen; returns the match."""
        def found():
            if self.proc.poll() is not None and not re.search(pattern, self.text()):
                raise BedError(f"{self.cmd[0]} exited {self.proc.returncode} before {what or pattern!r}:\n{self.text()}")
            return re.search(pattern, self.text())
        m = wait_for(found, deadline, what or f"{pattern!r} on the terminal")
        log(f"  terminal shows {m.group(0)!r} at {now() - self.t0:.2f} s")
        return m

    def type(self, line):
        log(f"  typing {line!r} at {now() - self.t0:.2f} s")
        os.write(self.master, line.encode() + b"\n")

    def interrupt(self):
        """Ctrl-C, as the terminal sends it: SIGINT to the foreground process."""
        log(f"  Ctrl-C at {now() - self.t0:.2f} s")
        self.proc.send_signal(signal.SIGINT)

    def wait_exit(self, deadline):
        wait_for(lambda: self.proc.poll() is not None, deadline, f"{os.path.basename(self.cmd[0])} to exit")
        rc = self.proc.returncode
        log(f"  exit {rc} at {now() - self.t0:.2f} s")
        for line in self.text().splitlines():
            log(f"  | {line}")
        return rc

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        try:
            os.close(self.master)
        except OSError:
            pass


def pair_wearable(p, name="Pulse-1", deadline=60):
    """`pairctl pair --service 180d`: exit 0, progress lines; returns the stdout lines."""
    rc, out, err = p.pairctl("pair", "--service", "180d", "--timeout", "20", timeout=deadline)
    for line in out.splitlines():
        log(f"  | {line}")
    if rc != 0:
        raise BedError(f"pairctl pair exited {rc}: {err.strip()}")
    return out.splitlines()


__all__ = [n for n in dir() if not n.startswith("_") and n not in (
    "contextlib", "functools", "json", "os", "re", "shutil", "signal", "socket", "subprocess", "sys", "threading", "time", "traceback")] + ["_Skip"]
