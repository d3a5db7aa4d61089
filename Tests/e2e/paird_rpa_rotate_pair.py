#!/usr/bin/python3
# testbed: mode=plain timeout=300 wearables=watch-passkey twin=no-bumble-only
"""A watch whose private address rotates between the scan that found it and the connection
(issue 17, part 2; seen once in paird_several by chance). The bed makes the race certain: the
watch advertises under an RPA that takes no connection (`rotate-after-found`: non-connectable,
as if it had rotated the moment after it was found) and 5 s later rotates and advertises
connectably. paird's `Pair()` on the found address fails: on BlueZ 5.66 with `device-gone`
(bluetoothd drops a device seen only in non-connectable advertisements when discovery stops, so
the object is gone before `Pair()` reaches it); a rotation of a connectable address instead ends
in connect-timeout (seen in paird_several; that path is unit-tested, `privateAddressRotatedBeforePair`).
paird scans again, finds the watch under its new address and pairs it in the same
`pairctl pair`, stored by its identity."""
import os
import subprocess

from bedlib import *

PASSKEY = "314159"


@scenario
def main():
    w = Wearable.start(profile="watch-passkey", away=True, extra=["--passkey", PASSKEY, "--rpa-period", "0"])
    p = Paird()
    with step("paird up; the watch away"):
        p.start()
    with step("pairctl pair finds the watch at an address that takes no connection: scans again, pairs at the new one"):
        outpath = os.path.join(OUT, "pairctl-pair.log")
        with open(outpath, "w") as f:
            t = now()
            proc = subprocess.Popen([PAIRCTL_BIN, "pair", "--name", "Watch-1", "--timeout", "20", "--passkey", PASSKEY],
                                    stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        at_exit(lambda: proc.poll() is None and proc.kill())
        wait_for(lambda: "scanning" in open(outpath).read(), 20, "pairctl pair scanning")
        found = w.cmd("rotate-after-found 5")["address"]
        log(f"  the watch advertises as {found}, taking no connection there; rotates in 5 s")
        rc = wait_for(lambda: proc.poll(), 150, "pairctl pair ended", interval=0.2)
        text = open(outpath).read()
        log(f"  pairctl pair → exit {rc} after {now() - t:.2f} s:\n" + "\n".join(f"  | {l}" for l in text.splitlines()))
        check(rc == 0, f"pairctl pair exit 0, got {rc}")
        check(f"found Watch-1 ({found}" in text, "it first found the watch at the address that took no connection")
        check("scanning again" in text, "it said it was scanning again")
        rotations = [e for e in w.events() if e["event"] == "rpa" and e.get("why") == "after-found"]
        check(len(rotations) == 1, f"the watch rotated once after being found: {rotations}")
        check(f"found Watch-1 ({rotations[0]['new']}" in text, f"then found it at its new address {rotations[0]['new']}")
    with step("stored by identity, connected, notifying"):
        p.wait_state("connected", 30, address=w.address)
        check([d["address"] for d in p.status()["devices"]] == [w.address], "one device, the identity")
        watch = p.watch()
        wait_for(lambda: len(watch.lines("notify")) >= 2, 20, "notifications")


main()
