#!/usr/bin/python3
# testbed: mode=plain timeout=2400
"""Reconnect latency, side by side: paird vs (a) kernel auto-connect alone, (b) a `bluetoothctl
connect` loop, (c) a bleak + bleak-retry-connector keeper.  Run by Tests/bench/bench.sh in the
real-BlueZ test bed; prints figures and writes $BED_OUT/results.jsonl.  Never asserts on time.

One rep: the wearable walks away (HCI_Disconnect 0x08, advertising off), stays away AWAY s,
comes back (advertising on), and we time, on one wall clock in the guest:
  t_adv   the wearable's `advertising on` (RegisterAdvertisement replied)
  t_conn  Device1 Connected=true on hci0 (not always signalled on 5.66, see testbed.md)
  t_sr    Device1 ServicesResolved=true on hci0
  t_bz    first BlueZ PropertiesChanged(Value) on 0x2A37 (a passive D-Bus monitor)
  t_cl    first heart-rate notification *as the approach's client sees it*: paird's
          Notification signal (what `pairctl watch` receives), the python clients' Value
          signal, bleak's notify callback.
Approaches run one at a time, each in one block (bluetoothctl loop, bleak, auto-connect, paird:
see the comment in main() on why not interleaved).  Env: BED_X_REPS5 (20), BED_X_REPS60 (2),
BED_X_REPS300 (0),
BED_X_HR (heart-rate period of the bench wearable, 0.1 s), BED_X_ONLY (comma list of names).
If bluetoothd dies (5.66 segfaults now and then on the 6.12 bed), it is started again, the rep
counts as failed with `bluetoothd_crash` and the approach is restarted; the summary lists each crash.
BED_X_KILL_BLUETOOTHD=APPROACH:REP (e.g. paird:2) kills bluetoothd before that rep, to exercise it."""
import contextlib
import json
import math
import subprocess
import os
import sys

sys.path.insert(0, os.path.join(os.environ.get("BED_REPO", "/work/main"), "Tests", "bench"))
from bedlib import *  # noqa: E402,F403
from benchlib import *  # noqa: E402,F403

E = os.environ
REPS = [(5, int(E.get("BED_X_REPS5", 20))), (60, int(E.get("BED_X_REPS60", 2))),
        (300, int(E.get("BED_X_REPS300", 0)))]
HR = float(E.get("BED_X_HR", 0.1))
ONLY = [s for s in E.get("BED_X_ONLY", "").split(",") if s]


def forwarding_latency(m, since):
    """paird's per-notification forwarding time in steady state: each paird Notification
    minus the BlueZ Value signal with the same value just before it (same monitor)."""
    out, last = [], {}
    for t, k, v in m.ev:
        if t < since:
            continue
        if k == "bluez-hr":
            last[v] = t
        elif k == "paird-hr" and v in last:
            out.append(t - last.pop(v))
    return out


