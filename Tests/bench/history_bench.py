#!/usr/bin/python3
"""The availability record (`pairctl history`, issue 33): how long the query takes as a user sees
it, and whether paird's memory stays flat once the record is at its cap.  A program that prints
figures, not a test.  Host side, no VM: the real paird and pairctl on python-dbusmock's BlueZ and a
private dbus-daemon, as scale_mock.py (whose Host it reuses).

1. Query.  HistoryBench generates the record of a BUSY wearable over 30 days (see
   Sources/HistoryBench/main.swift for the definition) and, apart, the record at its cap (the
   default MaxRecords 100000: compaction runs past a tenth more, so the file holds up to 110000
   lines; a wearable flapping every ~45 s for 30 days).  For each record: paird is started on it,
   and `pairctl history --since 30d --json`, the same in text, and the default `pairctl history`
   (24 h) are run --reps times each, interleaved, wall time exec → exit;
   references in the same loop: `pairctl --version` (exec alone) and `pairctl status --json` (one
   D-Bus round trip to paird).  Then HistoryBench times the in-process parts on the same file
   (read, parse, analyse, JSON, text).
2. RSS at the cap.  paird with an empty record, then paird with the record at its cap, each driven
   by battery readings that change every time (Battery1.Percentage 50, 51, 50, …: each one line
   appended, as fast as the mock sends them; link drops cannot be sent that fast: links that drop
   within a minute of coming up without the wearable answering are a lost bond to paird), for
   --rss-seconds (at the default cap a compaction per 10000 lines, i.e. every few seconds);
   VmRSS/VmHWM sampled every second; the number of compactions from paird's log.

  history_bench.py --paird BIN --pairctl BIN --historybench BIN [--reps 20] [--rss-seconds 180]
                   [--out FILE]"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

import dbus

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scale_mock import Host  # noqa: E402


def status_kb(pid):
    v = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, rest = line.partition(":")
            if k in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                v[k] = int(rest.split()[0])
    return v


def timed(argv, env):
    """Wall time (s) exec → exit, and the size of its output.  (No max RSS of pairctl: wait4's
    ru_maxrss counts the forked Python before the exec, so it says the bench's size, not pairctl's.)"""
    t0 = time.monotonic()
    r = subprocess.run(argv, env=env, capture_output=True)
    dt = time.monotonic() - t0
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(argv)}: exit {r.returncode}: {r.stderr.decode()[:500]}")
    return dt, len(r.stdout)


def med_max(xs):
    return statistics.median(xs), max(xs)


def generate(a, path, fill=0):
    argv = [a.historybench, "generate", "--out", path]
    if fill:
        argv += ["--fill", str(fill)]
    return json.loads(subprocess.run(argv, check=True, capture_output=True, text=True).stdout)


def start_on(h, content_from=None):
    """paird on one connected wearable (Band-0) with history.jsonl = content_from's copy (or none)."""
    hist = os.path.join(h.dir, "history.jsonl")
    if os.path.exists(hist):
        os.unlink(hist)
    if content_from:
        with open(content_from, "rb") as src, open(hist, "wb") as dst:
            dst.write(src.read())
        os.chmod(hist, 0o600)
    h.start_paird(1)
    h.wait(lambda: h.all_connected(1), 60, "Band-0 connected", interval=0.2)
    return hist


def query_bench(a, h, label, gen, out):
    start_on(h, gen["path"])
    env = h.env
    cases = [("history --since 30d --json", [a.pairctl, "history", "--since", "30d", "--json"]),
             ("history --since 30d (text)", [a.pairctl, "history", "--since", "30d"]),
             ("history (24h, text)", [a.pairctl, "history"]),
             ("status --json (reference)", [a.pairctl, "status", "--json"]),
             ("--version (exec alone)", [a.pairctl, "--version"])]
    t = {c: [] for c, _ in cases}
    size = {}
    for argv in (c[1] for c in cases):  # warm-up: page cache, the bus
        timed(argv, env)
    for _ in range(a.reps):
        for c, argv in cases:
            dt, n = timed(argv, env)
            t[c].append(dt * 1000)
            size[c] = n
    paird_rss = status_kb(h.paird.pid)
    h.stop_paird()
    print(f"\n{label}: {gen['records']} records, {gen['bytes'] / 1e6:.2f} MB, {gen['spanDays']} days, "
          f"{gen['linkDrops']} link drops ({gen['dropsPerDay']}/day), by kind {gen['byKind']}")
    print(f"  pairctl as a user runs it (real paird over D-Bus), {a.reps} reps, ms median / max, output:")
    rows = []
    for c, _ in cases:
        m, x = med_max(t[c])
        print(f"    {c:30s} {m:7.1f} / {x:7.1f} ms   {size[c]} bytes out")
        rows.append(dict(case=c, ms_median=m, ms_max=x, out_bytes=size[c]))
    print(f"  paird meanwhile: VmRSS {paird_rss['VmRSS'] / 1024:.1f} MB, VmHWM {paird_rss['VmHWM'] / 1024:.1f} MB")
    inproc = subprocess.run([a.historybench, "query", gen["path"], "--reps", str(a.reps)], check=True,
                            capture_output=True, text=True).stdout.splitlines()
    print("  " + "\n  ".join(inproc[:-1]))
    r = dict(bench="history-query", record=label, generate=gen, pairctl=rows, paird_status_kb=paird_rss,
             inprocess=json.loads(inproc[-1]))
    if out:
        out.write(json.dumps(r) + "\n")
    return r


