"""benchlib: guest-side helpers for the benchmark programs in Tests/bench (run in the test bed
by bench.sh through Tests/testbed/run-vm).  Builds on Tests/testbed/bedlib.py (wait_for,
bed_sleep, Wearable, Central, ...) and adds: the bench wearable, a passive D-Bus monitor with
wall-clock timestamps, the four "keep it connected" approaches behind one interface, /proc
sampling and the results file.  Benchmarks print figures; nothing here asserts on timing."""
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

import dbus

from bedlib import (BLUEZ, CHR, DEVICE, HR_MEAS, HR_SVC, OUT, PAIRCTL_BIN, PAIRD_BIN, PROPS, WEARABLE_ADDR,
                    BedError, BedFatal, Central, Wearable, at_exit, log, sh, wait_for)

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(BENCH))
PYLIB = os.environ.get("BED_X_PYLIB", os.path.join(REPO, ".build-bench", "pylib"))
PY = "/usr/bin/python3"
RESULTS = os.path.join(OUT, "results.jsonl")
DEV_PATH = "/org/bluez/hci0/dev_" + WEARABLE_ADDR.replace(":", "_")
PAIRD_IFACE = "org.paird1.Manager1"


def wall():
    return time.time()


def record(**kw):
    """One result line in $BED_OUT/results.jsonl (the host-side report reads these)."""
    with open(RESULTS, "a") as f:
        f.write(json.dumps(kw) + "\n")


