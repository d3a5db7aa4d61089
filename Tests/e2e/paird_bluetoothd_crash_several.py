#!/usr/bin/python3
# testbed: mode=systemd timeout=900 wearables=strap,ring twin=no-bumble-only controllers=3
"""Issue 22 with two wearables (the bed's patched btvirt, as paird_several): bluetoothd killed
with SIGSEGV while one wearable is connected and the other away, while the connected one's link
is being set up, and with both connected: each time bluetoothd is back without a command and
every wearable back in its earlier state (connected → connected and notifying; away → still
waited for, and connected when it returns). Then the crash loop with a bystander: bluetoothd is
killed whenever the strap's link is being set up → after two such crashes in a row the strap
alone is disarmed (needsRepair, bluetoothd-crashed); the ring, whose links came and went with
every crash, is connected and notifying at the end and never disarmed.
BED_X_CRASHES (default 4) sets the crashes of the first part."""
import os
import statistics

from bedlib import *

CRASHES = int(os.environ.get("BED_X_CRASHES", "4"))
HR = "00002a37-0000-1000-8000-00805f9b34fb"


def states_of(watch, address, since=0):
    """`address`'s states in pairctl watch's lines after the first `since` lines."""
    return [l.split()[3] for l in watch.lines()[since:] if len(l.split()) > 3 and l.split()[1] == address and l.split()[2] == "state"]


def notifies(watch, address, since=0):
    return [l for l in watch.lines()[since:] if len(l.split()) > 3 and l.split()[1] == address and l.split()[2] == "notify" and l.split()[3] == HR]


def segv():
    pid = bluetoothd_pid()
    check(pid > 0, f"bluetoothd running (pid {pid})")
    os.kill(pid, 11)
    return pid, now()


def wait_back(pid):
    wait_for(lambda: bluetoothd_active() and bluetoothd_pid() not in (0, pid), 60, "bluetoothd active again, new pid", interval=0.1)


