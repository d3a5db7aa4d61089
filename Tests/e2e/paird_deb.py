#!/usr/bin/python3
# testbed: mode=systemd timeout=480 wearables=strap
"""The Debian package on a systemd host (issue 20): `dpkg -i` of the .deb that `make deb`
built installs, enables and starts paird as its own user; `pairctl` from the package pairs the
wearable; `man pairctl`, `man 8 paird`, `man 5 paird.conf` render; bash completion completes;
the journal catalog knows paird's MESSAGE_IDs; installing the package over itself keeps the
wearable and the service; `dpkg --purge` leaves nothing of paird behind (files, unit, user,
state). The .deb: $BED_X_DEB, else the newest .build/deb/paird_*_amd64.deb of the repository.
The package's changelog says which Swift built it (`make deb`); with $BED_X_DEB_BUILT_BY set (make
test: "Debian's swiftlang", the package a stock Debian 12 builds) it must say that."""
import glob
import gzip
import json
import os
import subprocess

from bedlib import *

MSG_STARTED = "0e1c4f5ba0c84a2c8e6f2bd09ed7c4a1"


def deb_path():
    if os.environ.get("BED_X_DEB"):
        return os.environ["BED_X_DEB"]
    debs = sorted(glob.glob(os.path.join(REPO, ".build/deb/paird_*_amd64.deb")), key=os.path.getmtime)
    if not debs:
        raise BedError("no .build/deb/paird_*_amd64.deb: run `make deb` first (make e2e does)")
    return debs[-1]


def unit(prop):
    return sh(f"systemctl show -p {prop} --value paird.service", check=False).strip()


def pairctl(*args, timeout=60):
    t = now()
    r = subprocess.run(["/usr/bin/pairctl", *args], capture_output=True, text=True, timeout=timeout)
    log(f"/usr/bin/pairctl {' '.join(args)} → exit {r.returncode} in {now() - t:.2f} s")
    return r


def device_state(address):
    r = pairctl("status", "--json")
    if r.returncode != 0:
        return None
    return next((d["state"] for d in json.loads(r.stdout)["devices"] if d["address"] == address), None)


def running():
    return unit("ActiveState") == "active" and unit("SubState") == "running"