@scenario
def main():
    log(f"plan: {REPS}, wearable heart-rate period {HR} s")
    if E.get("BED_X_DEBUG_MONITOR"):   # debugging aid: every paird signal, timestamped
        mon = subprocess.Popen(["dbus-monitor", "--system", "interface='org.paird1.Manager1'"],
                               stdout=open(os.path.join(OUT, "dbus-paird.txt"), "w"), stderr=subprocess.STDOUT)
        at_exit(mon.kill)
    w = start_wearable(hr_interval=HR)
    m = Monitor()
    c = Central("hci0")
    paird = PairdApproach(m)
    with step("the wearable bonded through BlueZ alone (no GattProfile1 yet)"):
        pair_directly(c)
        m.hr_path = find_hr_path(c)
        paird.adopt_bond()
    # Order matters: a GattProfile1 (approach (a) and paird) leaves the wearable on the kernel's
    # auto-connect list for good (its owner leaving the bus does not remove it, and removing it
    # with Device1.Disconnect() or a bluetoothd restart trips the bed kernel's hci_chan_del BUG),
    # so the approaches that must not benefit from it run first, each in one block.
    approaches = [BtctlLoop(m), BleakKeeper(m), AutoConnect(m), paird]
    if ONLY:
        approaches = [a for a in approaches if any(o in a.name for o in ONLY)]
    broken, failures, crashes = {}, {}, []
    current = None

    def bluetoothd_revived(where):
        """bedlib.revive_bluetoothd, recorded: the rep it happened in is recorded as failed with
        `bluetoothd_crash` (report.py lists it apart), and the approach is then restarted."""
        why = revive_bluetoothd(w)
        if why is None:
            return False
        crashes.append(dict(where=where, dmesg=why))
        log(f"bluetoothd was gone ({where}): {why}; started it again")
        return True

    def switch_to(a):
        """Stop the previous approach (the link stays up), start this one, wait until its
        client sees notifications."""
        nonlocal current
        if current is a:
            return
        if current is not None:
            current.stop()
        a.start()
        current = a
        a.wait_flowing(120)

    def recover(a):
        """After a failed rep: restart the approach (paird adopts a live link) and go on."""
        a.stop()
        with contextlib.suppress(BedError):
            w.cmd("come-back")
        a.start()
        a.wait_flowing(120)

    def one_rep(a, away, i):
        if E.get("BED_X_KILL_BLUETOOTHD") == f"{a.name}:{i}":   # exercises the crash handling below
            log(f"BED_X_KILL_BLUETOOTHD: SIGKILL to bluetoothd before {a.name} rep {i}")
            bluetoothd("kill")
        since = wall()
        ca0 = connect_attempts()
        t_walk = wall()
        w.cmd("walk-away")
        t_down = wait_for(lambda: m.first("Connected", t_walk, False), 20, "Connected=false on hci0")
        bed_sleep(away, f"{a.name}: wearable away (rep {i}, {away} s)")
        t_back = wall()
        w.cmd("come-back")
        err = None
        try:
            wait_for(lambda: a.alive() and a.first_notif(t_back), 45,
                     f"{a.name}: first notification after come-back")
        except BedError as e:
            err = str(e)
        if not err:   # let the rest arrive: ServicesResolved (after the first notification, here) and paird's state
            with contextlib.suppress(BedError):
                wait_for(lambda: m.first("ServicesResolved", t_back, True), 40, "ServicesResolved=true")
            if a is paird:
                with contextlib.suppress(BedError):
                    wait_for(lambda: m.first("paird-state", t_back, "connected"), 40, "paird state connected")
            try:
                a.wait_flowing(30, n=3)
            except BedError as e:
                err = f"notifications stopped after the first: {e}"
        adv = wearable_event_after(w, "advertising", t_back, on=True)
        t_adv = adv["wall"] if adv else t_back
        r = dict(bench="reconnect", approach=a.name, away=away, rep=i, t_walk=t_walk, t_down=t_down,
                 t_back=t_back, t_adv=t_adv, t_conn=m.first("Connected", t_back, True),
                 t_sr=m.first("ServicesResolved", t_back, True), t_bz=m.first("bluez-hr", t_back),
                 t_cl=a.first_notif(t_back), error=err)
        if a is paird:
            r["t_state"] = m.first("paird-state", t_back, "connected")
        r["connect_attempts"] = connect_attempts() - ca0
        if err and bluetoothd_revived(f"{a.name}, away {away} s, rep {i}"):
            r["bluetoothd_crash"] = True
            err = r["error"] = f"bluetoothd crashed: {err}"
        if a is paird:
            r["forwarding"] = forwarding_latency(m, since)
        record(**r)
        f = lambda k: f"{(r[k] - t_adv) * 1000:7.1f}" if r.get(k) else "     — "  # noqa: E731
        log(f"{a.name:32s} away {away:3d}s rep {i:2d}: adv→conn {f('t_conn')}  →SR {f('t_sr')}  "
            f"→bluez value {f('t_bz')}  →client {f('t_cl')}" + (f"  →paird connected {f('t_state')}" if a is paird else "") + f" ms   connects {r['connect_attempts']}"
            + (f"  ERROR {err}" if err else ""))
        return err

    for a in approaches:
        for away, reps in REPS:
            if reps <= 0 or a.name in broken:
                continue
            done, revivals = 0, 0
            while done < reps:
                try:
                    with step(f"{a.name}: away {away} s, reps {done + 1}..{reps}"):
                        switch_to(a)
                        while done < reps:
                            done += 1
                            if one_rep(a, away, done):
                                failures[a.name] = failures.get(a.name, 0) + 1
                                log(f"{a.name}: rep failed; restarting it and going on")
                                recover(a)
                except BedError as e:
                    a.stop()
                    current = None
                    revived = bluetoothd_revived(f"{a.name}, away {away} s, after rep {done}")
                    with contextlib.suppress(BedError):
                        w.cmd("come-back")   # after the revival: a wearable that was away advertises again
                    if revived and revivals < 3:
                        revivals += 1
                        log(f"{a.name}: {e}; bluetoothd had crashed: the block goes on after rep {done}")
                        continue
                    broken[a.name] = str(e)
                    log(f"{a.name}: giving up on it for the rest of the run: {e}")
                    break

    # the summary this program prints (bench.sh / report.py make the tables from results.jsonl)
    rows = [json.loads(x) for x in open(RESULTS)]
    print("\nreconnect latency from the wearable's `advertising on` (ms):", flush=True)
    for away, _ in REPS:
        for a in approaches:
            rs = [r for r in rows if r.get("bench") == "reconnect" and r["approach"] == a.name and r["away"] == away]
            if rs:
                sr = [r["t_sr"] - r["t_adv"] for r in rs if r["t_sr"]]
                cl = [r["t_cl"] - r["t_adv"] for r in rs if r["t_cl"]]
                print(f"  away {away:3d} s  {a.name:32s} ServicesResolved {summary(sr)} | "
                      f"client notification {summary(cl)}", flush=True)
    for name, k in failures.items():
        print(f"  FAILED REPS: {name}: {k} (no notification within 45 s of the come-back, or none for 30 s after the first; restarted)", flush=True)
    for name, why in broken.items():
        print(f"  BROKEN: {name}: {why}", flush=True)
    for c in crashes:
        print(f"  BLUETOOTHD CRASHED ({c['where']}): {c['dmesg']}; started again", flush=True)
        record(bench="bluetoothd-crash", **c)


main()
