#!/bin/bash
# build-swiftlang.sh ARCH (arm64 or amd64) — paird and pairctl for Debian bookworm ARCH, release,
# Swift runtime linked in statically, built by Debian's swiftlang 6.2 for amd64 (the sid chroot of
# debian/cross/sid-chroot.sh) against a bookworm ARCH sysroot (debian/cross/sysroot.sh ARCH):
#   arm64: cross-compiled, with swiftlang's arm64 runtime, into .build-arm64/aarch64-unknown-linux-gnu/
#          release (stripped copies for the package in .build-arm64/deb-bin);
#   amd64: into .build-amd64/x86_64-pc-linux-gnu/release (dh_strip strips them; bluez-probe too, which
#          is not packaged: make test runs the whole end-to-end tier on these three), and the
#          manual pages and completions of `make dist-docs` made from them into .build/dist (no
#          Swift on the host: `make deb` with SWIFT_TOOLCHAIN=swiftlang or no Swift ≥ 6.2 on PATH).
# glibc-compat.o (debian/cross/glibc-compat.c) stands in for what sid's runtime needs of glibc 2.38+.
# Checks that the binaries are ARCH and need no glibc symbol version newer than bookworm's 2.36.
# PAIRD_VERSION (the Makefile's) is the version string they carry. debian/cross/build-arm64.sh is
# `build-swiftlang.sh arm64`.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
arch=${1:?usage: build-swiftlang.sh arm64|amd64}
case $arch in
  arm64) T=aarch64-unknown-linux-gnu multi=aarch64-linux-gnu elf='ARM aarch64' strip=aarch64-linux-gnu-strip ;;
  amd64) T=x86_64-pc-linux-gnu       multi=x86_64-linux-gnu  elf='x86-64'      strip= ;;
  # (amd64: swiftlang's own triple; its modules are x86_64-pc-linux-gnu, not -unknown-.)
  *) echo "build-swiftlang: $arch: arm64 or amd64" >&2; exit 2 ;;
esac
me=build-$arch
# amd64 (make deb with swiftlang): each step said as it starts (arm64 prints as it always has).
step() { [[ $arch != amd64 ]] || echo "$me: [$1/4] $2 ($(date -u +%H:%M:%S))"; }
t0=$(date +%s)
step 1 "the sid amd64 chroot with swiftlang (debian/cross/sid-chroot.sh; made once per machine)"
"$here/sid-chroot.sh" true
step 2 "the bookworm $arch sysroot (debian/cross/sysroot.sh $arch; made once per machine)"
cross=$("$here/sysroot.sh" "$arch")
t1=$(date +%s)
step 3 "swift build -c release paird, pairctl for $T against $cross/sysroot"
# arm64: the sysroot's swift/ has the arm64 resource dir; amd64: the chroot's own swiftlang's.
if [[ $arch == arm64 ]]; then R=/cross/swift/usr/libexec/swift/lib/swift_static; else R=/usr/libexec/swift/lib/swift_static; fi
PAIRD_CROSS=$cross "$here/sid-chroot.sh" bash -c '
  set -euo pipefail
  arch=$1 T=$2 multi=$3 strip=$4 R=$5
  S=/cross/sysroot
  out=.build-$arch; mkdir -p $out
  # bookworm glibc 2.36 stand-ins for the 4 newer-glibc functions swift_static calls.
  /usr/libexec/swift/bin/clang --target=$T --sysroot=$S -O2 -fPIC -c debian/cross/glibc-compat.c -o $out/glibc-compat.o
  # dbus-1.pc and libsystemd.pc with their paths inside the sysroot (SwiftPM'"'"'s own pkg-config
  # reader applies PKG_CONFIG_SYSROOT_DIR to some -I paths and not to others), found before the
  # chroot'"'"'s own amd64 ones.
  mkdir -p $out/pkgconfig
  for pc in dbus-1 libsystemd; do
    sed -E "s#^(original_prefix|prefix|libdir|includedir)=/usr#\1=$S/usr#" $S/usr/lib/$multi/pkgconfig/$pc.pc > $out/pkgconfig/$pc.pc
  done
  # (SwiftPM reads PKG_CONFIG_PATH and --pkg-config-path before its default paths, not PKG_CONFIG_LIBDIR.)
  export PKG_CONFIG_PATH=$PWD/$out/pkgconfig
  # (SwiftPM passes --sdk to clang only: swiftc gets -sdk itself. The resource dir is swift_static,
  # a whole one with the static runtime and its static-stdlib-args.lnk.)
  # Which Swift built them, for the changelog of the package (make deb).
  echo "Debian'"'"'s swiftlang in a sid chroot: $(swift --version 2>&1 | grep -m1 "Swift version")" > $out/built-by
  # amd64: bluez-probe as well, for the bed (make test runs the whole end-to-end tier on these binaries).
  products="paird pairctl"; [[ $arch != amd64 ]] || products+=" bluez-probe"
  for p in $products; do
    swift build -c release --static-swift-stdlib --scratch-path $out --triple $T --sdk $S --pkg-config-path $PWD/$out/pkgconfig \
      -Xswiftc -sdk -Xswiftc $S -Xswiftc -resource-dir -Xswiftc $R -Xswiftc -use-ld=lld -Xcc --sysroot=$S \
      -Xlinker $PWD/$out/glibc-compat.o --product $p
  done
  if [[ -n $strip ]]; then
    # Stripped copies for the package, as dh_strip would (it cannot strip arm64 on an amd64 host).
    mkdir -p $out/deb-bin
    for p in paird pairctl; do
      $strip --remove-section=.comment --remove-section=.note -o $out/deb-bin/$p $out/$T/release/$p
    done
  fi' bash "$arch" "$T" "$multi" "$strip" "$R"
