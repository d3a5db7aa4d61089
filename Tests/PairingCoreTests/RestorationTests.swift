import Testing
import PairingCore

@Suite("Restoration and the adapter")
struct RestorationTests {
    let watch = Harness.watch
    let ring = Harness.ring

    func restored(_ wanted: Wanted = .connected) -> Harness {
        Harness(state: PersistedState(devices: [
            PersistedDevice(identity: DeviceIdentity(address: watch, name: "Watch"), wanted: wanted, pairedAt: 0, updatedAt: 0),
        ]))
    }

    @Test("the head start still ends in one Connect() with the auto-connect armed; a wearable that is away is then left to it")
    func headStartThenAutoConnect() {
        var h = Harness(state: PersistedState(devices: [
            PersistedDevice(identity: DeviceIdentity(address: watch, serviceUUIDs: [ServiceUUID.heartRate]),
                            wanted: .connected, pairedAt: 0, updatedAt: 0)]))
        h.send(.autoConnectArmed([watch]))
        h.send(.adapterReady([watch: BlueZDeviceView()]))
        #expect(h.fireNext().connects(watch) == 1)
        h.connectFailed(watch, .abortedByLocal, after: .seconds(40))
        #expect(h.state(watch) == .waitingForDevice(.onAutoConnect))
        #expect(h.armed.isEmpty)
        #expect(h.send(.userConnect(watch)).connects(watch) == 1, "the user's connect tries at once")
    }

