#!/usr/bin/python3
"""Turn the JSON lines the bench programs wrote (bench.sh collects them in one directory) into
the Markdown tables of BENCHMARKS.md.   report.py RESULTS_DIR"""
import glob
import json
import os
import statistics
import sys


def pct(xs, p):
    s = sorted(xs)
    k = max(0, min(len(s) - 1, int(-(-p * len(s) // 100)) - 1))
    return s[k]


def ms(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "—", "—"
    return f"{statistics.median(xs) * 1000:.0f}", f"{pct(xs, 95) * 1000:.0f}"


def rows(d, name):
    out = []
    for f in sorted(glob.glob(os.path.join(d, name))):
        with open(f) as fh:
            out += [json.loads(x) for x in fh if x.strip()]
    return out


def reconnect(d):
    rs = [r for r in rows(d, "reconnect*.jsonl") if r.get("bench") == "reconnect"]
    if not rs:
        return
    order = []
    for r in rs:
        if r["approach"] not in order:
            order.append(r["approach"])
    la = os.path.join(d, "loadavg.txt")
    if os.path.exists(la):   # BENCH_PARALLEL: the VMs ran at once, on the host's shared CPUs
        xs = [float(x.split()[1]) for x in open(la) if len(x.split()) >= 2]
        if xs:
            print(f"\nThe approaches ran at once, each in VMs of its own; host 1-min load average over "
                  f"the run (every 30 s, n={len(xs)}): median {statistics.median(xs):.1f}, "
                  f"p95 {pct(xs, 95):.1f}, max {max(xs):.1f} ({os.cpu_count()} CPUs)")
    for away in sorted({r["away"] for r in rs}):
        print(f"\n#### Wearable away {away} s — milliseconds from its `advertising on`; median / p95 (n)\n")
        print("| approach | n | link up (Connected=true) | ServicesResolved | first notification at the client "
              "| LE connects requested per rep | failed reps |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for a in order:
            g = [r for r in rs if r["approach"] == a and r["away"] == away]
            if not g:
                continue
            ok = [r for r in g if not r.get("error")]
            # a rep whose first notification came but whose flow then stopped still has a t_cl
            late = [r for r in g if r.get("error") and r.get("t_cl")]
            cells = []
            for k in ("t_conn", "t_sr", "t_cl"):
                xs = [r[k] - r["t_adv"] for r in ok + (late if k == "t_cl" else []) if r.get(k)]
                m, p = ms(xs)
                cells.append(f"{m} / {p} ({len(xs)})")
            ca = [r.get("connect_attempts", 0) for r in ok]
            print(f"| {a} | {len(g)} | {' | '.join(cells)} | "
                  f"{statistics.median(ca) if ca else '—'} (max {max(ca) if ca else '—'}) | {len(g) - len(ok)}"
                  + (f" ({crashed} with a bluetoothd crash)" if (crashed := sum(1 for r in g if r.get("bluetoothd_crash"))) else "")
                  + " |")
        crashes = [r for r in rows(d, "reconnect*.jsonl") if r.get("bench") == "bluetoothd-crash"]
        for c in crashes if away == min(r["away"] for r in rs) else []:
            print(f"\nbluetoothd crashed in this run ({c['where']}): {c['dmesg']}; started again, the approach restarted")
        p = [r for r in rs if r["approach"] == "paird" and r["away"] == away and r.get("t_cl")]
        if p:
            print(f"\npaird's own share (away {away} s), ms, median / p95 (n):\n")
            for what, k1, k2 in (("first notification: paird's `Notification` signal − BlueZ's Value signal", "t_cl", "t_bz"),
                                 ("first notification at paird's client − ServicesResolved=true", "t_cl", "t_sr"),
                                 ("paird reports `connected` − ServicesResolved=true", "t_state", "t_sr")):
                xs = [r[k1] - r[k2] for r in p if r.get(k1) and r.get(k2)]
                m, q = ms(xs)
                print(f"- {what}: {m} / {q} ({len(xs)})")
            fw = [x for r in p for x in r.get("forwarding", [])]
            m, q = ms(fw)
            print(f"- every notification, steady state: paird `Notification` − BlueZ Value: {m} / {q} ({len(fw)})")


def startup(d):
    rs = [r for r in rows(d, "costs*.jsonl") if r.get("bench") == "startup"]
    if not rs:
        return
    print("\n#### Start-up, one known wearable whose link is up (adoption); ms, median / p95 (n)\n")
    print("| what | median | p95 | n |\n| --- | --- | --- | --- |")
    for what, k in (("exec → READY=1", "exec_to_ready"), ("exec → `connected` (link adopted)", "exec_to_connected")):
        m, p = ms([r[k] for r in rs])
        print(f"| {what} | {m} | {p} | {len(rs)} |")
    print(f"| disconnects the wearable saw, all reps | {sum(r['wearable_disconnects'] for r in rs)} | | {len(rs)} |")


def idle(d):
    rs = [r for r in rows(d, "costs*.jsonl") if r.get("bench") == "idle"]
    if not rs:
        return
    print("\n#### Idle cost (guest under TCG emulation: CPU seconds are inflated, compare the ratio)\n")
    print("| phase | who | CPU-s per hour | wake-ups/s | RSS MB | of which anonymous MB | open fds | window s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for ph in ("connected-1hz", "connected-quiet", "absent"):
        g = {r["who"]: r for r in rs if r["phase"] == ph}
        for who in ("paird", "bleak"):
            if who in g:
                r = g[who]
                print(f"| {ph} | {who} | {r['cpu_s_per_hour']:.2f} | {r['wakeups_per_s']:.2f} | "
                      f"{r['rss_kb'] / 1024:.1f} | {(r['anon_kb'] / 1024) if r.get('anon_kb') is not None else float('nan'):.1f} | {r['fds']} | {r['window']:.0f} |")
        if "paird" in g and "bleak" in g:
            a, b = g["paird"], g["bleak"]
            ratio = lambda x, y: f"{x / y:.2f}" if y else "—"  # noqa: E731
            print(f"| {ph} | paird / bleak | {ratio(a['cpu_s_per_hour'], b['cpu_s_per_hour'])} | "
                  f"{ratio(a['wakeups_per_s'], b['wakeups_per_s'])} | {ratio(a['rss_kb'], b['rss_kb'])} | | | |")


def scale(d):
    rs = [r for r in rows(d, "scale*.jsonl") if r.get("bench") == "scale"]
    if not rs:
        return
    print("\n#### Scale on python-dbusmock (host, no emulation); median over reps\n")
    print("| devices | reps | RSS MB | anonymous MB | RSS per device kB (vs N=1) | fds | paird CPU per PropertiesChanged µs "
          "| start → all `connected` s | `pairctl status --json` ms | paird's states after the storm (BlueZ: all up) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    base = None
    for n in sorted({r["devices"] for r in rs}):
        g = [r for r in rs if r["devices"] == n]
        rss = statistics.median(r["rss_kb"] for r in g)
        base = base or (n, rss)
        per = f"{(rss - base[1]) / (n - base[0]):.1f}" if n != base[0] else "—"
        an = [r["anon_kb"] for r in g if r.get("anon_kb") is not None]
        anon = f"{statistics.median(an) / 1024:.2f}" if an else "—"
        print(f"| {n} | {len(g)} | {rss / 1024:.2f} | {anon} | {per} | {statistics.median(r['fds'] for r in g):.0f} | "
              f"{statistics.median(r['cpu_per_signal_us'] for r in g):.0f} | "
              f"{statistics.median(r['start_to_all_connected'] for r in g):.2f} | "
              f"{statistics.median(r['status_call_s'] for r in g) * 1000:.0f} | "
              + "; ".join(", ".join(f"{k} {v}" for k, v in r.get("final_states", {}).items()) for r in g) + " |")


def trio(xs, f="{:.2f}"):
    """p50 / p95 / max of the values that are there, or a dash."""
    xs = [x for x in xs if x is not None]
    return " / ".join(f.format(v) for v in (statistics.median(xs), pct(xs, 95), max(xs))) if xs else "—"


def stall(d):
    rs = [r for r in rows(d, "stall*.jsonl") if r.get("bench") == "stall"]
    if not rs:
        return
    print("\n#### Stall: seconds to the first heart-rate notification (every profile notifies at 1 Hz)\n")
    print("pair: from `pairctl pair`; return and stall: from the come-back (the wearable advertising "
          "again), with the kernel auto-connect's own figure from the same return reps beside it (come-back → "
          "link up at the wearable's own stack); drop: from the dropped subscription.\n")
    print("| BlueZ | profile | kind | reps | p50 s | p95 s | max s | link up (auto-connect) p50 / p95 / max s "
          "| over 10 s (paird's reasons for the links it ended) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    keys = []
    for r in rs:
        k = (r.get("bluez", "5.66"), r.get("profile", "strap"))
        if k not in keys:
            keys.append(k)
    for bluez, profile in keys:
        for kind in ("pair", "return", "drop", "stall"):
            g = [r for r in rs if r.get("bluez", "5.66") == bluez and r.get("profile", "strap") == profile
                 and r["kind"] == kind]
            if not g:
                continue
            xs = [r["seconds"] for r in g if r.get("seconds") is not None]
            if not xs:
                print(f"| {bluez} | {profile} | {kind} | {len(g)} | — | — | — | — | all failed |")
                continue
            # the auto-connect's figure is the return's alone: in a stall rep the first link is up
            # at once but dead, and the one after it is paird's doing
            ls = [r["link_up"] for r in g if r.get("link_up") is not None and kind == "return"]
            link = f"{statistics.median(ls):.2f} / {pct(ls, 95):.2f} / {max(ls):.2f}" if ls else "—"
            over = [r for r in g if r.get("over10") or r.get("seconds") is None]
            why = "; ".join(f"{r['seconds']:.1f} s: {', '.join(r['reasons']) or 'none'}" if r.get("seconds") is not None
                            else f"failed: {r.get('failed')}" for r in over)
            print(f"| {bluez} | {profile} | {kind} | {len(g)} | {statistics.median(xs):.2f} | {pct(xs, 95):.2f} "
                  f"| {max(xs):.2f} | {link} | {len(over)}" + (f" ({why})" if why else "") + " |")

    # Where a return goes, per rep and from the same reps: the kernel's auto-connect (come-back →
    # link up at the wearable), BlueZ (link up → ServicesResolved), paird (ServicesResolved → its
    # StartNotify), and the whole (come-back → first notification, which adds the wearable's own
    # notification period). paird's share is what the goal's "within 50 ms of the auto-connect"
    # can be read against: the rest is not paird's to shorten.
    ret = [r for r in rs if r["kind"] == "return" and r.get("seconds") is not None]
    if any(r.get("paird_ms") is not None for r in ret):
        print("\nReturns, where the time goes (same reps; p50 / p95 / max): the kernel's auto-connect "
              "(come-back → link up at the wearable), BlueZ (link up → ServicesResolved), paird "
              "(ServicesResolved → its StartNotify, ms), the whole (come-back → first notification).\n")
        print("| BlueZ | profile | reps | auto-connect s | BlueZ resolves s | paird ms | whole s | paird over 50 ms |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for bluez, profile in keys:
            g = [r for r in ret if r.get("bluez", "5.66") == bluez and r.get("profile", "strap") == profile]
            if not g:
                continue
            pm = [r.get("paird_ms") for r in g if r.get("paird_ms") is not None]
            print(f"| {bluez} | {profile} | {len(g)} | {trio([r.get('link_up') for r in g])} "
                  f"| {trio([r.get('resolve') for r in g])} | {trio(pm, '{:.0f}')} "
                  f"| {trio([r['seconds'] for r in g])} | {sum(x > 50 for x in pm)} of {len(pm)} |")


if __name__ == "__main__":
    d = sys.argv[1]
    meta = os.path.join(d, "meta.txt")
    if os.path.exists(meta):
        print("```\n" + open(meta).read().strip() + "\n```")
    reconnect(d)
    startup(d)
    idle(d)
    scale(d)
    stall(d)
