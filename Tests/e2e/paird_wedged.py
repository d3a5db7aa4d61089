#!/usr/bin/python3
# testbed: mode=plain timeout=300 wearables=strap,ring twin=no-bumble-only controllers=3
"""Issue 32: a wedged adapter is recovered by a ladder.

The failure (reported on Linux hosts): the controller's firmware is stuck refusing new LE
connections (dmesg "Opcode 0x200d failed", Command Disallowed) until it is reset. The bed's
btvirt (btvirt/btvirt-wedge.patch) models it on controller 0, the central (hci0): `kill -URG
<btvirt>` with /run/bed/wedge saying "soft" (an HCI Reset clears it: the kernel sends one at
every power-on), "hard" (only the signal clears it) or "off". The strap holds hci1, the ring
hci2 (Bumble, its own drops and drain off).

0. The bed, without paird: with a soft wedge, BlueZ's Device1.Connect() (what `bluetoothctl
   connect` calls) to the advertising strap fails fast (printed: the error BlueZ 5.66 returns and
   how long it took; checked: it ends on the refusal, bluetoothd's att_connect_cb() EBUSY, not on
   the connection timeout an absent device costs after ~40 s); dmesg's lines
   printed; `btmgmt --index 0 power off` + `power on` clears it (btvirt: "cleared by HCI
   Reset"; the pairings that follow connect).
paird, with two wearables paired on hci0 (`pairctl pair --service 180d --name …`), both
connected and notifying; [Connection] WedgePowerCycles = 2, WedgeProbeInterval = 5 and short
timers. paird is never restarted in (a) and (b): after the links drop, both wearables wait on the
kernel's auto-connect, whose refusals BlueZ 5.66 tells D-Bus nothing of (mgmt Connect Failed,
status Busy, goes to bluetoothd only); paird finds the wedge with its probe (one Connect() every
WedgeProbeInterval while every wearable on the adapter waits so; a refusal at once asks the
other at once).
(a) soft wedge; both links drop (walk-away) and both advertise again (come-back): paird's log
    says "wedge probe: Connect()"; each passes through needsRepair (suspected-bond-loss) or goes
    adapterUnavailable directly; paird says the adapter is wedged and power-cycles it (log:
    "wedged" + "power-cycl", counted "(1/2)"; Adapter1.Powered false → true on D-Bus); btvirt: "cleared by HCI
    Reset"; both back, connected and notifying, with no pairctl command. MEASURED: links dropped
    → paird's probe, and → both notifying again.
(b) hard wedge, the same: paird power-cycles exactly twice (Powered=false seen twice; btvirt:
    two "HCI Reset does not clear a hard wedge"), then says the cap is reached and what a person
    must run (btmgmt / unplug); no third power cycle and no state change in the next
    BED_X_QUIET_S (12) s (three times AutoConnectHeadStart), both adapterUnavailable. Then the
    wedge is lifted (the signal) and a person power-cycles (`bluetoothctl power off`, `power
    on`): both back and notifying.
(c) only the strap paired (the ring unpaired), a soft wedge, the strap drops and returns: no
    probe for one wearable in BED_X_PASSIVE_S (7) s (longer than WedgeProbeInterval); then paird
    is restarted (its start-up Connect() meets the wedge): needsRepair (suspected-bond-loss) and
    no power cycle (one wearable's lost bond and a wedged adapter look the same to paird).
BED_X_WEDGE_PARTS (default "abc"): which of (a), (b), (c) to run (step 0 always runs)."""
import contextlib
import os
import re
import signal

import dbus

from bedlib import *

