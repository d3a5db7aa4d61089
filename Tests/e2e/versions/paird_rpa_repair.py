#!/usr/bin/python3
# testbed: mode=plain timeout=420 wearables=watch-passkey twin=no-bumble-only
"""BlueZ versions (issue 19): a watch with a resolvable private address paired (--passkey),
`pairctl unpair`, then paired again at once. On BlueZ 5.66 the second Pair() fails with
ConnectionAttemptFailed (Tests/testbed/README.md, Known problems: the kernel keeps resolving the
watch to its identity while BlueZ's new device object has the RPA; bluez/bluez#1079). This
scenario says whether a given version does it: run it with BLUEZ=<version> (e2e.sh names it
by path: versions/paird_rpa_repair). Not in the default `make e2e` set: it fails on 5.66."""
from bedlib import *

PASSKEY = "135791"


def pair_once(p, w, what):
    rc, out, err = p.pairctl("pair", "--name", "Watch-1", "--timeout", "20", "--passkey", PASSKEY, timeout=120)
    log(f"  {what}: pairctl pair exit {rc}: {err.strip()[-300:]}")
    check(rc == 0, f"{what}: pair exit 0, got {rc}: {err.strip()}")
    p.wait_state("connected", 30, address=w.address)


@scenario
def main():
    w = Wearable.start(profile="watch-passkey", extra=["--passkey", PASSKEY])
    p = Paird()
    with step("paired with --passkey (first time)"):
        p.start()
        pair_once(p, w, "first pairing")
        check(w.status()["address"] != w.address, "the watch advertises with a private address")

    with step("pairctl unpair → gone from BlueZ and paird"):
        seq = w.last_seq()
        rc, out, err = p.pairctl("unpair", w.address)
        check(rc == 0, f"unpair exit 0 ({err.strip()})")
        wait_for(lambda: not paired_in_bluez(w.address), 15, "no bond in BlueZ")
        check(p.status()["devices"] == [], "status lists no devices")
        w.wait_event("disconnected", 15, since=seq)
        wait_for(lambda: w.status()["advertising"] or w.cmd("come-back"), 10, "the watch advertising")

    with step("paired again right away (the same watch, its bond half still held: Bumble accepts)"):
        pair_once(p, w, "second pairing")
        watch = p.watch()
        wait_for(lambda: len(watch.lines("notify")) >= 2, 20, "notifications after the second pairing")


main()
