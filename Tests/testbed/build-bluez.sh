#!/bin/bash
# build-bluez.sh VERSION — the central's BlueZ for the bed at a chosen version (issue 19).
#
#   build-bluez.sh 5.66      Debian 12's packages (/usr): nothing to build
#   build-bluez.sh 5.82      Debian 13 (trixie)'s source package, built once
#   build-bluez.sh newest    the newest BlueZ in Debian unstable (sid), built once
#   build-bluez.sh 5.87      any version trixie's or sid's Sources list has
#
# Prints, on its last line of stdout, the directory whose bin/ holds bluetoothd, bluetoothctl,
# btmon, btvirt and btmgmt of that version ("/usr" for 5.66: the packages' own paths), and the
# version itself before it ("version 5.82"); everything else goes to stderr. Idempotent: a build
# present in .build-testbed/bluez-<version>/ (outside git, like the initramfs cache) is reused
# at once; a missing one is made again (about 3-6 minutes on 2 cores).
#
# The sources: deb-src lines for trixie and sid in a sources list of the bed's own
# ($CACHE/bluez-src-apt), with its own package lists: the host's /etc/apt is never written, and
# apt on the host never sees those suites.
# The build: only what the bed runs. configure with Debian's own choices where they change
# bluetoothd's behaviour (--enable-experimental, --enable-deprecated, the paths), without
# what the bed never runs (OBEX, CUPS, mesh, MIDI, manpages, the library, the HID tools), with
# --enable-testing (btvirt is in emulator/, built only with it); then `make` of those five
# programs alone, not the whole tree. No external ell is needed: without mesh and btpclient
# nothing links ell, and Debian 12's glib, dbus and udev are new enough for every version here.
set -euo pipefail
TB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$TB/../.." && pwd)
. "$TB/bed-cache"; CACHE=$(bed_cache_dir "$REPO")
APT_DIR=$CACHE/bluez-src-apt
APT_OPTS=(-o "Dir::Etc::SourceList=$APT_DIR/sources.list" -o "Dir::Etc::SourceParts=$APT_DIR/none"
          -o "Dir::State::Lists=$APT_DIR/lists" -o "Dir::Cache=$APT_DIR/cache" -o "APT::Sandbox::User=root")
TOOLS=(bluetoothd bluetoothctl btmon btvirt btmgmt)
say() { echo "build-bluez: $*" >&2; }
die() { say "ERROR: $*"; exit 1; }
SUDO=; [[ $(id -u) == 0 ]] || SUDO=sudo

want=${1:-}
[[ -n $want ]] || { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }

default_version() { /usr/libexec/bluetooth/bluetoothd --version 2>/dev/null; }
if [[ $want == default || $want == "$(default_version)" || $want == 5.66 ]]; then
  [[ -x /usr/libexec/bluetooth/bluetoothd ]] || die "bluez is not installed (run Tests/testbed/install-deps.sh)"
  echo "version $(default_version)"
  echo /usr
  exit 0
fi

