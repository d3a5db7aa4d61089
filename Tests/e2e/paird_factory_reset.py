#!/usr/bin/python3
# testbed: mode=plain timeout=420 wearables=strap twin=no-bumble-only
# (paird_factory_reset_systemd.py runs this same file in systemd mode)
"""A factory-reset wearable is paired again with the one command paird names (issue 30, item 1).

The strap is paired, then forgets its bond (a factory reset: `forget-bond`, its link drops and it
advertises again). paird must reach `needsRepair` and leave **no link up** to it: entering
needsRepair disarms the auto-connect, but the kernel's pending connection can still win the race,
and a connected wearable does not advertise, so nothing could find it. Then `pairctl pair ADDRESS`,
exactly what status tells the user, must end in exit 0 with the strap connected and notifying, in
that one command: paird removes the stale bond only once the strap is heard advertising and starts
the scan for it again only once BlueZ removed the object (before, Pair() went to the object being
removed: connect-timeout).

On Debian 12's own kernel (6.1; `linux-6.1:paird_factory_reset`) the central's encryption with the
stale key oopses the kernel (list_del corruption in hci_chan_del) and bluetoothd dies each time the
kernel's auto-connect links the reset strap (issue 49). Here, as D-Bus activation or a supervisor
would, bluetoothd is started again 1 s after it dies (plain mode: the scenario's own supervisor;
systemd mode: D-Bus activation). paird must then name the strap as the cause by itself: at most
2 deaths of bluetoothd per reset, needsRepair, no link after it, and the one command repairs it.
On 6.12 bluetoothd does not die and the supervisor has nothing to do (its count is printed).

Repeated BED_X_REPS times (default 3; the issue asks 10 of 10: `BED_X_REPS=10 BED_TIMEOUT_S=1000`,
the header's deadline being for 3), each repair timed. Fails on: no needsRepair, a link up at the end of 10 s watched after needsRepair
(Device1.Connected, or the strap's own view), more than one link-up of the strap after needsRepair
(its own `connected` events: the one race above is allowed), an exit other than 0, no "removing the old bond" line, not connected or not notifying afterwards."""
import os
import subprocess
import threading
import time

from bedlib import *

REPS = int(os.environ.get("BED_X_REPS", "3"))
# BED_X_SECOND=1 (paird_factory_reset_two.py): a second wearable, the ring on hci2, connected
# throughout; after each return of bluetoothd it must notify again (the time from the return to
# its first notification is printed, with how many were within 5 s: a figure, not a check).
SECOND = os.environ.get("BED_X_SECOND") == "1"
HR = "00002a37-0000-1000-8000-00805f9b34fb"
WINDOW = 10   # seconds the link to the needsRepair strap is watched for staying down


def crashed_or_bug():
    """The bed's known BlueZ 5.66 / kernel troubles (Tests/testbed/README.md): said, never hidden."""
    return kernel_bug() or bluetoothd_crash()


def bluetoothd_pids():
    """The PIDs of the running bluetoothd processes (either mode)."""
    out = subprocess.run(["pgrep", "-x", "bluetoothd"], capture_output=True, text=True).stdout
    return {int(x) for x in out.split()}


class Supervisor(threading.Thread):
    """Counts bluetoothd's deaths in both modes: each bluetoothd PID that goes away (polled every
    0.1 s; a start takes longer than that, so no death hides between two polls). Plain mode: also
    starts it again 1 s after it died, as D-Bus activation or a supervisor does on a host. systemd
    mode: paird starts it again itself (StartServiceByName after systemd's word of a crash)."""

    def __init__(self):
        super().__init__(daemon=True)
        self.deaths = []
        self.returns = []   # when a bluetoothd PID appeared after none
        self.done = threading.Event()

    def run(self):
        seen = bluetoothd_pids()
        while not self.done.wait(0.1):
            try:
                pids = bluetoothd_pids()
                for pid in sorted(seen - pids):
                    self.deaths.append(now())
                    log(f"supervisor: bluetoothd {pid} is gone (death {len(self.deaths)}; dmesg: {kernel_bug() or bluetoothd_crash()})"
                        + ("; starting it again in 1 s" if MODE == "plain" else ""))
                if pids and not seen:
                    self.returns.append(now())
                seen = pids
                if MODE == "plain" and not pids:
                    self.done.wait(1)
                    bluetoothd("start")
                    seen = bluetoothd_pids()
                    if seen:
                        self.returns.append(now())
            except Exception as e:  # noqa: BLE001 - said, then tried again on the next poll
                log(f"supervisor: {type(e).__name__}: {e}")

    def stop(self):
        self.done.set()


def ring_notifies_after(watch, ring, t):
    """The time the scenario first saw a ring heart-rate notification line of `pairctl watch`
    after `t` (the watcher thread stamps each line), or None."""
    return watch_stamps.first_after(watch, ring.address, t)


