#!/bin/bash
# try-clean-deb.sh — issue 47's proof: `make deb` from a fresh clone on a stock Debian 12 amd64
# with no Swift at all, then the package it made installed with apt in another clean bookworm root
# (debian/cross/try-deb.sh). As root, on Debian 12 amd64; not part of `make test`.
#
# 1. A throw-away bookworm amd64 root (debootstrap minbase, apt sources bookworm's alone), made
#    anew every run under $PAIRD_CLEAN_ROOT (default /var/tmp/paird-clean-root) and removed at the
#    end unless KEEP=1. What a person brings to it: `apt-get install make git`, and a clone.
# 2. In it: git clone of this repository's HEAD, then `make deb` exactly as the README says.
#    It finds no Swift on PATH, so it builds with Debian's swiftlang in the sid chroot
#    (debian/cross/sid-chroot.sh, made inside this root: nothing of the host's cache is used).
#    Two things come from this machine because it has no route to github.com, and a user's would:
#    the Swift package mirror (/opt/swift-packages, read-only, where git looks for github.com),
#    and deb.debian.org through the machine's network as for any apt.
# 3. A second `make deb` after a new commit in that clone (the cache of step 2 kept), timed.
# 4. The second run's .deb copied out to .build/deb-clean/, and try-deb.sh run on it.
# Each phase's time is printed; the log of the build is $PAIRD_CLEAN_ROOT.log.
set -euo pipefail
[[ $(id -u) == 0 ]] || { echo "try-clean-deb: run as root (debootstrap, chroot)" >&2; exit 1; }
[[ -n ${PAIRD_CHROOT_NS:-} ]] || PAIRD_CHROOT_NS=1 exec unshare --mount --propagation private "$0" "$@"
here=$(cd "$(dirname "$0")" && pwd); src=$(cd "$here/../.." && pwd)
root=${PAIRD_CLEAN_ROOT:-/var/tmp/paird-clean-root}
out=$src/.build/deb-clean
command -v debootstrap >/dev/null || { apt-get -q update && apt-get -q install -y --no-install-recommends debootstrap; }
t() { echo "try-clean-deb: [$(date +%T), +$(( $(date +%s) - T0 )) s] $*"; }
T0=$(date +%s)
umount -R "$root" 2>/dev/null || true; rm -rf "$root"; mkdir -p "$root"
cleanup() { umount -R "$root" 2>/dev/null || umount -lR "$root" 2>/dev/null || true
            [[ ${KEEP:-0} == 1 ]] || rm -rf --one-file-system "$root"; }
trap cleanup EXIT
t "debootstrap bookworm amd64 minbase into $root"
debootstrap --arch=amd64 --variant=minbase bookworm "$root" http://deb.debian.org/debian >"$root.log" 2>&1 ||
  { tail -20 "$root.log"; exit 1; }
echo 'deb http://deb.debian.org/debian bookworm main' > "$root/etc/apt/sources.list"
echo 'Acquire::Check-Valid-Until "false";' > "$root/etc/apt/apt.conf.d/99paird-valid-until"
# The root a mount of its own, as / is on a real host (sid-chroot.sh's `unshare --propagation
# private` inside it refuses a / that is not one: "cannot change root filesystem propagation").
mount --bind "$root" "$root"
mount -t proc proc "$root/proc"; mount --rbind /dev "$root/dev"; mount --rbind /sys "$root/sys"
mkdir -p "$root/clone-from"; mount --bind "$src" "$root/clone-from"; mount -o remount,bind,ro "$root/clone-from"
if [[ -d /opt/swift-packages ]]; then
  mkdir -p "$root/opt/swift-packages"; mount --bind /opt/swift-packages "$root/opt/swift-packages"
  mount -o remount,bind,ro "$root/opt/swift-packages"
fi
cp /etc/resolv.conf "$root/etc/resolv.conf"
inside() { chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 TERM=dumb /bin/bash -c "$1"; }
make_deb() { inside 'cd /root/paird && make deb' >>"$root.log" 2>&1 || { tail -40 "$root.log"; t "the $1 make deb FAILED"; exit 1; }; }
t "no Swift in it: $(inside 'command -v swift swiftc || echo none on PATH')"
t "what a person brings: apt-get install make git"
inside 'apt-get -q update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get -q install -y --no-install-recommends make git ca-certificates >/dev/null'
[[ -d /opt/swift-packages ]] && inside 'git config --global url./opt/swift-packages/.insteadOf https://github.com/; git config --global --add safe.directory "*"'
t "git clone of $(git -C "$src" rev-parse --short HEAD), then make deb (log: $root.log)"
inside 'git clone -q /clone-from /root/paird && cd /root/paird && git log --oneline -1'
make_deb first
grep -E '^make deb:|^\[[0-9]/4\]|build-amd64:|sid-chroot: made|made in' "$root.log" || true
t "make deb done (the first run)"
# A second run, as after a `git pull`: a new commit, everything cached.
inside 'cd /root/paird && git -c user.name=try -c user.email=try@localhost commit -q --allow-empty -m "a new commit" && git log --oneline -1'
make_deb second
mkdir -p "$out"; rm -f "$out"/*.deb
cp "$root"/root/paird/.build/deb/paird_*_amd64.deb "$out/"
deb=$(ls "$out"/paird_*_amd64.deb)
t "make deb done (the second run): $deb ($(du -h "$deb" | cut -f1))"
"$here/try-deb.sh" "$deb"
t "done"
