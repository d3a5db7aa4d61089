#!/usr/bin/python3
# testbed: mode=systemd timeout=600 wearables=strap,watch-passkey,ring twin=no-bumble-only controllers=4
"""Several wearables at once (issue 17, part 3): the strap (hci1), the watch (hci2, passkey
through --passkey; its RPA rotation slowed to 600 s: a rotation between discovery and Pair() is
another matter, see the README's Known problems) and the ring (hci3, its own link drops off) paired to one paird through
pairctl and kept connected together. Then, one at a time: the ring walks away and comes back,
the watch drops its link (0x13) and is reconnected, the strap is unpaired, paired again, loses its bond (a factory reset → needsRepair) and is
repaired by one `pairctl pair`. Across each event the other wearables' heart-
rate notifications, as `pairctl watch` prints them, keep coming without a gap (the wearables
count bpm up by one per notification: a missed one shows as a jump) and `pairctl status --watch
--json` shows no state change on them. `status` (text and --json) lists all three; their journal
entries carry PAIRD_DEVICE. `pairctl pair` while another pairing runs is refused at once.

Needs the bed's patched btvirt (one handle per link: Tests/testbed/README.md, "Several wearables
at once"); run-vm builds it."""
import json
import os
import signal
import subprocess

from bedlib import *

PASSKEY = "246802"
HR = "00002a37-0000-1000-8000-00805f9b34fb"


def next_bpm(v):
    return 60 + (v - 59) % 40      # bumble_wearable.py hr_loop


class StatusFollow:
    """`pairctl status --watch --json` in the background: one status document per change."""

    def __init__(self):
        self.path = os.path.join(OUT, "pairctl-status-watch.jsonl")
        self.proc = subprocess.Popen([PAIRCTL_BIN, "status", "--watch", "--json"],
                                     stdout=open(self.path, "w"), stderr=subprocess.STDOUT)
        at_exit(lambda: self.proc.poll() is None and (self.proc.terminate(), self.proc.wait(5)))

    def docs(self):
        with open(self.path) as f:
            text = f.read()
        return [json.loads(l) for l in text[:text.rfind("\n") + 1].splitlines() if l.startswith("{")]

    def mark(self):
        return len(self.docs())

    def changes(self, address, since):
        """(state, since) of `address` in every document after `since` that differs from the one before."""
        docs = self.docs()
        def of(d):
            return next(((x["state"], x["since"]) for x in d.get("devices", []) if x["address"] == address), None)
        prev = of(docs[since - 1]) if since > 0 else None
        out = []
        for d in docs[since:]:
            if "devices" not in d:
                continue
            cur = of(d)
            if cur != prev:
                out.append(cur)
            prev = cur
        return out


def hr_of(lines, address):
    return [int(l.split()[-1][2:], 16) for l in lines
            if " notify " in l and l.split()[1] == address and l.split()[3] == HR]


def complete_lines(watch):
    """pairctl watch's lines so far, without a last one still being written."""
    with open(watch.path, errors="replace") as f:
        text = f.read()
    return text[:text.rfind("\n") + 1].splitlines()


def hr_values(watch, address, since):
    return hr_of(complete_lines(watch)[since:], address)


