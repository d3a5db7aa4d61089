"""bedlib_core: the bed's ground floor (part of bedlib; scenarios import bedlib, not this):
paths and environment, D-Bus names and UUIDs, errors, logging and phase marks, the main loop and
waiting (wait_for, bed_sleep, call), at_exit, check, sh, kernel_bug(s) and the Terminal."""
import contextlib
import os
import re
import signal
import subprocess
import threading
import time

import dbus
import dbus.mainloop.glib
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


_cleanups = []


def at_exit(fn):
    _cleanups.append(fn)
    return fn


def check(cond, what):
    if not cond:
        raise BedError(f"check failed: {what}")
    log(f"checked: {what}")


def sh(cmd, timeout=30, check=True):
    """Run a shell command; return its stdout (raise BedError on failure when check)."""
    r = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise BedError(f"`{cmd}` exited {r.returncode}: {(r.stderr or r.stdout).strip()}")
    return r.stdout


def kernel_bugs():
    """Every dmesg line of the kernel's BUGs / list corruptions so far, oldest first (one BUG
    gives one line or more): a step asks whether a BUG is new in it by the count, not by whether
    there was one (a run on 6.1 may have oopsed in an earlier step already)."""
    out = subprocess.run(["dmesg"], capture_output=True, text=True).stdout
    return [line.strip() for line in out.splitlines()
            if "list_del corruption" in line or "kernel BUG" in line or "Oops" in line]


def kernel_bug():
    """The kernel's first dmesg line if it hit a BUG / list corruption (see README: Known problems)."""
    bugs = kernel_bugs()
    return bugs[0] if bugs else None


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