class WatchStamps:
    """Stamps `pairctl watch`'s ring notification lines with the scenario's clock as they appear
    (polled every 0.05 s; `pairctl watch` prints them as paird emits them)."""

    def __init__(self):
        self.stamps = {}   # (address, line index) -> first seen
        self.lock = threading.Lock()

    def first_after(self, watch, address, t):
        self.poll(watch)
        with self.lock:
            ts = sorted(v for (a, _), v in self.stamps.items() if a == address and v > t)
        return ts[0] if ts else None

    def poll(self, watch):
        ls = watch.lines()
        seen = now()
        with self.lock:
            for k, l in enumerate(ls):
                f = l.split()
                if len(f) > 3 and f[2] == "notify" and f[3] == HR and (f[1], k) not in self.stamps:
                    self.stamps[(f[1], k)] = seen

    def follow(self, watch):
        def loop():
            while True:
                self.poll(watch)
                time.sleep(0.05)
        threading.Thread(target=loop, daemon=True).start()


watch_stamps = WatchStamps()


@scenario
def main():
    if SECOND:
        w = Wearable.start(profile="strap", adapter="hci1", sock="/run/bed/strap.sock")
        ring = Wearable.start(profile="ring", adapter="hci2", sock="/run/bed/ring.sock",
                              extra=["--drop-every", "0", "--drain-every", "0"])
    else:
        w, ring = Wearable.start(profile="strap"), None
    sup = Supervisor()
    sup.start()
    at_exit(sup.stop)
    p = Paird()
    c = Central("hci0")
    with step("paird up, the strap paired (pairctl pair --service 180d), connected"
              + ("; the ring paired (pairctl pair --name Ring-1), both notifying" if SECOND else "")):
        p.start()
        if SECOND:
            for name in ("Pulse-1", "Ring-1"):
                rc, _, err = p.pairctl("pair", "--name", name, "--timeout", "30", timeout=120)
                check(rc == 0, f"pairctl pair --name {name}: exit {rc} {err.strip()}")
            p.wait_state("connected", 30, address=w.address)
            p.wait_state("connected", 30, address=ring.address)
            watch = p.watch()
            watch_stamps.follow(watch)
            wait_for(lambda: ring_notifies_after(watch, ring, 0), 30, "the ring notifying")
        else:
            pair_wearable(p)
            p.wait_state("connected", 30)
    ring_back = []   # seconds from each return of bluetoothd to the ring's next notification (None: died first)

    times = []
    for i in range(1, REPS + 1):
        with step(f"rep {i}/{REPS}: factory reset → needsRepair, at most 2 deaths of bluetoothd"):
            t = now()
            deaths0 = len(sup.deaths)
            w.cmd("forget-bond")
            wait_for(lambda: w.status()["advertising"] or w.status()["connected"], 15, "the strap advertising (or linked) again")
            try:
                p.wait_state("needsRepair", 150, address=w.address)
                seq_repair = w.last_seq()   # the strap's events from here on are after needsRepair
            except BedError:
                why = crashed_or_bug()
                if why:
                    log(f"KNOWN BLUEZ 5.66 / KERNEL PROBLEM (README): {why}")
                raise
            t_repair = now() - t
            log(f"rep {i}: MEASURED needsRepair {t_repair:.2f} s after forget-bond; {p.device(w.address)['lastDisconnect']}")
            log(f"rep {i}: bluetoothd died {len(sup.deaths) - deaths0} time(s) on the way (kernel BUG: {kernel_bug()})")
            check(len(sup.deaths) - deaths0 <= 2, f"at most 2 deaths of bluetoothd for this reset ({len(sup.deaths) - deaths0})")

        with step(f"rep {i}/{REPS}: no link stays up to the needsRepair strap; it advertises"):
            # needsRepair may come at bluetoothd's second departure: wait for its return (the
            # supervisor or D-Bus activation) before asking BlueZ anything.
            c.wait_bluez_back(60)
            dev = c.device_by_address(w.address)
            check(dev is not None and c.prop(dev, "Paired"), "BlueZ still holds the dead bond (nothing removed yet)")
            t = now()

            def bluez_connected():
                """Device1.Connected; False while bluetoothd is away (a death is the supervisor's
                count, and the strap's own view below still sees any link)."""
                try:
                    return bool(c.bluez_up() and c.prop(dev, "Connected"))
                except Exception as e:  # noqa: BLE001 - bluetoothd left between the two calls
                    log(f"Device1.Connected unreadable ({type(e).__name__}): bluetoothd away")
                    return False

            def down():
                st = w.status()
                return not bluez_connected() and not st["connected"] and st["advertising"]
            wait_for(down, 10, "Device1.Connected false, the strap unlinked and advertising")
            log(f"rep {i}: link down and advertising {now() - t:.2f} s after needsRepair was seen")
            # Down once is not "stays down": watch it for WINDOW s, both ends (BlueZ's
            # Device1.Connected, the strap's own `connected` events), every 0.2 s.
            n = {"samples": 0, "up": 0}
            end = now() + WINDOW

            def sample():
                n["samples"] += 1
                n["up"] += bool(bluez_connected() or w.status()["connected"])
                return now() >= end
            log(f"watching the link for {WINDOW:g} s on purpose: it must stay down")
            wait_for(sample, WINDOW + 10, f"{WINDOW:g} s of samples", interval=0.2)
            up_samples, samples = n["up"], n["samples"]
            evs = w.events(seq_repair)
            ups = [e for e in evs if e["event"] == "connected"]
            downs = [e for e in evs if e["event"] == "disconnected"]
            log(f"rep {i}: after needsRepair the strap saw {len(ups)} link-up(s), {len(downs)} drop(s); "
                f"link up in {up_samples} of {samples} samples over {WINDOW:g} s")
            # the one race the docstring allows: the kernel's pending connection, made before the
            # auto-connect was disarmed, may still come up once; anything more is paird linking it
            check(len(ups) <= 1, f"at most one link-up of the strap after needsRepair (the disarm race): {len(ups)}")
            check(len(downs) >= len(ups), f"every link-up after needsRepair dropped again ({len(ups)} up, {len(downs)} down)")
            st = w.status()
            check(not bluez_connected() and not st["connected"] and st["advertising"],
                  f"after {WINDOW:g} s: Device1.Connected false, the strap unlinked and advertising")
            check(p.state(w.address) == "needsRepair", "still needsRepair")
            check(len(sup.deaths) - deaths0 <= 2, f"still at most 2 deaths of bluetoothd for this reset ({len(sup.deaths) - deaths0})")
            wait_for(lambda: bluetoothd("status") == "active", 60, "bluetoothd up before the repair")

        if SECOND:
            with step(f"rep {i}/{REPS}: the ring notifies again after each return of bluetoothd"):
                rets = [r for r in sup.returns if r >= t]
                if not rets:
                    log(f"rep {i}: bluetoothd never died (this kernel does not crash on the stale key): no return to measure")
                wait_for(lambda: ring_notifies_after(watch, ring, rets[-1] if rets else t), 60,
                         "a ring notification after bluetoothd's last return" if rets else "a ring notification after the reset")
                for k, r in enumerate(rets):
                    nxt = next((d for d in sup.deaths if d > r), None)
                    first = ring_notifies_after(watch, ring, r)
                    took = first - r if first is not None and (nxt is None or first < nxt) else None
                    ring_back.append(took)
                    log(f"rep {i}: return {k + 1}: the ring notified "
                        + (f"{took:.2f} s after it" if took is not None else "not before bluetoothd's next death"))
                check(p.state(ring.address) == "connected", f"the ring connected ({p.state(ring.address)})")

        with step(f"rep {i}/{REPS}: pairctl pair ADDRESS → exit 0, connected, notifying, in one command"):
            t = now()
            rc, out, err = p.pairctl("pair", w.address, "--timeout", "20", timeout=120)
            t_pair = now() - t
            for line in out.splitlines():
                log(f"  | {line}")
            if rc != 0:
                why = crashed_or_bug()
                if why:
                    log(f"KNOWN BLUEZ 5.66 / KERNEL PROBLEM (README): {why}")
            check(rc == 0, f"pairctl pair {w.address}: exit 0, got {rc}: {err.strip()}")
            check(any("removing the old bond" in l for l in out.splitlines()), "paird removed the old bond itself")
            check(p.state(w.address) == "connected", f"connected when pairctl returned ({p.state(w.address)})")
            wait_for(lambda: w.status()["subscribed"]["hr"], 10, "the strap's heart rate subscribed")
            hr = c.char(c.device_by_address(w.address), HR_MEAS)
            t_n = now()
            wait_for(lambda: len(c.values(hr, since=t_n)) >= 2, 10, "2 heart-rate notifications on the new link")
            check(w.status()["bonds"], f"the strap holds a new bond: {w.status()['bonds']}")
            check(paired_in_bluez(w.address), "BlueZ holds the new bond")
            times.append((t_repair, t_pair))
            log(f"rep {i}: TIME pairctl pair {w.address}: {t_pair:.2f} s (exit 0, connected, notifying); "
                f"needsRepair came {t_repair:.2f} s after the reset")

    if SECOND:
        ok = [x for x in ring_back if x is not None]
        log(f"MEASURED: the ring notified again after {len(ok)} of {len(ring_back)} returns of bluetoothd, "
            f"{sum(x <= 5 for x in ok)} within 5 s; times (s): " + ", ".join("-" if x is None else f"{x:.2f}" for x in ring_back))
    log(f"MEASURED: {len(times)} of {REPS} repairs in one command; pairctl pair times (s): "
        + ", ".join(f"{b:.2f}" for _, b in times)
        + "; forget-bond → needsRepair (s): " + ", ".join(f"{a:.2f}" for a, _ in times))


main()
