#!/usr/bin/python3
"""Scale of paird with 1, 10 and 100 managed wearables, on python-dbusmock's BlueZ (host side,
no VM): a private system-type dbus-daemon, `python3 -m dbusmock --system --template bluez5`,
N devices added with org.bluez.Mock.AddDevice and set Paired/Trusted/Connected/ServicesResolved,
a state file listing the N devices (wanted=connected), and the real paird (--state-file,
DBUS_SYSTEM_BUS_ADDRESS) as in Tests/PairdTests/MockedHost.swift.

For each N: start → all N `connected` (adopted); RSS and fds; then TOGGLES link drops and
returns (PropertiesChanged Connected/ServicesResolved false, then true), spread over the N
devices, and paird's CPU time (schedstat, threads summed) for them; then until every device is
`connected` again.  Prints a table and writes JSON lines to --out.

  scale_mock.py --paird .build/release/paird --pairctl .build/release/pairctl [--counts 1,10,100]
                [--toggles 400] [--reps 3] [--out FILE]
The mock is a Python process: driving it is slower than paird; paird's own CPU time is the figure."""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import dbus

HR = "0000180d-0000-1000-8000-00805f9b34fb"


def proc_cpu(pid):
    cpu = 0.0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                cpu += int(f.read().split()[0]) / 1e9
        except FileNotFoundError:
            pass
    return cpu


def proc_mem(pid):
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def proc_anon(pid):
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Anonymous:"):
                return int(line.split()[1])
    return 0


def rss_by_mapping(pid, top=10):
    """The largest resident mappings of pid, as (kB, name): where the RSS lives."""
    sizes, name = {}, "?"
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
                name = os.path.basename(head[5]) if len(head) > 5 else "[anon]"
            elif head[0] == "Rss:":
                sizes[name] = sizes.get(name, 0) + int(head[1])
    return sorted(((kb, n) for n, kb in sizes.items()), reverse=True)[:top]


def addr(i):
    return f"00:BE:00:00:{i >> 8:02X}:{i & 0xff:02X}"