HR = HR_MEAS
WEDGE_FILE = "/run/bed/wedge"
BTVIRT_LOG = os.path.join(OUT, "btvirt.log")
QUIET_S = int(os.environ.get("BED_X_QUIET_S", "12"))
PASSIVE_S = int(os.environ.get("BED_X_PASSIVE_S", "7"))
PARTS = os.environ.get("BED_X_WEDGE_PARTS", "abc")   # which of (a) (b) (c) to run
# SetupFailuresBeforeRepair = 1: paird's own Connect() after a (re)start or the adapter's return
# is one (AutoConnectHeadStart); a refused one counts one setup failure and paird then waits on the
# kernel's auto-connect, whose refusals 5.66 does not report on D-Bus (measured on the bed: with 2
# the wearables stayed waitingForDevice, "1 connect attempt(s)", for 60 s under the wedge).
# AutoConnectHeadStart = 4: the kernel's auto-connect gets the first go at the adapter's return.
# (Both wearables linking in the same instant there failed the strap's encryption, 0x05, in the
# first runs: btvirt's one LTK per controller, fixed by btvirt/btdev-ltk-per-link.patch.)
CONFIG = """[Connection]
FallbackInterval = 5
AutoConnectHeadStart = 4
SetupFailuresBeforeRepair = 1
FastAttempts = 3
BackoffInitial = 0.5
BackoffMax = 2
AbsentAfter = 10
WedgePowerCycles = 2
WedgeProbeInterval = 5
"""


# ---------------------------------------------------------------- helpers
def btvirt_lines():
    with open(BTVIRT_LOG, errors="replace") as f:
        return f.read().splitlines()


def bluetoothd_lines():
    """bluetoothd's debug log so far (bluetoothd -d)."""
    with open(os.path.join(OUT, "bluetoothd.log"), errors="replace") as f:
        return f.read().splitlines()


def wedge(mode):
    """Set controller 0's wedge: "soft", "hard" or "off" (btvirt-wedge.patch); waits for btvirt's line."""
    os.makedirs(os.path.dirname(WEDGE_FILE), exist_ok=True)
    with open(WEDGE_FILE, "w") as f:
        f.write(mode + "\n")
    n = len(btvirt_lines())
    os.kill(btvirt_pid(), signal.SIGURG)
    want = f"wedged ({mode})" if mode != "off" else "unwedged by the signal"
    line = wait_for(lambda: next((l for l in btvirt_lines()[n:] if want in l), None), 10,
                    f"btvirt's line '{want}' (is BED_BTVIRT the bed's patched btvirt?)")
    log(f"btvirt: {line}")


def dmesg_lines(since=0):
    out = sh("dmesg", check=False).splitlines()
    return out[since:]


def complete_lines(watch):
    """pairctl watch's lines so far, without a last one still being written."""
    with open(watch.path, errors="replace") as f:
        text = f.read()
    return text[:text.rfind("\n") + 1].splitlines()


def hr_of(lines, address):
    return [l for l in lines if " notify " in l and l.split()[1] == address and l.split()[3] == HR]


def states_of(lines, address):
    """(state, reason or None) of `address` in `pairctl watch` lines (`<time> <address> state <state> [reason]`)."""
    out = []
    for l in lines:
        f = l.split()
        if len(f) >= 4 and f[2] == "state" and f[1] == address:
            out.append((f[3], " ".join(f[4:]) or None))
    return out


class Seen:
    """What `pairctl status --json` said of each wearable, every time it was asked (state,
    repairReason, lastDisconnect.reason), without repeats."""

    def __init__(self, p, addrs):
        self.p, self.seen = p, {a: [] for a in addrs}

    def poll(self):
        st = self.p.status()
        for d in st["devices"]:
            a = d["address"]
            if a in self.seen:
                t = (d["state"], d.get("repairReason"), (d.get("lastDisconnect") or {}).get("reason"))
                if not self.seen[a] or self.seen[a][-1] != t:
                    self.seen[a].append(t)
        return st

    def state(self, a):
        return self.seen[a][-1][0] if self.seen[a] else None


