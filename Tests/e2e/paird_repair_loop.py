#!/usr/bin/python3
# testbed: mode=plain timeout=900 wearables=strap,watch-passkey twin=no-bumble-only controllers=3
"""Pairing again (issue 17, part 5): `pairctl unpair` then `pairctl pair` of the same strap (random
static address) right after, 10 times in a row. `unpair` returns only once BlueZ has removed the
device: right when it exits, the object is gone and `bluetoothctl devices` does not list it. Each
round's timings are printed.

Then the watch (a rotating private address): pair, then unpair → pair again right after, 3 rounds
(BED_X_WATCH_ROUNDS). Each round checks that unpair removed the device and that the pairing right
after ends in exit 0 with the watch connected: a failed one fails the round. (BlueZ 5.66 was once
seen failing that second pairing, Tests/testbed/README.md, Known problems, likely bluez/bluez#1079,
not reproduced here since; if it comes back the round fails, saying so, after checking that the
failed attempt left nothing behind in paird.) Each round's time is printed (MEASURED)."""
import os

from bedlib import *

ROUNDS = int(os.environ.get("BED_X_REPAIR_ROUNDS", "10"))
WATCH_ROUNDS = int(os.environ.get("BED_X_WATCH_ROUNDS", "3"))
PASSKEY = "112233"


def bluetoothctl_lists(address):
    return address.upper() in sh("bluetoothctl devices", check=False).upper()


@scenario
def main():
    w = Wearable.start(profile="strap")
    p = Paird()
    c = Central("hci0")
    with step("paird up, pair the strap"):
        p.start()
        pair_wearable(p)
        p.wait_state("connected", 30)

    times = []
    for i in range(1, ROUNDS + 1):
        with step(f"round {i}/{ROUNDS}: unpair → gone from BlueZ at once → pair again → connected"):
            t0 = now()
            rc, out, err = p.pairctl("unpair", w.address)
            t_unpair = now() - t0
            check(rc == 0, f"unpair exit 0 ({out.strip()} {err.strip()})")
            check(c.device_by_address(w.address) is None, "no Device1 with the address when unpair returned")
            check(not bluetoothctl_lists(w.address), "`bluetoothctl devices` does not list it")
            check(p.device(w.address) is None, "gone from status")
            t1 = now()
            pair_wearable(p)
            t_pair = now() - t1
            d = p.wait_state("connected", 30)
            t_conn = now() - t1
            check(paired_in_bluez(w.address), "BlueZ holds the new bond")
            check(len([x for x in p.status()["devices"]]) == 1, "one device in status")
            times.append((t_unpair, t_pair, t_conn))
            log(f"round {i}: unpair {t_unpair:.2f} s, pair {t_pair:.2f} s, connected {t_conn:.2f} s after pair started")
    log("rounds (unpair / pair / connected, s): " + "; ".join(f"{a:.2f}/{b:.2f}/{c_:.2f}" for a, b, c_ in times))

    with step("the strap away: unpair it (the watch gets the bed to itself)"):
        rc, _, err = p.pairctl("unpair", w.address)
        check(rc == 0, f"unpair exit 0 ({err.strip()})")
        w.cmd("walk-away")

    watch = Wearable.start(profile="watch-passkey", adapter="hci2", sock="/run/bed/watch.sock",
                           extra=["--passkey", PASSKEY])
    with step("the watch (RPA): pair"):
        rc, out, err = p.pairctl("pair", "--name", "Watch-1", "--passkey", PASSKEY, "--timeout", "30", timeout=120)
        check(rc == 0, f"exit 0 ({err.strip()})")
        p.wait_state("connected", 30, address=watch.address)
    outcomes = []
    for i in range(1, WATCH_ROUNDS + 1):
        with step(f"the watch, round {i}/{WATCH_ROUNDS}: unpair, then pair again right after → exit 0, connected"):
            rc, _, err = p.pairctl("unpair", watch.address)
            check(rc == 0, f"unpair exit 0 ({err.strip()})")
            check(c.device_by_address(watch.address) is None, "no Device1 with the identity when unpair returned")
            t = now()
            rc, out, err = p.pairctl("pair", "--name", "Watch-1", "--passkey", PASSKEY, "--timeout", "30", timeout=120)
            outcomes.append(rc)
            if rc != 0:
                log(f"pairing the watch again right after unpair → exit {rc} in {now() - t:.2f} s: {err.strip()} "
                    f"(README, Known problems: BlueZ 5.66, likely bluez/bluez#1079)")
                wait_for(lambda: p.status()["pairing"] is None, 15, "no pairing session left")
                check(p.device(watch.address) is None, "paird keeps nothing of the failed attempt")
            check(rc == 0, f"the watch paired again right after unpair: exit {rc} ({err.strip()})")
            p.wait_state("connected", 30, address=watch.address)
            log(f"MEASURED: the watch paired again right after unpair in {now() - t:.2f} s (exit 0), connected")
    log(f"MEASURED: the watch paired again right after unpair in {outcomes.count(0)} of {len(outcomes)} rounds "
        f"(exit codes {outcomes})")

main()
