#!/usr/bin/python3
# testbed: mode=plain timeout=360 wearables=strap
"""Issue scenario 9: bad input gets clear errors and the right exit codes, and nothing is lost:
malformed addresses and options (64), an unknown device (7), a user in the bluetooth group
(allowed), a user outside root/bluetooth
calling Pair (refused by the D-Bus policy: 4) who may still read the status (0), paird not
running (3, valid JSON), a corrupt state file (quarantined as state.json.corrupt-*, paird runs,
its log says so), a missing adapter (status: not present; pair → 9)."""
import glob
import json
import os
import subprocess

from bedlib import *

UNKNOWN = "00:11:22:33:44:55"


def expect(p, rc_wanted, *args, user=None, groups=None, text=None):
    rc, out, err = p.pairctl(*args, user=user, groups=groups, timeout=60)
    msg = (err.strip() or out.strip()).splitlines()
    first = msg[0] if msg else ""
    check(rc == rc_wanted, f"pairctl {' '.join(args)}{' as ' + user if user else ''} → {rc_wanted} "
          f"(got {rc}: {first!r})")
    if text:
        check(text in err + out, f"  message says {text!r}")
    return out, err


@scenario
def main():
    w = Wearable.start(name="Pulse-1", battery=87)
    p = Paird()
    with step("paird not running: status → 3 with valid JSON, pair → 3"):
        out, _ = expect(p, 3, "status", "--json")
        check(json.loads(out)["daemon"]["running"] is False, "daemon.running false")
        expect(p, 3, "pair", "--service", "180d", "--timeout", "2")
    with step("paird up, pairctl pair --service 180d"):
        p.start()
        pair_wearable(p)
        p.wait_state("connected", 10)

    with step("malformed addresses and options → 64"):
        expect(p, 64, "pair", "00:11:22:33:44", text="not a Bluetooth address")
        expect(p, 7, "connect", "not-an-address", text="no paired wearable is named")   # a name nothing has
        expect(p, 64, "disconnect", "00:11:22:33:44:GG")
        expect(p, 64, "unpair", "00-11-22-33-44-55x")
        expect(p, 64, "pair", "--service", "xyz", text="not a UUID")
        expect(p, 64, "pair", "--timeout", "0")
        expect(p, 64, "pair", "--timeout", "abc")
        expect(p, 64, "pair", "--bogus")
        expect(p, 64, "frobnicate")
        expect(p, 64, "status", "--bogus")
    with step("unknown device → 7"):
        expect(p, 7, "connect", UNKNOWN, text="not paired")
        expect(p, 7, "disconnect", UNKNOWN)
        expect(p, 7, "unpair", UNKNOWN)

    with step("user nobody (no bluetooth group): Pair/Connect/Unpair → 4 access denied; status → 0"):
        expect(p, 4, "pair", "--service", "180d", user="nobody", text="access denied")
        expect(p, 4, "disconnect", w.address, user="nobody", text="access denied")
        expect(p, 4, "unpair", w.address, user="nobody", text="access denied")
        out, _ = expect(p, 0, "status", "--json", user="nobody")
        check(json.loads(out)["devices"][0]["state"] == "connected", "nobody reads state connected")
        expect(p, 0, "list", user="nobody")
        check(p.state() == "connected", "nothing changed: still connected")

    with step("user nobody in the bluetooth group (the policy's one group): disconnect, connect → 0"):
        expect(p, 0, "disconnect", w.address, user="nobody", groups="bluetooth")
        p.wait_state("disconnected", 20)
        expect(p, 0, "connect", w.address, user="nobody", groups="bluetooth")
        p.wait_state("connected", 60)

    with step("corrupt state file → quarantined as state.json.corrupt-*, paird runs and says so"):
        p.stop()
        good = open(PAIRD_STATE).read()
        garbage = '{"version": 1, "devices": [ {"address": "00:AA:01:01:00:01", truncated'
        with open(PAIRD_STATE, "w") as f:
            f.write(garbage)
        p.start()
        aside = glob.glob(PAIRD_STATE + ".corrupt-*")
        check(len(aside) == 1, f"moved aside: {aside}")
        check(open(aside[0]).read() == garbage, "the corrupt file is kept byte for byte (nothing lost)")
        check(p.status()["daemon"]["running"], "paird running")
        lines = [l for l in p.logtext().splitlines() if "unusable" in l or "quarantin" in l or "corrupt" in l]
        check(lines, f"paird's log says so: {lines[-1] if lines else None}")
        log(f"log line: {lines[-1]}")
        check(p.status()["devices"] == [], "started empty")
    with step("restore the good state file: the wearable is back"):
        p.stop()
        with open(PAIRD_STATE, "w") as f:
            f.write(good)
        os.chmod(PAIRD_STATE, 0o600)
        p.start()
        p.wait_state("connected", 30)

    with step("missing adapter: paird --adapter hci7 → READY, adapter not present; pair → 9"):
        p.stop()
        p.adapter = "hci7"
        p.start()
        st = p.status()
        check(st["adapter"]["present"] is False, f"adapter: {st['adapter']}")
        expect(p, 9, "pair", "--service", "180d", "--timeout", "3")
        out, _ = expect(p, 0, "status")
        log(f"status text: {out.strip()!r}")
    with step("bad --adapter / --config: paird exits 64 / 78"):
        r = subprocess.run([PAIRD_BIN, "--adapter", "bogus!", "--state-file", "/tmp/x.json"], capture_output=True, text=True)
        check(r.returncode == 64, f"--adapter bogus! → 64 (got {r.returncode}: {r.stderr.strip()[:100]})")
        with open("/tmp/bad.conf", "w") as f:
            f.write("[Connection]\nFallbackInterval = soon\n")
        r = subprocess.run([PAIRD_BIN, "--config", "/tmp/bad.conf", "--check-config"], capture_output=True, text=True)
        check(r.returncode == 78, f"bad config → 78 (got {r.returncode}: {r.stderr.strip()[:120]})")


main()
