#!/usr/bin/python3
# testbed: mode=plain timeout=480 wearables=watch-passkey twin=no-bumble-only
"""Pairing that asks the user (issue 17, part 1), with a Bumble watch that shows a passkey
(DisplayOnly, LE Secure Connections + MITM, a resolvable private address): no terminal and no
--passkey (exit 12 at once, not the pairing timeout); Ctrl-C at the prompt (the pairing canceled in
BlueZ, nothing left); then the passkey typed at `pairctl pair`'s prompt on a pseudo-terminal, and
the watch paired by its identity address, not the RPA it advertised with. The failures come first:
pairing the same RPA watch again after `unpair` fails on this bed (README, known problems), so
each scenario has one successful pairing (paird_passkey_flag: --passkey, a wrong one)."""
import json

from bedlib import *

PASSKEY = "246810"




@scenario
def main():
    w = Wearable.start(profile="watch-passkey", extra=["--passkey", PASSKEY])
    p = Paird()
    with step("paird up"):
        p.start()

    with step("no terminal, no --passkey: exit 12 with a clear message, not a wait for the pairing timeout"):
        rc, out, err = p.pairctl("pair", "--name", "Watch-1", "--timeout", "20")
        log(f"  | {err.strip()}")
        check(rc == 12, f"exit 12 (needs input), got {rc}: {err.strip()}")
        check("--passkey" in err, "the message names --passkey")
        check(not p.status()["devices"], "nothing paired")
        wait_for(lambda: p.status()["pairing"] is None, 10, "no pairing session left")
        check(not paired_in_bluez(w.address), "BlueZ holds no bond")

    with step("Ctrl-C at the prompt: the pairing is canceled, nothing is left"):
        t = Terminal(PAIRCTL_BIN, "pair", "--name", "Watch-1", "--timeout", "20")
        t.expect(r"Enter the 6-digit passkey shown on Watch-1: ", 40)
        t.interrupt()
        rc = t.wait_exit(15)
        check(rc != 0 and "canceled" in t.text(), f"pairctl ends canceled (exit {rc})")
        wait_for(lambda: p.status()["pairing"] is None, 10, "no pairing session left")
        check(not p.status()["devices"] and not paired_in_bluez(w.address), "nothing paired")

    with step("on a terminal: the prompt, the passkey the watch shows typed in, connected"):
        t = Terminal(PAIRCTL_BIN, "pair", "--name", "Watch-1", "--timeout", "20")
        t.expect(r"Enter the 6-digit passkey shown on Watch-1: ", 40)
        shown = wait_for(lambda: w.status()["passkey"], 10, "the watch shows a passkey")
        check(shown == PASSKEY, f"the watch shows {shown}")
        t.type(shown)
        t.expect(r"connected, services resolved: Watch-1", 60)
        check(t.wait_exit(10) == 0, "exit 0")

    with step("stored by its identity address, not the RPA it advertised with; notifications flow"):
        d = p.wait_state("connected", 20, address=w.address)
        st = w.status()
        log(f"  identity {w.address}, advertising as {st['address']}")
        check(st["address"] != w.address, "the watch advertised with a private address")
        state = json.load(open(PAIRD_STATE))
        dev = next(x for x in state["devices"] if x["address"] == w.address)
        check(dev["addressType"] == "random", f"addressType random: {dev}")
        check(d["name"] == "Watch-1", f"status name: {d['name']}")
        watch = p.watch()
        wait_for(lambda: len(watch.lines("notify")) >= 2, 20, "2 notify lines from pairctl watch")


main()
