#!/bin/bash
# sysroot.sh ARCH (arm64 or amd64) — prints the path of an ARCH sysroot made (once per machine,
# under the cache dir PAIRD_ARM64_CACHE, /var/cache/paird-arm64) for building paird with Debian's
# swiftlang (sid) for bookworm:
#   sysroot/            Debian bookworm ARCH's C library, libgcc/libstdc++ and the -dev packages
#                       paird links (libdbus-1-dev, libsystemd-dev) with their dependencies, each
#                       unpacked by dpkg-deb -x (nothing installed; absolute symlinks made relative),
#                       so the binaries link against what bookworm arm64 has;
#   sysroot/debs/       the .debs themselves (debian/cross/arm64-deps.sh reads their shlibs/symbols);
#   swift/              arm64 only: Debian's swiftlang (sid) arm64 resource dir: usr/libexec/swift/
#                       lib/{swift,swift_static,clang} — the Swift modules and the static Swift
#                       runtime. For amd64 the sid chroot's own swiftlang has them (/usr/libexec/swift
#                       inside debian/cross/sid-chroot.sh's chroot, where the sysroot is /cross).
# Keyed by the package lists and swiftlang's version (arm64), the package lists (amd64).
# debian/cross/arm64-sysroot.sh is `sysroot.sh arm64`.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
arch=${1:?usage: sysroot.sh arm64|amd64}
[[ $arch == arm64 || $arch == amd64 ]] || { echo "sysroot.sh: $arch: arm64 or amd64" >&2; exit 2; }
cache=${PAIRD_ARM64_CACHE:-/var/cache/paird-arm64}
SYSROOT_PKGS=(libc6-dev libgcc-12-dev libstdc++-12-dev libdbus-1-dev libsystemd-dev)
SWIFTLANG=${SWIFTLANG_VERSION:-6.2.3-1+b1}
if [[ $arch == arm64 ]]; then
  key=$(printf '%s\n' bookworm "${SYSROOT_PKGS[@]}" "$SWIFTLANG" | sha256sum | cut -c1-12)
else
  key=$(printf '%s\n' bookworm "$arch" "${SYSROOT_PKGS[@]}" | sha256sum | cut -c1-12)
fi
out=$cache/$arch-sysroot-$key
if [[ ! -e $out/.ready ]]; then
  t0=$(date +%s)
  rm -rf "$out.tmp"; mkdir -p "$out.tmp/sysroot/debs" "$out.tmp/swift"
  {
  "$here/papt" bookworm $arch update
  # A private, empty dpkg status: apt downloads each package and everything it depends on.
  "$here/papt" bookworm $arch install -y -d --no-install-recommends "${SYSROOT_PKGS[@]}"
  cp "$cache"/apt-bookworm-$arch/cache/archives/*.deb "$out.tmp/sysroot/debs/"
  for d in "$out.tmp"/sysroot/debs/*.deb; do dpkg-deb -x "$d" "$out.tmp/sysroot"; done
  # Absolute symlinks (libfoo.so -> /lib/...) point into the sysroot instead.
  find "$out.tmp/sysroot" -type l -lname '/*' | while read -r l; do
    t=$(readlink "$l"); ln -sfn "$(realpath -m --relative-to="$(dirname "$l")" "$out.tmp/sysroot$t")" "$l"; done
  if [[ $arch == arm64 ]]; then
    # Debian's swiftlang for arm64 (sid): only its resource dir is used (its binaries need glibc 2.42).
    "$here/papt" sid arm64 update
    deb=$cache/debs-sid-arm64/swiftlang_${SWIFTLANG/:/%3a}_arm64.deb   # ~500 MB: kept once per machine
    [[ -f $deb ]] || { mkdir -p "${deb%/*}"; (cd "${deb%/*}" && "$here/papt" sid arm64 download "swiftlang=$SWIFTLANG"); }
    dpkg-deb --fsys-tarfile "$deb" |
      tar -x -C "$out.tmp/swift" --wildcards './usr/libexec/swift/lib/swift/*' './usr/libexec/swift/lib/swift_static/*' './usr/libexec/swift/lib/clang/*'
  fi
  } >"$cache/$arch-sysroot-$key.log" 2>&1 || { tail -30 "$cache/$arch-sysroot-$key.log" >&2; exit 1; }
  mv "$out.tmp" "$out"; touch "$out/.ready"
  echo "$arch-sysroot: made in $(( $(date +%s) - t0 )) s: $out" >&2
fi
# The Swift driver, given -sdk, looks for the runtime (swiftrt.o, the static libraries) in the
# SDK's usr/lib/swift{,_static}, as in a Swift SDK bundle: there they are (amd64: the sid
# chroot's own, an absolute link that resolves inside the chroot).
for d in swift swift_static; do
  if [[ $arch == arm64 ]]; then t=../../../swift/usr/libexec/swift/lib/$d; else t=/usr/libexec/swift/lib/$d; fi
    [[ -L $out/sysroot/usr/lib/$d ]] || ln -sfn "$t" "$out/sysroot/usr/lib/$d"
  done
  echo "$out"
  