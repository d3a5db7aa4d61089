#!/usr/bin/python3
# testbed: mode=systemd timeout=600 wearables=strap twin=no-bumble-only controllers=3
"""Issue 34, item 1: `pairctl doctor` reaches each verdict from its real cause, in one VM (systemd
as PID 1, Debian's bluetooth.service, paird.service as shipped, the Bumble strap on hci1, a second
central on hci2 managed by the same bluetoothd). Each step runs `pairctl doctor` (text: the FAIL
line, the verdict and its fix) and `pairctl doctor --json` (the verdict's token, the numeric exit)
and checks both exit codes:
  all well (0); a caller outside the bluetooth group (4; the same in the group: 0); the strap
  walked away (not heard: 5); hci0 soft-blocked by rfkill (its own switch, /sys/class/rfkill/*/soft:
  `rfkill block bluetooth` would also hit hci1, which Bumble holds through the HCI user channel;
  9; paird's journal says rfkill blocks it and that paird does not lift it); hci0 powered off
  (Adapter1.Powered, 9); the strap connected to another central (hci2 of the same host, while
  hci0 was blocked: 5, connected-elsewhere); the strap forgot its bond and advertises (bond-lost:
  10), repaired with the `pairctl pair ADDR` doctor names; paird stopped (3); bluetoothd stopped
  by systemctl (9); bluetoothd crashed (SIGSEGV, with paird stopped so that nobody starts it
  again: 9). (All well after the repair is the same verdict as at the start: the
  scenario ends with the crash, to stay within a scenario's VM-time budget; teardown needs no bluetoothd.)
Not reachable here: an rfkill hard block (btvirt's controllers have no hardware switch: unit tests
only), and a phone's link (a central elsewhere is not visible from the host: doctor says "not
heard" for it, as for a wearable away, and says that these look the same)."""
import glob
import json
import os

from bedlib import *

LISTEN = "2"   # seconds: the strap readvertises every second on the bed


def doctor(p, verdict, rc_want, *args, user=None, groups=None, says=None, json_too=True):
    """`pairctl doctor` in text and in JSON: both exit `rc_want`, the JSON's verdict is `verdict`,
    the text has its verdict (and `says` in it) and a fix unless all is well. Returns the JSON
    (json_too=False: the text only, for a verdict already seen in JSON)."""
    rc, out, err = p.pairctl("doctor", "--listen", LISTEN, *args, user=user, groups=groups, timeout=60)
    for line in out.splitlines():
        log(f"  | {line}")
    if err.strip():
        log(f"  stderr: {err.strip()}")
    check(rc == rc_want, f"pairctl doctor: exit {rc_want}, got {rc}")
    text = out
    check("verdict: " in text, "a verdict line")
    if verdict != "all-well":
        check("\nfix:" in text and "FAIL " in text, "a FAIL line and the fix")
    if says:
        check(says in text, f"the text says {says!r}")
    if not json_too:
        return None
    rc, out, err = p.pairctl("doctor", "--json", "--listen", LISTEN, *args, user=user, groups=groups, timeout=60)
    check(len(out.strip().splitlines()) == 1, f"one compact JSON object: {out!r}")
    d = json.loads(out)
    log(f"  json: verdict {d['verdict']}, exit {d['exit']}, checks {[(c['check'], c['ok']) for c in d['checks']]}")
    check(rc == rc_want and d["exit"] == rc_want, f"doctor --json: exit {rc_want} (printed {d['exit']}, status {rc})")
    check(d["verdict"] == verdict, f"verdict {verdict}, got {d['verdict']}: {d['text']}")
    check(d["schemaVersion"] == 1, "schemaVersion 1")
    return d


def rfkill_of(hci):
    for e in glob.glob("/sys/class/rfkill/rfkill*"):
        if open(f"{e}/name").read().strip() == hci and open(f"{e}/type").read().strip() == "bluetooth":
            return e
    raise BedError(f"no rfkill switch for {hci}")


def soft_block(hci, on):
    with open(f"{rfkill_of(hci)}/soft", "w") as f:
        f.write("1" if on else "0")


