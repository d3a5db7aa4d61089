#!/bin/bash
# Approach (b): what keep-connected scripts commonly do with bluetoothctl.
#   btctl_loop.sh ADDR [SLEEP]
# Every SLEEP seconds (default 5): if `bluetoothctl info` does not say "Connected: yes", run
# `bluetoothctl connect ADDR` (it blocks until BlueZ's LE connect attempt ends, ~40 s when the
# wearable is away).  Notifications are held by notify_client.py (StartNotify once), started
# beside this loop.  Each connect attempt is logged with its wall-clock time on stdout.
addr=$1; pause=${2:-5}
while true; do
  if ! bluetoothctl info "$addr" 2>/dev/null | grep -q 'Connected: yes'; then
    t=$(date +%s.%N)
    if timeout --foreground 90 bluetoothctl connect "$addr" >/dev/null 2>&1; then rc=0; else rc=$?; fi
    echo "{\"wall\": $t, \"kind\": \"connect\", \"rc\": $rc, \"end\": $(date +%s.%N)}"
  fi
  sleep "$pause"
done
