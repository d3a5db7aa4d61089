#!/usr/bin/python3
# testbed: mode=plain timeout=480 wearables=strap
"""Issue 18 ("No stall"), against the Bumble strap with the bed's fault injection:
(a) the strap forgets paird's heart-rate subscription while the link stays up
    (`drop-subscription hr`: as if its CCC were written 0; BlueZ is not told and still shows it
    notifying) → paird, having learned the strap's 1 s period, finds it silent for 5 periods,
    probes it (a read of Battery Level), subscribes again → notifications resume on the same link;
(b) the strap leaves every ATT request of its next link unanswered (`stall-att next`), so that
    link comes up but never resolves → paird ends it at its resolve deadline (ResolveTimeout, 6 s,
    or the shorter one learned from the strap's earlier links) and the next link
    works, notifications flowing.
DiscoveryTimeout is raised to 120 s here, so only paird's resolve deadline can end the stalled link
within the wait. BED_X_NO_HEALTH=1 turns paird's handling off through its configuration
(SilencePeriods 1000 with SilenceMinimum 3600, ResolveTimeout and ResolveFloor 300): both parts then fail, which is
how this scenario was checked to be able to fail; BED_X_PARTS=a or b runs one part only. Prints each
step's timing and the reasons paird gave for each link it ended."""
import os
import re

from bedlib import *

OFF = os.environ.get("BED_X_NO_HEALTH") == "1"
PARTS = os.environ.get("BED_X_PARTS", "ab")


def health_reasons(p):
    return re.findall(r"→ connecting \((resolve-timeout|no-data|probe-[^)]*|subscription-lost)\)", p.logtext())


def notifies(watch, n0, k=2):
    return len(watch.lines("notify")) >= n0 + k


@scenario
def main():
    w = Wearable.start(name="Pulse-1", battery=87)
    p = Paird()
    conf = "[Connection]\nDiscoveryTimeout = 120\n"
    if OFF:
        conf += "ResolveTimeout = 300\nResolveFloor = 300\n[Health]\nFirstDataTimeout = 0\nSilencePeriods = 1000\nSilenceMinimum = 3600\n"
        log("BED_X_NO_HEALTH=1: paird's silence probe and resolve deadline are configured off")
    p.write_config(conf)
    with step("paird up, pairctl pair --service 180d, notifications flowing"):
        p.start()
        pair_wearable(p)
        p.wait_state("connected", 20)
        watch = p.watch()
        wait_for(lambda: len(watch.lines("notify")) >= 2, 15, "2 notify lines")

    if "a" in PARTS:
        part_a(p, w, watch)
    if "b" in PARTS:
        part_b(p, w, watch)


def part_a(p, w, watch):
    with step("the 1 s period learned: status shows the silence watch"):
        # 8 intervals are needed; the strap notifies every second
        wait_for(lambda: (p.device().get("health") or {}).get("check") == "silence" or OFF, 30,
                 "health.check == silence in status --json")
        d = p.device()
        log(f"status: lastData={d.get('lastData')} health={d.get('health')}")
        rc, out, _ = p.pairctl("status")
        for line in out.splitlines():
            log(f"  | {line}")

    # (a) the subscription is dropped on the wearable's side, the link stays
    with step("(a) strap drops the subscription → paird probes, subscribes again, notifications resume"):
        seq = w.last_seq()
        t = now()
        r = w.cmd("drop-subscription hr")
        check(r["was_subscribed"] is True, f"the strap had the subscription ({r})")
        check(w.status()["subscribed"]["hr"] is False, "the strap no longer has it (no notifications from now)")
        n1 = len(watch.lines("notify"))
        wait_for(lambda: notifies(watch, n1, 2), 45, "2 new heart-rate notify lines after the drop")
        log(f"MEASURED (a) notifications again {now() - t:.2f} s after the drop")
        text = p.logtext()
        check("probing with a read" in text, "paird probed the silent strap (log: 'probing with a read')")
        dropped = [e for e in w.events(seq) if e["event"] == "disconnected"]
        check(not dropped, f"the link stayed up (the probe answered): {dropped}")
        check(w.status()["subscribed"]["hr"] is True, "the strap has the subscription again")
        check(p.state() == "connected", "connected")



def part_b(p, w, watch):
    # (b) ATT stalled on the next link
    with step("(b) strap stalls ATT on its next link → paird ends it at the resolve deadline; the next link works"):
        w.cmd("stall-att next")
        w.cmd("walk-away")
        p.wait_state("waitingForDevice", 20)
        seq = w.last_seq()
        t = now()
        w.cmd("come-back")
        w.wait_event("att-stalling", 30, since=seq)
        log(f"stalled link up {now() - t:.2f} s after come-back")
        wait_for(lambda: "(resolve-timeout)" in p.logtext(), 60, "paird ends the stalled link (resolve-timeout)")
        log(f"MEASURED (b) stalled link ended by paird {now() - t:.2f} s after come-back")
        ev = [e for e in w.events(seq) if e["event"] in ("att-dropped", "disconnected")]
        check(any(e["event"] == "att-dropped" for e in ev), "the strap left ATT requests unanswered")
        n0 = len(watch.lines("notify"))
        p.wait_state("connected", 60)
        wait_for(lambda: notifies(watch, n0, 2), 30, "2 new heart-rate notify lines on the next link")
        log(f"MEASURED (b) notifications again {now() - t:.2f} s after come-back")
        check(w.status()["connected"] and w.status()["subscribed"]["hr"], "the strap is linked and subscribed")
        links = [e for e in w.events(seq) if e["event"] == "connected"]
        log(f"links the strap saw since come-back: {len(links)}; paird's reasons for ending links: {health_reasons(p)}")


main()
