#!/bin/bash
# arm64-bed.sh — issue 35's arm64 guest: the arm64 paird of the arm64 root (debian/cross/arm64-root.sh;
# install the package there first: `make deb ARCH=arm64 && debian/cross/try-arm64.sh
# .build/deb-arm64/paird_*_arm64.deb`) in qemu-system-aarch64 (TCG, `virt`, one cortex-a72),
# on Debian's arm64 kernel (bookworm-backports 6.12, the same version as the amd64 bed's), with
# bluetoothd 5.66 arm64 from bookworm, against Bumble's strap. Not in CI (make test).
#
# How the radio is made: Debian's arm64 kernel is built without hci_vhci (`# CONFIG_BT_HCIVHCI is
# not set`), so the amd64 bed's btvirt cannot give it a controller. Instead Bumble's own link-layer
# emulation runs on the host (`python -m bumble.apps.controllers`, two controllers on one link):
# the first is the guest's hci0, attached by the guest's kernel with hci_uart (H4, btattach)
# over a virtio console; the second is the wearable's (Tests/testbed/bumble_wearable.py
# --transport). What this does not reproduce: a kernel-side controller driver other than
# hci_uart, and btvirt's link layer (both ends here are Bumble's).
#
# The guest's side: debian/cross/arm64-bed-guest.sh. Logs: testbed-out/arm64-bed/.
# Exit 0 when the guest printed "ARM64 BED PASSED".
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd); src=$(cd "$here/../.." && pwd)
cache=${PAIRD_ARM64_CACHE:-/var/cache/paird-arm64}
out=$src/testbed-out/arm64-bed
die() { echo "arm64-bed: $*" >&2; exit 1; }
t_start=$(date +%s)

command -v qemu-system-aarch64 >/dev/null || { apt-get -q update >/dev/null; DEBIAN_FRONTEND=noninteractive apt-get -q install -y --no-install-recommends qemu-system-arm >/dev/null; } \
  || die "cannot install qemu-system-arm"
"$src/Tests/testbed/install-deps.sh" >/dev/null || die "Tests/testbed/install-deps.sh failed (Bumble's venv)"
. "$src/Tests/testbed/bed-cache"; BPY=$(bed_cache_dir "$src")/bumble-venv/bin/python
root=$(ls -d "$cache"/bookworm-arm64-*/ 2>/dev/null | while read -r d; do [[ -e $d/.ready && -x $d/usr/sbin/paird ]] && echo "${d%/}"; done | head -1)
[[ -n $root ]] || die "no arm64 root with paird installed under $cache: make deb ARCH=arm64 && debian/cross/try-arm64.sh .build/deb-arm64/paird_*_arm64.deb"

# ---- the kernel and busybox, downloaded (never installed on the host), and an initramfs
vm=$cache/vm; mkdir -p "$vm"
if ! compgen -G "$vm/k/boot/vmlinuz-*" >/dev/null; then
  (cd "$vm" && "$here/papt" bookworm-backports arm64 update >/dev/null &&
    pkg=$("$here/papt" bookworm-backports arm64 cache depends linux-image-arm64 | awk '$1 == "Depends:" && $2 ~ /^linux-image-6\.1[2-9]/ { print $2; exit }') &&
    "$here/papt" bookworm-backports arm64 download "$pkg" >/dev/null && rm -rf k && mkdir k && dpkg-deb -x linux-image-6*_arm64.deb k) \
    || die "cannot fetch Debian's arm64 kernel"
fi
kver=$(basename "$(ls -d "$vm"/k/lib/modules/* "$vm"/k/usr/lib/modules/* 2>/dev/null | head -1)")
kdir=$(ls -d "$vm"/k/lib/modules/"$kver" "$vm"/k/usr/lib/modules/"$kver" 2>/dev/null | head -1)
[[ -s $kdir/modules.dep ]] || /sbin/depmod -b "${kdir%/lib/modules/*}" "$kver" || die "depmod"
if [[ ! -x $vm/bb/bin/busybox ]]; then
  (cd "$vm" && "$here/papt" bookworm arm64 update >/dev/null && "$here/papt" bookworm arm64 download busybox-static >/dev/null &&
    rm -rf bb && mkdir bb && dpkg-deb -x busybox-static_*_arm64.deb bb) || die "cannot fetch busybox-static arm64"
