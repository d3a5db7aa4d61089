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
import dbus.mainloop.glib  # noqa: E402
import wearable as W  # noqa: E402
from gi.repository import GLib  # noqa: E402


class BenchWearable(W.Wearable):
    def __init__(self, args):
        self.hr_interval = args.hr_interval
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
    p = argparse.ArgumentParser()
    p.add_argument("--name", default="Pulse-1")
    p.add_argument("--adapter", default="hci1")
    p.add_argument("--socket", default="/run/bed/wearable.sock")
    p.add_argument("--battery", type=int, default=87)
    p.add_argument("--hr-interval", type=float, default=1.0)
    args = p.parse_args()
    dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
    BenchWearable(args).run()


if __name__ == "__main__":
    sys.exit(main())
