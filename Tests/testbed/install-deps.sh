#!/bin/bash
# Installs what the real-BlueZ test bed needs on Debian 12 (idempotent).
# Fast path: if every package is already installed, do nothing.
set -euo pipefail

PKGS=(
  qemu-system-x86      # the VM (TCG; no KVM needed)
  busybox-static       # the initramfs
  cpio gzip xz-utils kmod
  bluez                # bluetoothd, btmgmt, bluetoothctl, hcitool
  bluez-test-tools     # btvirt, btmon
  dbus                 # dbus-daemon (plain mode)
  systemd              # systemd-as-PID1 mode, journalctl
  python3 python3-dbus python3-gi   # scenarios + virtual wearable (Debian's /usr/bin/python3)
  python3-venv                      # the Bumble wearable's venv (below)
  coreutils util-linux procps iproute2
  strace               # paird_day: holds paird's fsyncs so a kill -9 lands inside a record write
  gcc libc6-dev        # the patched btvirt and bed-hci-relay (built once into the bed's cache)
)

# The guest kernel: Debian's 6.12 from bookworm-backports (linux-image-6.12.*-amd64), fetched as a
# package and unpacked into the bed's cache ($CACHE/kernel: boot/vmlinuz-*, lib/modules/*), never
# installed on this host: no apt source is added, no kernel lands in /boot. apt reads a sources
# list, package lists and a status file of its own under $CACHE/kernel-apt (the host's /etc/apt
# and dpkg database are not written). run-vm boots it and the guest binds its modules over
# /lib/modules/<version>. Not bookworm's own 6.1: its Bluetooth stack BUGs (list_del corruption
# in hci_chan_del) on an encryption failure and, now and then, on a bluetoothd restart under a
# live LE link, which made three scenarios unprovable (Tests/testbed/README.md, "Known problems").
# Older versions of the bed wrote these; nothing reads them now. Said, not removed: they are in
# the host's /etc/apt, which the bed no longer changes.
for f in /etc/apt/sources.list.d/paird-testbed-backports.list /etc/apt/sources.list.d/paird-bluez-src.sources; do
  [[ -e $f ]] && echo "install-deps: $f was written by an older version of the bed and is no longer used (to remove it: sudo rm $f && sudo apt-get update)"
done

missing=()
for p in "${PKGS[@]}"; do
  st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [[ $st == installed ]] || missing+=("$p")
done

# The independent wearable stack: Google's Bumble (PyPI), pinned, in a venv made with Debian's
# /usr/bin/python3 (a pyenv `python3` may come first on PATH) under the repository, so the guest
# sees it at the same path (its /tmp and /var/tmp are fresh tmpfs). .build-*/ is gitignored.
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUMBLE_VERSION=0.0.236
. "$REPO/Tests/testbed/bed-cache"; VENV=${BED_BUMBLE_VENV:-$(bed_cache_dir "$REPO")/bumble-venv}
KDIR=${BED_KERNEL_DIR:-$(bed_cache_dir "$REPO")/kernel}
have_kernel() { compgen -G "$KDIR/boot/vmlinuz-6.1[2-9]*" >/dev/null; }
# fetch-kernel.sh fetches and unpacks it (and, for runs that ask, 6.1 and the newest: e2e.sh)
fetch_kernel() { "$REPO/Tests/testbed/fetch-kernel.sh" 6.12 >/dev/null; }
have_bumble() {
  "$VENV/bin/python" -c "import importlib.metadata as m, bumble.device; assert m.version('bumble') == '$BUMBLE_VERSION'" 2>/dev/null
}
ensure_bumble() {
  have_bumble && { echo "install-deps: Bumble $BUMBLE_VERSION in $VENV"; return 0; }
  echo "install-deps: making $VENV with Bumble $BUMBLE_VERSION"
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  /usr/bin/python3 -m venv "$VENV" || return 1
  "$VENV/bin/pip" install --disable-pip-version-check -q "bumble==$BUMBLE_VERSION" || return 1
  have_bumble || { echo "install-deps: bumble does not import from $VENV" >&2; return 1; }
}

if ((${#missing[@]} == 0)) && have_kernel; then
  echo "install-deps: all ${#PKGS[@]} packages present; the guest kernel in $KDIR"
  ensure_bumble
  exit
fi

# Made for Debian 12 (bookworm): the package names, the backports kernel and Bumble's Python are
# bookworm's. Anywhere else, say so and stop, rather than change a host it was not made for.
. /etc/os-release 2>/dev/null || true
if [[ "${ID:-}:${VERSION_ID:-}" != debian:12 && ${BED_ANY_DISTRO:-0} != 1 ]]; then
  echo "install-deps: the test bed is made for Debian 12 (bookworm); this is ${PRETTY_NAME:-an unknown system}." >&2
  echo "install-deps: it would install: ${missing[*]:-nothing from apt}$(have_kernel || echo '; Debian 6.12 kernel package, unpacked into '"$KDIR")" >&2
  echo "install-deps: nothing was changed. BED_ANY_DISTRO=1 tries anyway." >&2
  exit 1
fi
SUDO=; [[ $(id -u) == 0 ]] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
if ((${#missing[@]})); then
  echo "install-deps: installing from this host's apt sources: ${missing[*]}"
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" || {
    command -v qemu-system-x86_64 >/dev/null && command -v btvirt >/dev/null || exit 1
    echo "install-deps: apt-get reported an error, but the bed's tools are present; continuing" >&2
  }
fi
have_kernel || fetch_kernel || exit 1
ensure_bumble || exit 1
echo "install-deps: done"
