#!/usr/bin/python3
# testbed: mode=plain timeout=3600 wearables=strap
"""Stall benchmark (issue 18): how long a wearable's heart rate is silent when paird pairs it, when
it comes back, and with the bed's faults. Run by `Tests/bench/bench.sh stall`; prints figures and
writes $BED_OUT/results.jsonl. Never asserts on time.

One wearable per VM, BED_X_STALL_PROFILE (default strap): strap | watch (watch-passkey: LE Secure
Connections with a passkey, a resolvable private address rotating every 30 s) | ring (advertising
every 1-2 s; its own drops and battery drain off) | twin (the BlueZ twin: bluetoothd on hci1, no
fault injection, so only the pair and return kinds). Every profile notifies heart rate at 1 Hz.

Kinds of repetition (BED_X_STALL_KINDS, default all that apply; BED_X_STALL_REPS each, default 5):
  pair    `pairctl unpair` (returns once BlueZ removed the device; the twin then forgets its
          bond, as it refuses re-pairing otherwise), then `pairctl pair` → first
          heart-rate notification at `pairctl watch`, timed from the start of `pairctl pair`;
  return  walk-away, BED_X_AWAY_MIN..BED_X_AWAY_MAX s away (default 1..10; the issue asks for
          1..90), come-back → first notification, timed from the come-back (the wearable
          advertising again); beside it the kernel auto-connect's own figure from the same rep:
          come-back → the link up at the wearable (its `connected` event, on its own clock);
  drop    the wearable forgets the subscription while the link stays (`drop-subscription hr`)
          → first notification after it (paird's silence probe and re-subscription);
  stall   the wearable leaves every ATT request of its next link unanswered (`stall-att next`),
          walk-away (BED_X_AWAY_MIN..BED_X_STALL_AWAY_MAX s, default at most 10), come-back → first
          notification (paird's resolve deadline, then a new link).
Each rep: the seconds, whether it took over 10 s, and paird's reasons for the links it ended
(resolve-timeout, no-data, probe-…, subscription-lost); for every kind but drop, from the bed's
dbus-monitor log (one clock): the link up → ServicesResolved (BlueZ's share) and ServicesResolved →
paird's first StartNotify (paird's own reaction: at most its share of a return, none when BlueZ
re-enabled paird's notify session on the new link by itself and the data came first)."""
import json
import os
import random
import re

from bedlib import *  # noqa: F403

E = os.environ
PROFILE = E.get("BED_X_STALL_PROFILE", "strap")
REPS = int(E.get("BED_X_STALL_REPS", 5))
AWAY_MIN = float(E.get("BED_X_AWAY_MIN", 1))
AWAY_MAX = float(E.get("BED_X_AWAY_MAX", 10))
# a stall rep's absence only lets the wearable go and come back with its ATT stalled
STALL_AWAY_MAX = float(E.get("BED_X_STALL_AWAY_MAX", min(AWAY_MAX, 10)))
FAULTS = PROFILE != "twin"
KINDS = E.get("BED_X_STALL_KINDS", "pair return drop stall").split()
KINDS = [k for k in KINDS if FAULTS or k in ("pair", "return")]
RESULTS = os.path.join(os.environ.get("BED_OUT", "/tmp"), "results.jsonl")
REASONS = r"→ connecting \((resolve-timeout|no-data|probe-[^)]*|subscription-lost)\)"
PASSKEY = "123456"
NAMES = {"strap": "Pulse-1", "watch": "Watch-1", "ring": "Ring-1", "twin": "Pulse-1"}


def record(**kw):
    with open(RESULTS, "a") as f:
        f.write(json.dumps(dict(bench="stall", profile=PROFILE, **kw)) + "\n")


