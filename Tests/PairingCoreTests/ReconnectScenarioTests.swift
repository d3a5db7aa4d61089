import Testing
import PairingCore

@Suite("Keeping a wearable connected")
struct ReconnectScenarioTests {
    let watch = Harness.watch

    @Test("walks out of range, auto-connect not armed (registration refused): one fallback Connect() per interval, never gives up")
    func outOfRange() {
        var h = Harness.connected()
        h.advance(.seconds(100))
        var out = h.send(.linkDown(watch, linkLoss))
        guard case .waitingForDevice(.fallbackDue(let fallback))? = h.state(watch) else {
            Issue.record("\(String(describing: h.state(watch)))"); return
        }
        #expect(out == [.arm(fallback), watchReport(.linkLost, .connected, .waitingForDevice, reason: .linkLoss(nil))],
                "no Connect storm: the kernel's auto-connect waits for it")
        #expect(h.machine.devices[watch]?.lastDisconnect?.reason.token == "link-loss")
        #expect(h.machine.devices[watch]?.lastDisconnect?.at == .at(100))

        // Away for hours: every fallback interval one Connect, which fails after BlueZ's ~40 s.
        for _ in 0..<200 {
            out = h.fireNext()
            #expect(out.connects(watch) == 1)
            #expect(h.stateName(watch) == "waitingForDevice")
            out = h.connectFailed(watch, .abortedByLocal, after: .seconds(40))
            #expect(out.connects() == 0)
            #expect(h.stateName(watch) == "waitingForDevice")
        }
        #expect(h.armed.count == 1)

