#!/bin/bash
# check-swiftlang.sh — the same source built with Debian's own Swift (swiftlang 6.2.x, sid amd64,
# in the chroot of debian/cross/sid-chroot.sh) and its unit tier run there: swift build,
# swift build --build-tests, swift test --skip-build. Build folder: .build-swiftlang (the host's
# Swift 6.3 keeps .build). Prints each step's time. `make check-swiftlang` runs it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
"$here/sid-chroot.sh" true   # made once per machine (not timed below)
# The mock BlueZ of the unit tier is bookworm's python3-dbusmock (0.28.7, what the host and CI run):
# sid's (0.38) dropped the class argument of its bluez5 template's PairDevice, which the tests
# pass. It is pure Python: unpacked under .build-swiftlang and copied into the chroot's
# /usr/local/lib/python3.*/dist-packages, which comes before Debian's (the tests clear PYTHONPATH;
# installing the .deb in the chroot would need sid's dbus-x11, uninstallable there now).
cache=${PAIRD_ARM64_CACHE:-/var/cache/paird-arm64}
mock=.build-swiftlang/dbusmock-0.28.7
if [[ ! -d $here/../../$mock ]]; then
  mkdir -p "$cache/debs-bookworm-all"
  ls "$cache"/debs-bookworm-all/python3-dbusmock_0.28.7*.deb >/dev/null 2>&1 ||
    { "$here/papt" bookworm amd64 update >/dev/null; (cd "$cache/debs-bookworm-all" && "$here/papt" bookworm amd64 download python3-dbusmock=0.28.7-1); }
  mkdir -p "$here/../../$mock"; dpkg-deb -x "$cache"/debs-bookworm-all/python3-dbusmock_0.28.7*.deb "$here/../../$mock"
fi
exec "$here/sid-chroot.sh" bash -c '
  set -euo pipefail
  swift --version 2>&1 | head -1
  t0=$(date +%s)
  swift build --scratch-path .build-swiftlang
  t1=$(date +%s); echo "check-swiftlang: swift build $((t1 - t0)) s"
  # Debian'"'"'s swiftlang 6.2.3 ships the _Testing_Foundation overlay'"'"'s module but not its library
  # (lib_Testing_Foundation.so), which every test module importing Testing and Foundation
  # autolinks: an empty archive stands in for it (a test using the overlay would fail to link).
  mkdir -p .build-swiftlang/stub; ar rcs .build-swiftlang/stub/lib_Testing_Foundation.a
  swift build --scratch-path .build-swiftlang --build-tests -Xlinker -L/src/.build-swiftlang/stub
  t2=$(date +%s); echo "check-swiftlang: swift build --build-tests $((t2 - t1)) s"
  # The bluetooth group (bluez makes it on a host): PrivacyTests checks the real D-Bus policy with it.
  getent group bluetooth >/dev/null || groupadd --system bluetooth
  site=$(python3 -c "import sys; print(\"/usr/local/lib/python%d.%d/dist-packages\" % sys.version_info[:2])")
  mkdir -p $site; rm -rf $site/dbusmock; cp -r /src/'"$mock"'/usr/lib/python3/dist-packages/dbusmock $site/
  python3 -c "import dbusmock, sys; print(\"python-dbusmock\", dbusmock.__version__, \"from\", dbusmock.__file__)"
  rc=0; swift test --scratch-path .build-swiftlang --skip-build "$@" || rc=$?
  t3=$(date +%s); echo "check-swiftlang: swift test $((t3 - t2)) s; in all $((t3 - t0)) s; exit $rc"
  exit $rc' bash "$@"
