#!/bin/bash
# build-arm64.sh — paird and pairctl cross-built for arm64: debian/cross/build-swiftlang.sh arm64.
exec "$(dirname "$0")/build-swiftlang.sh" arm64 "$@"
