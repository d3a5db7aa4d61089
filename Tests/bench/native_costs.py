#!/usr/bin/python3
"""paird's start-up and idle cost on this host's own CPU (no emulation), on python-dbusmock's
BlueZ: the figures the test bed cannot give, since its guest is TCG-emulated (BENCHMARKS.md §2–3
read CPU and start-up there as inflated).

What the mock does not reproduce: BlueZ's own work (bluetoothd, the kernel, the radio), GATT
(the mock device has no characteristics, so nothing is subscribed or read), and a real absent
device (its Connect() is made to fail at once with le-connection-abort-by-local, where BlueZ
would take up to its page timeout). paird's own CPU time and wake-ups are the figures; the mock
is a Python process and is not measured.

Start-up, REPS reps, one device bonded, known to the state file and connected+resolved in the
mock: exec → READY=1 and exec → the first STATUS= that says it is connected (adoption), each rep
interleaved with two references exec'd the same way on the same host: `pairctl --version`
(exec → exit, our other static binary) and /bin/true (the cost of an exec here).

Idle, WINDOW s per phase, WATCHDOG_USEC=10 s as under systemd/paird.service: CPU (schedstat,
threads summed), wake-ups per second (voluntary context switches: paird blocking again in
epoll_wait) and, apart, the host's preemptions of it (nonvoluntary), WATCHDOG=1 datagrams
received, RSS and fds, for
  connected-quiet  link up, nothing happening
  absent           link down, every Connect() fails. The mock accepts paird's GattProfile1 and
                   lists the device's Heart Rate service, so paird waits on the (here absent)
                   kernel auto-connect with no timer; were the registration refused, one fallback
                   Connect() per FallbackInterval (60 s) would be part of the figure

  native_costs.py [--paird .build/release/paird] [--pairctl .build/release/pairctl]
                  [--reps 20] [--window 60] [--out FILE]"""
import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scale_mock import Host, addr, proc_cpu, proc_mem  # noqa: E402


def ctx_switches(pid):
    """(voluntary, nonvoluntary) context switches, threads summed. A voluntary one is paird
    blocking (in epoll_wait, once per wake-up); a nonvoluntary one is the host preempting it."""
    vol = nonvol = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches"):
                        vol += int(line.split()[1])
                    elif line.startswith("nonvoluntary_ctxt_switches"):
                        nonvol += int(line.split()[1])
        except FileNotFoundError:
            pass
    return vol, nonvol


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


