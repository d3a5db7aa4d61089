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
)

# The guest kernel: Debian's 6.12 from bookworm-backports (linux-image-amd64), only for
# /boot/vmlinuz-* and /lib/modules/* (hci_vhci, 9p). Not bookworm's own 6.1: its Bluetooth
# stack BUGs (list_del corruption in hci_chan_del) on an encryption failure and, now and then,
# on a bluetoothd restart under a live LE link, which made three scenarios unprovable
# (Tests/testbed/README.md, "Known problems"). run-vm boots the newest kernel in /boot.
have_kernel() { compgen -G '/boot/vmlinuz-6.1[2-9]*' >/dev/null; }
BACKPORTS=/etc/apt/sources.list.d/paird-testbed-backports.list

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
  echo "install-deps: all ${#PKGS[@]} packages and a 6.12 kernel present"
  ensure_bumble
  exit
fi

SUDO=; [[ $(id -u) == 0 ]] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
if ! have_kernel && ! grep -rqs '^deb .*bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
  echo "install-deps: adding bookworm-backports ($BACKPORTS) for the guest kernel"
  echo "deb http://deb.debian.org/debian bookworm-backports main" | $SUDO tee "$BACKPORTS" >/dev/null
fi
echo "install-deps: installing ${missing[*]:-}$(have_kernel || echo ' linux-image-amd64 (bookworm-backports)')"
$SUDO apt-get update -q
# linux-image-amd64 may complain about the boot loader inside a container; the kernel and
# modules land in /boot and /lib/modules anyway, which is all the bed uses.
if ((${#missing[@]})); then
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" || {
    command -v qemu-system-x86_64 >/dev/null && command -v btvirt >/dev/null || exit 1
    echo "install-deps: apt-get reported an error, but the bed's tools are present; continuing" >&2
  }
fi
if ! have_kernel; then
  $SUDO apt-get install -y -q --no-install-recommends -t bookworm-backports linux-image-amd64 || {
    have_kernel || exit 1
    echo "install-deps: apt-get reported an error, but the kernel is in /boot; continuing" >&2
  }
fi
have_kernel || { echo "install-deps: no 6.12 kernel in /boot after installing" >&2; exit 1; }
ensure_bumble || exit 1
echo "install-deps: done"
