#!/bin/bash
# try-arm64.sh DEB — the arm64 package installed and run in bookworm arm64: debian/cross/try-deb.sh.
exec "$(dirname "$0")/try-deb.sh" "$@"
