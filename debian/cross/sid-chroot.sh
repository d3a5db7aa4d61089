#!/bin/bash
# sid-chroot.sh [COMMAND...] — Debian sid amd64 with Debian's own Swift (swiftlang 6.2.x), made
# once per machine under the cache dir (PAIRD_ARM64_CACHE, /var/cache/paird-arm64) by debootstrap,
# then COMMAND run inside it (a login shell without one) with this source tree at /src and the
# machine's Swift package mirror (/opt/swift-packages, read-only) where git looks for github.com.
# The chroot is keyed by what made it (this script's package list and suite), so a change of
# either makes a new one. The host's apt, dpkg and /etc are not touched.
set -euo pipefail
# Its own mount namespace: the binds below are private to this run and end with it, so runs side
# by side (a test run and a cross-build) never unmount each other's /src.
[[ -n ${PAIRD_CHROOT_NS:-} ]] || PAIRD_CHROOT_NS=1 exec unshare --mount --propagation private "$0" "$@"
here=$(cd "$(dirname "$0")" && pwd); src=$(cd "$here/../.." && pwd)
cache=${PAIRD_ARM64_CACHE:-/var/cache/paird-arm64}
SUITE=sid
PKGS=(
  swiftlang                                   # Debian's Swift 6.2.x (swiftc, swift-build, Foundation, XCTest)
  libc6-dev git ca-certificates pkgconf libdbus-1-dev libsystemd-dev
  dbus-daemon python3 python3-dbus python3-gi python3-dbusmock   # the integration tier's private buses and mock BlueZ
  valgrind systemd util-linux                 # DBusTests' leak check, systemd-analyze, setpriv
  binutils-aarch64-linux-gnu lld file         # debian/cross/build-swiftlang.sh (arm64 strip; lld, file)
)
key=$(printf '%s\n' "$SUITE" "${PKGS[@]}" | sha256sum | cut -c1-12)
root=$cache/$SUITE-amd64-$key
mkdir -p "$cache"
command -v debootstrap >/dev/null || { apt-get -q update && apt-get -q install -y --no-install-recommends debootstrap; }

if [[ ! -e $root/.ready ]]; then
  t0=$(date +%s)
  rm -rf "$root.tmp"
  echo "sid-chroot: debootstrap $SUITE amd64 into $root (once per machine)"
  debootstrap --variant=minbase $SUITE "$root.tmp" http://deb.debian.org/debian >"$cache/debootstrap-$key.log" 2>&1 ||
    { tail -20 "$cache/debootstrap-$key.log"; exit 1; }
  mount -t proc proc "$root.tmp/proc"
  trap 'umount "$root.tmp/proc" 2>/dev/null || true' EXIT
  # The archive's Release files may be older than this machine's clock says is valid.
  echo 'Acquire::Check-Valid-Until "false";' > "$root.tmp/etc/apt/apt.conf.d/99paird-valid-until"
  chroot "$root.tmp" apt-get -q update
  # No fsync per unpacked file (dpkg's force-unsafe-io): a root that is cut short stays root.tmp and
  # is made again from nothing, so the syncs of its 765 MB of packages buy nothing here.
  echo force-unsafe-io > "$root.tmp/etc/dpkg/dpkg.cfg.d/paird-unsafe-io"
  DEBIAN_FRONTEND=noninteractive chroot "$root.tmp" apt-get -q install -y --no-install-recommends "${PKGS[@]}"
  rm -f "$root.tmp/etc/dpkg/dpkg.cfg.d/paird-unsafe-io"
  chroot "$root.tmp" apt-get clean
  umount "$root.tmp/proc"; trap - EXIT
  mv "$root.tmp" "$root"
  touch "$root/.ready"
  echo "sid-chroot: made in $(( $(date +%s) - t0 )) s"
fi
# git inside reads github.com from the machine's mirror, as the host's git does.
if [[ -d /opt/swift-packages ]]; then
  git config -f "$root/etc/gitconfig" --replace-all url./opt/swift-packages/.insteadOf https://github.com/
  git config -f "$root/etc/gitconfig" --replace-all safe.directory '*'
fi

mounts=()
bind() { mkdir -p "$root$2"; mount --bind "$1" "$root$2"; mounts=("$root$2" "${mounts[@]}"); [[ ${3:-} != ro ]] || mount -o remount,bind,ro "$root$2"; }
cleanup() { for m in "${mounts[@]}"; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done; }
trap cleanup EXIT
mount -t proc proc "$root/proc"; mounts=("$root/proc")
bind /dev /dev; bind /dev/pts /dev/pts; bind /sys /sys ro
mkdir -p "$root/dev/shm" "$root/tmp" "$root/run"; chmod 1777 "$root/tmp"
[[ -d /opt/swift-packages ]] && bind /opt/swift-packages /opt/swift-packages ro
bind "$src" /src
[[ -z ${PAIRD_CROSS:-} ]] || bind "$PAIRD_CROSS" /cross ro   # debian/cross/sysroot.sh's sysroot (and arm64 Swift)
if (($#)); then
  chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 TERM=dumb \
    PAIRD_VERSION="${PAIRD_VERSION:-}" /bin/bash -c 'cd /src && "$@"' bash "$@"
else
  chroot "$root" /bin/bash -l
fi
