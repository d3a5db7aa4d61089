"""bedlib_paird: paird, the daemon under test (part of bedlib): its process or unit (Paird),
pairctl, `pairctl watch` (PairctlWatch), its journal entries, alert scripts, and the waits that
read its states."""
import contextlib
import json
import os
import shutil
import socket
import subprocess
import threading

from bedlib_core import (BedError, BedFatal, MODE, OUT, PAIRCTL_BIN, PAIRD_BIN, T0, TESTBED, at_exit,
                         kernel_bug, log, now, sh, trace, wait_for)
from bedlib_wearable import WEARABLE_ADDR, Wearable


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


def pair_wearable(p, name="Pulse-1", deadline=60):
    """`pairctl pair --service 180d`: exit 0, progress lines; returns the stdout lines."""
    rc, out, err = p.pairctl("pair", "--service", "180d", "--timeout", "20", timeout=deadline)
    for line in out.splitlines():
        log(f"  | {line}")
    if rc != 0:
        raise BedError(f"pairctl pair exited {rc}: {err.strip()}")
    return out.splitlines()
