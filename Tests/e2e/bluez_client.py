#!/usr/bin/python3
# testbed: mode=plain timeout=420 wearables=strap
"""The Swift BlueZ client alone (Sources/bluez-probe, no daemon) against real bluetoothd 5.66:
discover, pair, GATT set-up, notifications, walk-away and come-back (auto-connect armed by the
client's GattProfile1, Connect() fallback), bluetoothd restart (registrations redone, reconnect).

The probe binary: $BLUEZ_PROBE_BIN, else <repo>/.build/release/bluez-probe, else
<repo>/.build-bluez/release/bluez-probe
(`swift build -c release --product bluez-probe`). The probe prints "✓ step", "✗ step: why" or
"await <what>" (it waits for this scenario to act); every wait here and there has a deadline."""
import os
import queue
import subprocess
import threading

from bedlib import *

REPO = os.environ.get("BED_REPO", "/work/main")
# One named in the environment is the one used (a missing one is an error, not a fallback).
_named = os.environ.get("BLUEZ_PROBE_BIN") or os.environ.get("BED_X_BLUEZ_PROBE_BIN")
_candidates = [os.path.join(REPO, ".build/release/bluez-probe"), os.path.join(REPO, ".build-bluez/release/bluez-probe")]
PROBE = _named or next((c for c in _candidates if os.access(c, os.X_OK)), _candidates[0])


class Probe:
    def __init__(self):
        if not os.access(PROBE, os.X_OK):
            raise BedError(f"no probe binary at {PROBE} (swift build -c release --product bluez-probe)")
        log(f"probe: {PROBE}")
        self.log = open(os.path.join(OUT, "bluez-probe.log"), "a")
        self.proc = subprocess.Popen([PROBE, "--adapter", "hci0", "--name", "Pulse-1"],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env=dict(os.environ, BLUEZ_PROBE_VERBOSE="1"))
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        at_exit(self.stop)

    def _read(self):
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            self.log.write(line + "\n")
            self.log.flush()
            self.lines.put(line)
        self.lines.put(None)

    def expect(self, prefix, deadline):
        """Wait for the probe's next line starting with `prefix` (earlier ✓ lines are logged);
        a ✗ line or the probe's exit fails at once."""
        def next_line():
            while True:
                try:
                    line = self.lines.get_nowait()
                except queue.Empty:
                    return None
                if line is None:
                    raise BedFatal(f"probe exited ({self.proc.wait()}) before '{prefix}'")
                if not line.startswith("  ["):
                    log(f"probe: {line}")
                if line.startswith("✗"):
                    raise BedFatal(f"probe: {line}")
                if line.startswith(prefix):
                    return line
        return wait_for(next_line, deadline, f"probe line '{prefix}'", interval=0.05)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


@scenario
def main():
    w = Wearable.start(name="Pulse-1", battery=87)
    p = Probe()

    with step("probe: adapter ready, discovery, pair + bond + trust, services resolved"):
        p.expect("✓ adapter ready", 40)
        p.expect("✓ discovery finds", 40)
        p.expect("✓ Pair", 70)
        p.expect("✓ services resolved", 40)

    with step("probe: StartNotify + battery; 3 heart-rate notifications"):
        line = p.expect("✓ set up link", 50)
        check("87%" in line, f"battery 87% reported ({line})")
        p.expect("✓ 3 heart-rate notifications", 20)

    with step("walk-away → probe sees the link drop"):
        p.expect("await walk-away", 10)
        w.cmd("walk-away")
        p.expect("✓ link lost", 70)

    bed_sleep(5, "the wearable stays out of range")

    with step("come-back → link back (auto-connect or Connect fallback), notifications resume"):
        p.expect("await come-back", 10)
        w.cmd("come-back")
        line = p.expect("✓ link back", 120)
        log(f"reconnect: {line}")

    with step("bluetoothd restart → adapterLost, adapterReady, agent + profile registered again"):
        p.expect("await bluetoothd-restart", 10)
        bluetoothd("restart")
        # The twin re-registers its advertisement with the new bluetoothd; Bumble never went away
        # and may already be linked again by the probe's auto-connect: in range either way.
        wait_for(lambda: (lambda st: st["advertising"] or st["connected"])(w.status()), 20,
                 "wearable in range again (advertising, or already reconnected)")
        p.expect("✓ bluetoothd restart", 90)

    with step("reconnect after the restart; battery read"):
        line = p.expect("✓ reconnect after the restart", 120)
        log(f"reconnect: {line}")
        p.expect("✓ done", 15)
        check(p.proc.wait(10) == 0, "probe exit status 0")


main()