# A cached build of an explicit version needs no apt at all.
# The recipe: this script and the bed's BlueZ patches. A build made by another recipe (an older
# clone's, in the machine-wide cache) is built again, not reused.
RECIPE=$(cat "$0" "$TB"/bluez-patches/*/* 2>/dev/null | sha256sum | cut -c1-12)
cached() { # dir → 0 if every tool is there and the stamp says this recipe's build finished
  local t; [[ -f $1/BUILT ]] && grep -q " recipe $RECIPE\$" "$1/BUILT" || return 1
  for t in "${TOOLS[@]}"; do [[ -x $1/bin/$t ]] || return 1; done
}
if [[ $want != newest ]] && cached "$CACHE/bluez-$want${BLUEZ_NO_PATCHES:+-bare}"; then
  echo "version $want"; echo "$CACHE/bluez-$want${BLUEZ_NO_PATCHES:+-bare}"; exit 0
fi

ensure_sources() {
  mkdir -p "$APT_DIR/lists/partial" "$APT_DIR/cache/archives/partial"
  local want_list=$'# paird test bed (Tests/testbed/build-bluez.sh): BlueZ source packages only.\ndeb-src http://deb.debian.org/debian trixie main\ndeb-src http://deb.debian.org/debian sid main'
  if [[ ! -f $APT_DIR/sources.list ]] || [[ $(<"$APT_DIR/sources.list") != "$want_list" ]] \
      || ! compgen -G "$APT_DIR/lists/*Sources*" >/dev/null; then
    say "BlueZ's source packages: deb-src trixie sid in $APT_DIR (the host's /etc/apt is not touched)"
    printf '%s\n' "$want_list" >"$APT_DIR/sources.list"
    apt-get "${APT_OPTS[@]}" update -q >&2 || die "apt-get update (trixie, sid sources) failed"
  fi
}
# "Version: 5.82-1.1" lines of every bluez source package apt knows, newest first
src_versions() { apt-cache "${APT_OPTS[@]}" showsrc bluez 2>/dev/null | sed -n 's/^Version: //p' | sort -rV | uniq; }
ensure_sources
versions=$(src_versions)
pick() { # upstream or "newest" → Debian source version
  if [[ $1 == newest ]]; then
    # sid's own entry (apt-cache madison names the suite), else the newest of all
    apt-cache "${APT_OPTS[@]}" madison bluez | awk -F'|' '/sid\/main Sources|unstable\/main Sources/ {gsub(/ /,"",$2); print $2}' | sort -rV | head -n1
  else
    grep -E "^([0-9]+:)?$(sed 's/\./\\./g' <<<"$1")-" <<<"$versions" | head -n1 || true
  fi
}
debver=$(pick "$want")
if [[ -z $debver ]]; then
  say "no source package for '$want' yet; apt-get update"
  apt-get "${APT_OPTS[@]}" update -q >&2 || true
  versions=$(src_versions); debver=$(pick "$want")
fi
[[ -n $debver ]] || die "no bluez source package '$want' in trixie or sid (known: $(tr '\n' ' ' <<<"$versions"))"
upstream=${debver#*:}; upstream=${upstream%-*}
dir=$CACHE/bluez-$upstream${BLUEZ_NO_PATCHES:+-bare}
if cached "$dir"; then echo "version $upstream"; echo "$dir"; exit 0; fi

# ---------------------------------------------------------------- build
t0=$SECONDS
say "building BlueZ $upstream (Debian source $debver) in $dir"
need=(libglib2.0-dev libdbus-1-dev libudev-dev libreadline-dev pkg-config gcc make dpkg-dev)
missing=()
for p in "${need[@]}"; do
  [[ $(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true) == installed ]] || missing+=("$p")
done
if ((${#missing[@]})); then
  say "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >&2 \
    || die "apt-get install ${missing[*]} failed"
fi
rm -rf "$dir"; mkdir -p "$dir/dl" "$dir/bin"
log=$dir/build.log
cd "$dir/dl"
origin="Debian source package bluez $debver"
# apt-get runs its download as _apt; a root-owned cache directory would only warn
chmod 755 "$dir" "$dir/dl" 2>/dev/null || true
if ! apt-get "${APT_OPTS[@]}" source -q "bluez=$debver" >>"$log" 2>&1; then
  # Seen on this workplace's mirror: sid's Sources index named bluez 5.87-5 while the pool had
  # only its orig tarball (the .dsc and .debian.tar.xz answered 404). Build the upstream tarball
  # then, without Debian's patches, and say so (the build's ORIGIN file, the bed's log).
  say "apt-get source bluez=$debver failed (see $log); trying the upstream tarball alone"
  rm -rf "$dir/dl"/*
  apt-get "${APT_OPTS[@]}" source -q --tar-only "bluez=$debver" >>"$log" 2>&1 || die "apt-get source --tar-only bluez=$debver failed (see $log)"
  tarball=$(ls bluez_"$upstream".orig.tar.* | head -n1)
  tar xf "$tarball"
  origin="upstream bluez_$upstream.orig.tar (Debian source $debver's tarball; Debian's patches NOT applied: the .dsc was missing on the mirror)"
  upstream_only=1
fi
srcdir=$(find "$dir/dl" -mindepth 1 -maxdepth 1 -type d -name 'bluez-*' | head -n1)
[[ -n $srcdir && -x $srcdir/configure ]] || die "no configure in the unpacked source (see $log)"
# Without Debian's patches, the bed's own for this version (bluez-patches/<version>/): fixes of
# upstream bugs that stop the bed outright (5.87: bluetoothd segfaults on paird's UUID discovery
# filter, bluez/bluez#2282, fixed after 5.87). BLUEZ_NO_PATCHES=1 builds the bare tarball
# (into bluez-<version>-bare/) to see the bug itself.
if [[ ${upstream_only:-0} == 1 && ${BLUEZ_NO_PATCHES:-0} != 1 ]]; then
  for pf in "$TB/bluez-patches/$upstream"/*.patch; do
    [[ -f $pf ]] || continue
    patch -d "$srcdir" -p1 --forward <"$pf" >>"$log" 2>&1 || die "patch $(basename "$pf") failed (see $log)"
    origin+=$'\n'"plus the bed's patch $(basename "$pf")"
    say "applied $(basename "$pf")"
  done
fi
mkdir -p "$dir/obj"; cd "$dir/obj"
say "configure (log: $log)"
"$srcdir/configure" --prefix=/usr --sysconfdir=/etc --localstatedir=/var --libexecdir=/usr/libexec \
  --with-dbusconfdir=/usr/share --enable-experimental --enable-deprecated --enable-testing \
  --enable-tools --enable-monitor --enable-client --enable-systemd \
  --disable-manpages --disable-cups --disable-obex --disable-mesh --disable-midi --disable-btpclient \
  --disable-library --disable-test --disable-hid2hci --disable-sixaxis --disable-nfc --disable-sap \
  --disable-datafiles --disable-android \
  >>"$log" 2>&1 || die "configure failed (see $log)"
targets=(src/bluetoothd client/bluetoothctl monitor/btmon emulator/btvirt tools/btmgmt)
# automake's BUILT_SOURCES (the lib/bluetooth/*.h links, src/builtin.h, …) are made by `make all`
# only: make them first, then just the five programs
built=$(make -s -f Makefile -f <(printf 'bed-print-built:\n\t@echo $(BUILT_SOURCES)\n') bed-print-built 2>>"$log")
say "make ${targets[*]}"
make -j"$(nproc)" $built >>"$log" 2>&1 || die "make BUILT_SOURCES failed (see $log)"
make -j"$(nproc)" "${targets[@]}" >>"$log" 2>&1 || die "make failed (see $log)"
for t in "${targets[@]}"; do
  # libtool may leave a wrapper script with the real binary in .libs/
  b=$t; [[ -f $(dirname "$t")/.libs/$(basename "$t") ]] && b=$(dirname "$t")/.libs/$(basename "$t")
  install -m 0755 "$b" "$dir/bin/$(basename "$t")"
done
got=$("$dir/bin/bluetoothd" --version)
[[ $got == "$upstream" ]] || die "the built bluetoothd says '$got', not $upstream"
rm -rf "$dir/obj" "$dir/dl"/*/   # the binaries are all the bed needs; the tarballs stay for reference
{ echo "$origin"; echo "configure: see build.log"; } >"$dir/ORIGIN"
echo "$upstream $debver $((SECONDS - t0))s $(date -u +%FT%TZ) recipe $RECIPE" >"$dir/BUILT"
say "BlueZ $upstream built in $((SECONDS - t0)) s: $dir/bin"
echo "version $upstream"
echo "$dir"
