"""bedlib: helpers for test-bed scenarios (run inside the VM by Tests/testbed/run-vm).

    from bedlib import *
    @scenario
    def main():
        w = Wearable.start(name="Pulse-1")
        c = Central()
        with step("discover the wearable"):
            dev = c.discover(uuid=HR_SVC, name="Pulse-1", deadline=20)

Rules: every wait has a deadline and a description (wait_for); never sleep to let something
happen — sleep only where the scenario itself means "time passes" (bed_sleep).
Each `step` prints "✓ <what> (1.23 s)" or "✗ <what> (1.23 s): <error>".

Scenarios import this module only; it gathers the bed's parts, by concern, beside it:
  bedlib_core        paths and environment, D-Bus names and UUIDs, errors, log/trace, the main
                     loop and waits (wait_for, bed_sleep, call), at_exit, check, sh, kernel_bug(s),
                     Terminal
  bedlib_scenario    step, @scenario, skip, expects_kernel_bug (the run's own state lives here)
  bedlib_wearable    Wearable: the Bumble wearable or the BlueZ twin, and their control socket
  bedlib_bluez       BlueZ's D-Bus API on the central: Agent, Central, bonds and adapters
  bedlib_bluetoothd  bluetoothd start/stop/crashes, its log's counters, btvirt and IndexHolder
  bedlib_paird       Paird, pairctl, PairctlWatch, paird's journal, alert scripts
A part's module-level state is its own: reach it through the part's functions, never by
assigning a name imported from it.
"""
from bedlib_core import *  # noqa: F401,F403
from bedlib_scenario import *  # noqa: F401,F403
from bedlib_scenario import _Skip  # noqa: F401 (exported below: a scenario may catch a skip)
from bedlib_wearable import *  # noqa: F401,F403
from bedlib_bluez import *  # noqa: F401,F403
from bedlib_bluetoothd import *  # noqa: F401,F403
from bedlib_paird import *  # noqa: F401,F403

__all__ = [n for n in dir() if not n.startswith("_") and n not in (
    "contextlib", "functools", "json", "os", "re", "shutil", "signal", "socket", "subprocess", "sys", "threading", "time", "traceback")] + ["_Skip"]
