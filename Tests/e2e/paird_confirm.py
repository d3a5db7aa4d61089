#!/usr/bin/python3
# testbed: mode=plain timeout=480 wearables=watch-confirm twin=no-bumble-only
"""Numeric comparison (issue 17, part 1), with a Bumble watch (DisplayYesNo, LE Secure
Connections + MITM, a resolvable private address): on a pseudo-terminal "Does Watch-1 show
NNNNNN? [y/N]" answered n (exit 6, no bond); a pairing the watch starts on its own, with no
`pairctl pair` running, refused by paird's agent (BlueZ makes it the default agent when no other
is registered) and logged; then y (paired, the number asked about is the watch's). One success
per scenario (see paird_passkey); --confirm: paird_confirm_flag."""
from bedlib import *




@scenario
def main():
    w = Wearable.start(profile="watch-confirm")
    p = Paird()
    with step("paird up"):
        p.start()

    with step("on a terminal: n → exit 6, nothing paired"):
        t = Terminal(PAIRCTL_BIN, "pair", "--name", "Watch-1", "--timeout", "20")
        t.expect(r"Does Watch-1 show (\d{6})\? \[y/N\] ", 40)
        t.type("n")
        rc = t.wait_exit(40)
        check(rc == 6, f"exit 6, got {rc}")
        wait_for(lambda: p.status()["pairing"] is None, 10, "no pairing session left")
        check(not p.status()["devices"] and not paired_in_bluez(w.address), "nothing paired")

    with step("the watch starts a pairing on its own, no pairctl pair running: paird refuses it"):
        c = Central("hci0")
        wait_for(lambda: not w.status()["connected"], 20, "the watch's link from the last pairing gone")
        dev = c.discover(name="Watch-1", deadline=30)
        c.connect(dev)
        wait_for(lambda: w.status()["connected"], 20, "the watch sees the link")
        since = w.last_seq()
        w.cmd("request-pairing")
        e = w.wait_event("requested-pairing-done", 40, since=since)
        log(f"  watch: {e}")
        check(e["ok"] is False, "the watch's pairing failed")
        wait_for(lambda: "refused BlueZ's pairing question" in p.logtext(), 10, "paird logs the refusal")
        line = next(l for l in p.logtext().splitlines() if "refused BlueZ's pairing question" in l)
        log(f"  paird: {line.strip()}")
        check("numeric-comparison" in line or "authorize" in line, "the journal names the question")
        check(not paired_in_bluez(w.address), "BlueZ: not paired")
        check(not p.status()["devices"], "paird manages nothing")
        wait_for(lambda: not w.status()["connected"], 30, "the link gone")

    with step("on a terminal: the number asked about is the watch's; y → paired, connected"):
        t = Terminal(PAIRCTL_BIN, "pair", "--name", "Watch-1", "--timeout", "20")
        m = t.expect(r"Does Watch-1 show (\d{6})\? \[y/N\] ", 40)
        shown = wait_for(lambda: w.status()["compare"], 10, "the watch shows its number")
        check(m.group(1) == shown, f"pairctl asks about {m.group(1)}, the watch shows {shown}")
        t.type("y")
        t.expect(r"connected, services resolved: Watch-1", 60)
        check(t.wait_exit(10) == 0, "exit 0")
        p.wait_state("connected", 20, address=w.address)


main()
