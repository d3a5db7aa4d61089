#!/usr/bin/python3
"""Tests/bench/around.py SLEEP_OUT REPLUG_OUT — the figures of `bench.sh around` (issue 32), from
the scenario logs of one paird_sleep run and one paird_replug run: resume → first notification
(per sleep the strap was linked at; `sleep N: the strap notifying X s after the resume`) and
plug-in → first notification (`MEASURED round N: plug-in → first notification X s`), each beside
the clean bluetoothd restart → first notification of the same run. Prints a Markdown table and
one JSON line per figure (to stdout)."""
import json
import re
import statistics
import sys


def lines(out):
    try:
        with open(f"{out}/scenario.log", errors="replace") as f:
            return f.read().splitlines()
    except OSError:
        return []


def grab(ls, pattern):
    return [float(m.group(1)) for l in ls for m in [re.search(pattern, l)] if m]


sleep_out, replug_out = sys.argv[1], sys.argv[2]
s, r = lines(sleep_out), lines(replug_out)
rows = [
    ("resume → first notification", grab(s, r"sleep \d+: the strap notifying ([\d.]+) s after the resume"), "paird_sleep (systemd, logind)"),
    ("  clean bluetoothd restart → first notification, same run", grab(s, r"bluetoothd restart → first notification ([\d.]+) s"), "paird_sleep"),
    ("plug-in → first notification", grab(r, r"MEASURED round \d+: plug-in → first notification ([\d.]+) s"), "paird_replug (plain)"),
    ("  clean bluetoothd restart → first notification, same run", grab(r, r"MEASURED bluetoothd restart → first notification ([\d.]+) s"), "paird_replug"),
]
came = [l for l in s if "resume → first notification:" in l]
print("| figure | n | median | max | run |")
print("|---|---|---|---|---|")
for name, xs, run in rows:
    if xs:
        print(f"| {name} | {len(xs)} | {statistics.median(xs):.2f} s | {max(xs):.2f} s | {run} |")
    else:
        print(f"| {name} | 0 | – | – | {run} (no figure: see its scenario.log) |")
if came:
    print("\n" + came[-1].split("] ", 1)[-1])
for name, xs, run in rows:
    print(json.dumps({"figure": name.strip(), "run": run, "seconds": xs}), file=sys.stderr)