def rss_run(a, h, label, content_from, out):
    hist = start_on(h, content_from)
    battery = h.dev(0)
    pid = h.paird.pid
    time.sleep(1)
    samples = []  # (s since start, VmRSS, VmHWM, lines in the record)
    t0 = time.monotonic()
    k = 0
    next_sample = t0
    while True:
        now = time.monotonic()
        if now >= next_sample:
            s = status_kb(pid)
            with open(hist, "rb") as f:
                lines = sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
            samples.append((now - t0, s["VmRSS"], s["VmHWM"], lines, s.get("RssAnon", 0)))
            next_sample += 1.0
            if now - t0 >= a.rss_seconds:
                break
        battery.UpdateProperties("org.bluez.Battery1", {"Percentage": dbus.Byte(50 + k % 2)})
        k += 1
        time.sleep(a.pace)  # not faster than paird writes them (a line + an fsync each): no queue builds up
    time.sleep(2)
    with open(os.path.join(h.dir, "paird-1.log")) as f:
        log = f.read()
    compactions = re.findall(r"compacted: (\d+) → (\d+) lines", log)
    h.stop_paird()
    n = len(samples)
    pick = {"start": samples[0], "middle": samples[n // 2], "end": samples[-1]}
    rss_max = max(s[1] for s in samples)
    # flat = no trend: least-squares slope of VmRSS over the second half of the run (a first
    # compaction or two may leave a buffer's worth more in the thread's arena; growth would go on)
    after = [x for x in samples if x[0] >= a.rss_seconds / 2]
    since = f"over the second half (t ≥ {a.rss_seconds / 2:.0f} s: {min(x[1] for x in after) / 1024:.2f}–{max(x[1] for x in after) / 1024:.2f} MB)"
    slope = None
    if len(after) >= 3:
        xs, ys = [x[0] for x in after], [x[1] for x in after]
        mx, my = statistics.mean(xs), statistics.mean(ys)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs) * 60
    print(f"\n{label}: {k} battery readings in {a.rss_seconds} s (a line each), "
          f"{len(compactions)} compaction(s) {compactions[:6]}{' …' if len(compactions) > 6 else ''}")
    for name, s in pick.items():
        print(f"    {name:6s} t={s[0]:6.1f} s  VmRSS {s[1] / 1024:6.2f} MB  (anon {s[4] / 1024:5.2f})  VmHWM {s[2] / 1024:6.2f} MB  record {s[3]} lines")
    print(f"    max VmRSS {rss_max / 1024:.2f} MB, final VmHWM {samples[-1][2] / 1024:.2f} MB"
          + (f", VmRSS trend {since} {slope:+.1f} kB/min" if slope is not None else ""))
    r = dict(bench="history-rss", record=label, seconds=a.rss_seconds, toggles=k, compactions=len(compactions),
             compaction_lines=compactions, samples=[dict(t=s[0], rss_kb=s[1], hwm_kb=s[2], lines=s[3], anon_kb=s[4]) for s in samples],
             rss_max_kb=rss_max, hwm_end_kb=samples[-1][2], trend_kb_per_min_second_half=slope)
    if out:
        out.write(json.dumps(r) + "\n")
    return r


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--paird", default=".build/release/paird")
    p.add_argument("--pairctl", default=".build/release/pairctl")
    p.add_argument("--historybench", default=".build/release/HistoryBench")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--rss-seconds", type=int, default=240)
    p.add_argument("--pace", type=float, default=0.004, help="seconds between two battery readings")
    p.add_argument("--parts", default="query,rss")
    p.add_argument("--out", default=None)
    a = p.parse_args()
    a.paird, a.pairctl, a.historybench = map(os.path.abspath, (a.paird, a.pairctl, a.historybench))
    out = open(a.out, "a") if a.out else None
    h = Host(a)
    try:
        h.ensure_devices(1)
        # Battery1 known before paird starts (paird tracks the interfaces of its snapshot)
        h.dev(0).AddProperties("org.bluez.Battery1", {"Percentage": dbus.Byte(50)})
        busy = generate(a, os.path.join(h.dir, "gen-busy.jsonl"))
        cap = generate(a, os.path.join(h.dir, "gen-cap.jsonl"), fill=110000)
        print(f"cap: MaxRecords 100000 (paird.conf default), compaction past 110000 lines; 30 days of the busy wearable "
              f"= {busy['records']} records ({100 * busy['records'] / 100000:.1f} % of MaxRecords, {busy['bytes'] / 1e6:.2f} MB): "
              + ("under the cap: the 30-day age limit binds first" if busy["records"] <= 100000 else "OVER the cap"))
        if "query" in a.parts:
            query_bench(a, h, "30 days of the busy wearable", busy, out)
            query_bench(a, h, "the record at its cap (110000 lines)", cap, out)
        if "rss" in a.parts:
            e = rss_run(a, h, "paird, empty record", None, out)
            c = rss_run(a, h, "paird, record at its cap", cap["path"], out)
            print(f"\nRSS: empty record max {e['rss_max_kb'] / 1024:.2f} MB; at the cap max {c['rss_max_kb'] / 1024:.2f} MB "
                  f"(+{(c['rss_max_kb'] - e['rss_max_kb']) / 1024:.2f} MB), {c['compactions']} compactions")
    finally:
        h.close()


if __name__ == "__main__":
    sys.exit(main())
