#!/bin/bash
# arm64-sysroot.sh — the arm64 sysroot for the cross-build: debian/cross/sysroot.sh arm64.
exec "$(dirname "$0")/sysroot.sh" arm64 "$@"
