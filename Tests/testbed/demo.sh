#!/bin/bash
# `make demo`: boots the real-BlueZ test bed under systemd and runs Tests/testbed/demo/demo.py
# there: paird from systemd/paird.service, pairctl pair, live status while the wearable walks
# away and comes back, and the journal. Logs: testbed-out/demo/.
set -euo pipefail
TB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$TB/../.." && pwd)
export PAIRD_BIN=${PAIRD_BIN:-$REPO/.build/release/paird}
export PAIRCTL_BIN=${PAIRCTL_BIN:-$REPO/.build/release/pairctl}
"$TB/install-deps.sh"
exec "$TB/run-vm" --systemd "$TB/demo/demo.py"