def pct(xs, p):
    """Nearest-rank percentile (p in 0..100) of a non-empty list."""
    s = sorted(xs)
    k = max(0, min(len(s) - 1, int(-(-p * len(s) // 100)) - 1))
    return s[k]


def summary(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "n=0"
    return f"median {statistics.median(xs) * 1000:7.1f} ms  p95 {pct(xs, 95) * 1000:7.1f} ms  n={len(xs)}"


# ------------------------------------------------------------------ the wearable
def start_wearable(hr_interval=1.0, name="Pulse-1", sock="/run/bed/wearable.sock"):
    logf = open(os.path.join(OUT, "wearable.log"), "a")
    proc = subprocess.Popen([PY, "-u", os.path.join(BENCH, "bench_wearable.py"), "--name", name,
                             "--adapter", "hci1", "--socket", sock, "--hr-interval", str(hr_interval)],
                            stdout=logf, stderr=subprocess.STDOUT)
    w = Wearable(sock, proc)
    at_exit(w.stop)

    def up():
        if proc.poll() is not None:
            raise BedFatal(f"bench_wearable.py exited with {proc.returncode}")
        return w.cmd("status", timeout=5)["advertising"]
    wait_for(up, 30, "bench wearable advertising")
    return w


def wearable_event_after(w, event, t_wall, **match):
    for e in w.events(0):
        if e["event"] == event and e.get("wall", 0) >= t_wall and all(e.get(k) == v for k, v in match.items()):
            return e
    return None


# ------------------------------------------------------------------ passive monitor
class Monitor:
    """Every signal that matters, with time.time() at receipt: the central's Device1
    Connected/ServicesResolved, BlueZ's Value changes on the heart-rate characteristic, and
    paird's Notification / StateChanged."""

    def __init__(self, bus=None):
        self.bus = bus or dbus.SystemBus()
        self.ev = []    # (wall, kind, value)
        self.hr_path = None
        self.bus.add_signal_receiver(self._pc, "PropertiesChanged", PROPS, BLUEZ, path_keyword="path")
        self.bus.add_signal_receiver(self._pn, "Notification", PAIRD_IFACE)
        self.bus.add_signal_receiver(self._ps, "StateChanged", PAIRD_IFACE)

    def _pc(self, iface, changed, invalidated, path=None):
        t = wall()
        if path == DEV_PATH and iface == DEVICE:
            for k in ("Connected", "ServicesResolved"):
                if k in changed:
                    self.ev.append((t, k, bool(changed[k])))
        elif iface == CHR and "Value" in changed and path == self.hr_path:
            self.ev.append((t, "bluez-hr", bytes(changed["Value"]).hex()))

    def _pn(self, addr, characteristic, value):
        if "2a37" in str(characteristic).lower():
            self.ev.append((wall(), "paird-hr", bytes(value).hex()))

    def _ps(self, addr, state, reason):
        self.ev.append((wall(), "paird-state", str(state)))

    def first(self, kind, since, value=None):
        for t, k, v in self.ev:
            if k == kind and t >= since and (value is None or v == value):
                return t
        return None

    def count(self, kind, since, value=None):
        return sum(1 for t, k, v in self.ev if k == kind and t >= since and (value is None or v == value))

    def trim(self, before):
        self.ev = [e for e in self.ev if e[0] >= before]


def pair_directly(c):
    """Bond with the wearable from hci0 through BlueZ alone (Pair + Trusted, no GattProfile1:
    registering one would put the wearable on the kernel's auto-connect list for the rest of
    the VM's life, and every approach measured after it would ride on that)."""
    c.register_agent()
    dev = c.discover(uuid=HR_SVC, name="Pulse-1", deadline=30)
    c.pair(dev)
    c.set(dev, "Trusted", dbus.Boolean(True))
    c.wait_services_resolved(dev)
    return dev


def find_hr_path(central, deadline=30):
    return wait_for(lambda: central.char(DEV_PATH, HR_MEAS), deadline, "heart-rate characteristic object")


# ------------------------------------------------------------------ /proc sampling
def proc_sample(pid):
    """(cpu seconds, context switches, RSS kB, open fds) of one process, threads summed.
    CPU from /proc/PID/task/*/schedstat (ns on the CPU), not the 10 ms-granular utime+stime."""
    cpu = 0.0
    switches = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(FileNotFoundError), open(f"/proc/{pid}/task/{tid}/schedstat") as f:
            cpu += int(f.read().split()[0]) / 1e9
        with contextlib.suppress(FileNotFoundError), open(f"/proc/{pid}/task/{tid}/status") as f:
            for line in f:
                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    switches += int(line.split()[1])
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return cpu, switches, rss, fds


def proc_anon_kb(pid):
    """Anonymous (heap, stacks: the process's own) memory in kB, from smaps_rollup; the rest of
    RSS is file-backed pages of the binary and shared libraries (Swift runtime, Foundation)."""
    with contextlib.suppress(OSError), open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Anonymous:"):
                return int(line.split()[1])
    return None


def tree_pids(pid):
    """pid and all its descendants (for the shell loop: bash + bluetoothctl + sleep)."""
    out = [pid]
    with contextlib.suppress(FileNotFoundError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(FileNotFoundError), open(f"/proc/{pid}/task/{tid}/children") as f:
                for c in f.read().split():
                    out += tree_pids(int(c))
    return out


# ------------------------------------------------------------------ the approaches
class Approach:
    """One way of keeping the wearable connected. start() with the link possibly up; stop()
    leaves the link as it is.  notif_times() = when the *client* saw heart-rate values."""
    name = "?"
    procs = ()

    def __init__(self, monitor):
        self.m = monitor
        self.procs = []

    def spawn(self, args, logname, env=None):
        logf = open(os.path.join(OUT, logname), "a")
        p = subprocess.Popen(args, stdout=logf, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.procs.append(p)
        at_exit(lambda: self._kill(p))
        return p

    @staticmethod
    def _kill(p):
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(5)

    def stop(self):
        for p in self.procs:
            self._kill(p)
        self.procs = []

    def alive(self):
        for p in self.procs:
            if p.poll() is not None:
                raise BedFatal(f"{self.name}: {p.args[0] if isinstance(p.args, list) else p.args} "
                               f"exited with {p.returncode}")
        return True

    def main_pid(self):
        return self.procs[0].pid

    def notif_times(self, since):
        raise NotImplementedError

    def first_notif(self, since):
        ts = [t for t in self.notif_times(since) if t >= since]
        return min(ts) if ts else None

    def wait_flowing(self, deadline=60, n=2):
        """Until the client has seen n notifications after now."""
        t = wall()
        wait_for(lambda: self.alive() and len([x for x in self.notif_times(t) if x >= t]) >= n,
                 deadline, f"{self.name}: heart-rate notifications flowing")


_tails = {}


def _jsonl_times(path, kind, since):
    """Wall times of `kind` lines in a client's JSON-lines log, read incrementally (the logs
    grow by 10 lines/s; re-parsing them on every poll starved the bench process under TCG)."""
    off, seen = _tails.get(path, (0, []))
    with contextlib.suppress(FileNotFoundError), open(path) as f:
        f.seek(off)
        while True:
            line = f.readline()
            if not line.endswith("\n"):
                break
            off += len(line.encode())
            with contextlib.suppress(ValueError):
                e = json.loads(line)
                seen.append((e["wall"], e.get("kind")))
        if len(seen) > 5000:
            seen = seen[-2000:]
    _tails[path] = (off, seen)
    return [t for t, k in seen if k == kind and t >= since]


class PairdApproach(Approach):
    name = "paird"
    STATE = "/var/lib/paird-bench/state.json"
    NOTIFY = "/run/bed/bench-notify.sock"

    def __init__(self, monitor, config=None, watchdog_usec=10_000_000):
        super().__init__(monitor)
        self.config = config
        self.watchdog_usec = watchdog_usec
        self.watch = True
        self.notes = []
        self.notify = None
        if subprocess.run(["getent", "passwd", "paird"], capture_output=True).returncode != 0:
            sh("useradd --system --user-group --no-create-home --shell /usr/sbin/nologin paird")
        os.makedirs("/etc/dbus-1/system.d", exist_ok=True)
        sh(f"cp {REPO}/etc/dbus-1/system.d/org.paird1.conf /etc/dbus-1/system.d/")
        sh("dbus-send --system --print-reply --type=method_call --dest=org.freedesktop.DBus / "
           "org.freedesktop.DBus.ReloadConfig")
        os.makedirs(os.path.dirname(self.STATE), mode=0o700, exist_ok=True)

    def bind_notify(self):
        if self.notify is None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.NOTIFY)
            self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self.notify.bind(self.NOTIFY)
            # Read it all the time, as systemd does: a unix datagram socket queues only
            # net.unix.max_dgram_qlen (10 here, without systemd's sysctl) messages, and then
            # sd_notify() blocks paird's whole loop in sendmsg.  (Reading it only now and then
            # was the cause of the "paird goes deaf" finding of the first benchmark runs.)
            threading.Thread(target=self._reader, daemon=True).start()

    def _reader(self):
        while True:
            msg = self.notify.recv(4096).decode(errors="replace")
            t = wall()
            for line in msg.splitlines():
                self.notes.append((t, line))

    def drain(self):
        """Datagrams are read by a thread as they arrive (self.notes); nothing to do here."""

    def start(self, wait_ready=True):
        """exec paird (plain child; NOTIFY_SOCKET is ours); returns (t_exec, t_ready)."""
        self.bind_notify()
        self.drain()
        self.notes = []
        args = [PAIRD_BIN, "--state-file", self.STATE] + (["--config", self.config] if self.config else [])
        args += os.environ.get("BED_X_PAIRD_ARGS", "").split()   # e.g. --verbose, for diagnostics
        env = dict(os.environ, NOTIFY_SOCKET=self.NOTIFY)
        if self.watchdog_usec:
            # as under systemd/paird.service (WatchdogSec=10s): WATCHDOG_PID must be paird's own pid
            args = ["/bin/sh", "-c", 'export WATCHDOG_PID=$$; exec "$0" "$@"'] + args
            env["WATCHDOG_USEC"] = str(self.watchdog_usec)
        t0 = wall()
        self.spawn(args, "paird.log", env=env)
        if self.watch:
            self.start_watcher()
        if not wait_ready:
            return t0, None

        def ready():
            self.alive()
            self.drain()
            return next((t for t, n in self.notes if n == "READY=1" and t >= t0), None)
        return t0, wait_for(ready, 60, "paird READY=1", interval=0.005)

    def adopt_bond(self):
        """Put the wearable (bonded by pair_directly) into paird's state file, as `pairctl pair`
        would have: paird then manages it from its first start."""
        uuids = ["0000180d-0000-1000-8000-00805f9b34fb", "0000180f-0000-1000-8000-00805f9b34fb",
                 "70616972-6400-4000-8000-77656172ab1e"]
        doc = {"version": 1, "devices": [{"address": WEARABLE_ADDR, "addressType": "public", "name": "Pulse-1",
                                          "adapter": "hci0", "serviceUUIDs": uuids, "wanted": "connected",
                                          "pairedAt": "2026-11-22T00:00:00Z", "updatedAt": "2026-11-22T00:00:00Z"}]}
        with open(self.STATE, "w") as f:
            json.dump(doc, f)
        os.chmod(self.STATE, 0o600)

    def pairctl(self, *args, timeout=90):
        r = subprocess.run([PAIRCTL_BIN, *args], capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise BedError(f"pairctl {' '.join(args)} → {r.returncode}: {r.stderr.strip()}")
        return r.stdout

    def pair(self):
        out = self.pairctl("pair", "--service", "180d", "--timeout", "20")
        log("pairctl pair: " + " | ".join(out.strip().splitlines()))

    def state(self):
        d = json.loads(self.pairctl("status", "--json"))["devices"]
        return d[0]["state"] if d else None

    WATCH_LOG = os.path.join(OUT, "paird-watch.jsonl")

    def start_watcher(self):
        """paird's client: a separate process receiving paird's Notification signals (what
        `pairctl watch` receives), logging wall times, like the other approaches' clients."""
        self.spawn([PY, "-u", os.path.join(BENCH, "keepers", "notify_client.py"), "--paird",
                    "--log", self.WATCH_LOG, WEARABLE_ADDR], "paird-watch.out")

    def notif_times(self, since):
        return _jsonl_times(self.WATCH_LOG, "notification", since)


class AutoConnect(Approach):
    name = "auto-connect (GattProfile1)"
    LOG = os.path.join(OUT, "autoconnect.jsonl")

    def start(self):
        self.spawn([PY, "-u", os.path.join(BENCH, "keepers", "notify_client.py"), "--profile",
                    "--log", self.LOG, WEARABLE_ADDR], "autoconnect.out")

    def notif_times(self, since):
        return _jsonl_times(self.LOG, "notification", since)


class BtctlLoop(Approach):
    name = "bluetoothctl loop (sleep 5)"
    LOG = os.path.join(OUT, "btctl-notify.jsonl")
    LOOP_LOG = os.path.join(OUT, "btctl-loop.jsonl")

    def start(self):
        self.spawn(["/bin/bash", os.path.join(BENCH, "keepers", "btctl_loop.sh"), WEARABLE_ADDR, "5"],
                   "btctl-loop.jsonl")
        self.spawn([PY, "-u", os.path.join(BENCH, "keepers", "notify_client.py"),
                    "--log", self.LOG, WEARABLE_ADDR], "btctl-notify.out")

    def notif_times(self, since):
        return _jsonl_times(self.LOG, "notification", since)


class BleakKeeper(Approach):
    name = "bleak + bleak-retry-connector"
    LOG = os.path.join(OUT, "bleak.jsonl")

    def start(self):
        env = dict(os.environ, PYTHONPATH=PYLIB + ":" + os.environ.get("PYTHONPATH", ""))
        self.spawn([PY, "-u", os.path.join(BENCH, "keepers", "bleak_keeper.py"), "--log", self.LOG,
                    WEARABLE_ADDR], "bleak.out", env=env)

    def notif_times(self, since):
        return _jsonl_times(self.LOG, "notification", since)


def connect_attempts():
    """Device1.Connect / LE connect attempts bluetoothd logged so far (bluetoothd -d)."""
    try:
        with open(os.path.join(OUT, "bluetoothd.log"), errors="replace") as f:
            return sum(1 for line in f if "device_connect_le()" in line)
    except FileNotFoundError:
        return 0


def bench_env_note():
    """Facts worth printing with every figure."""
    r = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
    return {"guest_cpus": r, "kernel": os.uname().release, "paird_bin": PAIRD_BIN}
