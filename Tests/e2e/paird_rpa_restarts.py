#!/usr/bin/python3
# testbed: mode=plain timeout=420 boots=2 wearables=watch-passkey twin=no-bumble-only
"""Private addresses across restarts (issue 17, part 2): a Bumble watch with a resolvable private
address, paired once (--passkey), comes back by its identity after bluetoothd and the whole
machine were restarted, each time under an RPA it had not used before.

Boot 1: paired; bluetoothd stopped; the watch walks away and rotates its RPA while bluetoothd
is down; bluetoothd started; the watch comes back under the new RPA → connected by identity,
notifications, no pairctl command. Then shut down as a machine does and keep /var/lib/bluetooth,
/var/lib/paird and the watch's key store (paird_cold_boot's way).
Boot 2: a fresh kernel, controllers, bluetoothd and paird; the watch starts away and rotates
again; paird knows it from the state file alone (identity address and type); it comes back →
connected by identity, notifications, still one device."""
import os

from bedlib import *

BOOT = int(os.environ.get("BED_BOOT", "0"))
PASSKEY = "246810"


def one_device(p, w):
    devices = p.status()["devices"]
    check([d["address"] for d in devices] == [w.address], f"one device, the identity: {devices}")
    return devices[0]


def back_under_new_rpa(p, w, seen, what):
    new = w.cmd("rotate-rpa")["address"]
    log(f"  {what}: new RPA {new}")
    check(new not in seen and new != w.address, "a private address not used before")
    seen.add(new)
    watch = p.watch()
    t = now()
    w.cmd("come-back")
    p.wait_state("connected", 60, address=w.address)
    log(f"  {what}: connected {now() - t:.2f} s after coming back as {new}")
    wait_for(lambda: len(watch.lines("notify")) >= 2, 20, "notifications after the return")
    watch.stop()
    d = one_device(p, w)
    check(d.get("addressType") == "random", f"status keeps the identity's address type: {d}")


def boot1():
    w = Wearable.start(profile="watch-passkey", extra=["--passkey", PASSKEY, "--rpa-period", "0"])
    p = Paird()
    seen = set()
    with step("boot 1: paired with --passkey; stored by identity"):
        p.start()
        rc, out, err = p.pairctl("pair", "--name", "Watch-1", "--timeout", "20", "--passkey", PASSKEY, timeout=120)
        check(rc == 0, f"pair: exit {rc}: {err.strip()}")
        p.wait_state("connected", 20, address=w.address)
        seen.add(w.status()["address"])
        check(w.address not in seen, "it advertised with a private address")
        one_device(p, w)
    with step("boot 1: bluetoothd stopped; the watch walks away and rotates; bluetoothd started"):
        bluetoothd("stop")
        w.cmd("walk-away")
        p.wait_state("adapterUnavailable", 30, address=w.address)
        bluetoothd("start")
        p.wait_state("waitingForDevice", 60, address=w.address)
    with step("boot 1: back under a new RPA after the bluetoothd restart: connected by identity"):
        back_under_new_rpa(p, w, seen, "after the bluetoothd restart")
    with step("boot 1: shut down as a machine does; keep /var/lib (bonds, state file, the watch's keys)"):
        check(p.stop() == 0, "paird exit status 0 after SIGTERM")
        w.stop()
        bluetoothd("stop")
        doc = keep_var_lib()
        check([(d["address"], d.get("addressType")) for d in doc["devices"]] == [(w.address, "random")],
              f"the state file keeps identity address and type: {doc['devices']}")
        with open(os.path.join(PERSIST, "seen-rpas"), "w") as f:
            f.write("\n".join(sorted(seen)))


def boot2():
    with step("boot 2: a fresh stack with boot 1's /var/lib"):
        check(os.path.exists(PAIRD_STATE), f"{PAIRD_STATE} is back")
    with open(os.path.join(PERSIST, "seen-rpas")) as f:
        seen = set(f.read().split())
    w = Wearable.start(profile="watch-passkey", away=True, extra=["--passkey", PASSKEY, "--rpa-period", "0"])
    p = Paird()
    with step("boot 2: paird from the state file alone: the watch known by identity, waited for"):
        p.start()
        wait_for(lambda: (x := p.device(w.address)) and x["state"] in ("waitingForDevice", "connecting") and x, 30,
                 "waitingForDevice / connecting")
        one_device(p, w)
    with step("boot 2: back under a new RPA after the machine restart: connected by identity"):
        back_under_new_rpa(p, w, seen, "after the VM restart")


@scenario
def main():
    if BOOT == 1:
        boot1()
    elif BOOT == 2:
        boot2()
    else:
        raise BedError("run with boots=2 (run-vm sets BED_BOOT)")


main()
