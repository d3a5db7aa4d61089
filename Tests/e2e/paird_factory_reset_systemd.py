#!/usr/bin/python3
# testbed: mode=systemd timeout=420 wearables=strap twin=no-bumble-only
"""paird_factory_reset in systemd mode (issue 49: "in plain mode and in systemd mode"): the same
file, run here with paird and bluetoothd as systemd units. Nothing restarts bluetoothd but paird
itself (StartServiceByName after systemd's word of a crash; Debian's bluetooth.service has no
Restart=), so on kernel 6.1 this shows paird's own start driving the loop, or not: at most 2
deaths of bluetoothd per reset, needsRepair, no link after it, one command repairs it."""
import os
import runpy

runpy.run_path(os.path.join(os.environ["BED_REPO"], "Tests", "e2e", "paird_factory_reset.py"), run_name="__main__")