@scenario
def main():
    deb = deb_path()
    log(f"package: {deb}")
    check(not os.path.exists("/usr/sbin/paird") and not os.path.exists("/lib/systemd/system/paird.service"),
          "no paird on the host before the package")
    # The bed's root is the host's, a Docker image: its /usr/sbin/policy-rc.d forbids maintainer
    # scripts to start services (exit 101), which no real host has; and man-db's trigger would
    # rebuild the index of every manual over 9p for minutes (`man` reads pages without it).
    for f in ("/usr/sbin/policy-rc.d", "/var/lib/man-db/auto-update"):
        if os.path.exists(f):
            os.remove(f)
            log(f"bed: removed {f} from the VM's overlay")
    w = Wearable.start(name="Pulse-1", battery=87)
    with step("dpkg -i: installed, user paird made, service enabled and running as paird"):
        out = sh(f"dpkg -i {deb}", timeout=120)
        for line in out.splitlines()[-6:]:
            log(f"  | {line}")
        check(sh("getent passwd paird", check=False).strip() != "", "user paird exists")
        check(sh("systemctl is-enabled paird.service", check=False).strip() == "enabled", "paird.service enabled")
        listed = sh("systemctl list-unit-files --no-legend 'paird*'", check=False).split()
        check("paird.service" in listed, f"list-unit-files 'paird*' shows it (the purge's check asks the same): {listed}")
        wait_for(running, 30, "paird.service active (running)")
        pid = unit("MainPID")
        uid = [l.split()[1] for l in open(f"/proc/{pid}/status") if l.startswith("Uid:")][0]
        check(sh("id -u paird").strip() == uid, f"runs as user paird (uid {uid})")
        check(unit("ExecStart").find("/usr/sbin/paird") >= 0, "ExecStart=/usr/sbin/paird")
        with gzip.open("/usr/share/doc/paird/changelog.gz", "rt") as f:
            built = next((l.strip() for l in f if "Built from" in l), "")
        log(f"the package's changelog: {built!r}")
        want = os.environ.get("BED_X_DEB_BUILT_BY")
        if want:
            check(want in built, f"built by {want}")
    with step("pairctl pair --service 180d (the package's pairctl) → connected"):
        r = pairctl("pair", "--service", "180d", "--timeout", "20", timeout=90)
        for line in r.stdout.splitlines():
            log(f"  | {line}")
        check(r.returncode == 0, f"pairctl pair exit 0 ({r.stderr.strip()})")
        wait_for(lambda: device_state(w.address) == "connected", 30, f"{w.address} connected")
    with step("man pages render: pairctl(1), paird(8), paird.conf(5)"):
        env = "MANPAGER=cat MANWIDTH=100"
        page = sh(f"{env} man pairctl", check=False)
        check("pairctl" in page and "SYNOPSIS" in page and "Exit status" in page, "man pairctl: name, synopsis, exit codes")
        check("--state-file" in sh(f"{env} man 8 paird", check=False), "man 8 paird: its options")
        conf = sh(f"{env} man 5 paird.conf", check=False)
        check("ScanTimeout" in conf and "FallbackInterval" in conf, "man 5 paird.conf: the keys")
    with step("bash completion: 'pairctl pa<TAB>' → pair"):
        reply = sh("bash -c 'source /usr/share/bash-completion/completions/pairctl; "
                   "COMP_WORDS=(pairctl pa); COMP_CWORD=1; COMP_LINE=\"pairctl pa\"; COMP_POINT=10; "
                   "_pairctl pairctl pa pairctl; echo \"${COMPREPLY[*]}\"'").strip()
        check(reply.split() == ["pair"], f"completion offers {reply!r}")
        check(os.path.exists("/usr/share/zsh/vendor-completions/_pairctl")
              and os.path.exists("/usr/share/fish/vendor_completions.d/pairctl.fish"), "zsh and fish completions")
    with step("journal catalog: paird's MESSAGE_IDs explained (journalctl -x)"):
        cat = sh(f"journalctl --list-catalog {MSG_STARTED}", check=False)
        check("paird started" in cat, f"catalog entry for {MSG_STARTED}: {cat.strip()[:80]!r}")
    with step("dpkg -i over itself: the service runs again, the wearable is kept and reconnects"):
        old = unit("MainPID")
        sh(f"dpkg -i {deb}", timeout=120)
        wait_for(lambda: running() and unit("MainPID") not in ("0", old), 30, "paird restarted by the upgrade")
        wait_for(lambda: device_state(w.address) == "connected", 60, f"{w.address} connected after the upgrade")
        check(os.path.exists("/etc/paird/paird.conf"), "the conffile stays")
    with step("dpkg --purge: nothing of paird is left"):
        files = [l for l in sh("dpkg -L paird").splitlines() if os.path.isfile(l)]
        sh("dpkg --purge paird", timeout=120)
        wait_for(lambda: unit("LoadState") in ("not-found", ""), 15, "paird.service unknown to systemd")
        left = [f for f in files if os.path.exists(f)]
        check(not left, f"no packaged file left: {left}")
        for p in ("/etc/paird", "/var/lib/paird", "/var/lib/private/paird", "/usr/sbin/paird",
                  "/usr/share/dbus-1/system.d/org.paird1.conf", "/usr/lib/sysusers.d/paird.conf"):
            check(not os.path.exists(p), f"{p} gone")
        check(sh("getent passwd paird", check=False).strip() == "", "user paird gone")
        check(sh("getent group paird", check=False).strip() == "", "group paird gone")
        # with a pattern systemd looks up the state of the matching files only (all of them without
        # one: 25 s of this step under TCG)
        check(not any(l.startswith("paird") for l in sh("systemctl list-unit-files --no-legend 'paird*'", check=False).splitlines()),
              "no paird unit file")
    w.stop()


main()