    @Test("a link that is already up is adopted: no Connect, no Disconnect")
    func adoption() {
        var h = restored()
        #expect(h.stateName(watch) == "restoring")
        var out = h.send(.adapterReady([watch: BlueZDeviceView(connected: true, servicesResolved: true)]))
        let discovery = h.state(watch)?.countdown
        #expect(discovery?.id.purpose == .discovery)
        #expect(out == [.arm(discovery!), watchReport(.stateChanged, .restoring, .discovering), .setUpLink(watch), .updateAutoConnect([])],
                "no Connect, no Disconnect")
        out = h.send(.setUpLinkFinished(watch, failure: nil))
        #expect(h.state(watch)?.isConnected == true)
        #expect(out.reports(.connected).count == 1, "first connect since start is `connected`, not `reconnected`")
    }

    @Test("up but not yet resolved: adopted, waiting for ServicesResolved")
    func adoptionUnresolved() {
        var h = restored()
        let out = h.send(.adapterReady([watch: BlueZDeviceView(connected: true)]))
        #expect(out.connects() == 0 && !out.contains(.setUpLink(watch)))
        #expect(h.stateName(watch) == "discovering")
    }

    @Test("bluetoothd restarted under a live link: adopted unresolved, never resolves; dropped at the discovery timeout, not counted as a lost bond")
    func adoptedLinkWithoutATT() {
        var h = restored()
        for _ in 0..<5 {
            h.send(.adapterReady([watch: BlueZDeviceView(connected: true)]))
            #expect(h.stateName(watch) == "discovering")
            #expect(h.fireNext().disconnects == 1)
            #expect(h.stateName(watch) == "connecting")
            h.send(.adapterLost)
        }
        #expect(h.stateName(watch) == "adapterUnavailable", "never needsRepair")
        // The same, with the adopted link dropping before the countdown.
        h.send(.adapterReady([watch: BlueZDeviceView(connected: true)]))
        for _ in 0..<4 {
            h.send(.linkDown(watch, linkLoss))
            h.send(.adapterLost)
            h.send(.adapterReady([watch: BlueZDeviceView(connected: true)]))
        }
        #expect(h.stateName(watch) == "discovering")
    }

    @Test("known, bonded, not connected: reconnect by stored identifier")
    func reconnectByIdentifier() {
        var h = restored()
        let out = h.send(.adapterReady([watch: BlueZDeviceView()]))
        #expect(out.connects(watch) == 0, "the kernel's auto-connect gets its head start")
        #expect(h.stateName(watch) == "waitingForDevice")
        #expect(h.fireNext().connects(watch) == 1, "then one Connect() of paird's own")
    }

    @Test("after a restart the kernel's auto-connect brings the link up within the head start: no Connect() at all")
    func autoConnectWithinHeadStart() {
        var h = restored()
        #expect(h.send(.adapterReady([watch: BlueZDeviceView()])).connects() == 0)
        h.advance(.seconds(1))
        let all = h.linkComesUp(watch)
        #expect(h.state(watch)?.isConnected == true)
        #expect(all.connects() == 0)
        #expect(h.armed.isEmpty, "no fallback countdown left behind")
    }

    @Test("AutoConnectHeadStart = 0: Connect() at once after a restart, as before")
    func noHeadStart() {
        var config = MachineConfig()
        config.autoConnectHeadStart = .zero
        var h = Harness(config: config, state: PersistedState(devices: [
            PersistedDevice(identity: DeviceIdentity(address: watch, serviceUUIDs: [ServiceUUID.heartRate]),
                            wanted: .connected, pairedAt: 0, updatedAt: 0)]))
        #expect(h.send(.adapterReady([watch: BlueZDeviceView()])).connects(watch) == 1)
        #expect(h.stateName(watch) == "connecting")
    }

    @Test("BlueZ no longer knows it: needsRepair, no Connect")
    func forgottenByBlueZ() {
        var h = restored()
        let out = h.send(.adapterReady([:]))
        #expect(h.state(watch) == .needsRepair(reason: .deviceRemoved))
        #expect(out == [.setTrusted(watch, false), .disconnect(watch),
                        watchReport(.needsRepair, .restoring, .needsRepair, reason: .repair(.deviceRemoved)), .updateAutoConnect([])],
                "no Connect")
    }

    @Test("the user had disconnected it: it stays disconnected across the restart")
    func disconnectedSurvives() {
        var h = restored(.disconnected)
        let out = h.send(.adapterReady([watch: BlueZDeviceView(connected: false)]))
        #expect(h.state(watch) == .disconnected)
        #expect(out == [watchReport(.userDisconnected, .restoring, .disconnected), .updateAutoConnect([])], "no Connect")
    }

    @Test("no adapter at start, then the adapter arrives")
    func noAdapterAtStart() {
        var h = restored()
        h.send(.adapterLost)
        #expect(h.state(watch) == .adapterUnavailable)
        #expect(h.send(.adapterReady([watch: BlueZDeviceView()])).connects(watch) == 0)
        #expect(h.fireNext().connects(watch) == 1, "Connect() after the auto-connect's head start")
    }

    @Test("bluetoothd restart where the stored device shows up after the adapter: needsRepair, then back when it appears bonded")
    func deviceLateAfterRestart() {
        var h = Harness.connected()
        h.send(.adapterLost)
        h.send(.adapterReady([:])) // the new bluetoothd has not loaded the device yet
        #expect(h.state(watch) == .needsRepair(reason: .deviceRemoved))
        let out = h.send(.bondedDeviceAppeared(watch))
        #expect(out.connects(watch) == 0, "the kernel's auto-connect gets its head start")
        #expect(out.contains(.setTrusted(watch, true)))
        #expect(h.stateName(watch) == "waitingForDevice")
        #expect(h.fireNext().connects(watch) == 1)
        #expect(h.stateName(watch) == "waitingForDevice", "a probe: Connect() from the passive wait")
        // A lost bond (not a removal) is not undone by an appearance.
        h.send(.bondLost(watch))
        #expect(h.send(.bondedDeviceAppeared(watch)).connects() == 0)
    }

    @Test("bluetoothd restart: objects vanish while the adapter is gone, the device is not marked for repair")
    func bluetoothdRestart() {
        var h = Harness.connected()
        // BlueZ 5.66 on SIGTERM: Connected=false, Powered=false, InterfacesRemoved, NameOwnerChanged.
        h.send(.linkDown(watch, .init(adapterUp: false)))
        h.send(.adapterLost)
        h.send(.deviceRemoved(watch))
        #expect(h.state(watch) == .adapterUnavailable)
        #expect(h.armed.isEmpty)
        #expect(h.send(.adapterReady([watch: BlueZDeviceView()])).connects(watch) == 0)
        #expect(h.fireNext().connects(watch) == 1, "paird's Connect() after the auto-connect's head start")
        _ = h.connectSucceeded(watch)
        h.send(.servicesResolved(watch))
        h.send(.setUpLinkFinished(watch, failure: nil))
        #expect(h.state(watch)?.isConnected == true)
    }

    @Test("adapterReady again while devices are live changes nothing")
    func duplicateAdapterReady() {
        var h = Harness.connected()
        let out = h.send(.adapterReady([watch: BlueZDeviceView(connected: true, servicesResolved: true)]))
        #expect(out == [.updateAutoConnect([ServiceUUID.heartRate])])
    }

    @Test("status line names states the way a person reads them")
    func statusLine() {
        var h = Harness.connected()
        #expect(h.machine.statusLine(now: h.now) == "Watch (00:AA:01:01:00:01) connected")
        h.send(.linkDown(watch, linkLoss))
        #expect(h.machine.statusLine(now: h.now) == "Watch (00:AA:01:01:00:01) out of range, waiting")
        var empty = Harness()
        empty.send(.adapterReady([:]))
        #expect(empty.machine.statusLine(now: .at(0)) == "No wearables paired")
    }

    @Test("a configured characteristic missing on the set-up link: reported once, link after link; kept connected; back → gone from the status; missing again → reported again")
    func characteristicMissingOnce() {
        var h = Harness.connected()
        let hrm = ServiceUUID.heartRateMeasurement
        var out = h.send(.characteristicsMissing(watch, [hrm]))
        #expect(out.reports(.characteristicMissing).map(\.reasonToken) == [hrm])
        #expect(out.connects() == 0 && !out.contains(.disconnect(watch)), "not a reason to drop the link")
        #expect(h.state(watch)?.isConnected == true)
        #expect(h.machine.devices[watch]?.missingCharacteristics == [hrm])
        // The next links lack it too: no new report.
        for _ in 0..<3 {
            h.send(.linkDown(watch, linkLoss))
            h.send(.linkUp(watch))
            h.send(.servicesResolved(watch))
            h.send(.setUpLinkFinished(watch, failure: nil))
            out = h.send(.characteristicsMissing(watch, [hrm]))
            #expect(out.reports(.characteristicMissing).isEmpty)
        }
        h.send(.characteristicAppeared(watch, hrm))
        #expect(h.machine.devices[watch]?.missingCharacteristics == [])
        out = h.send(.characteristicsMissing(watch, [hrm]))
        #expect(out.reports(.characteristicMissing).count == 1, "missing again after it was back: said again")
        out = h.send(.characteristicsMissing(watch, []))
        #expect(out.isEmpty && h.machine.devices[watch]?.missingCharacteristics == [])
    }
}
