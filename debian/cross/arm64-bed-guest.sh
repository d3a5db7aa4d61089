#!/bin/bash
# arm64-bed-guest.sh — the arm64 guest's side of debian/cross/arm64-bed.sh (PID 1 after the
# initramfs; the bookworm arm64 root with the arm64 .deb installed, read-only under a tmpfs
# overlay; this directory's share at /probe). The central's controller is Bumble's emulated link
# layer on the host, attached with hci_uart (H4) over a virtio console (hvc0): Debian's arm64
# kernel has no hci_vhci, so btvirt cannot run here. The wearable (Bumble's strap, on the host, on
# the same emulated link layer) is driven through its control socket on hvc1. Checks: paird
# (as user paird, no systemd) pairs the strap with pairctl, it notifies, it walks away and comes
# back without a command, paird restarted finds it connected and notifying; paird's RSS idle and
# 65 s after its start (its start-up code pages given back at 60 s: MappedText.swift).
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
O=/probe/out.log; : > $O
t() { echo "[$(cut -d' ' -f1 /proc/uptime)] $*" | tee -a $O; }
fail() { t "FAIL: $*"; dmesg | tail -20 >> $O; sync; echo o > /proc/sysrq-trigger; sleep 5; }
waitfor() { # deadline-seconds what command...
  local end=$(( $(cut -d. -f1 /proc/uptime) + $1 )) what=$2; shift 2
  until "$@"; do (( $(cut -d. -f1 /proc/uptime) < end )) || { fail "timed out waiting for $what"; return 1; }; sleep 0.3; done
  t "ok: $what"
}
t "stage: $(uname -m) $(uname -r)"
mount -t tmpfs tmpfs /run; mount -t tmpfs tmpfs /tmp; mkdir -p /run/dbus /dev/pts; mount -t devpts devpts /dev/pts
modprobe hci_uart || fail "modprobe hci_uart"
dbus-daemon --system --fork --nopidfile
btattach -B /dev/hvc0 -P h4 >> $O 2>&1 &
waitfor 20 "hci0 (Bumble's controller over hvc0)" test -e /sys/class/bluetooth/hci0
/usr/libexec/bluetooth/bluetoothd -n > /probe/bluetoothd.log 2>&1 &
waitfor 20 "bluetoothd on the bus, hci0 powered" sh -c 'bluetoothctl show 2>/dev/null | grep -q "Powered: yes"'
exec 4<>/dev/hvc1; stty raw -echo <&4   # settings while open: a tty reopened echoes again
wcmd() { echo "$1" >&4; local r; read -r -t 30 r <&4; t "wearable $1 → ${r:0:80}"; [[ $r == ok* ]]; }
mkdir -p /var/lib/paird && chown paird:paird /var/lib/paird
start_paird() {
  setpriv --reuid=paird --regid=paird --init-groups /usr/sbin/paird >> /probe/paird.log 2>&1 &
  PAIRD=$!
  waitfor 30 "paird answering (pid $PAIRD)" pairctl status >/dev/null
}
STRAP=F3:5A:B1:00:00:01   # bumble_wearable.py's strap profile: its identity address
state() { pairctl list 2>/dev/null | awk -v a=$STRAP '$1 == a {print $2}'; }
is() { [[ $(state) == "$1" ]]; }
away() { local s; s=$(state); [[ -n $s && $s != connected ]]; }   # listed, in another state (not a pairctl that failed)
notified() { timeout 15 pairctl watch 2>/dev/null | grep -m1 -q "heart rate"; }
t "paird: $(/usr/sbin/paird --version | head -1)"
start_paird
pairctl pair --service 180d --timeout 60 >> $O 2>&1 || fail "pairctl pair exit $?"
t "pairctl pair: exit 0"
waitfor 30 "connected" is connected
waitfor 30 "a heart-rate notification" notified
rss() { awk '/VmRSS/ {print $2, $3}' /proc/$PAIRD/status; }
sleep 5   # deliberate: idle a moment before the RSS is read
t "paird RSS idle, one wearable connected: $(rss)"
# paird gives back its start-up code pages a minute after it starts (MappedText.swift): the RSS after
up() { echo $(( $(cut -d. -f1 /proc/uptime) - $(awk '{print int($22 / 100)}' /proc/$PAIRD/stat) )); }
old_enough() { [ "$(up)" -ge 65 ]; }
waitfor 90 "paird up for 65 s" old_enough
t "paird RSS $(up) s after its start, one wearable connected, start-up code given back: $(rss)"
wcmd walk-away || fail "walk-away"
waitfor 60 "link lost, paird waits (not connected)" away
t "state while away: $(state)"
wcmd come-back || fail "come-back"
waitfor 90 "connected again (no pairctl command)" is connected
waitfor 30 "notifying again" notified
kill -TERM $PAIRD; wait $PAIRD; t "paird stopped (exit $?)"
start_paird
waitfor 30 "connected after the restart" is connected
waitfor 30 "notifying after the restart" notified
t "paird RSS after the restart: $(rss)"
t "ARM64 BED PASSED"
sync; echo o > /proc/sysrq-trigger; sleep 5
