#!/usr/bin/python3
# testbed: mode=plain timeout=420 wearables=strap
"""Issue 43, on the bed: what crosses paird's boundaries from the radio, the clock and the disk.

1. A name from the radio. The Bumble strap advertises (and serves as its GAP name) a name made of
   an OSC title sequence ending in BEL, an SGR "conceal", a newline and a right-to-left override:
   BlueZ passes it on as valid UTF-8. `pairctl pair --service 180d`, `status`, `status ADDRESS`,
   `list`, `list --no-legend`, `history`, `doctor`, `scan` and `watch` must print no raw control
   byte (C0 but newline, DEL, C1) and no bidi control of the name; `list --no-legend` one line for
   the one wearable; `status --json` gives back the exact name.
2. The clock. The record lives in wall-clock time; `date -s '+40 days'`, a user disconnect and
   connect, then the clock set back: every record written meanwhile is still in the file (the
   forward jump's `clock` line among them), and `pairctl history` shows the jump back and counts
   the lines stamped ahead, kept apart.
3. A full disk. The state directory is a 256 KiB tmpfs of its own (--state-file there); it is
   filled, battery readings keep coming (each one a record: [History] BatteryStep=1,
   BatteryInterval=0), paird keeps running and answering; space is given back and the next reading
   is recorded after a `not-recorded` line that `pairctl history` shows.
Run with PAIRD_BIN / PAIRCTL_BIN of a build without the guards to see each step fail."""
import json
import os
import re
import subprocess

from bedlib import *

# ESC ] 0 ; t BEL: retitles the terminal; ESC [ 8 m: conceals what follows; a newline; U+202E
# (RIGHT-TO-LEFT OVERRIDE). 21 bytes: the scan response holds 29.
NAME = "P\x1b]0;t\x07\x1b[8mX\nY\u202eZ"
TINY = "/run/bed/tiny"
STATE = f"{TINY}/state.json"
HISTORY = f"{TINY}/history.jsonl"
BAD = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def clean(what, text, ok_newlines=True):
    """`text` (a command's output) holds no raw control byte and no piece of the name split by its
    newline onto a line of its own."""
    bad = sorted({f"U+{ord(c):04X}" for c in BAD.findall(text)})
    check(not bad, f"{what}: no raw control character ({', '.join(bad) or 'none'})")
    check(not any(l.startswith("Y") and "Z" in l for l in text.splitlines()),
          f"{what}: the name's newline starts no line of its own")


def records():
    with open(HISTORY) as f:
        return [json.loads(l) for l in f if l.strip()]