@scenario
def main():
    if not os.environ.get("BED_BTVIRT") and not os.environ.get("BED_X_ANY_BTVIRT"):
        raise BedFatal("needs the bed's patched btvirt (run-vm builds it; see paird_several)")
    strap = Wearable.start(profile="strap", adapter="hci1", sock="/run/bed/strap.sock")
    ring = Wearable.start(profile="ring", adapter="hci2", sock="/run/bed/ring.sock",
                          extra=["--drop-every", "0", "--drain-every", "0"])
    p = Paird(mode="systemd")
    with step("paird up (systemd, as shipped); strap and ring paired"):
        p.start()
        for name, w in (("Pulse-1", strap), ("Ring-1", ring)):
            rc, out, err = p.pairctl("pair", "--name", name, "--timeout", "30", timeout=120)
            check(rc == 0, f"pairctl pair --name {name}: exit {rc} {err.strip()}")
            p.wait_state("connected", 30, address=w.address)
    watch = p.watch()
    wait_for(lambda: notifies(watch, strap.address) and notifies(watch, ring.address), 30, "both notifying")

    with step("the ring walks away and stays away"):
        ring.cmd("walk-away")
        p.wait_state("waitingForDevice", 20, address=ring.address)

    moments = ["strap connected, ring away", "strap's link being set up, ring away"]
    back_times = []
    for k in range(CRASHES):
        moment = moments[k % len(moments)]
        with step(f"crash {k + 1}/{CRASHES} ({moment}) → bluetoothd back, strap connected and notifying, ring still waited for"):
            p.wait_state("connected", 60, address=strap.address)
            n = watch.count()
            if "set up" in moment:
                strap.cmd("walk-away")
                p.wait_state("waitingForDevice", 20, address=strap.address)
                n = watch.count()
                strap.cmd("come-back")
                wait_for(lambda: set(states_of(watch, strap.address, n)) & {"discovering", "connected"}, 30,
                         "the strap's link being set up")
            pid, t = segv()
            log(f"killed; strap's states before: {' → '.join(states_of(watch, strap.address, n))}")
            wait_back(pid)
            p.wait_state("connected", 60, address=strap.address)
            m = watch.count()
            wait_for(lambda: notifies(watch, strap.address, m), 30, "a strap notification after the crash")
            back_times.append(now() - t)
            log(f"strap notifying {now() - t:.2f} s after the crash; states {' → '.join(states_of(watch, strap.address, n))}; "
                f"ring {' → '.join(states_of(watch, ring.address, n))}")
            check(p.state(ring.address) == "waitingForDevice", f"the ring still waited for: {p.state(ring.address)}")

    log(f"crash → the strap's first notification (ring away): n={len(back_times)} median {statistics.median(back_times):.2f} s, "
        f"max {max(back_times):.2f} s ({', '.join(f'{x:.2f}' for x in back_times)})")

    with step("the ring comes back → connected, notifying; then a crash with both connected → both back"):
        ring.cmd("come-back")
        p.wait_state("connected", 60, address=ring.address)
        m = watch.count()
        wait_for(lambda: notifies(watch, ring.address, m), 30, "a ring notification")
        pid, t = segv()
        wait_back(pid)
        for w in (strap, ring):
            p.wait_state("connected", 60, address=w.address)
        m = watch.count()
        wait_for(lambda: notifies(watch, strap.address, m) and notifies(watch, ring.address, m), 30,
                 "both notifying after the crash")
        log(f"both notifying {now() - t:.2f} s after the crash")

    kills, setup_kills = [], 0
    with step("crash loop: bluetoothd killed whenever the strap's link is being set up → the strap alone disarmed"):
        strap.cmd("walk-away")
        p.wait_state("waitingForDevice", 20, address=strap.address)
        n = watch.count()
        t0 = now()
        strap.cmd("come-back")
        while len(kills) < 6:
            got = wait_for(lambda: ("discovering" if "discovering" in states_of(watch, strap.address, n) else None)
                           or ("needsRepair" if p.state(strap.address) == "needsRepair" else None), 60,
                           "the strap's link being set up, or needsRepair")
            if got == "needsRepair":
                break
            pid, _ = segv()
            kills.append(now() - t0)
            wait_for(lambda: p.state(strap.address) == "needsRepair" or (bluetoothd_active() and bluetoothd_pid() not in (0, pid)),
                     60, "bluetoothd started again by paird (or the strap disarmed)", interval=0.1)
            seen = states_of(watch, strap.address, n)
            upto = next((i for i, s in enumerate(seen) if s not in ("discovering", "connected")), len(seen))
            during_setup = "connected" not in seen[:upto]
            setup_kills = setup_kills + 1 if during_setup else 0
            log(f"kill {len(kills)} at {kills[-1]:.2f} s, {'during' if during_setup else 'after'} the strap's set-up; "
                f"strap {' → '.join(seen)}; ring {' → '.join(states_of(watch, ring.address, n))}")
            check(setup_kills <= 2, f"{setup_kills} set-up crashes in a row (at most two)")
            n = watch.count()
        check(setup_kills == 2 and p.state(strap.address) == "needsRepair",
              f"the strap disarmed after two set-up crashes in a row ({setup_kills}, {p.state(strap.address)})")
        d = p.device(strap.address)
        log(f"strap: {d['state']} ({d.get('repairReason')})")
        check(d.get("repairReason") == "bluetoothd-crashed", "reason bluetoothd-crashed")

    with step("the ring: connected and notifying, never disarmed; bluetoothd stays up"):
        wait_for(bluetoothd_active, 60, "bluetoothd running")
        p.wait_state("connected", 60, address=ring.address)
        m = watch.count()
        wait_for(lambda: notifies(watch, ring.address, m), 30, "a ring notification after the loop")
        check("needsRepair" not in states_of(watch, ring.address), f"the ring never needsRepair: {states_of(watch, ring.address)}")
        rc, out, _ = p.pairctl("status")
        log("pairctl status:\n" + "\n".join(f"  | {l}" for l in out.splitlines()))
        n = watch.count()
        bed_sleep(10, "nothing may link the strap now")
        check("discovering" not in states_of(watch, strap.address, n), "no further link for the strap")
        check(bluetoothd_active() and p.state(ring.address) == "connected", "bluetoothd up, the ring connected")


main()
