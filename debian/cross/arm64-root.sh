#!/bin/bash
# arm64-root.sh [COMMAND...] — the bookworm arm64 root under qemu-user: debian/cross/bookworm-root.sh arm64.
exec "$(dirname "$0")/bookworm-root.sh" arm64 "$@"
