#!/usr/bin/python3
"""Where paird's memory is (issue 46, item 1): a program that prints figures, not a test.  Host
side, no VM: the real paird and pairctl on python-dbusmock's BlueZ and a private dbus-daemon
(scale_mock.py's Host), 3 wearables connected.

For each variant (default; then each --env given, e.g. MALLOC_ARENA_MAX=2, in paird's environment
only): paird started with the 3 wearables in its state file → all `connected`, 2 s → snapshot
"start"; 65 s after paird's start (it gives back its start-up code pages at 60 s: MappedText.swift)
→ snapshot "released"; then --rounds rounds of churn (every wearable's link dropped and back through the mock —
PropertiesChanged Connected/ServicesResolved false, then true — and one `pairctl status --json`)
→ until paird's CPU time stops moving and (at most 60 s) all are `connected` again, 2 s →
snapshot "churn".  A snapshot: VmRSS/VmHWM (/proc/PID/status), smaps_rollup, and every mapping of
/proc/PID/smaps sorted into
  paird binary (its r-x segment: .text, .rodata, .rela.dyn, …; a separate r-- segment if any; its
    rw segment: .data.rel.ro, .data, .bss, file-backed or written), shared libraries (file-backed /
    written: anonymous copy-on-write pages),
  [heap] (brk: glibc's main arena), malloc arenas of other threads (anonymous mappings whose
    reservation is glibc's 64 MB arena), thread stacks (the mapping holding each thread's stack
    pointer, from /proc/PID/task/TID/syscall; [stack] for the main thread), other anonymous
    mappings (mmap'd large allocations, the Swift runtime's own mmaps, …);
and, after churn, what a second churn touches (referenced bits cleared, then smaps' Referenced:
the pages in use, where Rss also counts what the kernel maps around each fault), how much of each section of paird's binary (.text, .rodata, .rela.dyn, …) is
resident (/proc/PID/pagemap).
Then the same scenario once more under heaptrack (--heaptrack BIN): the top allocation sites by
their share of the peak heap, the allocator frames skipped (malloc, swift_slowAlloc,
swift_allocObject, …), names demangled with swift-demangle.  And pairctl's own max RSS
(/usr/bin/time -v; time's child execs pairctl directly, so the figure is pairctl's).

  memory.py --paird BIN --pairctl BIN [--rounds 50] [--env MALLOC_ARENA_MAX=2 ...]
            [--heaptrack /usr/bin/heaptrack] [--out FILE]"""
import argparse
import collections
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scale_mock import Host, proc_cpu, rss_by_mapping  # noqa: E402

N = 3
PAGE = os.sysconf("SC_PAGE_SIZE")
RELEASED_AT = 65   # s after paird's start: MappedText's first release is at 60 s
ARENA = 64 << 20  # glibc's HEAP_MAX_SIZE on 64-bit: a thread arena's reservation, aligned to it