class Notify:
    """Our NOTIFY_SOCKET, read all the time by a thread as systemd does (a unix datagram socket
    queues only a few messages; an unread one would block paird's sd_notify)."""

    def __init__(self, path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.notes = []
        self.lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        while True:
            msg = self.sock.recv(65536).decode(errors="replace")
            t = time.monotonic()
            with self.lock:
                self.notes.extend((t, line) for line in msg.splitlines())

    def reset(self):
        with self.lock:
            self.notes = []

    def first(self, pred, since):
        with self.lock:
            return next((t for t, line in self.notes if t >= since and pred(line)), None)

    def count(self, line, since, until):
        with self.lock:
            return sum(1 for t, n in self.notes if since <= t <= until and n == line)


def exec_time(argv):
    t0 = time.monotonic()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.monotonic() - t0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--paird", default=".build/release/paird")
    p.add_argument("--pairctl", default=".build/release/pairctl")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--window", type=float, default=60)
    p.add_argument("--out", default=None)
    a = p.parse_args()
    a.paird, a.pairctl = os.path.abspath(a.paird), os.path.abspath(a.pairctl)
    h = Host(a)
    out = open(a.out, "a") if a.out else None
    notify = Notify(os.path.join(h.dir, "notify"))
    conf = os.path.join(h.dir, "paird.conf")
    open(conf, "w").close()
    state = h.write_state(1)
    h.ensure_devices(1)
    h.set_link(0, True)
    label = f"Band-0 ({addr(0)}) connected"

    def start_paird(watchdog=False):
        env = dict(h.env, NOTIFY_SOCKET=notify.path)
        argv = [a.paird, "--state-file", state, "--config", conf]
        if watchdog:
            # as under systemd: WATCHDOG_PID must be paird's own pid, so exec through a shell
            argv = ["/bin/sh", "-c", 'export WATCHDOG_PID=$$; exec "$0" "$@"'] + argv
            env["WATCHDOG_USEC"] = "10000000"
        log = open(os.path.join(h.dir, "paird.log"), "a")
        t0 = time.monotonic()
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        return proc, t0

    def wait(pred, deadline, what):
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            v = pred()
            if v is not None:
                return v
            time.sleep(0.002)
        raise SystemExit(f"timed out after {deadline} s waiting for {what}; log in {h.dir}/paird.log")

    def stop(proc):
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)

    rows = {"ready": [], "connected": [], "pairctl_version": [], "true": []}
    try:
        for rep in range(1, a.reps + 1):
            rows["true"].append(exec_time(["/bin/true"]))
            rows["pairctl_version"].append(exec_time([a.pairctl, "--version"]))
            notify.reset()
            proc, t0 = start_paird()
            ready = wait(lambda: notify.first(lambda n: n == "READY=1", t0), 30, "READY=1")
            up = wait(lambda: notify.first(lambda n: n.startswith("STATUS=") and label in n, t0), 30, "STATUS … connected")
            stop(proc)
            rows["ready"].append(ready - t0)
            rows["connected"].append(up - t0)
            if h.calls(1):
                raise SystemExit(f"rep {rep}: paird called Connect() on a live link (adoption failed)")
        print(f"start-up, {a.reps} reps interleaved, host CPU (not emulated), python-dbusmock BlueZ:")
        print(f"  {'what':44s} {'median':>9s} {'p95':>9s}")
        for key, what in [("true", "/bin/true exec → exit (reference)"),
                          ("pairctl_version", "pairctl --version exec → exit (reference)"),
                          ("ready", "paird exec → READY=1"),
                          ("connected", "paird exec → STATUS connected (adopted)")]:
            xs = rows[key]
            print(f"  {what:44s} {statistics.median(xs) * 1000:7.1f} ms {pct(xs, 95) * 1000:7.1f} ms")
            if out:
                out.write(json.dumps(dict(bench="native-start", what=key, reps=len(xs), median_s=statistics.median(xs),
                                          p95_s=pct(xs, 95), values_s=xs)) + "\n")
        print(f"  ratio paird READY / pairctl --version (medians): "
              f"{statistics.median(rows['ready']) / statistics.median(rows['pairctl_version']):.1f}")

        notify.reset()
        proc, t0 = start_paird(watchdog=True)
        wait(lambda: notify.first(lambda n: n.startswith("STATUS=") and label in n, t0), 30, "STATUS … connected")
        print(f"\nidle, {a.window:.0f} s per phase, WATCHDOG_USEC=10 s (ping expected every 5 s):")
        print(f"  {'phase':16s} {'CPU-s/hour':>10s} {'wake-ups/s':>10s} {'preempt/s':>9s} {'WATCHDOG=1':>10s} {'RSS MB':>7s} {'fds':>4s} {'Connect()':>9s}")

        def window(phase):
            time.sleep(10)  # let the change that started the phase settle (start-up, the link drop)
            c0, s0, k0, t = proc_cpu(proc.pid), ctx_switches(proc.pid), h.calls(1), time.monotonic()
            time.sleep(a.window)
            c1, s1, k1, t1 = proc_cpu(proc.pid), ctx_switches(proc.pid), h.calls(1), time.monotonic()
            rss, fds = proc_mem(proc.pid)
            dt = t1 - t
            r = dict(bench="native-idle", phase=phase, window_s=dt, cpu_s_per_hour=(c1 - c0) / dt * 3600,
                     wakeups_per_s=(s1[0] - s0[0]) / dt, preemptions_per_s=(s1[1] - s0[1]) / dt,
                     watchdog_pings=notify.count("WATCHDOG=1", t, t1), rss_kb=rss, fds=fds, connect_calls=k1 - k0)
            print(f"  {phase:16s} {r['cpu_s_per_hour']:10.3f} {r['wakeups_per_s']:10.2f} {r['preemptions_per_s']:9.2f} {r['watchdog_pings']:10d} "
                  f"{rss / 1024:7.1f} {fds:4d} {r['connect_calls']:9d}", flush=True)
            if out:
                out.write(json.dumps(r) + "\n")

        window("connected-quiet")
        # absent: every Connect() fails at once, as a quick abort would (the mock's own Connect
        # would bring the link up), then the link drops
        h.dev(0).AddMethod("org.bluez.Device1", "Connect", "", "",
                           "raise dbus.exceptions.DBusException('le-connection-abort-by-local', "
                           "name='org.bluez.Error.Failed')")
        h.set_link(0, False)
        wait(lambda: notify.first(lambda n: n.startswith("STATUS=") and "out of range" in n, t0), 30,
             "STATUS … out of range")
        window("absent")
        stop(proc)
    finally:
        h.close()


if __name__ == "__main__":
    main()
