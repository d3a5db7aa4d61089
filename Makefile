# paird — the entry points. `make test` is what CI runs (.ci/run).
SWIFT        ?= swift
PREFIX       ?= /usr/local
DESTDIR      ?=
SYSCONFDIR   ?= /etc
UNITDIR      ?= /etc/systemd/system
RELEASE_BIN   = .build/release
# Release binaries link the Swift runtime statically (and only FoundationEssentials): paird's
# RSS 25.9 → 14.1 MB, pairctl starts in half the time (BENCHMARKS.md §2). Every release build
# passes the same flags, or SwiftPM would rebuild .build/release back and forth.
RELEASE       = $(SWIFT) build -c release --static-swift-stdlib

.PHONY: all deps build release test unit e2e demo bench soak install uninstall purge clean

all: build

deps:
	Tests/install-build-deps.sh

build: deps
	$(SWIFT) build

release: deps
	$(RELEASE) --product paird
	$(RELEASE) --product pairctl
	$(RELEASE) --product bluez-probe

## test: every tier — unit + integration (swift test), then end-to-end on the real-BlueZ test bed.
test: unit e2e

## unit: PairingCore, the C modules, the event loop, D-Bus against a private dbus-daemon,
## BlueZ against python-dbusmock, the daemon and pairctl binaries against the mock.
unit: deps release
	$(SWIFT) build --build-tests
	$(SWIFT) test --skip-build

## e2e: the real kernel Bluetooth stack, bluetoothd 5.66 and virtual wearables in a qemu VM: Bumble
## profiles (an independent BLE stack) for every scenario, the BlueZ twin for a core subset.
e2e: release
	Tests/testbed/e2e.sh

demo: release
	Tests/testbed/demo.sh

## bench: programs that print figures (see BENCHMARKS.md).
bench: deps release
	$(RELEASE) --product PairingBench
	$(RELEASE_BIN)/PairingBench 1 3
	$(RELEASE_BIN)/PairingBench 100 3
	if [ -x Tests/bench/bench.sh ]; then Tests/bench/bench.sh; fi

## soak: the long reliability runs (the short versions run in `make test`).
soak: deps release
	$(SWIFT) build --build-tests
	PAIRD_SOAK_KILLS=$${PAIRD_SOAK_KILLS:-200} $(SWIFT) test --skip-build --filter ReliabilityTests
	Tests/testbed/install-deps.sh
	BED_WEARABLE=bluez PAIRD_BIN=$(CURDIR)/$(RELEASE_BIN)/paird PAIRCTL_BIN=$(CURDIR)/$(RELEASE_BIN)/pairctl Tests/testbed/run-vm --out testbed-out/soak Tests/bench/soak.py

## install: what `make release` built, and nothing else (no apt-get, no build on the target):
## binaries stripped, unit, config (kept if present), D-Bus policy, README; the `paird` user.
install:
	@for b in paird pairctl; do test -x $(RELEASE_BIN)/$$b || { echo "make install: $(RELEASE_BIN)/$$b is missing: run 'make release' first (it builds; install only copies)" >&2; exit 1; }; done
	install -D -m 0755 -s $(RELEASE_BIN)/paird   $(DESTDIR)$(PREFIX)/sbin/paird
	install -D -m 0755 -s $(RELEASE_BIN)/pairctl $(DESTDIR)$(PREFIX)/bin/pairctl
	install -D -m 0644 systemd/paird.service  $(DESTDIR)$(UNITDIR)/paird.service
	sed -i -e 's|^ExecStart=.*|ExecStart=$(PREFIX)/sbin/paird|' \
	  -e 's|^Documentation=.*|Documentation=file:$(PREFIX)/share/doc/paird/README.md|' $(DESTDIR)$(UNITDIR)/paird.service
	install -D -m 0644 README.md $(DESTDIR)$(PREFIX)/share/doc/paird/README.md
	install -D -m 0644 LICENSE $(DESTDIR)$(PREFIX)/share/doc/paird/LICENSE
	test -e $(DESTDIR)$(SYSCONFDIR)/paird/paird.conf || \
	  install -D -m 0644 etc/paird/paird.conf $(DESTDIR)$(SYSCONFDIR)/paird/paird.conf
	install -D -m 0644 etc/dbus-1/system.d/org.paird1.conf \
	  $(DESTDIR)/usr/share/dbus-1/system.d/org.paird1.conf
	[ -n "$(DESTDIR)" ] || getent passwd paird >/dev/null || useradd --system --no-create-home --home-dir /var/lib/paird --shell /usr/sbin/nologin --user-group paird
	-[ -z "$(DESTDIR)" ] && systemctl reload dbus 2>/dev/null; true
	-[ -z "$(DESTDIR)" ] && systemctl daemon-reload 2>/dev/null; true
	@echo "installed; now: systemctl enable --now paird && pairctl pair"

## uninstall: stops and disables the service, removes every file `install` put in place except
## what holds your data and settings: /etc/paird/paird.conf, /var/lib/paird and the `paird` user
## stay (`make purge` removes them too).
uninstall:
	-[ -z "$(DESTDIR)" ] && systemctl disable --now paird 2>/dev/null; true
	rm -f $(DESTDIR)$(PREFIX)/sbin/paird $(DESTDIR)$(PREFIX)/bin/pairctl $(DESTDIR)$(UNITDIR)/paird.service \
	  $(DESTDIR)$(PREFIX)/share/doc/paird/README.md $(DESTDIR)$(PREFIX)/share/doc/paird/LICENSE \
	  $(DESTDIR)/usr/share/dbus-1/system.d/org.paird1.conf
	-rmdir $(DESTDIR)$(PREFIX)/share/doc/paird 2>/dev/null; true
	-[ -z "$(DESTDIR)" ] && systemctl daemon-reload 2>/dev/null; true
	-[ -z "$(DESTDIR)" ] && systemctl reload dbus 2>/dev/null; true

## purge: uninstall, then the configuration, the state (paired wearables) and the `paird` user.
purge: uninstall
	rm -f $(DESTDIR)$(SYSCONFDIR)/paird/paird.conf
	-rmdir $(DESTDIR)$(SYSCONFDIR)/paird 2>/dev/null; true
	rm -rf $(DESTDIR)/var/lib/paird
	-[ -z "$(DESTDIR)" ] && getent passwd paird >/dev/null && userdel paird; true

clean:
	rm -rf .build .build-* testbed-out
