#!/bin/bash
# build-arm64.sh — paird and pairctl for arm64 (aarch64), release, Swift runtime linked in
# statically, into .build-arm64/aarch64-unknown-linux-gnu/release (stripped copies for the
# package in .build-arm64/deb-bin): cross-compiled by Debian's
# swiftlang 6.2 for amd64 (the sid chroot of debian/cross/sid-chroot.sh) against an arm64 sysroot
# of bookworm's libraries and swiftlang's arm64 runtime (debian/cross/arm64-sysroot.sh).
# Checks that the binaries are aarch64 and need no glibc symbol version newer than bookworm's 2.36.
# PAIRD_VERSION (the Makefile's) is the version string they carry.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
t0=$(date +%s)
"$here/sid-chroot.sh" true
cross=$("$here/arm64-sysroot.sh")
t1=$(date +%s)
PAIRD_CROSS=$cross "$here/sid-chroot.sh" bash -c '
  set -euo pipefail
  S=/cross/sysroot R=/cross/swift/usr/libexec/swift/lib/swift_static T=aarch64-unknown-linux-gnu
  out=.build-arm64; mkdir -p $out
  # bookworm glibc 2.36 stand-ins for the 4 newer-glibc functions swift_static calls.
  /usr/libexec/swift/bin/clang --target=$T --sysroot=$S -O2 -fPIC -c debian/cross/glibc-compat.c -o $out/glibc-compat.o
  # dbus-1.pc and libsystemd.pc with their paths inside the sysroot (SwiftPM'"'"'s own pkg-config
  # reader applies PKG_CONFIG_SYSROOT_DIR to some -I paths and not to others), found before the
  # chroot'"'"'s own amd64 ones.
  mkdir -p $out/pkgconfig
  for pc in dbus-1 libsystemd; do
    sed -E "s#^(original_prefix|prefix|libdir|includedir)=/usr#\1=$S/usr#" $S/usr/lib/aarch64-linux-gnu/pkgconfig/$pc.pc > $out/pkgconfig/$pc.pc
  done
  # (SwiftPM reads PKG_CONFIG_PATH and --pkg-config-path before its default paths, not PKG_CONFIG_LIBDIR.)
  export PKG_CONFIG_PATH=$PWD/$out/pkgconfig
  # (SwiftPM passes --sdk to clang only: swiftc gets -sdk itself. The resource dir is swift_static,
  # a whole one with the static runtime and its static-stdlib-args.lnk.)
  for p in paird pairctl; do
    swift build -c release --static-swift-stdlib --scratch-path $out --triple $T --sdk $S --pkg-config-path $PWD/$out/pkgconfig \
      -Xswiftc -sdk -Xswiftc $S -Xswiftc -resource-dir -Xswiftc $R -Xswiftc -use-ld=lld -Xcc --sysroot=$S \
      -Xlinker $PWD/$out/glibc-compat.o --product $p
  done
  # Stripped copies for the package, as dh_strip would (it cannot strip arm64 on an amd64 host).
  mkdir -p $out/deb-bin
  for p in paird pairctl; do
    aarch64-linux-gnu-strip --remove-section=.comment --remove-section=.note -o $out/deb-bin/$p $out/$T/release/$p
  done'
bin=.build-arm64/aarch64-unknown-linux-gnu/release
t2=$(date +%s)
rc=0
for b in paird pairctl; do
  file -b "$bin/$b" | grep -q 'ARM aarch64' || { echo "build-arm64: $bin/$b is not aarch64: $(file -b "$bin/$b")" >&2; rc=1; }
  newest=$(readelf -V "$bin/$b" | grep -o 'GLIBC_2\.[0-9]*' | sort -t. -k2 -n -u | tail -1)
  echo "build-arm64: $b: $(file -b "$bin/$b" | cut -d, -f1-2); needs glibc up to $newest"
  [[ $(printf '%s\n' "$newest" GLIBC_2.36 | sort -t. -k2 -n | tail -1) == GLIBC_2.36 ]] ||
    { echo "build-arm64: $b needs $newest, newer than bookworm's 2.36" >&2; rc=1; }
done
echo "build-arm64: $((t2 - t1)) s to build ($((t1 - t0)) s for the chroot and sysroot); exit $rc"
exit $rc