@scenario
def main():
    if not os.environ.get("BED_BTVIRT"):
        raise BedFatal("needs the bed's patched btvirt (one handle per link, the wedge on SIGURG; "
                       "run-vm builds it with Tests/testbed/btvirt/build): BED_BTVIRT=stock was given or the build failed")
    strap = Wearable.start(profile="strap", adapter="hci1", sock="/run/bed/strap.sock")
    ring = Wearable.start(profile="ring", adapter="hci2", sock="/run/bed/ring.sock",
                          extra=["--drop-every", "0", "--drain-every", "0"])   # a steady stream
    ws = (strap, ring)
    names = {strap.address: "Pulse-1", ring.address: "Ring-1"}
    c = Central("hci0")   # its history: Adapter1.Powered on hci0, i.e. every power cycle, whoever does it

    def power_offs(since):
        return sum(1 for t, k, path, d in c.history if t >= since and k == "props" and path == c.apath
                   and d[0] == ADAPTER and d[1].get("Powered") is not None and not bool(d[1]["Powered"]))

    # ---------------------------------------------------------- 0. the bed's wedge, BlueZ alone
    with step("the bed: a soft wedge → BlueZ's Device1.Connect() to the advertising strap fails fast (printed: what 5.66 returns)"):
        dev = c.discover(name="Pulse-1", deadline=20)
        d0 = len(dmesg_lines())
        b0 = len(btvirt_lines())
        wedge("soft")
        # Trusted, as paird's wearables are: BlueZ 5.66 puts a device neither paired nor trusted
        # back to temporary when its connection fails and removes it, and the pending Connect()
        # is then never answered (seen: NoReply after our 60 s D-Bus timeout, the kernel's refusal
        # and mgmt Connect Failed (Busy) 4 ms after the command).
        c.set(dev, "Trusted", dbus.Boolean(True))
        bt0 = len(bluetoothd_lines())
        t = now()
        err = None
        try:
            c.connect(dev, timeout=60)
        except dbus.exceptions.DBusException as e:
            err = e
        dt = now() - t
        check(err is not None, f"Connect() failed under the wedge (it returned after {dt:.2f} s)")
        log(f"MEASURED BlueZ Device1.Connect() under a soft wedge: {err.get_dbus_name()} "
            f"\"{err.get_dbus_message()}\" after {dt:.2f} s")
        refused = [l for l in btvirt_lines()[b0:] if "refused 0x" in l]
        check(refused, "btvirt refused an LE Create Connection")
        log(f"btvirt: {refused[0]} … ({len(refused)} refusal line(s))")
        for l in dmesg_lines(d0):
            log(f"  dmesg | {l}")
        # "fast" is the outcome, not a time (its duration is the MEASURED figure above): the call
        # ended on the controller's refusal passed up (the kernel's Command Disallowed → mgmt
        # Connect Failed → bluetoothd's att_connect_cb() with EBUSY, README "Measured"), not on
        # the connection timeout an absent device ends with (~40 s, "timed out").
        cb = [l.split('] ', 1)[-1] for l in bluetoothd_lines()[bt0:] if 'connect_failed_callback' in l or 'att_connect_cb' in l]
        log(f"bluetoothd: {cb[-3:]}")
        check(any("att_connect_cb" in l and "busy" in l.lower() for l in cb),
              "bluetoothd's att_connect_cb() for this Connect() says busy (the refusal), not a timeout")
        check(not any("timed out" in l.lower() or "timeout" in l.lower() for l in cb),
              "no connection timeout in bluetoothd's connect callbacks for this Connect()")
    with step("the bed: btmgmt --index 0 power off + power on (an HCI Reset at power-on) clears a soft wedge"):
        b0 = len(btvirt_lines())
        sh("btmgmt --index 0 power off")
        sh("btmgmt --index 0 power on")
        line = wait_for(lambda: next((l for l in btvirt_lines()[b0:] if "cleared by HCI Reset" in l), None), 15,
                        "btvirt: cleared by HCI Reset")
        log(f"btvirt: {line}")
        wait_for(lambda: c.prop(c.apath, "Powered", ADAPTER), 15, "hci0 powered on org.bluez")
        # (the pairings below connect: they prove it cleared)
        with contextlib.suppress(dbus.exceptions.DBusException):
            c.iface(c.apath, ADAPTER).RemoveDevice(dev)   # no leftover object for paird to meet
        wait_for(lambda: all(w.status()["advertising"] for w in ws), 20, "both wearables advertising again")

    # ---------------------------------------------------------- paird, two wearables
    p = Paird()
    p.write_config(CONFIG)
    with step("paird up (WedgePowerCycles = 2, short timers); strap and ring paired by pairctl pair --service 180d --name"):
        p.start()
        pw = p.watch()
        for w in ws:
            rc, out, err = p.pairctl("pair", "--service", "180d", "--name", names[w.address], "--timeout", "30", timeout=120)
            for line in (out + err).splitlines():
                log(f"  | {line}")
            check(rc == 0, f"pairctl pair --name {names[w.address]}: exit 0, got {rc}: {err.strip()}")
            p.wait_state("connected", 30, address=w.address)
    seen = Seen(p, [w.address for w in ws])

    def notifying(since, n=2, deadline=60, who=ws):
        for w in who:
            wait_for(lambda: len(hr_of(complete_lines(pw)[since:], w.address)) >= n, deadline,
                     f"{n} heart-rate notifications from {names[w.address]}")

    with step("both connected and notifying"):
        notifying(len(complete_lines(pw)), deadline=20)

    def drop_and_return(who, passive=0, restart=False):
        """The links drop (walk-away: HCI_Disconnect 0x08 from the wearable) and the wearables advertise again."""
        for w in who:
            seq = w.last_seq()
            w.cmd("walk-away")
            w.wait_event("disconnected", 10, since=seq)
        for w in who:
            w.cmd("come-back")
        if passive:
            # A window in which paird must not probe (one wearable): what it did is printed.
            t, b = now(), len(btvirt_lines())
            bed_sleep(passive, "one wearable waiting on the auto-connect: paird must not probe")
            log(f"passive {passive} s: states {[(names[w.address], p.state(w.address)) for w in who]}, "
                f"btvirt refusals {sum(1 for l in btvirt_lines()[b:] if 'refused 0x' in l)}")
        if restart:
            log("paird restarted: its start-up Connect()s meet the wedge")
            p.restart()

    def wedge_lines(since, *words):
        return [l for l in p.logtext().splitlines()[since:] if all(x in l.lower() for x in words)]

    # ---------------------------------------------------------- (a) soft wedge
    if "a" in PARTS:
        part_a(p, pw, ws, names, seen, power_offs, notifying, drop_and_return, wedge_lines)
    if "b" in PARTS:
        part_b(p, pw, ws, names, seen, power_offs, notifying, drop_and_return, wedge_lines)
    if "c" in PARTS:
        part_c(p, strap, ring, power_offs, drop_and_return, wedge_lines)


