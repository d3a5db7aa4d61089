#!/usr/bin/python3
# testbed: mode=plain timeout=360 wearables=watch-passkey twin=no-bumble-only
"""Private addresses (issue 17, part 2): a Bumble watch advertising resolvable private addresses
is paired (--passkey) and kept by its identity address; it walks away, rotates its RPA while
away, and comes back under the new one: the kernel's auto-connect (BlueZ resolves the RPA with
the IRK it was given) brings it back with no pairctl command and paird reports the same identity
connected; after a paird restart the link is adopted by identity; `pairctl disconnect/connect`
take the identity address."""
from bedlib import *

PASSKEY = "424242"


@scenario
def main():
    w = Wearable.start(profile="watch-passkey", extra=["--passkey", PASSKEY, "--rpa-period", "0"])
    p = Paird()
    with step("paired with --passkey; stored by identity"):
        p.start()
        rc, out, err = p.pairctl("pair", "--name", "Watch-1", "--timeout", "20", "--passkey", PASSKEY, timeout=120)
        check(rc == 0, f"pair: exit {rc}: {err.strip()}")
        p.wait_state("connected", 20, address=w.address)
        first = w.status()["address"]
        log(f"  identity {w.address}, advertised as {first}")
        check(first != w.address, "it advertised with a private address")

    with step("walks away, rotates its RPA while away, comes back: reconnected by identity, no command"):
        w.cmd("walk-away")
        p.wait_state("waitingForDevice", 30, address=w.address)
        new = w.cmd("rotate-rpa")["address"]
        log(f"  new RPA {new}")
        check(new not in (first, w.address), "a new private address")
        t = now()
        w.cmd("come-back")
        p.wait_state("connected", 60, address=w.address)
        log(f"  connected again {now() - t:.2f} s after coming back as {new}")
        watch = p.watch()
        wait_for(lambda: len(watch.lines("notify")) >= 2, 20, "notifications after the return")
        check([d["address"] for d in p.status()["devices"]] == [w.address], "one device, the identity")

    with step("paird restarted: the link adopted by identity, still one device"):
        p.restart()
        p.wait_state("connected", 30, address=w.address)
        check([d["address"] for d in p.status()["devices"]] == [w.address], "one device, the identity")

    with step("pairctl disconnect / connect by the identity address"):
        rc, _, err = p.pairctl("disconnect", w.address)
        check(rc == 0, f"disconnect: {err.strip()}")
        p.wait_state("disconnected", 20, address=w.address)
        rc, _, err = p.pairctl("connect", w.address)
        check(rc == 0, f"connect: {err.strip()}")
        p.wait_state("connected", 60, address=w.address)


main()
