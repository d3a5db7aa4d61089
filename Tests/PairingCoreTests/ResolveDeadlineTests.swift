import Testing
import PairingCore

/// A link that is up but whose services do not resolve (after bluetoothd returned under a live
/// link, 5.66 attaches no ATT channel to it) is dropped and connected again at the resolve
/// deadline, not left to the 30 s discovery timeout.
@Suite("The resolve deadline")
struct ResolveDeadlineTests {
    let watch = Harness.watch

    func restored() -> Harness {
        Harness(state: PersistedState(devices: [
            PersistedDevice(identity: DeviceIdentity(address: watch, name: "Watch", serviceUUIDs: [ServiceUUID.heartRate]),
                            wanted: .connected, pairedAt: 0, updatedAt: 0),
        ]))
    }

    /// The countdown the device's state carries now.
    func countdown(_ h: Harness) -> Countdown { h.state(watch)!.countdown! }

    @Test("adopted up and unresolved: the resolve countdown (ResolveTimeout), not the discovery one")
    func adoptionArmsResolve() {
        var h = restored()
        let out = h.send(.adapterReady([watch: BlueZDeviceView(connected: true)]))
        let c = countdown(h)
        #expect(c.id.purpose == .resolve)
        #expect(c.deadline == .at(0) + MachineConfig().resolveTimeout)
        #expect(out == [
            .arm(c),
            .report(Report(kind: .stateChanged, device: watch, name: "Watch", from: "restoring", to: "discovering")),
            .updateAutoConnect([ServiceUUID.heartRate]),
        ])
    }

    @Test("never resolves: at the resolve deadline dropped and connected again, not counted as a lost bond")
    func neverResolves() {
        var h = restored()
        h.send(.adapterReady([watch: BlueZDeviceView(connected: true)]))
        let resolve = countdown(h)
        let out = h.fireNext()
        #expect(h.now == resolve.deadline, "fired at the resolve deadline, long before DiscoveryTimeout")
        guard case .connecting(.backingOff, attempt: 1, let retry) = h.state(watch) else {
            Issue.record("expected connecting (backing off), got \(String(describing: h.state(watch)))")
            return
        }
        #expect(out == [
            .disconnect(watch),
            .cancel(resolve.id),
            .arm(retry),
            .report(Report(kind: .stateChanged, device: watch, name: "Watch", from: "discovering", to: "connecting",
                           reason: "resolve-timeout")),
        ])
        #expect(h.machine.devices[watch]?.setupFailures == 0)
        #expect(retry.id.purpose == .linkDown && retry.deadline == resolve.deadline + MachineConfig().linkDownWait)
        // Our own drop goes down: Connect() at once, and the new link resolves.
        #expect(h.send(.linkDown(watch, linkLoss)).connects(watch) == 1)
        #expect(h.stateName(watch) == "connecting")
        #expect(h.now < .at(0) + MachineConfig().discoveryTimeout, "connecting again well before DiscoveryTimeout")
        h.connectSucceeded(watch)
        #expect(countdown(h).id.purpose == .resolve, "a fresh link gets the resolve countdown too")
        h.send(.servicesResolved(watch))
        #expect(countdown(h).id.purpose == .discovery, "resolved: the rest of the set-up gets the discovery countdown")
        h.send(.setUpLinkFinished(watch, failure: nil))
        #expect(h.state(watch)?.isConnected == true)
    }

    @Test("a dropped link not seen down by LinkDownWait: Connect() then anyway; its late link-down changes nothing")
    func droppedLinkNotSeenDown() {
        var h = restored()
        h.send(.adapterReady([watch: BlueZDeviceView(connected: true)]))
        let resolve = countdown(h)
        h.fireNext() // resolve deadline: dropped
        let wait = countdown(h)
        #expect(wait.id.purpose == .linkDown)
        let out = h.fireNext()
        #expect(h.now == resolve.deadline + MachineConfig().linkDownWait)
        #expect(out.connects(watch) == 1, "no link-down seen: Connect() at LinkDownWait (the old link may answer it)")
        guard case .connecting(.calling, attempt: 2, _) = h.state(watch) else {
            Issue.record("expected connecting (calling, attempt 2), got \(String(describing: h.state(watch)))")
            return
        }
        // The old link goes down now, during that Connect(): nothing more is sent for it.
        #expect(h.send(.linkDown(watch, linkLoss)).connects() == 0)
        #expect(h.stateName(watch) == "connecting")
    }

    @Test("resolves in time: the rest of the set-up gets the discovery countdown")
    func resolvesInTime() {
        var h = restored()
        h.send(.adapterReady([watch: BlueZDeviceView(connected: true)]))
        let resolve = countdown(h)
        h.advance(.seconds(2))
        let out = h.send(.servicesResolved(watch))
        let discovery = countdown(h)
        #expect(discovery.id.purpose == .discovery)
        #expect(discovery.deadline == .at(2) + MachineConfig().discoveryTimeout)
        #expect(out == [.cancel(resolve.id), .arm(discovery), .setUpLink(watch)])
        h.send(.setUpLinkFinished(watch, failure: nil))
        #expect(h.state(watch)?.isConnected == true)
        #expect(h.armed.isEmpty)
    }

    @Test("a resolve countdown that fires after its link resolved is stale: ignored")
    func staleResolve() {
        var h = restored()
        h.send(.adapterReady([watch: BlueZDeviceView(connected: true)]))
        let resolve = countdown(h)
        h.send(.servicesResolved(watch))
        #expect(h.send(.countdownFired(resolve.id)) == [])
        #expect(h.stateName(watch) == "discovering")
    }
}