def part_a(p, pw, ws, names, seen, power_offs, notifying, drop_and_return, wedge_lines):
    with step("(a) soft wedge; both links drop, both advertise again → each needsRepair (suspected-bond-loss) or adapterUnavailable"):
        wedge("soft")
        mark_w, mark_log, mark_b = len(complete_lines(pw)), len(p.logtext().splitlines()), len(btvirt_lines())
        t_drop = now()
        drop_and_return(ws)
        probe = wait_for(lambda: wedge_lines(mark_log, "wedge probe: connect()"), 40, "paird's log: wedge probe: Connect()")
        log(f"  paird | {probe[0]}")
        log(f"MEASURED (a) links dropped → paird's probe: {now() - t_drop:.2f} s (WedgeProbeInterval = 5)")

        def both_marked():
            seen.poll()
            got = {}
            for w in ws:
                st = [s for s, _ in states_of(complete_lines(pw)[mark_w:], w.address)] + [x[0] for x in seen.seen[w.address]]
                if "needsRepair" in st or "adapterUnavailable" in st:
                    got[w.address] = st
            return got if len(got) == 2 else None
        try:
            wait_for(both_marked, 60, "both wearables needsRepair or adapterUnavailable")
        finally:
            for w in ws:
                log(f"{names[w.address]}: pairctl watch {states_of(complete_lines(pw)[mark_w:], w.address)}; "
                    f"status {seen.seen[w.address]}")
            log(f"btvirt refusals so far: {sum(1 for l in btvirt_lines()[mark_b:] if 'refused 0x' in l)}")
        for w in ws:
            reasons = {r for s, r, _ in seen.seen[w.address] if s == "needsRepair"} | \
                      {r for s, r in states_of(complete_lines(pw)[mark_w:], w.address) if s == "needsRepair" and r}
            check(reasons <= {"suspected-bond-loss"}, f"{names[w.address]}: needsRepair only as suspected-bond-loss: {reasons or 'went adapterUnavailable directly'}")
    with step("(a) paird says the adapter is wedged and power-cycles it (1 of 2); btvirt: cleared by HCI Reset"):
        wait_for(lambda: power_offs(t_drop) >= 1, 30, "hci0 Powered=false on D-Bus (paird's power cycle)")
        lines = wait_for(lambda: wedge_lines(mark_log, "wedged", "power-cycl"), 10, "paird's log: wedged … power-cycl…")
        for l in lines:
            log(f"  paird | {l}")
        line = wait_for(lambda: next((l for l in btvirt_lines()[mark_b:] if "cleared by HCI Reset" in l), None), 20,
                        "btvirt: cleared by HCI Reset")
        log(f"btvirt: {line}")
        mention = [l for l in p.logtext().splitlines()[mark_log:] if "adapter-wedged" in l] or \
                  [l for l in complete_lines(pw)[mark_w:] if "adapter-wedged" in l] or \
                  [x for w in ws for x in seen.seen[w.address] if "adapter-wedged" in (x[2] or "")]
        check(mention, "adapter-wedged named (paird's log, pairctl watch or status lastDisconnect)")
        # "1 of 2": the first of WedgePowerCycles = 2, as paird's own line counts it
        # ("power-cycling it (1/2)"), and no other count so far
        counts = [m for l in lines for m in re.findall(r"\((\d+/\d+)\)", l)]
        check(counts == ["1/2"], f"paird's wedge line says power cycle 1/2 and no other: {counts}")
    with step("(a) both back, connected and notifying, no pairctl command"):
        n = len(complete_lines(pw))
        notifying(n, deadline=60)
        t_back = now()
        for w in ws:
            p.wait_state("connected", 20, address=w.address)
        log(f"MEASURED (a) links dropped → both notifying again: {t_back - t_drop:.2f} s")
        check(power_offs(t_drop) == 1, f"one power cycle: {power_offs(t_drop)}")


