#!/usr/bin/env python3
"""arm64-deps.py SYSROOT BINARY... — the Depends: line of binaries built against the arm64
sysroot of debian/cross/arm64-sysroot.sh, computed as dpkg-shlibdeps does (it cannot here: the arm64
libraries are unpacked, not installed): each DT_NEEDED library (readelf -d) is found in the
sysroot, its package in SYSROOT/debs by the package's file list, and the version from that
package's symbols file: the highest minimal version among the symbols the binaries import
(readelf --dyn-syms), or its shlibs file where it has no symbols file."""
import glob, os, re, subprocess, sys

sysroot, bins = sys.argv[1], sys.argv[2:]
run = lambda *a: subprocess.run(a, check=True, capture_output=True, text=True).stdout

owner, symbols, shlibs = {}, {}, {}
for deb in glob.glob(os.path.join(sysroot, "debs", "*.deb")):
    pkg = run("dpkg-deb", "-f", deb, "Package").strip()
    for line in run("dpkg-deb", "-c", deb).splitlines():
        path = line.split()[5].lstrip(".")
        owner[os.path.basename(path) + "@" + os.path.dirname(path).replace("/usr/lib/", "/lib/")] = pkg
    ctrl = subprocess.run(f"dpkg-deb --ctrl-tarfile '{deb}' | tar -xO ./symbols 2>/dev/null", shell=True,
                          capture_output=True, text=True).stdout
    soname = None
    for line in ctrl.splitlines():
        if line and not line[0].isspace() and not line.startswith(("|", "*", "#")):
            soname = line.split()[0]; symbols.setdefault(soname, (pkg, {}))
        elif line.startswith(" ") and soname:
            f = line.split()
            symbols[soname][1][f[0]] = f[1]
    sh = subprocess.run(f"dpkg-deb --ctrl-tarfile '{deb}' | tar -xO ./shlibs 2>/dev/null", shell=True,
                        capture_output=True, text=True).stdout
    for line in sh.splitlines():
        f = line.split(None, 2)
        if len(f) == 3 and not line.startswith("#"):
            shlibs[f"{f[0]}.so.{f[1]}"] = f[2]

def vkey(v):
    return subprocess.run(["dpkg", "--compare-versions", v[0], "gt", v[1]]).returncode == 0

deps = {}
def need(pkg, ver):
    cur = deps.get(pkg)
    if ver and (cur is None or cur == "" or vkey((ver, cur))):
        deps[pkg] = ver
    else:
        deps.setdefault(pkg, ver or "")

for b in bins:
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", run("readelf", "-d", b))
    imports = set()
    for line in run("readelf", "--dyn-syms", "-W", b).splitlines():
        f = line.split()
        if len(f) >= 8 and f[6] == "UND":
            name, _, ver = f[7].partition("@")
            imports.add(f"{name}@{ver.lstrip('@') or 'Base'}")
    for so in needed:
        pkg = next((owner[k] for k in (f"{so}@/lib/aarch64-linux-gnu", f"{so}@/lib") if k in owner), None)
        if pkg is None:
            sys.exit(f"arm64-deps: {so} (needed by {b}) is in no package of {sysroot}/debs")
        if so in symbols:
            spkg, table = symbols[so]
            vers = [table[s] for s in imports if s in table and table[s] != "0"]   # 0: any version
            best = ""
            for v in vers:
                if not best or vkey((v, best)):
                    best = v
            need(spkg, best)
        elif so in shlibs:
            m = re.match(r"(\S+)(?:\s*\(>=\s*(\S+)\))?", shlibs[so])
            need(m.group(1), m.group(2))
        else:
            need(pkg, "")
print(", ".join(f"{p} (>= {v})" if v else p for p, v in sorted(deps.items())))