@scenario
def main():
    os.makedirs(TINY, exist_ok=True)
    sh(f"mount -t tmpfs -o size=256k,mode=0700 paird-tiny {TINY}")
    at_exit(lambda: sh(f"umount -l {TINY}", check=False))
    w = Wearable.start(name=NAME)
    p = Paird(state_file=STATE)
    p.write_config("[History]\nBatteryStep=1\nBatteryInterval=0\n")
    watch = None

    with step("a wearable named with an OSC title + BEL, SGR conceal, a newline and an RTL override: pair, watch"):
        p.start()
        watch = p.watch()
        rc, out, err = p.pairctl("scan", "--timeout", "5", timeout=60)
        log("pairctl scan:\n" + "\n".join(f"  | {l!r}" for l in (out + err).splitlines()))
        check(rc == 0 and w.address in out, "pairctl scan lists the wearable")
        clean("pairctl scan", out + err)
        rc, out, err = p.pairctl("pair", "--service", "180d", "--timeout", "20", timeout=90)
        log(f"pairctl pair → {rc}: {out!r} {err!r}")
        check(rc == 0, "pairctl pair --service 180d exit 0")
        clean("pairctl pair", out + err)
        p.wait_state("connected", 30, address=w.address)

    with step("status, status ADDRESS, status --json, list, list --no-legend, doctor, watch: no raw control byte; the JSON keeps the name"):
        for args in (("status",), ("status", w.address), ("list",), ("doctor",)):
            rc, out, err = p.pairctl(*args, timeout=60)
            log(f"pairctl {' '.join(args)} → {rc}:\n" + "\n".join(f"  | {l!r}" for l in (out + err).splitlines()))
            check(rc == 0 or args[0] == "doctor", f"pairctl {' '.join(args)} exit {rc}")
            clean(f"pairctl {' '.join(args)}", out + err)
        rc, out, err = p.pairctl("list", "--no-legend")
        lines = [l for l in out.splitlines() if l.strip()]
        check(rc == 0 and len(lines) == 1 and w.address in lines[0], f"list --no-legend: one line for the one wearable ({len(lines)})")
        clean("pairctl list --no-legend", out + err)
        d = p.device(w.address)
        check(d["name"] == NAME, f"status --json gives back the exact name ({d['name']!r})")
        wait_for(lambda: len(watch.lines("state")) >= 1, 30, "pairctl watch printed the wearable's states")
        with open(watch.path, encoding="utf-8", errors="replace") as f:
            clean("pairctl watch", f.read())

    with step("the clock 40 days ahead, a user disconnect and connect, the clock set back: every record kept, the jump back shown, the lines written ahead counted"):
        before = len(records())
        sh("date -s '+40 days'")
        back_set = False
        try:
            rc, _, err = p.pairctl("disconnect", w.address)
            check(rc == 0, f"pairctl disconnect exit 0 {err.strip()}")
            p.wait_state("disconnected", 30, address=w.address)
            rc, _, err = p.pairctl("connect", w.address)
            check(rc == 0, f"pairctl connect exit 0 {err.strip()}")
            p.wait_state("connected", 60, address=w.address)
            during = records()[before:]
        finally:
            sh("date -s '-40 days'")
            back_set = True
        kinds = [r["type"] for r in during]
        log(f"written while 40 days ahead: {kinds}")
        check("clock" in kinds and "down" in kinds and "up" in kinds, "the forward jump, the drop and the return recorded")
        fwd = next(r for r in during if r["type"] == "clock")
        check(fwd["jump"] > 39 * 86400, f"the forward jump: {fwd['jump']:.0f} s")
        # The jump back shows at paird's next record: a battery reading.
        w.cmd("battery 70")
        wait_for(lambda: any(r["type"] == "clock" and r["jump"] < -39 * 86400 for r in records()), 30, "the jump back recorded")
        check(records()[before:before + len(during)] == during, "every record written while ahead is still in the file")
        rc, out, err = p.pairctl("history")
        log("pairctl history:\n" + "\n".join(f"  | {l!r}" for l in out.splitlines()))
        # The forward jump's line is stamped 40 days ahead like the lines after it: now that the
        # clock is back, they are the record's future, kept and counted apart, not analysed.
        check(rc == 0 and "the wall clock jumped back 40 d" in out, "pairctl history shows the jump back")
        check(f"({len(during)} line(s) of the record are stamped after now" in out, f"… and the {len(during)} lines written while ahead, kept")
        clean("pairctl history", out + err)
        rc, out, _ = p.pairctl("history", "--json")
        doc = json.loads(out)
        check(any(j["seconds"] < -39 * 86400 for j in doc["clockJumps"]) and doc["futureLines"] == len(during),
              f"history --json: clock jumps {doc['clockJumps']}, {doc['futureLines']} line(s) stamped ahead")
        check(back_set, "clock set back")

    with step("the state directory full: readings lost, paird runs on; space back: the next reading recorded after a not-recorded line"):
        sh(f"dd if=/dev/zero of={TINY}/fill bs=4k 2>/dev/null || true", check=False)
        log(f"df: {sh(f'df -k {TINY} | tail -1', check=False).strip()}")
        # tmpfs counts whole pages: the record's last page may still take a few lines. Readings go
        # on until three in a row leave the file as it was (each one seen by paird first).
        n, unwritten, level = len(records()), 0, 20
        while unwritten < 3:
            check(level < 100, "the full disk stopped the record's writes within 80 readings")
            size = len(records())
            w.cmd(f"battery {level}")
            # paird's Battery signal, as the running pairctl watch prints it: paird has handled it
            wait_for(lambda: any(l.endswith(f" battery {level}") or f" battery {level} " in l for l in watch.lines("battery")),
                     20, f"paird saw battery {level}")
            unwritten = unwritten + 1 if len(records()) == size else 0
            level += 1
        log(f"{len(records()) - n} reading(s) still fitted in the last page; then {unwritten} not written")
        check(p.running(), "paird still running")
        rc, _, _ = p.pairctl("status")
        check(rc == 0, "paird answers while its disk is full")
        os.unlink(f"{TINY}/fill")
        w.cmd(f"battery {level}")
        wait_for(lambda: any(r["type"] == "battery" and r.get("level") == level for r in records()), 30, "the reading after the space came back")
        new = records()[n:]
        log(f"after the space came back: {[r['type'] for r in new]}")
        nr = next((r for r in new if r["type"] == "not-recorded"), None)
        check(nr is not None and nr.get("lost", 0) >= 3, f"a not-recorded line counting the lost readings: {nr}")
        rc, out, _ = p.pairctl("history")
        check(rc == 0 and "not-recorded:" in out, "pairctl history shows the span not recorded")
        check(p.state(w.address) == "connected", "the wearable stayed connected throughout")
main()
