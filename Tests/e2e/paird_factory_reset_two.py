#!/usr/bin/python3
# testbed: mode=plain timeout=540 wearables=strap,ring twin=no-bumble-only controllers=3
"""paird_factory_reset with a second wearable connected throughout (issue 49): the ring on hci2
(the bed's patched btvirt, as paird_several). The same file, with BED_X_SECOND=1: besides every
check of paird_factory_reset, the ring must notify again after each return of bluetoothd (the time
from each return to its first notification is printed, with how many were within 5 s)."""
import os
import runpy

os.environ["BED_X_SECOND"] = "1"
runpy.run_path(os.path.join(os.environ["BED_REPO"], "Tests", "e2e", "paird_factory_reset.py"), run_name="__main__")
