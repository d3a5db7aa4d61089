"""bedlib_scenario: a scenario's run (part of bedlib): steps, the @scenario decorator and its
summary, skip, and the kernel-BUG excuse (expects_kernel_bug)."""
import contextlib
import functools
import json
import os
import subprocess
import sys
import traceback

from bedlib_core import MODE, OUT, PAIRCTL_BIN, T0, _cleanups, kernel_bug, now
from bedlib_wearable import Wearable


_steps = []

# ------------------------------------------------------------------ kernel BUGs
# A kernel BUG excuses a failed step only in a scenario that declared it expects one
# (expects_kernel_bug) and only when the BUG was already in dmesg when the failing step began: a
# BUG that fires inside the step is the step's to survive (on 6.1 that is paird's job: issue 49).
# _span is the step under way (or the gap after one) and the BUG line dmesg held when it began.
_KERNEL_BUG_EXPECTED = None
_span = {"what": "(before the first step)", "bug": None}


def expects_kernel_bug(why):
    """Declare that this scenario may meet a kernel BUG (why: which, and on which kernel). Only then
    can a BUG excuse a failure, and only a BUG that preceded the failing step (e2e.sh counts
    the run apart, "excused by a kernel BUG", and prints the BUG in its summary)."""
    global _KERNEL_BUG_EXPECTED
    _KERNEL_BUG_EXPECTED = why
    _span["bug"] = kernel_bug()


def _begin_span(what):
    _span["what"] = what
    _span["bug"] = kernel_bug() if _KERNEL_BUG_EXPECTED else None


@contextlib.contextmanager
def step(what):
    _begin_span(what)
    t = now()
    try:
        yield
    except BaseException as e:
        dt = now() - t
        _steps.append((what, dt, False))
        print(f"✗ {what} ({dt:.2f} s): {type(e).__name__}: {e}", flush=True)
        raise
    dt = now() - t
    _steps.append((what, dt, True))
    print(f"✓ {what} ({dt:.2f} s)", flush=True)
    _begin_span(f"(after the step '{what}')")


def _state_at_failure():
    """What the wearable and paird say at the moment a step failed, in the scenario's output (CI
    shows only part of a run's logs): bounded, and never a second failure."""
    for w in getattr(Wearable, "started", []):
        try:
            if w.proc is not None and w.proc.poll() is not None:
                continue   # stopped by the scenario
            st = w.cmd("status", timeout=5)
            keep = ("name", "address", "advertising", "connected", "registered", "bonds", "subscribed")
            print("state at failure, wearable: " + json.dumps({k: st.get(k) for k in keep}), flush=True)
        except Exception as e:  # noqa: BLE001
            print(f"state at failure, wearable: no answer ({type(e).__name__}: {e})", flush=True)
    if PAIRCTL_BIN:
        try:
            r = subprocess.run([PAIRCTL_BIN, "status"], capture_output=True, text=True, timeout=10,
                               stdin=subprocess.DEVNULL)
            print(f"state at failure, pairctl status (exit {r.returncode}):", flush=True)
            for line in (r.stdout + r.stderr).splitlines()[:20]:
                print(f"  | {line}", flush=True)
        except Exception as e:  # noqa: BLE001
            print(f"state at failure, pairctl status: {type(e).__name__}: {e}", flush=True)


def scenario(fn):
    """Decorator for a scenario's main(): runs it, prints a summary, exits 0/1."""
    @functools.wraps(fn)
    def run():
        print(f"scenario {os.path.basename(sys.argv[0])} ({MODE} mode)", flush=True)
        rc = 0
        skipped = None
        try:
            fn()
        except _Skip as e:
            skipped = str(e)
        except BaseException as e:  # noqa: BLE001
            bug = kernel_bug() if not isinstance(e, KeyboardInterrupt) else None
            if bug and _KERNEL_BUG_EXPECTED and _span["bug"]:
                # A BUG this scenario declared it may meet, already in dmesg when the failing step
                # began: bluetoothd is dead or wedged since, so this step's outcome says nothing
                # about the code under test. Not a pass: e2e.sh counts it apart and prints the BUG.
                skipped = (f"kernel-bug: {_span['bug']} | expected: {_KERNEL_BUG_EXPECTED} | it preceded "
                           f"the failing step {_span['what']!r}, which then failed with {type(e).__name__}: {e}")
                print(f"\nEXCUSED BY A KERNEL BUG: {skipped}", flush=True)
            else:
                rc = 1
                print("\nFAILED:", f"{type(e).__name__}: {e}", file=sys.stderr, flush=True)
                traceback.print_exc()
                if bug:
                    why = ("this scenario does not declare it expects one" if not _KERNEL_BUG_EXPECTED
                           else f"it was not yet in dmesg when the failing step {_span['what']!r} began")
                    print(f"the kernel BUGged ({bug}); no excuse: {why}", file=sys.stderr, flush=True)
                _state_at_failure()
        for c in reversed(_cleanups):
            try:
                c()
            except Exception as e:  # noqa: BLE001
                print(f"(cleanup {c.__name__} failed: {e})", file=sys.stderr)
        ok = sum(1 for s in _steps if s[2])
        if rc == 0 and skipped is None and (bug := kernel_bug()):
            # Passed with the kernel's BUG in dmesg (Debian 12's 6.1 meets some): said, not hidden.
            print(f"note: the kernel BUGged during this run ({bug}); every step passed regardless", flush=True)
        print(f"\n{ok}/{len(_steps)} steps passed in {now() - T0:.1f} s", flush=True)
        if skipped is not None and rc == 0:
            print(f"SKIPPED: {skipped}", flush=True)
            with contextlib.suppress(OSError), open(os.path.join(OUT, "SKIPPED"), "w") as f:
                f.write(skipped + "\n")
        sys.exit(rc)
    return run


def skip(why, detail=""):
    """End the scenario as skipped: exit 0 with a loud SKIP line. `why` is a fixed sentence: e2e.sh
    counts a skip as a failure unless (scenario, why) is on Tests/testbed/skip-allowlist, each
    entry with its justification. `detail` (a dmesg line, a measured value) goes on the next line."""
    print(f"\nSKIP: {why}" + (f"\n  {detail}" if detail else ""), flush=True)
    raise _Skip(why + ("\n" + detail if detail else ""))


class _Skip(BaseException):
    pass