bin=.build-$arch/$T/release
t2=$(date +%s)
rc=0
for b in paird pairctl; do
  file -b "$bin/$b" | grep -q "$elf" || { echo "$me: $bin/$b is not $arch: $(file -b "$bin/$b")" >&2; rc=1; }
  newest=$(readelf -V "$bin/$b" | grep -o 'GLIBC_2\.[0-9]*' | sort -t. -k2 -n -u | tail -1)
  echo "$me: $b: $(file -b "$bin/$b" | cut -d, -f1-2); needs glibc up to $newest"
  [[ $(printf '%s\n' "$newest" GLIBC_2.36 | sort -t. -k2 -n | tail -1) == GLIBC_2.36 ]] ||
    { echo "$me: $b needs $newest, newer than bookworm's 2.36" >&2; rc=1; }
done
echo "$me: $((t2 - t1)) s to build ($((t1 - t0)) s for the chroot and sysroot); exit $rc"
((rc == 0)) || exit $rc
[[ $arch == amd64 ]] || exit 0
# amd64: what `make dist-docs` makes (the same commands; keep them alike), from these binaries and
# swift-argument-parser's generate-manual built natively in the chroot (.build-swiftlang-tools).
t3=$(date +%s)
step 4 "manual pages and completions (generate-manual built in the chroot) into .build/dist"
"$here/sid-chroot.sh" bash -c '
  set -euo pipefail
  bin=$1 ver=$2 DIST=.build/dist
  mkdir -p $DIST/man $DIST/completions
  swift build --scratch-path .build-swiftlang-tools --product generate-manual >/dev/null
  $(swift build --scratch-path .build-swiftlang-tools --show-bin-path)/generate-manual $bin/pairctl --section 1 --authors "paird developers" -o $DIST/man
  sed -i "/^\$/d" $DIST/man/pairctl.1
  $bin/paird --experimental-dump-help | python3 debian/paird-man.py "$PAIRD_VERSION" > $DIST/man/paird.8
  python3 debian/paird-conf-man.py etc/paird/paird.conf "$ver" > $DIST/man/paird.conf.5
  for sh in bash zsh fish; do $bin/pairctl --generate-completion-script $sh > $DIST/completions/pairctl.$sh; done
  sed -i "1{/^#!/d}" $DIST/completions/pairctl.bash' bash "$bin" "${PAIRD_CODE_VERSION:-}"
echo "$me: manual pages and completions in .build/dist: $(( $(date +%s) - t3 )) s"
