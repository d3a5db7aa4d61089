"""bedlib_bluetoothd: bluetoothd itself (part of bedlib): start/stop/kill through
guest/bluetoothd-ctl, what a boot keeps, crashes and revival, counters read from its debug log,
its process under systemd, and the bed's btvirt (controllers, a dongle unplugged: IndexHolder)."""
import json
import os
import re
import shutil
import signal
import subprocess

from bedlib_core import BedError, OUT, TESTBED, at_exit, check, log, now, sh, wait_for


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


def bluez_double_connections():
    """Times bluetoothd saw a second link to a device it had one with: a Connect() that raced the
    kernel's auto-connect (BENCHMARKS.md findings 14, 16), 'device_add_connection() … is already
    connected'."""
    return bluetoothd_log_count("is already connected")


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
