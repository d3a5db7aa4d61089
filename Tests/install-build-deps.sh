#!/bin/bash
# Installs what building paird and its fast + integration test tiers need on Debian 12
# (idempotent; quick when everything is present). The real-BlueZ test bed has its own list:
# Tests/testbed/install-deps.sh.
set -euo pipefail
PKGS=(
  pkg-config libdbus-1-dev libsystemd-dev   # the C libraries paird links (CDBus, CSystemd)
  dbus                                      # dbus-daemon: private buses for the integration tier
  python3 python3-dbus python3-gi python3-dbusmock  # python-dbusmock's bluez5 template
  valgrind                                  # the D-Bus layer's leak check
  systemd                                   # systemd-analyze for the unit's security score
  dpkg-dev debhelper lintian binutils        # `make deb`: dpkg-buildpackage, dh, lintian, strip
  debootstrap                               # `make deb` with swiftlang (make test's package): the sid chroot
  libmosquitto1 mosquitto-clients           # [MQTT]: the library paird dlopens; mosquitto_sub for the tests
  libcjson1 libdlt2 libwrap0 libcap2        # the libraries the unpacked mosquitto broker (below) links
)
SUDO=; [[ $(id -u) == 0 ]] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive

# promtool, prometheus and node_exporter for the metrics tests (Tests/PairdIntegrationTests/
# MetricsIntegrationTests.swift): Debian's packages prometheus and prometheus-node-exporter,
# downloaded and unpacked into .build/prometheus, not installed (installing them would start a
# Prometheus server and node_exporter as services on this host). About 25 MB, a few seconds.
PROM_DIR="$(cd "$(dirname "$0")/.." && pwd)/.build/prometheus"
if [[ ! -x $PROM_DIR/usr/bin/promtool || ! -x $PROM_DIR/usr/bin/prometheus-node-exporter ]]; then
  echo "install-build-deps: unpacking Debian's prometheus and prometheus-node-exporter into $PROM_DIR"
  tmp=$(mktemp -d)
  if ! (cd "$tmp" && apt-get download prometheus prometheus-node-exporter 2>/dev/null); then
    $SUDO apt-get update -q
    (cd "$tmp" && apt-get download prometheus prometheus-node-exporter 2>/dev/null)
  fi
  mkdir -p "$PROM_DIR"
  for d in "$tmp"/*.deb; do dpkg-deb -x "$d" "$PROM_DIR"; done
  rm -rf "$tmp"
fi
# The metrics tests fail without them (they do not skip): say so here, at the cause.
for t in promtool prometheus prometheus-node-exporter; do
  if [[ ! -x $PROM_DIR/usr/bin/$t ]]; then
    echo "install-build-deps: $PROM_DIR/usr/bin/$t is missing after unpacking Debian's prometheus and prometheus-node-exporter" >&2
    exit 1
  fi
done

# mosquitto, the broker of the MQTT tests (Tests/PairdIntegrationTests/MQTTIntegrationTests.swift):
# Debian's package downloaded and unpacked into .build/mosquitto, not installed (installing it would
# start a broker as a service on port 1883 of this host). The tests start their own on a free port.
MQ_DIR="$(cd "$(dirname "$0")/.." && pwd)/.build/mosquitto"
if [[ ! -x $MQ_DIR/usr/sbin/mosquitto ]]; then
  echo "install-build-deps: unpacking Debian's mosquitto into $MQ_DIR"
  tmp=$(mktemp -d)
  if ! (cd "$tmp" && apt-get download mosquitto 2>/dev/null); then
    $SUDO apt-get update -q
    (cd "$tmp" && apt-get download mosquitto 2>/dev/null)
  fi
  mkdir -p "$MQ_DIR"
  for d in "$tmp"/*.deb; do dpkg-deb -x "$d" "$MQ_DIR"; done
  rm -rf "$tmp"
fi
if [[ ! -x $MQ_DIR/usr/sbin/mosquitto ]]; then
  echo "install-build-deps: $MQ_DIR/usr/sbin/mosquitto is missing after unpacking Debian's mosquitto" >&2
  exit 1
fi

missing=()
for p in "${PKGS[@]}"; do
  st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [[ $st == installed ]] || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install-build-deps: all ${#PKGS[@]} packages present"
  exit 0
fi
echo "install-build-deps: installing ${missing[*]}"
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
