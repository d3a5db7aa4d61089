#!/bin/bash
# fetch-kernel.sh [6.12|6.1|newest] — the bed's guest kernel: a Debian kernel package fetched from
# Debian's archive and unpacked into the bed's cache (boot/vmlinuz-*, lib/modules/*), never installed
# on this host: no apt source is added, no kernel lands in /boot. apt reads a sources list, package
# lists and a status file of its own beside the kernel (<dir>-apt). Prints "version <uname -r>" and,
# last, the directory (run-vm's BED_KERNEL selects it; e2e.sh's linux-<k>:SCENARIO runs).
#   6.12    bookworm-backports (the bed's default since 6.1's Bluetooth BUGs: README, "Known problems")
#   6.1     bookworm and bookworm-security: the kernel Debian 12 ships, what most Debian 12 hosts run
#   newest  unstable (sid): the newest kernel Debian has
# Each is fetched once per machine (the bed cache) and kept; FETCH_KERNEL_REFRESH=1 fetches again.
set -euo pipefail
TB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$TB/../.." && pwd)
. "$TB/bed-cache"
CACHE=$(bed_cache_dir "$REPO")
which=${1:-6.12}
case $which in
  6.12)   dir=${BED_KERNEL_DIR:-$CACHE/kernel}; pat='^linux-image-6\.1[2-9]'
          srcs=("deb http://deb.debian.org/debian bookworm-backports main") ;;
  6.1)    dir=$CACHE/kernel-6.1; pat='^linux-image-6\.1\.'
          srcs=("deb http://deb.debian.org/debian bookworm main" "deb http://deb.debian.org/debian-security bookworm-security main") ;;
  newest) dir=$CACHE/kernel-newest; pat='^linux-image-[0-9]'
          srcs=("deb http://deb.debian.org/debian unstable main") ;;
  *) echo "fetch-kernel: unknown kernel '$which' (6.12, 6.1 or newest)" >&2; exit 2 ;;
esac
have() { compgen -G "$dir/boot/vmlinuz-*" >/dev/null && [[ -d $dir/lib/modules ]]; }
say() { echo "version $(basename "$(ls -1 "$dir"/boot/vmlinuz-* | sort -V | tail -n1)" | sed 's/vmlinuz-//')"; echo "$dir"; }
if have && [[ ${FETCH_KERNEL_REFRESH:-0} != 1 ]]; then say; exit 0; fi

apt_dir=${dir%/}-apt
echo "fetch-kernel: fetching Debian's $which kernel package into $dir (about 100 MB once per machine); nothing is installed on this host" >&2
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
printf '%s\n' "${srcs[@]}" >"$apt_dir/sources.list"
: >"$apt_dir/status"
opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o "Dir::Etc::SourceParts=$apt_dir/none"
      -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::State::status=$apt_dir/status"
      -o "Dir::Cache=$apt_dir/cache" -o "APT::Get::List-Cleanup=0" -o "APT::Sandbox::User=root")
apt-get "${opts[@]}" -q update >/dev/null || { echo "fetch-kernel: apt-get update of ${srcs[*]} failed" >&2; exit 1; }
# the metapackage names the kernel it stands for (the newest candidate across the sources listed)
pkg=$(apt-cache "${opts[@]}" depends linux-image-amd64 2>/dev/null | awk -v p="$pat" '$1 == "Depends:" && $2 ~ p { print $2; exit }')
[[ -n $pkg ]] || { echo "fetch-kernel: linux-image-amd64 in ${srcs[*]} names no package matching $pat" >&2; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bed-kernel.XXXXXX")
trap 'rm -rf "$tmp" "$dir.part"' EXIT
(cd "$tmp" && apt-get "${opts[@]}" -q download "$pkg" >/dev/null) || { echo "fetch-kernel: apt-get download $pkg failed" >&2; exit 1; }
rm -rf "$dir.part" && mkdir -p "$dir.part" && dpkg-deb -x "$tmp"/*.deb "$dir.part"
# merged /usr (trixie's and sid's packages put modules under usr/lib): one place for run-vm to look
[[ -d $dir.part/lib/modules || ! -d $dir.part/usr/lib/modules ]] || ln -s usr/lib "$dir.part/lib"
# modules.dep is made by the package's postinst (depmod), which never runs here
for v in "$dir.part"/lib/modules/*; do /sbin/depmod -b "$dir.part" "${v##*/}"; done
rm -rf "$dir" && mv "$dir.part" "$dir"
have || { echo "fetch-kernel: $pkg unpacked, but no vmlinuz in $dir/boot" >&2; exit 1; }
echo "fetch-kernel: $pkg unpacked into $dir ($(du -sh "$dir" | cut -f1))" >&2
say
