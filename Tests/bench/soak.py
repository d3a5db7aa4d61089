#!/usr/bin/python3
# testbed: mode=plain timeout=10800
"""Soak (issue 6, reliability), in the real-BlueZ test bed, real paird and pairctl:
  1. BED_X_CYCLES (500) away/return cycles of the wearable, each away a random 1..BED_X_AWAY_MAX
     (8) s: every return must reach `connected` with notifications flowing again, with no pairctl
     command; paird's RSS, open fds and threads are sampled after every cycle and compared,
     first 50 cycles against the last 50;
  2. BED_X_RESTARTS (20) bluetoothd restarts while connected: each must come back to connected
     with notifications;
  3. BED_X_POWER (20) adapter power cycles (btmgmt power off/on) while connected: the same.
If the guest kernel BUGs (6.1 did, on bluetoothd restarts), the soak stops there and ends as a
loud SKIP: a wedged Bluetooth stack says nothing about paird.
BED_X_PAIRD_ARGS adds paird arguments (`--verbose` for a post-mortem of every event).
A failed cycle is logged and counted, and the soak goes on (it does not stop at the first).
Prints "N tried, N survived" per part and writes $BED_OUT/results.jsonl. Never asserts on time;
exits non-zero if any cycle failed or the state file lost the device.  Run by `make soak`."""
import contextlib
import json
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.environ.get("BED_REPO", "/work/main"), "Tests", "bench"))
from bedlib import *  # noqa: E402,F403

E = os.environ
CYCLES = int(E.get("BED_X_CYCLES", 500))
AWAY_MAX = float(E.get("BED_X_AWAY_MAX", 8))
RESTARTS = int(E.get("BED_X_RESTARTS", 20))
POWER = int(E.get("BED_X_POWER", 20))
SEED = int(E.get("BED_X_SEED", 1))


def record(**kv):
    with open(os.path.join(OUT, "results.jsonl"), "a") as f:
        f.write(json.dumps(kv) + "\n")


def sample(pid):
    """(RSS kB, open fds, threads) of paird."""
    with open(f"/proc/{pid}/status") as f:
        st = dict(line.split(":", 1) for line in f if ":" in line)
    return (int(st["VmRSS"].split()[0]), len(os.listdir(f"/proc/{pid}/fd")), int(st["Threads"]))


class Lines:
    """pairctl watch's output read incrementally (re-reading a file that grows for hours would
    cost the emulated guest more CPU than paird itself): the states seen and notifications counted."""

    def __init__(self, watch):
        self.f = open(watch.path, errors="replace")
        self.states, self.notifies, self.rest = [], 0, ""

    def poll(self):
        self.rest += self.f.read()
        *done, self.rest = self.rest.split("\n")
        for line in done:
            if " state " in f" {line} ":
                self.states.append(line.split(" state ", 1)[1].split()[0])
            elif " notify " in f" {line} ":
                self.notifies += 1
        return self

    def mark(self):
        self.poll()
        return len(self.states), self.notifies

    def saw(self, state, since):
        return state in self.poll().states[since:]


def back_and_flowing(lines, n_state, n_notify, deadline, what):
    """Wait (on pairctl watch's lines) for `connected` after state n_state and two new
    notifications after n_notify."""
    wait_for(lambda: lines.saw("connected", n_state), deadline, f"{what}: state connected", interval=0.1)
    wait_for(lambda: lines.poll().notifies >= n_notify + 2, 20, f"{what}: 2 new notify lines", interval=0.1)


_bug = []


def bugged(where):
    """True once the guest kernel has BUGged (bedlib.kernel_bug): the Bluetooth stack is wedged from
    then on, so later cycles would measure the bed, not paird. Logged once."""
    if not _bug:
        line = kernel_bug()
        if line:
            _bug.append(line)
            log(f"the bed's kernel BUGged ({line}), noticed {where}: stopping here")
    return bool(_bug)


def part(name, tried, failures):
    ok = tried - len(failures)
    log(f"RESULT {name}: {tried} tried, {ok} survived" + (f"; failed: {failures}" if failures else ""))
    record(part=name, tried=tried, survived=ok, failures=failures)
    return not failures


