#!/bin/bash
# testbed: mode=systemd timeout=240
# systemd-as-PID-1 mode works: bluetooth.service is up, a Type=notify unit with a watchdog
# starts, reports STATUS=, logs to the journal, and is killed by the watchdog once it stops pinging.
source "$BED_TESTBED/bedlib.sh"
echo "scenario systemd_smoke.sh ($BED_MODE mode)"
[[ $(cat /proc/1/comm) == systemd ]] || bed_fail "PID 1 is $(cat /proc/1/comm), not systemd"

bluez_ok() {
  [[ $(systemctl is-active bluetooth.service) == active ]] &&
    busctl get-property org.bluez /org/bluez/hci0 org.bluez.Adapter1 Powered | grep -q true &&
    busctl get-property org.bluez /org/bluez/hci1 org.bluez.Adapter1 Powered | grep -q true
}
step "bluetooth.service active, hci0 + hci1 powered" wait_for 30 "bluetooth.service + adapters" bluez_ok

# a notify service: READY=1 + STATUS=, pings the watchdog until /run/stop-ping appears
NOTIFY_PY='
import os, socket, time
addr = os.environ["NOTIFY_SOCKET"]
if addr[0] == "@": addr = "\0" + addr[1:]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
def notify(m): s.sendto(m.encode(), addr)
print("hello from the notify unit", flush=True)
notify("READY=1\nSTATUS=pinging the watchdog")
while not os.path.exists("/run/stop-ping"):
    notify("WATCHDOG=1"); time.sleep(0.5)
notify("STATUS=stopped pinging")
print("stopped pinging", flush=True)
time.sleep(3600)
'
start_unit() {
  systemd-run --unit=bed-notify -p Type=notify -p WatchdogSec=6 -p TimeoutStartSec=60 \
    /usr/bin/python3 -c "$NOTIFY_PY"
}
step "systemd-run Type=notify WatchdogSec=6 unit starts" start_unit
step "unit is active" check "is-active = active" test "$(systemctl is-active bed-notify)" = active
step "StatusText via systemctl show" check "StatusText = pinging the watchdog" \
  test "$(systemctl show -p StatusText --value bed-notify)" = "pinging the watchdog"
journal_has() { journalctl -u bed-notify -o json --no-pager | grep -q "$1"; }
step "unit output in journalctl -o json" wait_for 10 "MESSAGE in the journal" journal_has '"MESSAGE":"hello from the notify unit"'
bed_sleep 8 "the watchdog (6 s; 2 s was too tight on a loaded TCG host) must not fire while the unit pings"
step "still active after 8 s (pings keep it alive)" check "is-active = active" test "$(systemctl is-active bed-notify)" = active
touch /run/stop-ping
watchdog_fired() { [[ $(systemctl show -p Result --value bed-notify) == watchdog ]]; }
step "stops pinging → killed by the watchdog (Result=watchdog)" wait_for 40 "Result=watchdog" watchdog_fired
step "\"Watchdog timeout\" in journalctl -o json" wait_for 10 "watchdog message" journal_has 'Watchdog timeout'
journalctl -u bed-notify -o short-monotonic --no-pager | tail -n 8
echo "all steps passed"
