#!/bin/bash
# try-deb.sh DEB — the package (arm64 or amd64, its Architecture) installed in Debian bookworm of that
# architecture (debian/cross/bookworm-root.sh: a bookworm root, arm64's under qemu-user, amd64's
# run natively; apt sources bookworm's alone) with apt, and run there:
# paird --version, pairctl --help, paird against a system dbus-daemon with no bluetoothd (it
# must start, say it waits for BlueZ, and stay up), pairctl status against it, paird's RSS.
# qemu-user runs the arm64 binaries on this amd64 host: the RSS it shows includes qemu's own.
# debian/cross/try-arm64.sh is try-deb.sh for the arm64 package.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); src=$(cd "$here/../.." && pwd)
deb=$(realpath "$1"); [[ $deb == "$src"/* ]] || { echo "try-deb: $deb must be inside $src" >&2; exit 1; }
arch=$(dpkg-deb -f "$deb" Architecture)
qemu=; [[ $arch == amd64 ]] || qemu=" (under qemu-user: includes the emulator)"
t0=$(date +%s)
exec "$here/bookworm-root.sh" "$arch" bash -c '
  set -euo pipefail
  deb=/src/${1#'"$src"'/}
  echo "== uname -m: $(uname -m); $(. /etc/os-release; echo $PRETTY_NAME); apt sources: $(grep -v "^#" /etc/apt/sources.list)"
  apt-get -q update >/dev/null
  dpkg -s paird >/dev/null 2>&1 && apt-get -q purge -y paird >/dev/null
  echo "== apt-get install $deb"
  DEBIAN_FRONTEND=noninteractive apt-get -q install -y --no-install-recommends "$deb" 2>&1 | grep -E "^(The following NEW|  |Setting up paird|E:)" || true
  dpkg -s paird | grep -E "^(Status|Architecture|Version|Depends)"
  echo "== paird --version: $(paird --version)"
  echo "== pairctl --help (first lines)"; pairctl --help | head -5
  mkdir -p /run/dbus; dpid=$(dbus-daemon --system --fork --nopidfile --print-pid)
  # What the unit gives it (StateDirectory=paird, mode 0700; User=paird): no systemd runs here.
  install -d -m 0700 -o paird -g paird /var/lib/paird
  echo "== paird as user paird against the system bus, no bluetoothd (8 s)"
  setpriv --reuid=paird --regid=paird --init-groups paird >/tmp/paird.log 2>&1 & p=$!
  sleep 8
  if kill -0 $p; then echo "paird up after 8 s (pid $p); VmRSS $(awk "/VmRSS/{print \$2, \$3}" /proc/$p/status)$2"; else echo "paird exited"; fi
  echo "== pairctl status"; timeout 20 pairctl status 2>&1 | head -8 || true
  kill -TERM $p || true; rc=0; wait $p || rc=$?; echo "paird exit status after SIGTERM: $rc"
  echo "== paird output"; head -15 /tmp/paird.log
  kill $dpid   # by its pid: this chroot shares the host'"'"'s process table' bash "$deb" "$qemu"