def part_b(p, pw, ws, names, seen, power_offs, notifying, drop_and_return, wedge_lines):
    # ---------------------------------------------------------- (b) hard wedge: the cap
    with step("(b) hard wedge; both drop and return → paird power-cycles exactly twice, then says the cap is reached (btmgmt / unplug)"):
        wedge("hard")
        mark_w, mark_log, mark_b = len(complete_lines(pw)), len(p.logtext().splitlines()), len(btvirt_lines())
        t_drop = now()
        drop_and_return(ws)

        def cap():
            seen.poll()
            return [l for l in wedge_lines(mark_log, "wedge") if "btmgmt" in l.lower() or "unplug" in l.lower()]
        try:
            lines = wait_for(cap, 150, "paird's log: the cap reached, what to run (btmgmt / unplug)", interval=0.5)
        finally:
            for l in p.logtext().splitlines()[mark_log:]:
                if "wedge" in l.lower() or "power cycle" in l.lower() or "power-cycl" in l.lower():
                    log(f"  paird | {l}")
            log(f"power cycles seen (Powered=false): {power_offs(t_drop)}; btvirt: "
                f"{sum(1 for l in btvirt_lines()[mark_b:] if 'does not clear a hard wedge' in l)} HCI Reset(s) under the hard wedge")
        t_cap = now()
        log(f"cap reached {t_cap - t_drop:.2f} s after the links dropped")
        check(power_offs(t_drop) == 2, f"exactly two power cycles (Powered=false on D-Bus): {power_offs(t_drop)}")
        resets = [l for l in btvirt_lines()[mark_b:] if "does not clear a hard wedge" in l]
        check(len(resets) == 2, f"btvirt saw two HCI Resets under the hard wedge: {len(resets)}")
    with step(f"(b) no third power cycle, no state change in {QUIET_S} s; both adapterUnavailable"):
        for w in ws:
            wait_for(lambda: seen.poll() and seen.state(w.address) == "adapterUnavailable", 10,
                     f"{names[w.address]} adapterUnavailable")
        mark_q = len(complete_lines(pw))
        bed_sleep(QUIET_S, "a person has not acted yet: paird must not power-cycle again nor loop")
        seen.poll()
        check(power_offs(t_drop) == 2, f"still two power cycles: {power_offs(t_drop)}")
        check(len([l for l in btvirt_lines()[mark_b:] if "does not clear a hard wedge" in l]) == 2, "still two HCI Resets")
        for w in ws:
            check(seen.state(w.address) == "adapterUnavailable", f"{names[w.address]} adapterUnavailable: {seen.seen[w.address][-3:]}")
            moves = states_of(complete_lines(pw)[mark_q:], w.address)
            check(not moves, f"{names[w.address]}: no state change in the quiet window: {moves}")
    with step("(b) the wedge lifted, a person's power cycle (bluetoothctl power off, power on) → both back and notifying"):
        wedge("off")
        n = len(complete_lines(pw))
        t = now()
        sh("bluetoothctl power off", timeout=30)
        sh("bluetoothctl power on", timeout=30)
        notifying(n, deadline=60)
        for w in ws:
            p.wait_state("connected", 20, address=w.address)
        log(f"MEASURED (b) person's power cycle → both notifying: {now() - t:.2f} s")


