#!/usr/bin/python3
# testbed: mode=plain timeout=300 boots=2 wearables=strap
"""Issue scenario 4, second half: a cold start of the whole machine with a state file.

run-vm boots this VM twice (`boots=2`): a fresh kernel, controllers, bluetoothd and paird each time.
Boot 1: pair the wearable, see notifications, then shut down the way a machine does (paird gets
SIGTERM, bluetoothd is stopped) and keep /var/lib/bluetooth and /var/lib/paird in
/bed/out/persist, which run-vm's stage2 puts back before the stack starts in boot 2, as a disk
would keep them.
Boot 2: the wearable is out of range (registered, not advertising). paird starts from the state
file alone: the device is known, wanted connected, waiting; nothing connects while it is away.
The wearable comes back → connected, notifications and battery, without any pairctl command."""
import json
import os

from bedlib import *

BOOT = int(os.environ.get("BED_BOOT", "0"))


def boot1():
    w = Wearable.start(name="Pulse-1", battery=87)
    p = Paird()
    with step("boot 1: paird up, pairctl pair --service 180d, notifications flow"):
        p.start()
        pair_wearable(p)
        p.wait_state("connected", 10)
        watch = p.watch()
        wait_for(lambda: len(watch.lines("notify")) >= 2, 20, "2 notify lines")
    with step("boot 1: shut down as a machine does: paird SIGTERM (exit 0), bluetoothd stopped; keep /var/lib"):
        watch.stop()
        check(p.stop() == 0, "paird exit status 0 after SIGTERM")
        w.stop()
        bluetoothd("stop")
        doc = keep_var_lib()
        check([d["address"] for d in doc["devices"]] == [w.address], f"the state file kept: {doc['devices']}")
        log(f"kept for boot 2: {sorted(os.listdir(PERSIST))}; state file {len(json.dumps(doc))} bytes")


def boot2():
    with step("boot 2: a fresh stack with boot 1's /var/lib/bluetooth and /var/lib/paird"):
        check(os.path.exists(PAIRD_STATE), f"{PAIRD_STATE} is back")
        check(any(os.scandir("/var/lib/bluetooth")), "bluetoothd's storage is back")
    w = Wearable.start(name="Pulse-1", battery=64, away=True)
    p = Paird()
    with step("boot 2: paird starts from the state file alone; the wearable is away: known, wanted, waiting"):
        p.start()
        d = p.device()
        check(d is not None and d["address"] == w.address and d["name"] == "Pulse-1",
              f"identity restored: {d}")
        check(d["wanted"] == "connected", "intent restored: wanted connected")
        d = wait_for(lambda: (x := p.device()) and x["state"] in ("waitingForDevice", "connecting") and x, 30,
                     "waitingForDevice / connecting")
    watch = p.watch()
    bed_sleep(5, "the wearable stays away 5 s")
    with step("boot 2: nothing connected while it was away"):
        check(p.state() != "connected", f"not connected while away ({p.state()})")
        check([e for e in w.events() if e["event"] == "connected"] == [], "the wearable saw no connection")
    with step("boot 2: the wearable comes back → connected, notifications and battery, no pairctl command"):
        w.cmd("come-back")
        p.wait_state("connected", 90)
        wait_for(lambda: len(watch.lines("notify")) >= 2, 20, "2 notify lines")
        wait_for(lambda: p.device()["battery"] == 64, 20, "battery 64 % (read after the reconnect)")


@scenario
def main():
    if BOOT == 1:
        boot1()
    elif BOOT == 2:
        boot2()
    else:
        raise BedError("run through run-vm (the header's boots=2 sets BED_BOOT)")


main()