        // Back: the kernel reconnects on its own; ServicesResolved arrives (Connected=true may not).
        h.send(.servicesResolved(watch))
        let discovery = h.state(watch)?.countdown
        out = h.send(.setUpLinkFinished(watch, failure: nil))
        #expect(h.state(watch)?.isConnected == true)
        #expect(out == [.cancel(discovery!.id), watchReport(.reconnected, .discovering, .connected, attempt: 200)])
        #expect(h.machine.devices[watch]?.reconnectAttempts == 0)
        #expect(h.armed.isEmpty)
    }

    @Test("walks out of range, auto-connect armed: no timer of paird's however long it is away; back → connected")
    func outOfRangeOnAutoConnect() {
        var h = Harness.connected()
        h.send(.autoConnectArmed([watch]))
        var out = h.send(.linkDown(watch, linkLoss))
        #expect(h.state(watch) == .waitingForDevice(.onAutoConnect))
        #expect(out.connects() == 0)
        #expect(out.reports(.linkLost).count == 1)
        #expect(h.armed.isEmpty, "nothing to wake paird while it waits")
        #expect(h.fireNext().isEmpty)
        h.advance(.seconds(5 * 3600))
        out = h.linkComesUp(watch)
        #expect(h.state(watch)?.isConnected == true)
        #expect(out.reports(.reconnected).count == 1)
        #expect(h.log.connects() == 0, "the kernel's auto-connect did it all")
    }

    @Test("the registration stops covering it while it waits: the fallback timer comes back; covered again, the next wait has none")
    func autoConnectDisarmed() {
        var h = Harness.connected()
        h.send(.autoConnectArmed([watch]))
        h.send(.linkDown(watch, linkLoss))
        let out = h.send(.autoConnectArmed([Harness.ring]))   // armed for another device only
        guard case .waitingForDevice(.fallbackDue(let c))? = h.state(watch) else {
            Issue.record("\(String(describing: h.state(watch)))"); return
        }
        #expect(out.contains(.arm(c)))
        #expect(h.fireNext().connects(watch) == 1)
        h.send(.autoConnectArmed([watch]))
        #expect(h.armed.count == 1, "the Connect() in flight keeps its reply countdown")
        h.connectFailed(watch, .abortedByLocal, after: .seconds(40))
        #expect(h.state(watch) == .waitingForDevice(.onAutoConnect))
        #expect(h.armed.isEmpty)
        h.send(.autoConnectArmed([]))   // bluetoothd lost our registration
        #expect(h.state(watch)?.countdown?.id.purpose == .fallbackConnect)
    }

    @Test("back while our fallback Connect is in flight: the Connect's success leads to discovering")
    func backDuringProbe() {
        var h = Harness.connected()
        h.send(.linkDown(watch, linkLoss))
        h.fireNext()
        h.advance(.seconds(3))
        _ = h.connectSucceeded(watch)
        #expect(h.stateName(watch) == "discovering")
        h.send(.servicesResolved(watch))
        h.send(.setUpLinkFinished(watch, failure: nil))
        #expect(h.state(watch)?.isConnected == true)
    }

    @Test("disconnect reasons of BlueZ ≥ 5.83", arguments: DisconnectClassifier.Reason.allCases)
    func reasons(reason: DisconnectClassifier.Reason) {
        var h = Harness.connected()
        let out = h.send(.linkDown(watch, .init(reason: reason)))
        switch reason {
        case .authentication:
            #expect(h.stateName(watch) == "needsRepair")
            #expect(out.reports(.needsRepair).count == 1)
        case .timeout, .remote, .unknown, .suspend, .local:
            #expect(h.stateName(watch) == "waitingForDevice")
            #expect(h.machine.devices[watch]?.lastDisconnect?.reason.token == reason.token)
        }
        #expect(out.connects() == 0)
    }

    @Test("transient connect errors back off with growing, jittered delays, then wait passively")
    func transientBackoff() {
        var config = MachineConfig()
        config.fastAttempts = 4
        config.autoConnectHeadStart = .zero   // Connect() at once: this is about its failures
        var h = Harness(config: config, state: PersistedState(devices: [
            PersistedDevice(identity: DeviceIdentity(address: watch), wanted: .connected, pairedAt: 0, updatedAt: 0),
        ]))
        h.send(.adapterReady([watch: BlueZDeviceView()]))
        var delays: [Double] = []
        for attempt in 1...4 {
            guard case .connecting(.calling, attempt, _)? = h.state(watch) else {
                Issue.record("attempt \(attempt): \(String(describing: h.state(watch)))"); return
            }
            let failedAt = h.now + .milliseconds(50)
            _ = h.connectFailed(watch, .busy, after: .milliseconds(50))
            if attempt < 4 {
                guard case .connecting(.backingOff, _, let c)? = h.state(watch) else { Issue.record("no backoff"); return }
                delays.append(c.deadline.since(failedAt).seconds)
                h.fireNext()
            }
        }
        #expect(h.stateName(watch) == "waitingForDevice")
        // 1, 2, 4 s ± 20 %.
        for (i, d) in delays.enumerated() {
            let base = Double(1 << i)
            #expect(d >= base * 0.8 && d <= base * 1.2, "retry \(i + 1) waited \(d) s")
        }
        #expect(h.machine.devices[watch]?.reconnectAttempts == 4)
    }

    /// Connect() at once after a restart (no head start for the auto-connect): for the tests of
    /// what follows a Connect().
    static let immediateConnect: MachineConfig = {
        var c = MachineConfig()
        c.autoConnectHeadStart = .zero
        return c
    }()

    @Test("a Connect that fails only after ~40 s means the wearable is away, not a hiccup")
    func slowFailureMeansAbsent() {
        var h = Harness(config: Self.immediateConnect, state: PersistedState(devices: [
            PersistedDevice(identity: DeviceIdentity(address: watch), wanted: .connected, pairedAt: 0, updatedAt: 0),
        ]))
        h.send(.adapterReady([watch: BlueZDeviceView()]))
        _ = h.connectFailed(watch, .abortedByLocal, after: .seconds(40))
        #expect(h.stateName(watch) == "waitingForDevice")
    }

    @Test("a Connect reply that never comes is given up at its countdown")
    func connectReplyCountdown() {
        var h = Harness(config: Self.immediateConnect, state: PersistedState(devices: [
            PersistedDevice(identity: DeviceIdentity(address: watch), wanted: .connected, pairedAt: 0, updatedAt: 0),
        ]))
        h.send(.adapterReady([watch: BlueZDeviceView()]))
        h.fireNext()
        #expect(h.now == .at(50))
        #expect(h.stateName(watch) == "waitingForDevice")
    }

    @Test("services that never resolve: drop the link ourselves and retry; our own disconnect is no link loss")
    func discoveryTimeout() {
        var h = Harness.connected()
        h.send(.linkDown(watch, linkLoss))
        h.send(.linkUp(watch))
        #expect(h.stateName(watch) == "discovering")
        var out = h.fireNext()
        #expect(out.disconnects == 1)
        #expect(h.stateName(watch) == "connecting")
        out = h.send(.linkDown(watch, linkLoss))
        #expect(out.reports(.linkLost).isEmpty)
        #expect(out.connects(watch) == 1, "the dropped link is down: Connect() at once")
    }

    @Test("a stale countdown and a stale Connect reply change nothing")
    func staleInputs() {
        var h = Harness.connected()
        h.send(.linkDown(watch, linkLoss))
        guard case .waitingForDevice(.fallbackDue(let first))? = h.state(watch) else { Issue.record(); return }
        h.fireNext() // a fallback Connect() in flight now, a new countdown
        let oldCall = h.lastConnectCall[watch]!
        let before = h.state(watch)
        #expect(h.send(.countdownFired(first.id)).isEmpty)
        #expect(h.send(.connectFailed(watch, call: oldCall &+ 1000, .abortedByLocal)).isEmpty)
        #expect(h.send(.connectSucceeded(watch, call: oldCall &- 1)).isEmpty)
        #expect(h.state(watch) == before)
    }

    @Test("the user's disconnect stays down: no reconnect, and a link that comes up anyway is dropped")
    func userDisconnect() {
        var h = Harness.connected()
        var out = h.send(.userDisconnect(watch))
        #expect(out == [.persist, .setTrusted(watch, false), .disconnect(watch),
                        watchReport(.userDisconnected, .connected, .disconnected, reason: .user), .updateAutoConnect([])])
        #expect(h.state(watch) == .disconnected)
        #expect(h.machine.persistedState().devices.first?.wanted == .disconnected)
        out = h.send(.linkDown(watch, linkLoss))
        #expect(out.isEmpty)
        out = h.send(.linkUp(watch))
        #expect(out == [.disconnect(watch)])
        #expect(h.armed.isEmpty)
        #expect(!h.machine.autoConnectUUIDs.contains(ServiceUUID.heartRate))

        out = h.send(.userConnect(watch))
        guard case .waitingForDevice(.fallbackDue(let headStart))? = h.state(watch) else {
            Issue.record("\(String(describing: h.state(watch)))"); return
        }
        // No Connect() yet: the kernel's auto-connect gets its head start (finding 16); back in
        // the auto-connect list.
        #expect(out == [.persist, .setTrusted(watch, true), .arm(headStart),
                        watchReport(.stateChanged, .disconnected, .waitingForDevice), .updateAutoConnect([ServiceUUID.heartRate])])
        #expect(h.machine.devices[watch]?.wanted == .connected)
        #expect(h.fireNext().connects(watch) == 1, "then one Connect() of paird's own")
    }

    @Test("the user's connect, auto-connect in time: the link comes up with no Connect() of paird's")
    func userConnectAutoConnects() {
        var h = Harness.connected()
        h.send(.userDisconnect(watch))
        h.send(.linkDown(watch, linkLoss))
        var all = h.send(.userConnect(watch))
        h.advance(.milliseconds(300))
        all += h.linkComesUp(watch)
        #expect(h.state(watch)?.isConnected == true)
        #expect(all.connects() == 0)
        #expect(h.armed.isEmpty, "no fallback countdown left behind")
    }

    @Test("the user's connect with AutoConnectHeadStart = 0: Connect() at once, as before")
    func userConnectNoHeadStart() {
        var config = MachineConfig()
        config.autoConnectHeadStart = .zero
        var h = Harness.connected(config: config)
        h.send(.userDisconnect(watch))
        h.send(.linkDown(watch, linkLoss))
        #expect(h.send(.userConnect(watch)).connects(watch) == 1)
        #expect(h.stateName(watch) == "connecting")
    }

    @Test("user connect while waiting tries at once; user connect while connected does nothing")
    func userConnectVariants() {
        var h = Harness.connected()
        #expect(h.send(.userConnect(watch)).isEmpty)
        h.send(.linkDown(watch, linkLoss))
        #expect(h.send(.userConnect(watch)).connects(watch) == 1)
    }

    @Test("unpair forgets the device in BlueZ and in the state file")
    func unpair() {
        var h = Harness.connected()
        h.send(.linkDown(watch, linkLoss))
        let out = h.send(.userUnpair(watch))
        #expect(out.contains(.removeDevice(watch)))
        #expect(out.persists)
        #expect(out.reports(.unpaired).count == 1)
        #expect(h.machine.devices[watch] == nil)
        #expect(h.machine.persistedState().devices.isEmpty)
        #expect(h.armed.isEmpty)
    }
}
