#!/usr/bin/python3
# testbed: mode=plain timeout=360 wearables=watch-passkey twin=no-bumble-only
"""Pairing that asks, answered in advance (issue 17, part 1): a Bumble watch that shows a fixed
passkey (DisplayOnly, LE Secure Connections + MITM, a resolvable private address); a wrong
--passkey fails with exit 6 and leaves no bond on either side of paird; the right one pairs with
no prompt and no terminal, by the watch's identity address."""
import json

from bedlib import *

PASSKEY = "135790"




@scenario
def main():
    w = Wearable.start(profile="watch-passkey", extra=["--passkey", PASSKEY])
    p = Paird()
    with step("paird up"):
        p.start()

    with step("a wrong --passkey: exit 6 (authentication failed), no bond kept by paird or BlueZ"):
        rc, out, err = p.pairctl("pair", "--name", "Watch-1", "--timeout", "20", "--passkey", "000000", timeout=120)
        log(f"  | {err.strip()}")
        check(rc == 6, f"exit 6, got {rc}: {err.strip()}")
        check(not p.status()["devices"], "paird keeps nothing")
        wait_for(lambda: p.status()["pairing"] is None, 10, "no pairing session left")
        check(not paired_in_bluez(w.address), "BlueZ holds no bond")

    with step("the right --passkey, no terminal: no prompt, exit 0, connected by its identity"):
        rc, out, err = p.pairctl("pair", "--name", "Watch-1", "--timeout", "20", "--passkey", PASSKEY, timeout=120)
        for line in out.splitlines():
            log(f"  | {line}")
        check(rc == 0, f"exit 0, got {rc}: {err.strip()}")
        check("Enter the" not in out, "no prompt")
        p.wait_state("connected", 20, address=w.address)
        state = json.load(open(PAIRD_STATE))
        check([d["address"] for d in state["devices"]] == [w.address], f"state file: {state['devices']}")


main()
