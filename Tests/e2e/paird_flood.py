#!/usr/bin/python3
# testbed: mode=plain timeout=1200 wearables=strap,ring twin=no-bumble-only controllers=3
"""Issue 43, item 4, on the bed: one wearable floods the record, another's drops stay.

The strap (hci1) changes its battery level 20 × BED_X_FLOOD times (default 120: the issue's two
minutes at 20 Hz; Bumble under TCG sends about 7 a second, so it takes some six minutes here) while the ring (hci2) walks away and comes back three times. paird.conf:
[History] MaxRecords=100 (the least it takes), BatteryStep=1, BatteryInterval=0, so every reading
the strap sends is a record and the record's cap, kept per wearable, is what holds it. After the
flood:
- the record holds at most MaxRecords plus the tenth that starts a compaction;
- the strap's battery lines are at most MaxRecords;
- every one of the ring's drops is still in `pairctl history --json` (link-loss, three), and
  each of its walks' lines (down, up) is in the file;
- paird answered throughout, and both wearables are connected at the end.
Not in CI (two minutes of flood: `make e2e` runs it; E2E_CI_SKIP)."""
import json
import os

from bedlib import *

SECONDS = float(os.environ.get("BED_X_FLOOD", "120"))
RATE = 20.0
MAX_RECORDS = 100
HISTORY = f"{PAIRD_STATE_DIR}/history.jsonl"


def lines():
    with open(HISTORY) as f:
        return [json.loads(l) for l in f if l.strip()]


@scenario
def main():
    strap = Wearable.start(profile="strap", adapter="hci1", sock="/run/bed/strap.sock")
    ring = Wearable.start(profile="ring", adapter="hci2", sock="/run/bed/ring.sock",
                          extra=["--drop-every", "0", "--drain-every", "0"])
    p = Paird()
    p.write_config(f"[History]\nMaxRecords={MAX_RECORDS}\nBatteryStep=1\nBatteryInterval=0\n")

    with step("paird up; the strap and the ring paired and connected"):
        p.start()
        for args in (("--name", "Pulse-1"), ("--name", "Ring-1")):
            rc, out, err = p.pairctl("pair", *args, "--timeout", "30", timeout=120)
            check(rc == 0, f"pairctl pair {' '.join(args)} exit 0 {err.strip()}")
        p.wait_state("connected", 30, address=strap.address)
        p.wait_state("connected", 30, address=ring.address)

    walks = []
    with step(f"the strap's battery at {RATE:g} Hz for {SECONDS:g} s; the ring away and back three times meanwhile"):
        watch = p.watch()
        n = int(SECONDS * RATE)
        t0 = now()
        strap.cmd(f"flood {RATE:g} {SECONDS:g}")     # the strap paces itself (bumble_wearable.py flood_loop)
        for k in (1, 2, 3):
            bed_sleep(max(0.0, t0 + SECONDS * k / 4 - now()), f"the ring's walk {k} at {k}/4 of the flood")
            ring.cmd("walk-away")
            walks.append(now())
            bed_sleep(3, "the ring stays away 3 s")
            ring.cmd("come-back")
            wait_for(lambda: p.state(ring.address) == "connected", 30, "the ring connected again")
        # Bumble under TCG reached 7 Hz, not 20 (each notification ~140 ms through btvirt on one
        # vCPU): the count is the flood's, the time is what the bed gives; a figure, not a check.
        done = wait_for(lambda: strap.status().get("flood"), SECONDS * 8, "the strap's flood done")
        seen = len([l for l in watch.lines("battery") if strap.address in l])
        log(f"the strap: {done}; paird's Battery signals for it (pairctl watch): {seen}; the file: {len(lines())} lines")
        log(f"FIGURE: {n} battery changes asked at {RATE:g} Hz took {done['took']:.1f} s ({n / done['took']:.1f} Hz)")
        check(done["notified"] == n, f"the strap notified all {n} changes ({done['notified']})")
        check(seen >= n // 2, f"paird handled the flood: {seen} battery changes signalled")
        check(p.running(), "paird running")

    with step("the record within its cap; the ring's three drops all there"):
        p.wait_state("connected", 30, address=ring.address)
        p.wait_state("connected", 30, address=strap.address)
        recs = lines()
        bat = [r for r in recs if r["type"] == "battery" and r.get("device") == strap.address]
        ring_lines = [r["type"] for r in recs if r.get("device") == ring.address]
        log(f"the file: {len(recs)} lines; the strap's battery lines {len(bat)}; the ring's lines {ring_lines}")
        check(len(recs) <= MAX_RECORDS + MAX_RECORDS // 10 + 5, f"{len(recs)} lines: within MaxRecords {MAX_RECORDS} and the compaction's tenth")
        check(len(bat) <= MAX_RECORDS, f"the strap's battery lines: {len(bat)}, at most {MAX_RECORDS}")
        check(ring_lines.count("down") >= 3 and ring_lines.count("up") >= 4, "each of the ring's walks (down, up) is in the file")
        rc, out, _ = p.pairctl("history", "--json")
        doc = json.loads(out)
        r = next(d for d in doc["devices"] if d["address"] == ring.address)
        log(f"the ring in pairctl history: drops {r['drops']}")
        check(r["dropsByReason"].get("link-loss", 0) == 3, f"pairctl history: the ring's three link-loss drops ({r['dropsByReason']})")


main()
