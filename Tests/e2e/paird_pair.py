#!/usr/bin/python3
# testbed: mode=plain timeout=240 wearables=strap twin=yes
"""Issue scenario 1: `pairctl pair --service 180d` pairs the virtual wearable with progress lines
and exit 0; `pairctl status --json` shows it connected with its battery level; heart-rate
notifications reach `pairctl watch`."""
import json
import os
import re

from bedlib import *


@scenario
def main():
    w = Wearable.start(name="Pulse-1", battery=87)
    p = Paird()
    with step("paird starts and reports READY=1 (no state file: first start)"):
        p.start()
        st = p.status()
        check(st["daemon"]["running"] and st["devices"] == [], "status: running, no devices")
        check(st["adapter"]["present"] and st["adapter"]["powered"], f"adapter present and powered: {st['adapter']}")
        check(st["pairing"] is None, "no pairing session")

    with step("pairctl scan --json lists the advertising strap: its name, address and Heart Rate service"):
        rc, out, err = p.pairctl("scan", "--timeout", "5", "--json")
        check(rc == 0, f"pairctl scan: exit 0, got {rc}: {err.strip()}")
        doc = json.loads(out.strip().splitlines()[-1])
        for d in doc["devices"]:
            log(f"  | {d['address']} {d['addressType']} rssi {d['rssi']} {d['known']} {d['name']!r} {' '.join(d['services'])}")
        d = next((d for d in doc["devices"] if d["address"] == w.address), None)
        check(d is not None, f"the strap {w.address} is listed")
        check(d["name"] == "Pulse-1", f"its name: {d['name']!r}")
        check(any("180d" in u.lower() for u in d["services"]), f"its Heart Rate service (180d): {d['services']}")
        check(d["known"] != "paird", f"not yet paired in paird: {d['known']}")
        rc, text, _ = p.pairctl("scan", "--timeout", "3")
        log("pairctl scan:\n" + "\n".join(f"  | {l}" for l in text.splitlines()))
        check(rc == 0 and "Pulse-1" in text, "the text list names it too")

    watch = p.watch()
    with step("pairctl pair --service 180d → progress lines, exit 0"):
        lines = pair_wearable(p)
        text = "\n".join(lines)
        check(lines[0].startswith("scanning"), "first line: scanning…")
        # btvirt reports no RSSI (0x7f, "not available"): the bed's line has no ", -NN dBm".
        found = [l for l in lines if re.fullmatch(rf"found Pulse-1 \({w.address}(, -?\d+ dBm)?\)", l)]
        check(found, f"found line: {found}")
        check("pairing…" in text, "pairing…")
        check(lines[-1].startswith("connected"), f"last line: {lines[-1]}")

    with step("status --json: connected, battery 87, wanted connected, persisted"):
        d = p.wait_state("connected", 10)
        d = wait_for(lambda: (lambda x: x if x["battery"] == 87 else None)(p.device()), 10, "battery 87 in status")
        check(d["name"] == "Pulse-1" and d["wanted"] == "connected", f"name/wanted: {d['name']}/{d['wanted']}")
        check(d["lastDisconnect"] is None and p.status()["pairing"] is None, "no lastDisconnect, pairing null")
        state = json.load(open(PAIRD_STATE))
        check(w.address in json.dumps(state), "state file lists the wearable")
        check(oct(os.stat(PAIRD_STATE).st_mode & 0o777) == "0o600", "state file mode 0600")
        c = Central("hci0")
        dev = c.device_path(w.address)
        check(c.prop(dev, "Paired") and c.prop(dev, "Trusted"), "BlueZ: Paired=true, Trusted=true")
        check(w.status()["connected"], "the wearable sees a connection")

    with step("heart-rate notifications reach pairctl watch (≥3 notify lines)"):
        hr = lambda: [l for l in watch.lines("notify") if HR_MEAS in l]  # noqa: E731 (2a19 is forwarded too)
        wait_for(lambda: len(hr()) >= 3, 15, "3 heart-rate (2a37) notify lines from pairctl watch")
        for l in watch.lines("notify")[:4]:
            log(f"  | {l}")
        # pairctl decodes Heart Rate Measurement (issue 34): the bpm it prints is the one in the
        # raw value it also prints (the strap's flags 00: the rate is the second byte)
        for l in hr()[:3]:
            raw = l.split()[-1]
            bpm = int(raw[2:4], 16)
            check(raw[:2] == "00" and f"(heart rate: {bpm} bpm" in l, f"watch shows {bpm} bpm for {raw}: {l}")

    with step("battery change reaches pairctl watch and status"):
        w.cmd("battery 55")
        wait_for(lambda: any(l.endswith("battery 55") for l in watch.lines("battery")), 10, "battery 55 line")
        wait_for(lambda: p.device()["battery"] == 55, 10, "status battery 55")

    with step("pairctl list / status (text)"):
        rc, out, _ = p.pairctl("list")
        check(rc == 0 and w.address in out and "connected" in out, f"list: {out.strip()}")
        rc, out, _ = p.pairctl("status")
        check(rc == 0 and "battery 55%" in out, f"status: {out.strip()}")


main()
