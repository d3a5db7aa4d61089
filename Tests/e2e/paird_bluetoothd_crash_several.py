#!/usr/bin/python3
# testbed: mode=systemd timeout=900 wearables=strap,ring twin=no-bumble-only controllers=3
"""Issue 22 with two wearables (the bed's patched btvirt, as paird_several): bluetoothd killed
with SIGSEGV while one wearable is connected and the other away, while the connected one's link
is being set up, and with both connected: each time bluetoothd is back without a command and
every wearable back in its earlier state (connected → connected and notifying; away → still
waited for, and connected when it returns). Then the crash loop with a bystander: both away and
back at once, bluetoothd killed whenever the strap's link is being set up. The ring reconnects
beside the strap and may be setting up at both crashes too: then both are disarmed and let back
one at a time, the strap's next set-up crashes bluetoothd again and it stays disarmed (needsRepair,
bluetoothd-crashed) while the ring ends connected and notifying.
BED_X_CRASHES (default 4) sets the crashes of the first part."""
import os
import statistics

from bedlib import *

CRASHES = int(os.environ.get("BED_X_CRASHES", "4"))
HR = "00002a37-0000-1000-8000-00805f9b34fb"


def states_of(watch, address, since=0):
    """`address`'s states in pairctl watch's lines after the first `since` lines."""
    return [l.split()[3] for l in watch.lines()[since:] if len(l.split()) > 3 and l.split()[1] == address and l.split()[2] == "state"]


SETUP = LINK_SETUP_STATES
SETUP_TRIES = 5   # kills per set-up crash until one lands in the set-up (the kill races the link)


def landed(watch, address, n):
    """Where a kill landed for `address`, from paird's own states since line `n` (pairctl watch):
    up to paird's reaction to the crash (its first state that is neither set-up nor connected), a
    `connected` means the link had been set up before bluetoothd died ("connected"); none means
    it died during the set-up ("set-up"). Waits for that reaction."""
    return crash_landing(lambda: states_of(watch, address, n))


def notifies(watch, address, since=0):
    return [l for l in watch.lines()[since:] if len(l.split()) > 3 and l.split()[1] == address and l.split()[2] == "notify" and l.split()[3] == HR]


