#!/bin/bash
# Installs what the real-BlueZ test bed needs on Debian 12 (idempotent).
# Fast path: if every package is already installed, do nothing.
set -euo pipefail

PKGS=(
  qemu-system-x86      # the VM (TCG; no KVM needed)
  linux-image-amd64    # only for /boot/vmlinuz-* and /lib/modules/* (hci_vhci, 9p, virtio)
  busybox-static       # the initramfs
  cpio gzip xz-utils kmod
  bluez                # bluetoothd, btmgmt, bluetoothctl, hcitool
  bluez-test-tools     # btvirt, btmon
  dbus                 # dbus-daemon (plain mode)
  systemd              # systemd-as-PID1 mode, journalctl
  python3 python3-dbus python3-gi   # scenarios + virtual wearable (Debian's /usr/bin/python3)
  coreutils util-linux procps iproute2
)

missing=()
for p in "${PKGS[@]}"; do
  st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [[ $st == installed ]] || missing+=("$p")
done
if ((${#missing[@]} == 0)) && compgen -G '/boot/vmlinuz-*' >/dev/null; then
  echo "install-deps: all ${#PKGS[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]:-linux-image-amd64}"
SUDO=; [[ $(id -u) == 0 ]] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
# linux-image-amd64 may complain about the boot loader inside a container; the kernel and
# modules land in /boot and /lib/modules anyway, which is all the bed uses.
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]:-linux-image-amd64}" || {
  compgen -G '/boot/vmlinuz-*' >/dev/null && command -v qemu-system-x86_64 >/dev/null \
    && command -v btvirt >/dev/null || exit 1
  echo "install-deps: apt-get reported an error, but the bed's tools are present; continuing" >&2
}
compgen -G '/boot/vmlinuz-*' >/dev/null || { echo "install-deps: no /boot/vmlinuz-*" >&2; exit 1; }
echo "install-deps: done"