def pct(xs, p):
    s = sorted(xs)
    return s[max(0, min(len(s) - 1, int(-(-p * len(s) // 100)) - 1))]


def hr(watch):
    return [line for line in watch.lines("notify") if "2a37" in line]


def start_wearable():
    if PROFILE == "twin":
        return Wearable.start(name="Pulse-1", battery=87)
    if PROFILE == "watch":
        return Wearable.start(profile="watch-passkey", extra=["--passkey", PASSKEY])
    if PROFILE == "ring":
        return Wearable.start(profile="ring", extra=["--drop-every", "0", "--drain-every", "0"])
    return Wearable.start(profile="strap", battery=87)


def pair(p):
    args = ["--service", "180d"] if PROFILE in ("strap", "twin") else ["--name", NAMES[PROFILE]]
    if PROFILE == "watch":
        args += ["--passkey", PASSKEY]
    rc, out, err = p.pairctl("pair", *args, "--timeout", "30", timeout=120)
    if rc != 0:
        raise BedError(f"pairctl pair exited {rc}: {err.strip()}")


def link_up_after(w, seq0, t_back):
    """Seconds from the come-back to the wearable's first `connected` event after seq0 (its clock)."""
    for e in w.events(seq0):
        if e["event"] == "connected":
            return round(e["t"] - t_back, 3)
    return None


MONITOR = os.path.join(os.environ.get("BED_OUT", "/tmp"), "dbus-monitor.log")
SIG = re.compile(r"^signal time=([\d.]+) .*path=/org/bluez/hci0/dev_[0-9A-F_]+; "
                 r"interface=org.freedesktop.DBus.Properties; member=PropertiesChanged")
CALL = re.compile(r"^method call time=([\d.]+) .*path=/org/bluez/hci0/dev_[0-9A-F_/a-z]+; "
                  r"interface=org.bluez.GattCharacteristic1; member=StartNotify")


def monitor_size():
    try:
        return os.path.getsize(MONITOR)
    except OSError:
        return 0


def bluez_times(offset):
    """From the bed's dbus-monitor log after `offset` (one clock, the guest's): the first StartNotify
    paird sent, the last ServicesResolved=true before it and the last Connected=true before that.
    Returns (seconds link up → resolved, milliseconds resolved → paird's StartNotify), each None
    if not seen. The second is at most paird's share of a return: the link is the kernel's
    auto-connect, the resolution BlueZ's, what follows the subscription the wearable's."""
    try:
        with open(MONITOR, errors="replace") as f:
            f.seek(offset)
            lines = f.read().split("\n")
    except OSError:
        return None, None
    up = resolved = None
    for i, line in enumerate(lines):
        m = SIG.match(line)
        if m:
            body = "\n".join(lines[i + 1:i + 30]).split("signal time=")[0].split("method ")[0]
            if re.search(r'string "Connected"\s+variant\s+boolean true', body):
                up = float(m.group(1))
            if re.search(r'string "ServicesResolved"\s+variant\s+boolean true', body):
                resolved = float(m.group(1))
            continue
        m = CALL.match(line)
        if m and resolved is not None:
            share = round((float(m.group(1)) - resolved) * 1000, 1)
            return (round(resolved - up, 3) if up is not None and up <= resolved else None), share
    return None, None


def rep(kind, k, p, w, watch, rng):
    reasons0 = len(re.findall(REASONS, p.logtext()))
    mon0 = monitor_size()
    away = link = None
    if kind == "pair":
        rc, _, err = p.pairctl("unpair", w.address, timeout=60)
        if rc != 0:
            raise BedError(f"pairctl unpair exited {rc}: {err.strip()}")
        if PROFILE == "twin":
            # the twin (bluetoothd as a peripheral) refuses a new pairing while it holds the old
            # bond (Tests/testbed/README.md, "What differs from the twin"): back to pairing mode
            w.cmd("forget-bond")
        n0 = len(hr(watch))
        t = now()
        pair(p)
    elif kind in ("return", "stall"):
        if kind == "stall":
            w.cmd("stall-att next")
        w.cmd("walk-away")
        p.wait_state("waitingForDevice", 30)
        away = round(rng.uniform(AWAY_MIN, AWAY_MAX if kind == "return" else STALL_AWAY_MAX), 1)
        bed_sleep(away, f"{kind} {k}: away {away} s")
        n0 = len(hr(watch))
        seq0 = w.last_seq()
        t = now()
        back = w.cmd("come-back")
    else:
        wait_for(lambda: w.status()["subscribed"]["hr"], 30, "the wearable subscribed")
        n = len(hr(watch))
        # the period is learned anew after each probe that found the wearable answering: 8 intervals
        wait_for(lambda: len(hr(watch)) >= n + 11, 40, "11 notifications first (the period learned)")
        t = now()
        w.cmd("drop-subscription hr")
        n0 = len(hr(watch))   # one already on its way counts as before the drop
    wait_for(lambda: len(hr(watch)) > n0, 120, "a heart-rate notification")
    dt = now() - t
    if kind in ("return", "stall") and "t" in back:
        link = link_up_after(w, seq0, back["t"])
    reasons = re.findall(REASONS, p.logtext())[reasons0:]
    resolve = share = None
    if kind != "drop":  # a dropped subscription is taken up again on the same link
        wait_for(lambda: bluez_times(mon0)[1] is not None, 10, "paird's StartNotify in the dbus-monitor log")
        resolve, share = bluez_times(mon0)
    log(f"MEASURED {PROFILE} {kind} {k}: first notification after {dt:.2f} s"
        + (f" (away {away} s)" if away is not None else "")
        + (f"; link up after {link:.2f} s (auto-connect)" if link is not None else "")
        + (f"; resolved {resolve:.2f} s after the link" if resolve is not None else "")
        + (f"; paird's StartNotify {share:.0f} ms after ServicesResolved" if share is not None else "")
        + (f"; paird ended links: {reasons}" if reasons else ""))
    record(kind=kind, rep=k, seconds=round(dt, 3), away=away, link_up=link, over10=dt > 10, reasons=reasons,
           resolve=resolve, paird_ms=share)
    wait_for(lambda: len(hr(watch)) >= n0 + 3, 30, "notifications flowing again")
    return dt


@scenario
def main():
    rng = random.Random(int(E.get("BED_X_SEED", 18)))  # the away draws; another seed, other absences
    w = start_wearable()
    p = Paird()
    p.write_config("[Connection]\nDiscoveryTimeout = 120\n")
    with step(f"paird up, {PROFILE} paired, notifications flowing"):
        p.start()
        watch = p.watch()
        pair(p)
        p.wait_state("connected", 30)
        wait_for(lambda: len(hr(watch)) >= 10, 30, "10 heart-rate notifications (the period learned)")
    figures = {}
    for kind in KINDS:
        with step(f"{PROFILE}: {REPS} × {kind}"):
            figures[kind] = []
            for k in range(1, REPS + 1):
                try:
                    figures[kind].append(rep(kind, k, p, w, watch, rng))
                except BedError as e:
                    # a failed rep is a result too: recorded, then back to a paired, connected wearable
                    log(f"FAILED {PROFILE} {kind} {k}: {e}; status {p.status()}; wearable {w.status()}")
                    record(kind=kind, rep=k, seconds=None, failed=str(e))
                    try:
                        w.cmd("come-back")
                        if p.device(w.address) is None:
                            pair(p)
                        p.wait_state("connected", 90, w.address)
                    except BedError as e2:
                        raise BedError(f"could not recover after the failed rep: {e2}") from e2
    log(f"stall benchmark, seconds to the first heart-rate notification ({PROFILE}, 1 Hz):")
    for kind, xs in figures.items():
        if not xs:
            log(f"  {kind:7s} no rep succeeded")
            continue
        log(f"  {kind:7s} n={len(xs):3d}  p50 {pct(xs, 50):6.2f}  p95 {pct(xs, 95):6.2f}  max {max(xs):6.2f}"
            f"  over 10 s: {sum(x > 10 for x in xs)}")


main()