@scenario
def main():
    if not os.environ.get("BED_BTVIRT") and not os.environ.get("BED_X_ANY_BTVIRT"):
        raise BedFatal("needs the bed's patched btvirt (run-vm builds it; see paird_several)")
    strap = Wearable.start(profile="strap", adapter="hci1", sock="/run/bed/strap.sock")
    ring = Wearable.start(profile="ring", adapter="hci2", sock="/run/bed/ring.sock",
                          extra=["--drop-every", "0", "--drain-every", "0"])
    # A link that does not resolve keeps its whole ResolveTimeout (10 s, not a learned deadline
    # of 3 s or more): the crash loop's stalled strap link stays in set-up, on a slow host too,
    # until the kill lands. Links that resolve are not slowed; one the new bluetoothd never
    # resolves (the kernel's kept link after a crash) is dropped after 10 s instead of 6.
    os.makedirs("/etc/paird", exist_ok=True)
    with open("/etc/paird/bed.conf", "w") as f:
        f.write("[Connection]\nResolveTimeout = 10\nResolveFloor = 10\n")
    p = Paird(mode="systemd", config="/etc/paird/bed.conf")
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
    where = {}   # where the kills of this part landed, for the strap: "connected" / "set-up" → count

    def crash_once(moment):
        """One crash at `moment` and the recovery; returns where the kill landed for the strap."""
        p.wait_state("connected", 60, address=strap.address)
        n = watch.count()
        at = "connected"   # connected and notifying when killed
        if "set up" in moment:
            strap.cmd("walk-away")
            p.wait_state("waitingForDevice", 20, address=strap.address)
            n = watch.count()
            strap.cmd("come-back")
            # the kill as soon as paird's own events (pairctl watch, read every 50 ms) show the set-up
            wait_for(lambda: set(states_of(watch, strap.address, n)) & set(SETUP + ("connected",)), 30,
                     "the strap's link being set up")
        pid, t = bluetoothd_segv()
        if "set up" in moment:
            at = landed(watch, strap.address, n)
        where[at] = where.get(at, 0) + 1
        log(f"killed; strap's states before: {' → '.join(states_of(watch, strap.address, n))}; landed {at}")
        wait_bluetoothd_replaced(pid)
        p.wait_state("connected", 60, address=strap.address)
        m = watch.count()
        wait_for(lambda: notifies(watch, strap.address, m), 30, "a strap notification after the crash")
        back_times.append(now() - t)
        log(f"strap notifying {now() - t:.2f} s after the crash; states {' → '.join(states_of(watch, strap.address, n))}; "
            f"ring {' → '.join(states_of(watch, ring.address, n))}")
        check(p.state(ring.address) == "waitingForDevice", f"the ring still waited for: {p.state(ring.address)}")
        return at

    for k in range(CRASHES):
        moment = moments[k % len(moments)]
        with step(f"crash {k + 1}/{CRASHES} ({moment}) → bluetoothd back, strap connected and notifying, ring still waited for"):
            at = crash_once(moment)
            tries = 1
            # The kill races the link: on a loaded host the set-up may end before it lands. A
            # crash "while the link is set up" must be one: again (a whole crash and recovery
            # each time) until a kill lands in the set-up, at most SETUP_TRIES kills.
            while "set up" in moment and at != "set-up" and tries < SETUP_TRIES:
                log(f"kill {tries} landed {at}, not in the strap's set-up: again")
                at = crash_once(moment)
                tries += 1
            if "set up" in moment:
                check(at == "set-up", f"a kill landed while the strap's link was being set up (kill {tries} of at most "
                      f"{SETUP_TRIES}; landed so far: {where})")

    log(f"where the {sum(where.values())} kills of the first part landed (the strap): "
        + ", ".join(f"{v} {k}" for k, v in sorted(where.items())))
    log(f"crash → the strap's first notification (ring away): n={len(back_times)} median {statistics.median(back_times):.2f} s, "
        f"max {max(back_times):.2f} s ({', '.join(f'{x:.2f}' for x in back_times)})")

    with step("the ring comes back → connected, notifying; then a crash with both connected → both back"):
        ring.cmd("come-back")
        p.wait_state("connected", 60, address=ring.address)
        m = watch.count()
        wait_for(lambda: notifies(watch, ring.address, m), 30, "a ring notification")
        pid, t = bluetoothd_segv()
        wait_bluetoothd_replaced(pid)
        for w in (strap, ring):
            p.wait_state("connected", 60, address=w.address)
        m = watch.count()
        wait_for(lambda: notifies(watch, strap.address, m) and notifies(watch, ring.address, m), 30,
                 "both notifying after the crash")
        log(f"both notifying {now() - t:.2f} s after the crash")

    kills = []
    with step("crash loop: bluetoothd killed whenever the strap's link is being set up → the strap disarmed, the ring back"):
        strap.cmd("walk-away")
        p.wait_state("waitingForDevice", 20, address=strap.address)
        ring.cmd("walk-away")    # both away, both back at once: the ring reconnects beside the culprit
        p.wait_state("waitingForDevice", 20, address=ring.address)
        n = watch.count()
        t0 = now()
        # The bed's stand-in for BlueZ's bug: a kill while the strap's link is being set up, as a
        # link that crashes bluetoothd does. The strap leaves the ATT requests of its next link
        # unanswered (`stall-att next`, re-armed after each kill), so its set-up cannot end before
        # the kill lands (as paird_bluetoothd_crashloop). Without it, the clean-clone CI of
        # b11f5e1 failed twice: the strap's link had gone by the time a kill landed, only the ring
        # was being set up, and paird rightly blamed the ring.
        # A kill waits for a NEW stalled link of the strap (the wearable's `att-stalling` event),
        # not only for paird's `discovering`: after a crash the kernel keeps the old link, the new
        # bluetoothd reports it connected, paird shows it `discovering` and drops it at once
        # (clean-clone run of 572dc43, first try: a kill landed just after that drop, with only the
        # ring being set up, and paird rightly blamed the ring).
        strap.cmd("stall-att next")
        seq = strap.last_seq()
        strap.cmd("come-back")
        ring.cmd("come-back")

        def fresh_setup():
            if states_of(watch, strap.address, n)[-1:] != ["discovering"]:
                return None
            return "setup" if any(e["event"] == "att-stalling" for e in strap.events(seq)) else None

        while len(kills) < 6:
            # paird's own events (pairctl watch): a pairctl call here took 0.5-1.7 s on a loaded
            # host, and the kill came that much after the set-up was seen
            got = wait_for(lambda: fresh_setup()
                           or ("done" if states_of(watch, strap.address)[-1:] == ["needsRepair"]
                               and states_of(watch, ring.address)[-1:] == ["connected"] else None),
                           90, "a new link of the strap being set up, or the strap disarmed and the ring connected", interval=0.05)
            if got == "done":
                break
            pid, _ = bluetoothd_segv()
            kills.append(now() - t0)
            strap.cmd("stall-att next")
            seq = strap.last_seq()
            wait_bluetoothd_replaced(pid)
            log(f"kill {len(kills)} at {kills[-1]:.2f} s; strap {' → '.join(states_of(watch, strap.address, n))}; "
                f"ring {' → '.join(states_of(watch, ring.address, n))}")
            n = watch.count()
        d = p.device(strap.address)
        log(f"after {len(kills)} kill(s): strap {d['state']} ({d.get('repairReason')}), ring {p.state(ring.address)}; "
            f"ring's states {' → '.join(states_of(watch, ring.address))}")
        # bluetoothd-died-on-link when both kills came within 1 s of the strap's link coming up, in
        # its set-up (issue 49's rule, which needs no word from systemd); bluetoothd-crashed otherwise.
        check(d["state"] == "needsRepair" and d.get("repairReason") in ("bluetoothd-crashed", "bluetoothd-died-on-link"),
              f"the strap disarmed ({d.get('repairReason')})")
        # Two set-up crashes, one more if the ring was disarmed with the strap and the strap was let
        # back first; a kill that lands just after the strap's set-up ended is not one of them
        # (the kill races the link: clean-clone CI of 06deaac, 4 kills, one such). The loop bound
        # (6) is the check that it ends; paird_bluetoothd_crashloop holds the count itself.
        log(f"{len(kills)} kill(s) until the strap was disarmed and the ring connected")

    with step("the ring: connected and notifying; bluetoothd stays up; nothing links the strap"):
        wait_for(bluetoothd_active, 60, "bluetoothd running")
        p.wait_state("connected", 60, address=ring.address)
        m = watch.count()
        wait_for(lambda: notifies(watch, ring.address, m), 30, "a ring notification after the loop")
        rc, out, _ = p.pairctl("status")
        log("pairctl status:\n" + "\n".join(f"  | {l}" for l in out.splitlines()))
        n = watch.count()
        bed_sleep(10, "nothing may link the strap now")
        check("discovering" not in states_of(watch, strap.address, n), "no further link for the strap")
        check(bluetoothd_active() and p.state(ring.address) == "connected", "bluetoothd up, the ring connected")

main()
