#!/bin/bash
# bookworm-root.sh ARCH [COMMAND...] — a Debian bookworm ARCH root (amd64: debootstrap; arm64:
# debootstrap --foreign, its second stage run under qemu-user-static through binfmt), made once per
# machine under the cache dir (PAIRD_ARM64_CACHE, /var/cache/paird-arm64), its apt sources
# bookworm's alone; COMMAND run in it (in a private mount namespace) with this source tree at /src.
# Used to install a .deb from bookworm's archive and run it (debian/cross/try-deb.sh).
# arm64 needs qemu-user-static. debian/cross/arm64-root.sh is `bookworm-root.sh arm64`.
set -euo pipefail
[[ -n ${PAIRD_CHROOT_NS:-} ]] || PAIRD_CHROOT_NS=1 exec unshare --mount --propagation private "$0" "$@"
here=$(cd "$(dirname "$0")" && pwd); src=$(cd "$here/../.." && pwd)
arch=${1:?usage: bookworm-root.sh arm64|amd64 [COMMAND...]}; shift
[[ $arch == arm64 || $arch == amd64 ]] || { echo "bookworm-root: $arch: arm64 or amd64" >&2; exit 2; }
cache=${PAIRD_ARM64_CACHE:-/var/cache/paird-arm64}
INCLUDE=dbus,ca-certificates
key=$(printf '%s\n' bookworm $arch "$INCLUDE" | sha256sum | cut -c1-12)
root=$cache/bookworm-$arch-$key
if [[ $arch == amd64 ]]; then
  command -v debootstrap >/dev/null || { apt-get -q update && apt-get -q install -y --no-install-recommends debootstrap; }
else
# arm64 programs run through qemu-user-static's binfmt handler (F flag: it works inside the chroot).
command -v debootstrap >/dev/null && [[ -e /usr/libexec/qemu-binfmt/aarch64-binfmt-P ]] ||
  { apt-get -q update && apt-get -q install -y --no-install-recommends debootstrap qemu-user-static binfmt-support; }
[[ -e /proc/sys/fs/binfmt_misc/register ]] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
[[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]] || update-binfmts --enable qemu-aarch64
[[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]] || { echo "arm64-root: no binfmt handler for aarch64" >&2; exit 1; }
fi
if [[ ! -e $root/.ready ]]; then
  t0=$(date +%s); rm -rf "$root.tmp"; mkdir -p "$cache"
  if [[ $arch == amd64 ]]; then
    debootstrap --arch=amd64 --variant=minbase --include=$INCLUDE bookworm "$root.tmp" http://deb.debian.org/debian >"$cache/debootstrap-$key.log" 2>&1 ||
      { tail -20 "$cache/debootstrap-$key.log"; exit 1; }
  else
    debootstrap --foreign --arch=arm64 --variant=minbase --include=$INCLUDE bookworm "$root.tmp" http://deb.debian.org/debian >"$cache/debootstrap-$key.log" 2>&1
    chroot "$root.tmp" /debootstrap/debootstrap --second-stage >>"$cache/debootstrap-$key.log" 2>&1 ||
      { tail -20 "$cache/debootstrap-$key.log"; exit 1; }
  fi
  echo 'deb http://deb.debian.org/debian bookworm main' > "$root.tmp/etc/apt/sources.list"
  echo 'Acquire::Check-Valid-Until "false";' > "$root.tmp/etc/apt/apt.conf.d/99paird-valid-until"
  mv "$root.tmp" "$root"; touch "$root/.ready"
  echo "$arch-root: made in $(( $(date +%s) - t0 )) s: $root" >&2
fi
mount -t proc proc "$root/proc"
for d in /dev /dev/pts; do mount --bind "$d" "$root$d"; done
mkdir -p "$root/src" "$root/run"; mount --bind "$src" "$root/src"; mount -t tmpfs tmpfs "$root/run"
if (($#)); then
  chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 /bin/bash -c 'cd /src && "$@"' bash "$@"
else
  chroot "$root" /bin/bash -l
fi
