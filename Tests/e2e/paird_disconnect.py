#!/usr/bin/python3
# testbed: mode=plain timeout=360 wearables=strap
"""Issue scenario 5: `pairctl disconnect` → disconnected and it stays down (the wearable sees the
disconnect and no reconnect within 20 s, even while advertising), also across a paird restart;
`pairctl connect` → connected again."""
from bedlib import *


def connects(w, since):
    return [e for e in w.events(since) if e["event"] == "connected"]


@scenario
def main():
    w = Wearable.start(name="Pulse-1", battery=87)
    p = Paird()
    with step("paird up, pairctl pair --service 180d"):
        p.start()
        pair_wearable(p)
        p.wait_state("connected", 10)

    seq = w.last_seq()
    with step("pairctl disconnect → exit 0, state disconnected, the wearable sees the disconnect"):
        rc, out, err = p.pairctl("disconnect")
        check(rc == 0, f"exit 0 ({out.strip()} {err.strip()})")
        d = p.wait_state("disconnected", 15)
        check(d["wanted"] == "disconnected", "wanted disconnected")
        w.wait_event("disconnected", 15, since=seq)
    with step("the wearable advertises (come-back); still no reconnect"):
        if not w.status()["advertising"]:
            w.cmd("come-back")
        wait_for(lambda: w.status()["advertising"], 10, "wearable advertising")
    bed_sleep(20, "20 s with the wearable in range and advertising")
    with step("no reconnect in 20 s"):
        check(connects(w, seq) == [], "the wearable saw no connection")
        check(p.state() == "disconnected", "still disconnected")

    seq2 = w.last_seq()
    with step("restart paird: the device stays disconnected"):
        p.restart()
        check(p.state() == "disconnected", "disconnected right after READY")
    bed_sleep(15, "15 s after the restart, wearable advertising")
    with step("no reconnect after the restart"):
        check(connects(w, seq2) == [], "the wearable saw no connection")
        d = p.device()
        check(d["state"] == "disconnected" and d["wanted"] == "disconnected", f"state {d['state']}, wanted {d['wanted']}")

    watch = p.watch()
    with step("pairctl connect → connected, notifications flow, one link (no Connect() racing the auto-connect)"):
        connects_before, doubles_before, seq3 = bluez_connect_attempts(), bluez_double_connections(), w.last_seq()
        t = now()
        rc, out, err = p.pairctl("connect")
        check(rc == 0, f"exit 0 ({out.strip()} {err.strip()})")
        d = p.wait_state("connected", 60)
        log(f"connected {now() - t:.2f} s after pairctl connect, "
            f"{bluez_connect_attempts() - connects_before} Device1.Connect() at bluetoothd")
        check(d["wanted"] == "connected", "wanted connected")
        wait_for(lambda: len(watch.lines("notify")) >= 2, 15, "2 notify lines")
        # bluetoothd's 'is already connected' counter has no positive control on the bed, so it is a
        # figure; the claim rests on the wearable's own view: exactly one link came up.
        log(f"bluetoothd 'is already connected' lines since pairctl connect: {bluez_double_connections() - doubles_before}")
        check(w.links(seq3) == 1, f"the wearable saw exactly one link come up ({w.links(seq3)})")
    with step("after connect, a walk-away is waited for again (intent is connected)"):
        w.cmd("walk-away")
        p.wait_state("waitingForDevice", 20)
        w.cmd("come-back")
        p.wait_state("connected", 60)
    with step("positive control: the Connect() counter counts one of paird's"):
        prove_connect_counter(p, w)


main()
