#!/usr/bin/python3
"""The test bed's virtual wearable (Tests/testbed/wearable.py), two knobs added for benchmarks:

  --hr-interval S   heart-rate notification period while subscribed (stock: 1 s; 0 = never:
                    "subscribed but quiet", for idle-cost measurements). Control command
                    `hr-interval S` changes it at run time.
  every event line carries "wall" (time.time()), so the bench can put the wearable's
  `advertising on` on the same clock as the central's D-Bus signals.

Everything else (control socket, walk-away, come-back, ...) is wearable.py's, unchanged."""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testbed"))
import wearable as W  # noqa: E402
from gi.repository import GLib  # noqa: E402


class BenchWearable(W.Wearable):
    default_hr_interval = 1.0

    def __init__(self, args):
        self.hr_interval = self.default_hr_interval
        super().__init__(args)

    def event(self, _event, **kw):
        kw["wall"] = round(time.time(), 6)
        super().event(_event, **kw)

    def start_hr(self):
        if self.hr_timer is None and self.hr_interval > 0:
            self.hr_timer = GLib.timeout_add(max(1, int(self.hr_interval * 1000)), self.hr_tick)

    def command(self, line):
        parts = line.split()
        if parts and parts[0] == "hr-interval" and len(parts) == 2:
            self.hr_interval = float(parts[1])
            self.stop_hr()
            if self.hr.notifying:
                self.start_hr()
            return {"hr_interval": self.hr_interval}
        return super().command(line)


def main():
    """wearable.py's own command line (whatever options it has today) plus --hr-interval."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--hr-interval", type=float, default=1.0)
    ours, rest = p.parse_known_args()
    BenchWearable.default_hr_interval = ours.hr_interval
    W.Wearable = BenchWearable          # wearable.main() instantiates the module's Wearable
    sys.argv = [sys.argv[0]] + rest
    return W.main()


if __name__ == "__main__":
    sys.exit(main())
