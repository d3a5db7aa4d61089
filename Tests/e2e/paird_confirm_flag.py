#!/usr/bin/python3
# testbed: mode=plain timeout=300 wearables=watch-confirm twin=no-bumble-only
"""Numeric comparison accepted in advance (issue 17, part 1): `pairctl pair --confirm` with no
terminal pairs a Bumble watch (DisplayYesNo, LE Secure Connections + MITM) without a prompt."""
from bedlib import *


@scenario
def main():
    w = Wearable.start(profile="watch-confirm")
    p = Paird()
    with step("paird up"):
        p.start()

    with step("--confirm, no terminal: the comparison accepted, exit 0, connected"):
        rc, out, err = p.pairctl("pair", "--name", "Watch-1", "--timeout", "20", "--confirm", timeout=120)
        for line in out.splitlines():
            log(f"  | {line}")
        check(rc == 0, f"exit 0, got {rc}: {err.strip()}")
        check("Does Watch-1 show" not in out, "no prompt")
        check(w.status()["compare"], "the watch showed a number to compare")
        p.wait_state("connected", 20, address=w.address)


main()