@scenario
def main():
    rnd = random.Random(SEED)
    w = Wearable.start(name="Pulse-1", battery=87)
    p = Paird()
    with step("paird up, pairctl pair --service 180d"):
        p.start(extra_args=E.get("BED_X_PAIRD_ARGS", "").split())
        pair_wearable(p)
        p.wait_state("connected", 10)
    watch = p.watch()
    lines = Lines(watch)
    wait_for(lambda: lines.poll().notifies >= 1, 30, "pairctl watch receiving")
    pid = p.pid()
    samples, failures, restarts_of_paird = [], [], 0

    log(f"part 1: {CYCLES} away/return cycles, away 1..{AWAY_MAX} s (seed {SEED})")
    for i in range(1, CYCLES + 1):
        away = round(rnd.uniform(1, AWAY_MAX), 2)
        n_state, n_notify = lines.mark()
        try:
            w.cmd("walk-away")
            wait_for(lambda: lines.saw("waitingForDevice", n_state), 30, f"cycle {i}: waitingForDevice", interval=0.1)
            time.sleep(away)  # the simulated absence: a deliberate passage of time
            n_state, _ = lines.mark()
            w.cmd("come-back")
            back_and_flowing(lines, n_state, n_notify, 90, f"cycle {i}")
        except BedError as e:
            failures.append(i)
            log(f"cycle {i} (away {away} s) FAILED: {e}; states since: {lines.states[n_state:]}")
            p.diagnose()
            if bugged(f"after cycle {i}"):
                break
            if not p.running():
                log("paird is not running: restarting it and going on")
                restarts_of_paird += 1
                p.start()
                pid = p.pid()
            with contextlib.suppress(BedError):
                w.cmd("come-back")
            continue
        samples.append((i,) + sample(pid))
        if i % 25 == 0:
            log(f"cycle {i}: {len(failures)} failed so far; paird RSS {samples[-1][1]} kB, "
                f"{samples[-1][2]} fds, {samples[-1][3]} threads")
    ok1 = part("away-return", i if CYCLES and _bug else CYCLES, failures)
    if len(samples) >= 20:
        k = min(50, len(samples) // 2)
        first, last = samples[:k], samples[-k:]
        for idx, what in ((1, "RSS kB"), (2, "open fds"), (3, "threads")):
            a = statistics.median(s[idx] for s in first)
            b = statistics.median(s[idx] for s in last)
            log(f"RESULT {what}: median {a} over cycles {first[0][0]}-{first[-1][0]}, "
                f"{b} over cycles {last[0][0]}-{last[-1][0]} (max {max(s[idx] for s in samples)})")
        record(part="resources", first=first, last=last)

    log(f"part 2: {RESTARTS} bluetoothd restarts while connected")
    failures = []
    tried = 0
    for i in range(1, 0 if _bug else RESTARTS + 1):
        tried = i
        n_state, n_notify = lines.mark()
        try:
            bluetoothd("restart")
            back_and_flowing(lines, n_state, n_notify, 90, f"bluetoothd restart {i}")
        except BedError as e:
            failures.append(i)
            log(f"bluetoothd restart {i} FAILED: {e}; states since: {lines.states[n_state:]}")
            if bugged(f"after bluetoothd restart {i}"):
                break
    ok2 = part("bluetoothd-restart", tried, failures)

    log(f"part 3: {POWER} adapter power cycles (btmgmt) while connected")
    failures = []
    tried = 0
    for i in range(1, 0 if _bug else POWER + 1):
        tried = i
        n_state, n_notify = lines.mark()
        try:
            sh("btmgmt --index 0 power off")
            wait_for(lambda: lines.saw("adapterUnavailable", n_state), 30, f"power cycle {i}: adapterUnavailable",
                     interval=0.1)
            n_state, _ = lines.mark()
            sh("btmgmt --index 0 power on")
            back_and_flowing(lines, n_state, n_notify, 90, f"power cycle {i}")
        except BedError as e:
            failures.append(i)
            log(f"power cycle {i} FAILED: {e}; states since: {lines.states[n_state:]}")
            with contextlib.suppress(BedError):
                sh("btmgmt --index 0 power on")
            if bugged(f"after power cycle {i}"):
                break
    ok3 = part("power-cycle", tried, failures)
    if _bug:
        skip(f"blocked by kernel bug ({_bug[0]}): the parts stopped there; see the RESULT lines")

    with step("nothing lost: the state file still holds the wearable, wanted connected"):
        with open(p.state_file) as f:
            doc = json.load(f)
        devs = doc["devices"]
        check(len(devs) == 1 and devs[0]["address"] == WEARABLE_ADDR and devs[0]["wanted"] == "connected",
              f"state file devices: {devs}")
        log(f"paird restarted by the soak after a failure: {restarts_of_paird} time(s); "
            f"pid now {p.pid()} (was {pid})")
    check(ok1 and ok2 and ok3, "every cycle survived")


main()