def part_c(p, strap, ring, power_offs, drop_and_return, wedge_lines):
    # ---------------------------------------------------------- (c) one wearable: no power cycle
    with step("(c) the ring unpaired; a soft wedge, the strap drops and returns → needsRepair (suspected-bond-loss), no power cycle"):
        rc, out, err = p.pairctl("unpair", ring.address)
        check(rc == 0, f"pairctl unpair the ring: exit {rc} ({err.strip()})")
        wedge("soft")
        mark_log, mark_b = len(p.logtext().splitlines()), len(btvirt_lines())
        t_drop = now()
        drop_and_return((strap,), passive=PASSIVE_S, restart=True)
        check(not wedge_lines(mark_log, "wedge probe"), "no wedge probe for one wearable")
        d = p.wait_state("needsRepair", 60, address=strap.address)
        check(d.get("repairReason") == "suspected-bond-loss", f"repairReason suspected-bond-loss: {d.get('repairReason')}")
        bed_sleep(QUIET_S / 2, "paird must not power-cycle for one wearable")
        check(power_offs(t_drop) == 0, f"no power cycle: {power_offs(t_drop)} Powered=false")
        check(not [l for l in btvirt_lines()[mark_b:] if "HCI Reset" in l], "btvirt saw no HCI Reset")
        check(not wedge_lines(mark_log, "wedged"), "paird's log says nothing of a wedged adapter")
        check(p.state(strap.address) == "needsRepair", "the strap still needsRepair")
        wedge("off")


main()
