"""bedlib_wearable: the handle on a virtual wearable (part of bedlib): Wearable.start() runs the
Bumble wearable (bumble_wearable.py) or the BlueZ twin (wearable.py) and speaks their control
protocol."""
import json
import os
import socket
import subprocess

from bedlib_core import BedError, BedFatal, OUT, TESTBED, at_exit, log, trace, wait_for


# ------------------------------------------------------------------ the virtual wearable
CENTRAL_ADDR = "00:AA:01:00:00:00"   # hci0
WEARABLE_ADDR = "00:AA:01:01:00:01"  # hci1's public address: the BlueZ twin's (wearable.py) only
# Which wearable implementation Wearable.start() runs unless told: "bumble" (an independent
# stack, Tests/testbed/bumble_wearable.py, the default) or "bluez" (wearable.py: the bed's own
# bluetoothd on hci1, the BlueZ-to-BlueZ reference). e2e.sh sets it per run.
WEARABLE_IMPL = os.environ.get("BED_WEARABLE", "bumble")
BUMBLE_PY = os.environ.get("BED_BUMBLE_PYTHON") or os.path.join(
    os.path.dirname(os.path.dirname(TESTBED)), ".build-testbed", "bumble-venv", "bin", "python")
# BED_BUMBLE_HOST=1 (run-vm, opt-in): a Bumble wearable's Python runs on the host
# (bumble_host.py, through qemu's user network), the guest keeping only bed-hci-relay, which takes
# the controller and carries the HCI packets: the same Bumble, natively instead of under TCG.
BUMBLE_ON_HOST = os.environ.get("BED_BUMBLE_HOST") == "1" and bool(os.environ.get("BED_HCI_RELAY"))
HCI_RELAY = os.environ.get("BED_HCI_RELAY", "")


def host_path(guest_path):
    """A path under the bed's output directory, as the host sees it (BED_HOST_OUT)."""
    rel = os.path.relpath(os.path.abspath(guest_path), OUT)
    if rel.startswith(".."):
        raise BedError(f"{guest_path} is not under {OUT}: the host cannot write it")
    return os.path.join(os.environ["BED_HOST_OUT"], rel)


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
        where = ""
        if impl == "bumble" and BUMBLE_ON_HOST and "--transport" not in args:
            # Bumble runs on the host (bumble_host.py), natively; bed-hci-relay takes the
            # controller here and carries its HCI packets and the control socket's lines
            bargs = args[3:]   # bumble_wearable.py's arguments, as built above
            i = bargs.index("--socket")   # the control socket is the relay's, here
            del bargs[i:i + 2]
            i = bargs.index("--bumble-log")   # Bumble's log: where the host sees it
            bargs[i + 1] = host_path(bargs[i + 1])
            spec = {"args": bargs, "log": host_path(logf.name), "keyspace": os.environ.get("BED_NAME", "run")}
            take = bargs[bargs.index("--take-deadline") + 1] if "--take-deadline" in bargs else "15"
            args = [HCI_RELAY, adapter.removeprefix("hci"), sock, take, json.dumps(spec)]
            where = " (Bumble on the host, bed-hci-relay here)"
        log(f"wearable: {impl} {profile if impl == 'bumble' else 'twin'} on {adapter}{where}")
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