@scenario
def main():
    if not os.environ.get("BED_BTVIRT") and not os.environ.get("BED_X_ANY_BTVIRT"):  # BED_X_ANY_BTVIRT=1: show the failure
        raise BedFatal("needs the bed's patched btvirt (run-vm builds it with Tests/testbed/btvirt/build; "
                       "BED_BTVIRT=stock was given or the build failed): Debian's btvirt breaks a second "
                       "simultaneous link to hci0")
    strap = Wearable.start(profile="strap", adapter="hci1", sock="/run/bed/strap.sock")
    watch = Wearable.start(profile="watch-passkey", adapter="hci2", sock="/run/bed/watch.sock",
                           extra=["--passkey", PASSKEY, "--rpa-period", "600"])
    ring = Wearable.start(profile="ring", adapter="hci3", sock="/run/bed/ring.sock",
                          extra=["--drop-every", "0", "--drain-every", "0"])
    names = {strap.address: "Pulse-1", watch.address: "Watch-1", ring.address: "Ring-1"}
    p = Paird(mode="systemd")
    with step("paird up"):
        p.start()
    follow = StatusFollow()
    pw = p.watch()

    def pair(*args):
        rc, out, err = p.pairctl("pair", *args, "--timeout", "30", timeout=120)
        for line in out.splitlines():
            log(f"  | {line}")
        check(rc == 0, f"pairctl pair {' '.join(args)}: exit 0, got {rc}: {err.strip()}")
        return out.splitlines()

    with step("pair the strap (Just Works)"):
        pair("--name", "Pulse-1")
        p.wait_state("connected", 30, address=strap.address)
    with step("pair the watch (passkey through --passkey) while the strap stays connected"):
        pair("--name", "Watch-1", "--passkey", PASSKEY)
        p.wait_state("connected", 30, address=watch.address)
    with step("pair the ring while strap and watch stay connected"):
        pair("--name", "Ring-1")
        p.wait_state("connected", 30, address=ring.address)

    with step("all three connected; status text and --json list them"):
        for w in (strap, watch, ring):
            check(p.state(w.address) == "connected", f"{names[w.address]} connected: {p.state(w.address)}")
        rc, text, err = p.pairctl("status")
        for line in text.splitlines():
            log(f"  | {line}")
        check(rc == 0, f"pairctl status exit 0 ({err.strip()})")
        for a, n in names.items():
            check(a in text and n in text, f"status text lists {n} {a}")
        check(sorted(d["address"] for d in p.status()["devices"]) == sorted(names), "status --json lists the three")
        for w in (strap, watch, ring):
            check(w.status()["connected"], f"{names[w.address]} sees its link")

    with step("pairctl pair while another pairing runs → refused at once with a clear error"):
        first = subprocess.Popen([PAIRCTL_BIN, "pair", "--name", "Nobody-9", "--timeout", "20"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        at_exit(lambda: first.poll() is None and first.kill())
        wait_for(lambda: p.status()["pairing"] is not None, 15, "the first pairing (scanning for Nobody-9) running")
        rc, out, err = p.pairctl("pair", "--name", "Ring-1", "--timeout", "20")
        log(f"  | second pairctl pair: exit {rc}: {err.strip()}")
        check(rc == 1, f"exit 1 (other failure), got {rc}")
        check("already in progress" in err, f"says a pairing is already in progress: {err.strip()!r}")
        check(first.poll() is None, "the first pairing still runs")
        first.send_signal(signal.SIGINT)          # Ctrl-C: cancels it
        rc1 = first.wait(30)
        log(f"  | first pairctl pair after Ctrl-C: exit {rc1}: {first.stderr.read().strip()}")
        wait_for(lambda: p.status()["pairing"] is None, 15, "no pairing left")
        for w in (strap, watch, ring):
            check(p.state(w.address) == "connected", f"{names[w.address]} still connected")

    def undisturbed(event, subject, others, action):
        """Runs `action` on `subject`; the `others` keep their notification stream and their state."""
        n_follow = follow.mark()
        lines = complete_lines(pw)  # one read: the split between before and after is exact
        n_watch = len(lines)
        before = {w.address: hr_of(lines, w.address) for w in others}
        for w in others:
            check(before[w.address], f"{names[w.address]}: heart-rate notifications before {event}")
        t = now()
        action()
        log(f"{event}: {now() - t:.2f} s")
        # a few more notifications from each after the event, so a stall would show
        for w in others:
            k = len(hr_values(pw, w.address, n_watch))
            wait_for(lambda: len(hr_values(pw, w.address, n_watch)) >= k + 3, 20,
                     f"{names[w.address]}: 3 more notifications after {event}")
        for w in others:
            vals = before[w.address][-1:] + hr_values(pw, w.address, n_watch)
            gaps = [(a, b) for a, b in zip(vals, vals[1:]) if b != next_bpm(a)]
            log(f"  {names[w.address]}: {len(vals) - 1} notifications across {event}, gaps {gaps}")
            check(not gaps, f"{names[w.address]}: no missed notification across {event} ({gaps})")
            ch = follow.changes(w.address, n_follow)
            check(not ch, f"{names[w.address]}: no state change across {event} ({ch})")
            check(p.state(w.address) == "connected", f"{names[w.address]} still connected")
        # the same follower does see the subject's own changes (the check above can fail)
        own = follow.changes(subject.address, n_follow)
        log(f"  {names[subject.address]} itself: {' → '.join(s[0] if s else 'gone' for s in own)}")
        check(own, f"{names[subject.address]}: its own state changes seen in status --watch --json")

    def ring_away_and_back():
        s = ring.last_seq()
        ring.cmd("walk-away")
        ring.wait_event("disconnected", 15, since=s)
        p.wait_state("waitingForDevice", 20, address=ring.address)
        bed_sleep(5, "the ring stays away")
        ring.cmd("come-back")
        p.wait_state("connected", 60, address=ring.address)

    with step("the ring walks away and comes back: strap and watch undisturbed"):
        undisturbed("the ring's walk-away and return", ring, (strap, watch), ring_away_and_back)

    def watch_drops_link():
        s = watch.last_seq()
        watch.cmd("disconnect 13")          # the watch ends the link itself (0x13), stays in range
        watch.wait_event("disconnected", 15, since=s)
        p.wait_state("connected", 60, address=watch.address)

    with step("the watch drops its link and is reconnected: strap and ring undisturbed"):
        undisturbed("the watch's own disconnect", watch, (strap, ring), watch_drops_link)

    def unpair_strap():
        rc, out, err = p.pairctl("unpair", "Pulse-1")
        check(rc == 0, f"pairctl unpair Pulse-1: exit 0 ({out.strip()} {err.strip()})")
        check(p.device(strap.address) is None, "the strap is gone from status")

    with step("unpair the strap: watch and ring undisturbed"):
        undisturbed("unpairing the strap", strap, (watch, ring), unpair_strap)

    def pair_strap():
        pair("--name", "Pulse-1")
        p.wait_state("connected", 30, address=strap.address)

    with step("pair the strap again: watch and ring undisturbed"):
        undisturbed("pairing the strap again", strap, (watch, ring), pair_strap)

    def strap_factory_reset():
        strap.cmd("forget-bond")      # the strap forgets every key (a factory reset); its link drops
        wait_for(lambda: strap.status()["advertising"] or strap.status()["connected"], 15, "the strap advertising again")
        p.wait_state("needsRepair", 150, address=strap.address)

    with step("the strap loses its bond (factory reset) → needsRepair: watch and ring undisturbed"):
        undisturbed("the strap's factory reset", strap, (watch, ring), strap_factory_reset)

    def strap_repair():
        lines = pair("--name", "Pulse-1")
        check(any("removing the old bond" in l for l in lines), "paird removed the old bond itself")
        p.wait_state("connected", 30, address=strap.address)

    with step("one pairctl pair repairs the strap: watch and ring undisturbed"):
        undisturbed("repairing the strap", strap, (watch, ring), strap_repair)

    with step("journal: each wearable's entries carry PAIRD_DEVICE"):
        out = sh("journalctl -u paird.service -o json --no-pager", check=False)
        entries = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
        for a, n in names.items():
            mine = [e for e in entries if e.get("PAIRD_DEVICE") == a]
            log(f"  {n}: {len(mine)} entries, e.g. {mine[-1].get('MESSAGE')!r}" if mine else f"  {n}: none")
            check(mine, f"journal entries with PAIRD_DEVICE={a}")
        for w in (strap, watch, ring):
            check(p.state(w.address) == "connected", f"{names[w.address]} connected at the end")


main()