fi
init=$(cat <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in netfs 9pnet 9pnet_virtio 9p overlay; do insmod /lib/mod/$m.ko || echo "insmod $m failed"; done
O9=trans=virtio,version=9p2000.L,msize=512000
mkdir -p /lower /upper
mount -t 9p -o $O9,ro,cache=loose hostroot /lower || { echo "initramfs: no root"; poweroff -f; }
mount -t tmpfs -o mode=0755,size=512M tmpfs /upper; mkdir -p /upper/u /upper/w
mount -t overlay overlay -o lowerdir=/lower,upperdir=/upper/u,workdir=/upper/w /newroot || { echo "initramfs: no overlay"; poweroff -f; }
mkdir -p /newroot/probe /newroot/lib/modules/$(uname -r)
mount -t 9p -o $O9 probe /newroot/probe || echo "initramfs: no probe share"
mount -t 9p -o $O9,ro kmods /newroot/lib/modules/$(uname -r) || echo "initramfs: no kmods"
mount --move /proc /newroot/proc; mount --move /sys /newroot/sys; mount --move /dev /newroot/dev
exec switch_root /newroot /bin/bash /probe/guest.sh
INIT
)
key=$(printf '%s\n' "$kver" "$init" | sha256sum | cut -c1-12)
initrd=$vm/initramfs-$key.cpio.gz
if [[ ! -s $initrd ]]; then
  ird=$(mktemp -d); mkdir -p "$ird"/{bin,lib/mod,proc,sys,dev,newroot}
  cp "$vm/bb/bin/busybox" "$ird/bin/"
  for m in fs/netfs/netfs net/9p/9pnet net/9p/9pnet_virtio fs/9p/9p fs/overlayfs/overlay; do
    xz -dc "$kdir/kernel/$m.ko.xz" >"$ird/lib/mod/${m##*/}.ko" || die "module $m"
  done
  printf '%s\n' "$init" >"$ird/init"; chmod +x "$ird/init"
  (cd "$ird" && find . | cpio -o -H newc 2>/dev/null | gzip -1) >"$initrd.part" && mv "$initrd.part" "$initrd"
  rm -rf "$ird"
fi

# ---- the link layer and the wearable on the host, then the guest
rm -rf "$out"; mkdir -p "$out"; cp "$here/arm64-bed-guest.sh" "$out/guest.sh"
ports=($("$BPY" -c 'import socket
for _ in range(2):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'))
"$BPY" -m bumble.apps.controllers "tcp-server:127.0.0.1:${ports[0]}" "tcp-server:127.0.0.1:${ports[1]}" >"$out/controllers.log" 2>&1 &
ctrl=$!
trap 'kill $ctrl ${wear:-} 2>/dev/null' EXIT
listening() { ss -ltn "sport = :$1" | grep -q LISTEN; }   # (a probe connection would take the transport's one accept)
for _ in $(seq 100); do listening "${ports[0]}" && listening "${ports[1]}" && break; sleep 0.1; done
"$BPY" "$src/Tests/testbed/bumble_wearable.py" --profile strap --name Pulse-1 --transport "tcp-client:127.0.0.1:${ports[1]}" \
  --socket "$out/wearable.sock" --keystore "$out/wearable-keys.json" >"$out/wearable.log" 2>&1 &
wear=$!
for _ in $(seq 100); do [[ -S $out/wearable.sock ]] && break; sleep 0.1; done
[[ -S $out/wearable.sock ]] || die "the wearable did not start (see $out/wearable.log)"
echo "arm64-bed: root $root (paird $(sed -n 's/^Version: //p' <(awk '/^Package: paird$/,/^$/' "$root/var/lib/dpkg/status"))), kernel $kver"
t0=$(date +%s.%N)
timeout 600 qemu-system-aarch64 -M virt -accel tcg -cpu cortex-a72 -smp 1 -m 1G -nodefaults -no-user-config -display none -no-reboot \
  -kernel "$vm/k/boot/vmlinuz-$kver" -initrd "$initrd" \
  -fsdev "local,id=root,path=$root,security_model=none,readonly=on,multidevs=remap" -device virtio-9p-pci,fsdev=root,mount_tag=hostroot \
  -fsdev "local,id=probe,path=$out,security_model=none,multidevs=remap" -device virtio-9p-pci,fsdev=probe,mount_tag=probe \
  -fsdev "local,id=kmods,path=$kdir,security_model=none,readonly=on,multidevs=remap" -device virtio-9p-pci,fsdev=kmods,mount_tag=kmods \
  -device virtio-serial-pci -chardev "socket,id=bt,host=127.0.0.1,port=${ports[0]}" -device virtconsole,chardev=bt \
  -chardev "socket,id=wctl,path=$out/wearable.sock" -device virtconsole,chardev=wctl \
  -device virtio-rng-pci -serial "file:$out/console.log" -append "console=ttyAMA0 panic=-1 quiet rw"
rc=$?
vm_s=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
grep -v "HCI UART protocol" "$out/out.log" 2>/dev/null
if grep -q "ARM64 BED PASSED" "$out/out.log" 2>/dev/null; then
  echo "PASS  arm64-bed [bumble link layer, bluez 5.66 arm64]  (VM ${vm_s} s, all $(( $(date +%s) - t_start )) s; qemu exit $rc; logs: $out)"; exit 0
fi
echo "FAIL  arm64-bed (VM ${vm_s} s, qemu exit $rc; logs: $out)"; exit 1
