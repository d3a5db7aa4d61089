#!/usr/bin/python3
# testbed: mode=systemd timeout=420
"""`make demo`: what paird does, in about two minutes, on the real BlueZ stack.

paird runs as a user would run it, from systemd/paird.service (Type=notify, watchdog, hardening,
User=paird); the virtual wearable "Pulse-1" walks out of range and comes back while
`pairctl status` is shown live. Ends with the journal lines paird wrote."""
import json
import os
import shutil
import subprocess
import threading
import time

from bedlib import *

REPO = os.path.abspath(os.path.join(TESTBED, "..", ".."))


def banner(text):
    print(f"\n\033[1;36m── {text}\033[0m", flush=True)


def sh(*cmd, check_rc=True):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check_rc and r.returncode != 0:
        raise BedError(f"{' '.join(cmd)} → {r.returncode}: {r.stderr.strip()}")
    return r


def pairctl(*args, show=True):
    r = subprocess.run([PAIRCTL_BIN, *args], capture_output=True, text=True)
    if show:
        print(f"$ pairctl {' '.join(args)}", flush=True)
        for line in (r.stdout + r.stderr).rstrip().splitlines():
            print(f"  {line}", flush=True)
    return r


def status():
    r = subprocess.run([PAIRCTL_BIN, "status", "--json"], capture_output=True, text=True)
    return json.loads(r.stdout) if r.stdout.strip() else {}


def device_state():
    devs = status().get("devices", [])
    return devs[0]["state"] if devs else None


def install_paird():
    """What `make install` does, inside the throw-away VM."""
    if sh("getent", "passwd", "paird", check_rc=False).returncode != 0:
        sh("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "--user-group", "paird")
    shutil.copy(os.path.join(REPO, "etc/dbus-1/system.d/org.paird1.conf"), "/etc/dbus-1/system.d/org.paird1.conf")
    sh("dbus-send", "--system", "--type=method_call", "--dest=org.freedesktop.DBus", "/",
       "org.freedesktop.DBus.ReloadConfig")
    os.makedirs("/etc/paird", exist_ok=True)
    shutil.copy(os.path.join(REPO, "etc/paird/paird.conf"), "/etc/paird/paird.conf")
    # The unit as shipped (ExecStart=/usr/local/sbin/paird, PrivateTmp=yes: a build under /tmp
    # would be invisible to the service), with the binaries where `make install` puts them.
    shutil.copy(PAIRD_BIN, "/usr/local/sbin/paird")
    shutil.copy(os.path.join(REPO, "systemd/paird.service"), "/etc/systemd/system/paird.service")
    sh("systemctl", "daemon-reload")


@scenario
def main():
    banner("the stack: real kernel Bluetooth (hci_vhci + btvirt), bluetoothd 5.66, a virtual wearable (Bumble unless BED_WEARABLE=bluez)")
    w = Wearable.start(name="Pulse-1", battery=87)
    st = w.status()
    print(f"  wearable {st['name']} ({st['impl']} {st['profile']}, {st['identity_address']}) advertising "
          f"{', '.join(st['services'])} on hci1", flush=True)

    banner("systemctl start paird   (Type=notify: returns once paird sent READY=1)")
    with step("paird active under systemd"):
        install_paird()
        sh("systemctl", "start", "paird")
        check(sh("systemctl", "is-active", "paird", check_rc=False).stdout.strip() == "active", "paird active")
    print(sh("systemctl", "status", "paird", "--no-pager", "--lines=0", check_rc=False).stdout.rstrip(), flush=True)

    banner("pairctl pair --service 180d")
    with step("paired and connected"):
        r = pairctl("pair", "--service", "180d", "--timeout", "20")
        check(r.returncode == 0, "pairctl pair exit 0")
    pairctl("status")

    banner("pairctl watch   (heart-rate notifications forwarded by paird; 4 s)")
    watch = subprocess.Popen([PAIRCTL_BIN, "watch"], stdout=subprocess.PIPE, text=True)
    at_exit(lambda: watch.poll() is None and watch.kill())
    lines = []
    wait_for(lambda: len(lines) >= 3 or lines.append(watch.stdout.readline()) or False, 20,
             "three notification lines from pairctl watch")
    watch.kill()
    for line in lines:
        print(f"  {line.rstrip()}", flush=True)

    def live(until_state, deadline, what):
        """Wait (deadline) until the device is in `until_state`; the live view is pairctl's own."""
        wait_for(lambda: device_state() == until_state, deadline, what, interval=0.25)

    banner("pairctl status --watch   (live from here on: a line set per change, as pairctl prints it)")
    watcher = subprocess.Popen([PAIRCTL_BIN, "status", "--watch"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    at_exit(lambda: watcher.poll() is None and watcher.kill())
    t_live = time.monotonic()

    def pump():
        last_adapter = None
        for line in watcher.stdout:
            line = line.rstrip()
            if line.startswith("adapter:"):   # repeated with every change: shown when it changes
                if line == last_adapter:
                    continue
                last_adapter = line
            print(f"  +{time.monotonic() - t_live:5.1f}s | {line}", flush=True)
    threading.Thread(target=pump, daemon=True).start()

    banner("the wearable walks out of range (link lost, no orderly disconnect)")
    w.cmd("walk-away")
    with step("paird waits for it: waitingForDevice, no Connect storm"):
        live("waitingForDevice", 20, "waitingForDevice")
    bed_sleep(8, "the wearable stays away")
    print(f"  still: {device_state()}", flush=True)

    banner("the wearable comes back: the kernel's auto-connect (armed by paird's GattProfile1) reconnects")
    w.cmd("come-back")
    w.cmd("battery 64")
    with step("connected again, without any pairctl command"):
        live("connected", 90, "connected")
    wait_for(lambda: status()["devices"][0].get("battery") == 64, 20, "battery 64% via notification")
    pairctl("status")

    bed_sleep(1, "the last status lines printed")
    watcher.kill()

    banner("what `systemctl status paird` shows (the STATUS= line)")
    print("  " + sh("systemctl", "show", "-p", "StatusText", "--value", "paird").stdout.strip(), flush=True)

    banner("journalctl -u paird   (structured: MESSAGE_ID, PAIRD_DEVICE, PAIRD_STATE, PAIRD_REASON…)")
    out = sh("journalctl", "-u", "paird", "-o", "json", "--no-pager").stdout
    for line in out.splitlines():
        e = json.loads(line)
        if "PAIRD_EVENT" in e or "MESSAGE_ID" in e:
            fields = " ".join(f"{k}={e[k]}" for k in ("PAIRD_EVENT", "PAIRD_STATE", "PAIRD_REASON") if e.get(k))
            print(f"  {e.get('MESSAGE', '')}   [{fields}]", flush=True)


main()