@scenario
def main():
    w = Wearable.start(profile="strap")
    p = Paird(mode="systemd")
    c = Central("hci0")
    with step("paird up, the strap paired and connected: all well (0)"):
        p.start()
        pair_wearable(p)
        p.wait_state("connected", 30)
        d = doctor(p, "all-well", 0)
        check([x["check"] for x in d["checks"]] == ["bluetoothd", "rfkill", "adapter", "paird", "rights", "wearable"],
              "every check made, in order")
        check(d["listenSeconds"] is None, "no listen for a connected wearable")

    with step("a caller outside the bluetooth group (4); in it (0)"):
        doctor(p, "access-denied", 4, user="nobody", says="usermod -aG bluetooth nobody")
        doctor(p, "all-well", 0, user="nobody", groups="bluetooth", json_too=False)

    with step("the strap walks away: not heard (5)"):
        w.cmd("walk-away")
        p.wait_state("waitingForDevice", 20)
        d = doctor(p, "not-heard", 5, says="these look the same")
        check(d["listenSeconds"] == int(LISTEN), "it listened")
        w.cmd("come-back")
        p.wait_state("connected", 30)

    with step("hci0 soft-blocked by rfkill (9; paird's journal says rfkill blocks it), unblocked: connected again"):
        soft_block("hci0", True)
        wait_for(lambda: not c.prop(c.apath, "Powered", ADAPTER), 10, "hci0 powered off by the block")
        said = wait_for(lambda: [l for l in p.logtext().splitlines() if "rfkill blocks it" in l], 10,
                        "paird's journal: rfkill blocks it (read in sysfs: 5.66 has no PowerState without -E), and that paird does not lift it")
        log(f"  paird | {said[0]}")
        check("does not lift" in said[0], "paird says it does not lift the block")
        doctor(p, "rfkill-soft-block", 9, says="rfkill unblock bluetooth")
        soft_block("hci0", False)
        try:
            wait_for(lambda: c.prop(c.apath, "Powered", ADAPTER), 10, "bluetoothd powering hci0 again after the unblock")
        except BedError:
            log("bluetoothd did not power hci0 after the unblock: powering it")
            c.set(c.apath, "Powered", dbus.Boolean(True), ADAPTER)
        p.wait_state("connected", 45)

    with step("hci0 powered off (9; paird's journal says powered-off, not rfkill), on again: connected"):
        rfkill_lines = len([l for l in p.logtext().splitlines() if "rfkill blocks it" in l])
        c.set(c.apath, "Powered", dbus.Boolean(False), ADAPTER)
        wait_for(lambda: not c.prop(c.apath, "Powered", ADAPTER), 10, "hci0 off")
        wait_for(lambda: [l for l in p.logtext().splitlines() if "adapter unavailable: powered-off" in l], 10,
                 "paird's journal: adapter unavailable: powered-off")
        check(len([l for l in p.logtext().splitlines() if "rfkill blocks it" in l]) == rfkill_lines, "no rfkill line for a power-off")
        doctor(p, "adapter-off", 9, says="bluetoothctl power on")
        c.set(c.apath, "Powered", dbus.Boolean(True), ADAPTER)
        p.wait_state("connected", 45)

    with step("the strap connected to another central (hci2) while hci0 was blocked: connected-elsewhere (5)"):
        w.cmd("walk-away")
        p.wait_state("waitingForDevice", 20)
        soft_block("hci0", True)
        wait_for(lambda: not c.prop(c.apath, "Powered", ADAPTER), 10, "hci0 powered off by the block")
        w.cmd("come-back")
        other = Central("hci2")
        dev2 = other.discover(name=w.name, deadline=20)
        other.connect(dev2, timeout=30)
        wait_for(lambda: w.status()["connected"], 10, "the strap linked to hci2")
        soft_block("hci0", False)
        wait_for(lambda: c.prop(c.apath, "Powered", ADAPTER) or c.set(c.apath, "Powered", dbus.Boolean(True), ADAPTER),
                 15, "hci0 powered again")
        d = doctor(p, "connected-elsewhere", 5, says="hci2")
        other.iface(dev2, DEVICE).Disconnect()
        p.wait_state("connected", 45)

    with step("the strap forgets its bond and advertises: bond-lost (10); pairctl pair ADDR mends it"):
        w.cmd("forget-bond")
        p.wait_state("needsRepair", 60)
        wait_for(lambda: w.status()["advertising"] and not w.status()["connected"], 15, "the strap advertising, unlinked")
        doctor(p, "bond-lost", 10, says=f"pairctl pair {w.address}")
        rc, out, err = p.pairctl("pair", w.address, "--timeout", "20", timeout=90)
        check(rc == 0, f"pairctl pair {w.address}: exit 0, got {rc}: {err.strip()}")
        p.wait_state("connected", 30)
        doctor(p, "all-well", 0, json_too=False)

    with step("paird stopped (3)"):
        p.stop()
        doctor(p, "paird-stopped", 3, says="systemctl start paird")

    with step("bluetoothd stopped by systemctl (9)"):
        bluetoothd("stop")
        wait_for(lambda: not c.bluez_up(), 10, "org.bluez gone")
        doctor(p, "bluetoothd-stopped", 9, says="systemctl start bluetooth")
        bluetoothd("start")
        c.wait_bluez_back(30)

    with step("bluetoothd crashed (SIGSEGV; paird stopped, so nobody starts it again) (9)"):
        bluetoothd_segv()
        wait_for(lambda: sh("systemctl show -p ActiveState --value bluetooth.service", check=False).strip() in ("failed", "inactive")
                 and not c.bluez_up(), 20, "bluetooth.service down after the crash")
        log(f"bluetooth.service: {sh('systemctl show -p ActiveState -p Result -p ExecMainCode -p ExecMainStatus bluetooth.service').split()}")
        doctor(p, "bluetoothd-crashed", 9, says="SIGSEGV")



main()