class MemHost(Host):
    """scale_mock's Host, paird started with a command prefix (heaptrack) and extra environment."""

    def start_paird(self, n, prefix=(), extra_env=None):
        conf = os.path.join(self.dir, "paird.conf")
        open(conf, "w").close()
        self.log = open(os.path.join(self.dir, f"paird-{n}.log"), "w")
        env = dict(self.env, **(extra_env or {}))
        self.paird = subprocess.Popen([*prefix, self.a.paird, "--state-file", self.write_state(n), "--config", conf],
                                      env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self.wait(lambda: subprocess.run([self.a.pairctl, "status"], env=self.env,
                                         capture_output=True).returncode == 0, 60, "paird answering")


def status_kb(pid):
    v = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, rest = line.partition(":")
            if k in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem", "VmSize", "Threads"):
                v[k] = int(rest.split()[0])
    return v


def rollup(pid):
    v = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            m = re.match(r"(\w+):\s+(\d+) kB", line)
            if m:
                v[m.group(1)] = int(m.group(2))
    return v


def mappings(pid):
    maps, cur = [], None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split()
            if re.match(r"^[0-9a-f]+-[0-9a-f]+$", head[0]):
                lo, hi = (int(x, 16) for x in head[0].split("-"))
                cur = dict(lo=lo, hi=hi, perms=head[1], path=head[5] if len(head) > 5 else "", Rss=0, Anonymous=0,
                           Referenced=0)
                maps.append(cur)
            elif head[0] in ("Rss:", "Anonymous:", "Referenced:"):
                cur[head[0][:-1]] = int(head[1])
    return maps


def thread_sps(pid):
    sps = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/syscall") as f:
                fields = f.read().split()
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                comm = f.read().strip()
            if len(fields) >= 3 and fields[0] != "running":
                sps[int(tid)] = (int(fields[-2], 16), comm)
            else:
                sps[int(tid)] = (None, comm)
        except (FileNotFoundError, ProcessLookupError, PermissionError, ValueError):
            pass
    return sps


def breakdown(pid, binary):
    """kB resident by part (see the docstring), plus the thread count and names."""
    maps = mappings(pid)
    sps = thread_sps(pid)
    binary = os.path.realpath(binary)
    parts = collections.OrderedDict((k, 0) for k in (
        "paird binary: text+rodata (r-x)", "paird binary: read-only data (r--)", "paird binary: data segment (rw, .bss)",
        "shared libraries: file-backed", "shared libraries: written (anon, COW)",
        "[heap] (brk: main arena)", "malloc arenas (other threads)", "thread stacks", "other anonymous mmaps",
        "other (vdso, vvar, files…)"))
    stacks, arenas = 0, 0
    bss_after_binary = False
    for i, m in enumerate(maps):
        rss, anon, path = m["Rss"], m["Anonymous"], m["path"]
        if path and os.path.realpath(path) == binary:
            if "x" in m["perms"]:
                parts["paird binary: text+rodata (r-x)"] += rss - anon
            elif "w" in m["perms"]:
                parts["paird binary: data segment (rw, .bss)"] += rss - anon
            else:
                parts["paird binary: read-only data (r--)"] += rss - anon
            parts["paird binary: data segment (rw, .bss)"] += anon
            bss_after_binary = "w" in m["perms"]
            continue
        if path.startswith("/") and not path.startswith("/memfd"):
            parts["shared libraries: file-backed"] += rss - anon
            parts["shared libraries: written (anon, COW)"] += anon
            bss_after_binary = False
            continue
        after_binary, bss_after_binary = bss_after_binary, False
        if path == "[heap]":
            parts["[heap] (brk: main arena)"] += rss
        elif path == "[stack]":
            parts["thread stacks"] += rss
            stacks += 1
        elif path == "" and any(sp is not None and m["lo"] <= sp < m["hi"] for sp, _ in sps.values()):
            parts["thread stacks"] += rss
            stacks += 1
        elif path == "" and after_binary and "w" in m["perms"]:
            parts["paird binary: data segment (rw, .bss)"] += rss  # .bss past the file's end
        elif path == "" and "rw" in m["perms"] and m["lo"] % ARENA == 0 and (
                m["hi"] - m["lo"] == ARENA or (i + 1 < len(maps) and maps[i + 1]["perms"].startswith("---")
                                              and maps[i + 1]["hi"] - m["lo"] == ARENA)):
            parts["malloc arenas (other threads)"] += rss
            arenas += 1
        elif path == "" and "rw" in m["perms"]:
            parts["other anonymous mmaps"] += rss
        else:
            parts["other (vdso, vvar, files…)"] += rss
    comms = collections.Counter(c for _, c in sps.values())
    return dict(parts=parts, threads=len(sps), thread_names=dict(comms), stack_mappings=stacks, arenas=arenas,
                rss_sum=sum(m["Rss"] for m in maps))


def sections(binary):
    """The allocated sections of binary: (name, address, size)."""
    out = subprocess.run(["readelf", "-SW", binary], capture_output=True, text=True).stdout
    secs = []
    for line in out.splitlines():
        m = re.match(r"\s*\[\s*\d+\]\s+(\S+)\s+\S+\s+([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)\s+\S+\s+(\S*)", line)
        if m and int(m.group(2), 16) and "A" in m.group(4):
            secs.append((m.group(1), int(m.group(2), 16), int(m.group(3), 16)))
    return secs

def resident_by_section(pid, binary):
    """kB of each section of paird's binary, and how much of it is resident (/proc/PID/pagemap's
    present bit per page)."""
    binary = os.path.realpath(binary)
    base = None
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            h = line.split()
            if len(h) > 5 and os.path.realpath(h[5]) == binary and int(h[2], 16) == 0:
                base = int(h[0].split("-")[0], 16)
                break
    res = collections.OrderedDict()
    with open(f"/proc/{pid}/pagemap", "rb") as pm:
        for name, addr, size in sections(binary):
            lo, hi = (base + addr) // PAGE, (base + addr + size + PAGE - 1) // PAGE
            pm.seek(lo * 8)
            data = pm.read((hi - lo) * 8)
            n = sum(1 for (e,) in struct.iter_unpack("<Q", data) if e >> 63 & 1)
            res[name] = (size // 1024, n * PAGE // 1024)
    return res

def snapshot(pid, binary):
    s = status_kb(pid)
    return dict(status=s, rollup=rollup(pid), **breakdown(pid, binary))


def settle(h, pid, limit=60):
    t0 = time.monotonic()
    last = proc_cpu(pid)
    while time.monotonic() - t0 < limit:
        time.sleep(1)
        c = proc_cpu(pid)
        if c - last < 0.001:
            break
        last = c
    try:
        h.wait(lambda: h.all_connected(N), 10, "all connected", interval=0.5)
    except SystemExit:
        pass


def churn(h, rounds):
    for _ in range(rounds):
        for i in range(N):
            h.set_link(i, False)
            h.set_link(i, True)
        h.status()


def states(h):
    c = collections.Counter(h.states(N).values())
    return dict(c)


def variant(h, a, label, extra_env, ctl=False):
    started = time.monotonic()
    h.start_paird(N, extra_env=extra_env)
    pid = h.paird.pid
    h.wait(lambda: h.all_connected(N), 60, f"{N} devices connected", interval=0.2)
    time.sleep(2)
    start = snapshot(pid, a.paird)
    # paird gives back its start-up code pages a minute after it starts (MappedText.swift)
    time.sleep(max(0.0, RELEASED_AT - (time.monotonic() - started)))
    released = snapshot(pid, a.paird)
    t0 = time.monotonic()
    churn(h, a.rounds)
    settle(h, pid)
    time.sleep(2)
    after = snapshot(pid, a.paird)
    after["top_mappings"] = rss_by_mapping(pid, 8)
    after["sections"] = resident_by_section(pid, a.paird)
    after["referenced"] = referenced(h, pid, a)
    r = dict(bench="memory", variant=label, env=extra_env, rounds=a.rounds, churn_s=time.monotonic() - t0,
             states_after=states(h), start=start, released=released, churn=after, cpu_s=proc_cpu(pid))
    if ctl:
        r["pairctl"] = pairctl_rss(h, a)
    h.stop_paird()
    return r


def referenced(h, pid, a):
    """kB of paird's binary (r-x, rw) and of the libraries' text that a second churn of a.rounds
    rounds touches: the pages' referenced bits cleared (/proc/PID/clear_refs), the churn, then
    smaps' Referenced: what the code and data in use are, where Rss also counts the pages the
    kernel mapped around each fault (fault-around, 64 kB)."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("1")
    churn(h, a.rounds)
    settle(h, pid)
    binary = os.path.realpath(a.paird)
    out = collections.Counter()
    for m in mappings(pid):
        mine = m["path"] and os.path.realpath(m["path"]) == binary
        if "x" in m["perms"]:
            out["paird binary r-x" if mine else "libraries r-x" if m["path"].startswith("/") else "other r-x"] += m["Referenced"]
        elif mine:
            out["paird binary data"] += m["Referenced"]
        else:
            out["all else"] += m["Referenced"]
    return dict(out)


def mb(kb):
    return f"{kb / 1024:.2f}"


def print_table(runs):
    cols = [(r["variant"], k, r[k]) for r in runs for k in ("start", "released", "churn")]
    w = 44
    print(f"\n{'kB → MB (resident)':{w}s}" + "".join(f"{(v + ' ' + k):>26s}" for v, k, _ in cols))
    rows = [("VmRSS", lambda s: mb(s["status"]["VmRSS"])), ("VmHWM", lambda s: mb(s["status"]["VmHWM"])),
            ("  RssFile", lambda s: mb(s["status"]["RssFile"])), ("  RssAnon", lambda s: mb(s["status"]["RssAnon"])),
            ("Pss (smaps_rollup)", lambda s: mb(s["rollup"]["Pss"])),
            ("Private_Dirty (smaps_rollup)", lambda s: mb(s["rollup"]["Private_Dirty"])),
            ("Shared_Clean (smaps_rollup)", lambda s: mb(s["rollup"]["Shared_Clean"]))]
    rows += [(k, (lambda k: lambda s: mb(s["parts"][k]))(k)) for k in runs[0]["start"]["parts"]]
    rows += [("sum of the parts (= Rss of all mappings)", lambda s: mb(sum(s["parts"].values()))),
             ("threads", lambda s: str(s["threads"])), ("stack mappings found", lambda s: str(s["stack_mappings"])),
             ("thread arenas found", lambda s: str(s["arenas"]))]
    for name, f in rows:
        print(f"{name:{w}s}" + "".join(f"{f(s):>26s}" for _, _, s in cols))
    for r in runs:
        print(f"  {r['variant']}: threads {r['churn']['thread_names']}; after churn paird says {r['states_after']}; "
              f"churn+settle {r['churn_s']:.1f} s; paird CPU {r['cpu_s']:.2f} s in all")
        print("    largest resident files/mappings after churn: "
              + ", ".join(f"{n} {kb} kB" for kb, n in r["churn"]["top_mappings"]))
        print(f"    referenced by a second churn of {r['rounds']} rounds (clear_refs, then smaps' Referenced), MB: "
              + ", ".join(f"{k} {mb(v)}" for k, v in r["churn"]["referenced"].items()))
    print("\npaird's binary after churn, by section: size / resident kB (pagemap), sections with ≥ 16 kB resident")
    print(f"  {'section':32s}" + "".join(f"{r['variant']:>26s}" for r in runs))
    for name, (size, _) in runs[0]["churn"]["sections"].items():
        if any(r["churn"]["sections"].get(name, (0, 0))[1] >= 16 for r in runs):
            print(f"  {name:32s}" + "".join(f"{size:>14d} / {r['churn']['sections'].get(name, (0, 0))[1]:>8d}" for r in runs))


# ----------------------------------------------------------------- heaptrack
ALLOC = re.compile(r"^(malloc|calloc|realloc|free|posix_memalign|aligned_alloc|memalign|operator new|"
                   r"swift_slowAlloc|swift_allocObject|swift_allocBox|swift_allocEmptyBox|"
                   r"\$ss12_SwiftObject|_swift_|swift::|__libc_|\?\?|<unresolved|_dl_|call_init|__GI_|strdup|0x[0-9a-f]+$)")


def demangle(names, swift_demangle):
    names = sorted(set(names))
    if not swift_demangle or not names:
        return {n: n for n in names}
    out = subprocess.run([swift_demangle, "--simplified", "--compact"], input="\n".join(names) + "\n",
                         capture_output=True, text=True).stdout.splitlines()
    return dict(zip(names, out)) if len(out) == len(names) else {n: n for n in names}


def is_runtime(frame):
    """Allocator and Swift-runtime frames: skipped to find the site that asked for the memory."""
    if ALLOC.match(frame):
        return True
    return frame.startswith(("$ss", "$sS", "_swift", "swift_", "__swift", "_ZN5swift", "std::", "_ZNSt")) or " swift::" in frame[:30]


def heaptrack_run(h, a, top=10):
    data = os.path.join(h.dir, "paird.heaptrack")
    h.start_paird(N, prefix=[a.heaptrack, "-o", data])
    h.wait(lambda: h.all_connected(N), 120, f"{N} devices connected (heaptrack)", interval=0.5)
    time.sleep(2)
    churn(h, a.rounds)
    pid = paird_child(h.paird.pid, a.paird)
    if pid:
        settle(h, pid)
    time.sleep(2)
    if pid:
        os.kill(pid, signal.SIGTERM)
    h.paird.wait(120)
    files = [f for f in os.listdir(h.dir) if f.startswith("paird.heaptrack")]
    if not files:
        print("heaptrack: no data file written")
        return None
    path = os.path.join(h.dir, files[0])
    kept = os.path.join(a.keep, os.path.basename(path)) if a.keep else None
    if kept:
        shutil.copy(path, kept)
    return analyse(a, path, top, kept)


def size_kb(text):
    m = re.match(r"([\d.]+)([BKMG]?)", text)
    return float(m.group(1)) * {"B": 1 / 1024, "": 1 / 1024, "K": 1000 / 1024, "M": 1e6 / 1024, "G": 1e9 / 1024}[m.group(2)]


def peak_backtraces(text):
    """heaptrack_print -p -m 0: every backtrace (leaf first) with its share of the peak, as
    (kB, [(function, at, in)])."""
    out, cur = [], None
    for line in text.splitlines():
        m = re.match(r"^([\d.]+[BKMG]?) peak memory consumed over \d+ calls from", line)
        if m:
            cur = (size_kb(m.group(1)), [])
            out.append(cur)
        elif cur and line.startswith("  ") and not line.startswith("   "):
            cur[1].append([line.strip(), "", ""])
        elif cur and cur[1] and line.strip().startswith("at "):
            cur[1][-1][1] = line.strip()[3:]
        elif cur and cur[1] and line.strip().startswith("in "):
            cur[1][-1][2] = os.path.basename(line.strip()[3:])
        elif not line.strip():
            cur = None if cur and cur[1] else cur
    return out


def analyse(a, path, top=10, kept=None):
    summary = subprocess.run([a.heaptrack_print, "-f", path, "-p", "1", "-a", "0", "-T", "0", "-m", "0", "-n", "100000"],
                             capture_output=True, text=True).stdout
    by_site, how = collections.Counter(), {}
    traces = peak_backtraces(summary.split("PEAK MEMORY CONSUMERS", 1)[-1])
    total = sum(kb for kb, _ in traces)
    for kb, frames in traces:
        k = next((i for i, f in enumerate(frames) if not is_runtime(f[0])), None)
        if k is None:  # all allocator/runtime/unresolved: the library it is in
            lib = next((f[2] for f in frames if f[2]), "?")
            site, where, caller = f"(no symbol) in {lib}", "", " ← ".join(f[0] for f in frames[1:3])
        else:
            site, where = frames[k][0], os.path.basename(frames[k][1]) if frames[k][1] else frames[k][2]
            caller = frames[k + 1][0] if k + 1 < len(frames) else ""
        by_site[(site, where)] += kb
        how.setdefault((site, where), collections.Counter())[caller] += kb
    names = {s for s, _ in by_site} | {c for h in how.values() for c in h}
    dm = demangle([n for n in names if n.startswith("$s")], a.swift_demangle)
    summ = [ln.strip() for ln in summary.splitlines()
            if re.match(r"^(total runtime|calls to allocation|temporary memory|peak heap memory|peak RSS|total memory leaked)", ln.strip())]
    print("\nheaptrack, same scenario (paird under heaptrack: its RSS is not paird's alone)")
    for ln in summ:
        print(f"  {ln}")
    print(f"  top {top} allocation sites by their share of the peak heap ({total:.0f} kB in {len(traces)} backtraces), "
          f"allocator and Swift-runtime/stdlib frames skipped: site (file:line) ← its heaviest caller")
    rows = []
    for (site, where), kb in by_site.most_common(top):
        caller = how[(site, where)].most_common(1)[0][0]
        shown = f"{dm.get(site, site)}" + (f" ({where})" if where else "") + (f" ← {dm.get(caller, caller)}" if caller else "")
        print(f"  {kb:8.1f} kB  {shown[:260]}")
        rows.append(dict(kb=kb, site=dm.get(site, site), at=where, caller=dm.get(caller, caller)))
    return dict(summary=summ, peak_total_kb=total, top=rows, data=kept or path)


def paird_child(root, binary):
    """The paird process under root (heaptrack's script runs it as a child)."""
    binary = os.path.realpath(binary)
    for _ in range(50):
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            try:
                if os.path.realpath(f"/proc/{p}/exe") != binary:
                    continue
                q = int(p)
                while q > 1:
                    with open(f"/proc/{q}/stat") as f:
                        q = int(f.read().rpartition(")")[2].split()[1])
                    if q == root:
                        return int(p)
            except (OSError, ValueError):
                continue
        time.sleep(0.1)
    return None


def pairctl_rss(h, a):
    print("pairctl's own peak memory (/usr/bin/time -v: Maximum resident set size), against the default paird after churn:")
    rows = []
    for argv in (["--version"], ["status"], ["status", "--json"], ["history"], ["list"]):
        r = subprocess.run(["/usr/bin/time", "-v", a.pairctl, *argv], env=h.env, capture_output=True, text=True)
        m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr)
        kb = int(m.group(1)) if m else None
        print(f"  pairctl {' '.join(argv):16s} max RSS {mb(kb) if kb else '?'} MB (exit {r.returncode})")
        rows.append(dict(argv=argv, max_rss_kb=kb, rc=r.returncode))
    return rows


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--paird", default=".build/release/paird")
    p.add_argument("--pairctl", default=".build/release/pairctl")
    p.add_argument("--rounds", type=int, default=50)
    p.add_argument("--env", action="append", default=[], help="a variant: NAME=VALUE in paird's environment")
    p.add_argument("--heaptrack", default=shutil.which("heaptrack") or "")
    p.add_argument("--heaptrack-print", dest="heaptrack_print", default=shutil.which("heaptrack_print") or "")
    p.add_argument("--swift-demangle", dest="swift_demangle", default=shutil.which("swift-demangle") or "")
    p.add_argument("--keep", default=None, help="directory to copy heaptrack's data file to")
    p.add_argument("--out", default=None)
    p.add_argument("--analyse", default=None, help="only print the allocation sites of a kept heaptrack file")
    a = p.parse_args()
    if a.analyse:
        analyse(a, a.analyse)
        return 0
    a.paird, a.pairctl = os.path.abspath(a.paird), os.path.abspath(a.pairctl)
    out = open(a.out, "a") if a.out else None
    h = MemHost(a)
    try:
        h.ensure_devices(N)
        size = os.path.getsize(a.paird)
        print(f"paird {a.paird} ({size / 1e6:.1f} MB on disk), {N} wearables on python-dbusmock, churn: {a.rounds} rounds "
              f"of {N} link drops + returns and one `pairctl status --json`")
        runs = [variant(h, a, "default", {}, ctl=True)]
        for e in a.env:
            k, _, v = e.partition("=")
            runs.append(variant(h, a, e, {k: v}))
        print_table(runs)
        ctl = runs[0]["pairctl"]
        for i in range(N):
            h.set_link(i, True)
        ht = heaptrack_run(h, a) if a.heaptrack and a.heaptrack_print else None
        if out:
            for r in runs:
                out.write(json.dumps(r) + "\n")
            out.write(json.dumps(dict(bench="memory-pairctl", rows=ctl)) + "\n")
            if ht:
                out.write(json.dumps(dict(bench="memory-heaptrack", **ht)) + "\n")
    finally:
        h.close()


if __name__ == "__main__":
    sys.exit(main())