class Host:
    def __init__(self, args):
        self.a = args
        self.dir = tempfile.mkdtemp(prefix="paird-scale-")
        conf = os.path.join(self.dir, "bus.conf")
        with open(conf, "w") as f:
            f.write(f"""<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig><type>system</type><listen>unix:path={self.dir}/bus</listen>
  <policy context="default"><allow send_destination="*" eavesdrop="true"/><allow eavesdrop="true"/><allow own="*"/></policy>
  <limit name="max_replies_per_connection">50000</limit>
</busconfig>
""")
        self.address = f"unix:path={self.dir}/bus"
        self.env = dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=self.address)
        self.procs = [subprocess.Popen(["/usr/bin/dbus-daemon", f"--config-file={conf}", "--nofork"])]
        self.wait(lambda: os.path.exists(f"{self.dir}/bus"), 10, "bus socket")
        self.procs.append(subprocess.Popen(["/usr/bin/python3", "-m", "dbusmock", "--system", "--template", "bluez5"],
                                           env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        os.environ["DBUS_SYSTEM_BUS_ADDRESS"] = self.address
        self.bus = dbus.SystemBus()
        self.wait(lambda: self.bus.name_has_owner("org.bluez"), 15, "org.bluez")
        self.mock = dbus.Interface(self.bus.get_object("org.bluez", "/"), "org.bluez.Mock")
        self.mock.AddAdapter("hci0", "host")
        # The bluez5 template has no GattManager1: without these paird's RegisterApplication fails
        # and is retried every 5 s, wake-ups real BlueZ (which accepts it) would not cause.
        dbus.Interface(self.bus.get_object("org.bluez", "/org/bluez/hci0"), "org.freedesktop.DBus.Mock").AddMethods(
            "org.bluez.GattManager1", [("RegisterApplication", "oa{sv}", "", ""), ("UnregisterApplication", "o", "", "")])
        self.known = 0
        self.paird = None

    @staticmethod
    def wait(pred, deadline, what, interval=0.05):
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            try:
                v = pred()
                if v:
                    return v
            except Exception:  # noqa: BLE001
                pass
            time.sleep(interval)
        raise SystemExit(f"timed out after {deadline} s waiting for {what}")

    def dev(self, i):
        return dbus.Interface(self.bus.get_object("org.bluez", "/org/bluez/hci0/dev_" + addr(i).replace(":", "_")),
                              "org.freedesktop.DBus.Mock")

    def calls(self, n):
        return sum(len(self.dev(i).GetMethodCalls("Connect")) for i in range(n))

    def set_link(self, i, up):
        self.dev(i).UpdateProperties("org.bluez.Device1", {
            "Connected": dbus.Boolean(up), "ServicesResolved": dbus.Boolean(up)})

    def ensure_devices(self, n):
        while self.known < n:
            i = self.known
            self.mock.AddDevice("hci0", addr(i), f"Band-{i}")
            self.dev(i).UpdateProperties("org.bluez.Device1", {
                "Paired": dbus.Boolean(True), "Trusted": dbus.Boolean(True),
                "UUIDs": dbus.Array([HR], signature="s"), "Connected": dbus.Boolean(True),
                "ServicesResolved": dbus.Boolean(True)})
            self.known += 1

    def write_state(self, n):
        path = os.path.join(self.dir, f"state-{n}.json")
        devs = [{"address": addr(i), "addressType": "public", "name": f"Band-{i}", "adapter": "hci0",
                 "serviceUUIDs": [HR], "wanted": "connected", "pairedAt": "2026-11-22T08:00:00Z",
                 "updatedAt": "2026-11-22T08:00:00Z"} for i in range(n)]
        with open(path, "w") as f:
            json.dump({"version": 1, "devices": devs}, f)
        os.chmod(path, 0o600)
        return path

    def status(self):
        r = subprocess.run([self.a.pairctl, "status", "--json"], env=self.env, capture_output=True, text=True,
                           timeout=30)
        return json.loads(r.stdout)

    def states(self, n):
        ds = self.status()["devices"]
        return {d["address"]: d["state"] for d in ds if d["address"] in {addr(i) for i in range(n)}}

    def all_connected(self, n):
        s = self.states(n)
        return len(s) == n and all(v == "connected" for v in s.values())

    def start_paird(self, n):
        conf = os.path.join(self.dir, "paird.conf")
        open(conf, "w").close()
        self.log = open(os.path.join(self.dir, f"paird-{n}.log"), "w")
        self.paird = subprocess.Popen([self.a.paird, "--state-file", self.write_state(n), "--config", conf],
                                      env=self.env, stdout=self.log, stderr=subprocess.STDOUT)
        self.wait(lambda: subprocess.run([self.a.pairctl, "status"], env=self.env,
                                         capture_output=True).returncode == 0, 30, "paird answering")

    def stop_paird(self):
        self.paird.terminate()
        self.paird.wait(15)

    def close(self):
        for p in reversed(self.procs + ([self.paird] if self.paird else [])):
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--paird", default=".build/release/paird")
    p.add_argument("--pairctl", default=".build/release/pairctl")
    p.add_argument("--counts", default="1,10,100")
    p.add_argument("--toggles", type=int, default=400, help="link drops+returns per run (each = 2 signals)")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--out", default=None)
    p.add_argument("--smaps", action="store_true", help="also print paird's largest resident mappings (first rep of each N)")
    a = p.parse_args()
    a.paird, a.pairctl = os.path.abspath(a.paird), os.path.abspath(a.pairctl)
    out = open(a.out, "a") if a.out else None
    h = Host(a)
    rows = []
    try:
        for n in [int(x) for x in a.counts.split(",")]:
            h.ensure_devices(n)
            for i in range(n):
                h.set_link(i, True)
            for rep in range(1, a.reps + 1):
                t0 = time.monotonic()
                h.start_paird(n)
                h.wait(lambda: h.all_connected(n), 120, f"{n} devices connected", interval=0.2)
                t_up = time.monotonic() - t0
                time.sleep(1)
                rss, fds = proc_mem(h.paird.pid)
                anon = proc_anon(h.paird.pid)
                if a.smaps and rep == 1:
                    print(f"N={n:3d}: resident mappings: " + ", ".join(f"{name} {kb} kB" for kb, name in rss_by_mapping(h.paird.pid)))
                t = time.monotonic()
                h.status()
                t_status = time.monotonic() - t
                cpu0 = proc_cpu(h.paird.pid)
                t1 = time.monotonic()
                for k in range(a.toggles):
                    i = k % n
                    h.set_link(i, False)
                    h.set_link(i, True)
                t_drive = time.monotonic() - t1
                # settled = paird's CPU time stops moving for 1 s (no status polls meanwhile)
                last = proc_cpu(h.paird.pid)
                while True:
                    time.sleep(1)
                    c = proc_cpu(h.paird.pid)
                    if c - last < 0.001 or time.monotonic() - t1 > 120:
                        break
                    last = c
                t_settle = time.monotonic() - t1
                cpu = proc_cpu(h.paird.pid) - cpu0
                final = {}
                for st in h.states(n).values():
                    final[st] = final.get(st, 0) + 1
                rss2, fds2 = proc_mem(h.paird.pid)
                # the status polls above cost paird CPU too: measure one and subtract
                c0 = proc_cpu(h.paird.pid)
                polls = 10
                for _ in range(polls):
                    h.status()
                per_status = (proc_cpu(h.paird.pid) - c0) / polls
                r = dict(bench="scale", devices=n, rep=rep, start_to_all_connected=t_up, rss_kb=rss, anon_kb=anon, fds=fds,
                         status_call_s=t_status, toggles=a.toggles, signals=2 * a.toggles, cpu_s=cpu,
                         cpu_per_signal_us=cpu / (2 * a.toggles) * 1e6, drive_s=t_drive, settle_s=t_settle,
                         rss_after_kb=rss2, fds_after=fds2, cpu_per_status_ms=per_status * 1000,
                         final_states=final, connect_calls=h.calls(n))
                rows.append(r)
                if out:
                    out.write(json.dumps(r) + "\n")
                print(f"N={n:3d} rep {rep}: start→all connected {t_up:5.2f} s, RSS {rss / 1024:5.1f} MB "
                      f"(after storm {rss2 / 1024:5.1f}), fds {fds}, {2 * a.toggles} signals: paird CPU {cpu:.3f} s "
                      f"= {r['cpu_per_signal_us']:.0f} µs/signal (one GetStatus costs paird ~{per_status * 1000:.1f} ms CPU), "
                      f"status call {t_status * 1000:.0f} ms; after the storm (BlueZ: all connected) paird says {final}, "
                      f"Connect() calls {r['connect_calls']}", flush=True)
                h.stop_paird()
        print("\nsummary (median over reps):")
        base = None
        for n in sorted({r["devices"] for r in rows}):
            rs = [r for r in rows if r["devices"] == n]
            rss = statistics.median(r["rss_kb"] for r in rs)
            base = base or (n, rss)
            per_dev = (rss - base[1]) / (n - base[0]) if n != base[0] else None
            print(f"  N={n:3d}: RSS {rss / 1024:6.2f} MB"
                  + (f" (+{per_dev:.1f} kB/device over N={base[0]})" if per_dev is not None else "")
                  + f", fds {statistics.median(r['fds'] for r in rs):.0f}"
                  f", CPU {statistics.median(r['cpu_per_signal_us'] for r in rs):.0f} µs per PropertiesChanged"
                  f", start→all connected {statistics.median(r['start_to_all_connected'] for r in rs):.2f} s"
                  f", GetStatus via pairctl {statistics.median(r['status_call_s'] for r in rs) * 1000:.0f} ms")
    finally:
        h.close()


if __name__ == "__main__":
    sys.exit(main())
