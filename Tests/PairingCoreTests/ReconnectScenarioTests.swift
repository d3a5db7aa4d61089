import Testing
import PairingCore

/// A report of the watch's, as the machine words it (the whole action lists below).
private func watchReport(_ kind: Report.Kind, _ from: DeviceState.Kind, _ to: DeviceState.Kind,
                         reason: ReportReason? = nil, attempt: Int? = nil) -> Action {
    .report(Report(kind: kind, device: Harness.watch, name: "Watch", from: .state(from), to: .state(to), reason: reason, attempt: attempt))
}

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

    @Test("a lost bond asks for re-pairing and never loops",
          arguments: [Event.bondLost(Harness.watch), .deviceRemoved(Harness.watch),
                      .linkDown(Harness.watch, .init(stillBonded: false))])
    func bondLost(event: Event) {
        var h = Harness.connected()
        var out = h.send(event)
        let why: RepairReason = if case .deviceRemoved = event { .deviceRemoved } else { .bondRemoved }
        #expect(out == [.setTrusted(watch, false), .disconnect(watch),
                        watchReport(.needsRepair, .connected, .needsRepair, reason: .repair(why)), .updateAutoConnect([])])
        for _ in 0..<10 { out += h.fireNext(); out += h.send(.linkDown(watch, linkLoss)) }
        #expect(out.connects() == 0)
        #expect(h.armed.isEmpty)
    }

    @Test("5.66, wearable forgot its bond: the link comes up and drops before services resolve, again and again → needsRepair")
    func forgottenBondOn566() {
        var h = Harness.connected()
        h.send(.linkDown(watch, linkLoss)) // forget-bond drops the link: looks like any link loss
        var connects = 0
        for round in 1...3 {
            h.send(.linkUp(watch))          // kernel auto-connect: the link comes up…
            let out = h.send(.linkDown(watch, linkLoss)) // …and encryption fails
            if round < 3 {
                #expect(h.stateName(watch) == "waitingForDevice")
            } else {
                #expect(h.state(watch) == .needsRepair(reason: .suspectedBondLoss))
                #expect(out.contains(.setTrusted(watch, false)), "BlueZ's auto-connect is turned off for it too")
                #expect(out.contains(.disconnect(watch)))
            }
            connects += out.connects()
        }
        for _ in 0..<20 { connects += h.fireNext().connects() }
        #expect(connects == 0)
        #expect(h.armed.isEmpty)
    }

    @Test("5.66, wearable forgot its bond: Connect answered at once with abort-by-local, thrice → needsRepair")
    func quickAbortsMeanBondLoss() {
        var h = Harness.connected()
        h.send(.linkDown(watch, linkLoss))
        h.fireNext()
        _ = h.connectFailed(watch, .abortedByLocal, after: .milliseconds(300))
        #expect(h.stateName(watch) == "waitingForDevice")
        h.fireNext()
        _ = h.connectFailed(watch, .abortedByLocal, after: .milliseconds(300))
        h.fireNext()
        let out = h.connectFailed(watch, .abortedByLocal, after: .milliseconds(300))
        #expect(h.stateName(watch) == "needsRepair")
        #expect(out.reports(.needsRepair).first?.reasonToken == "suspected-bond-loss")
    }

    @Test("5.66, wearable forgot its bond while connected: the link stays up but services go; discovery times out, and again → needsRepair")
    func servicesLostWhileConnected() {
        var h = Harness.connected()
        var out = h.send(.servicesLost(watch))
        #expect(h.stateName(watch) == "discovering")
        #expect(out.connects() == 0 && out.disconnects == 0, "give it the discovery window first")
        for round in 1...3 {
            out = h.fireNext() // discovery countdown: our own disconnect
            #expect(out.disconnects == 1)
            if round == 3 { break }
            h.fireNext()       // backoff → Connect
            h.send(.linkUp(watch))
        }
        #expect(h.state(watch) == .needsRepair(reason: .suspectedBondLoss))
        #expect(h.armed.isEmpty)
        #expect(h.send(.servicesLost(watch)).isEmpty, "ignored outside connected")
    }

    @Test("wearable forgot its bond, seen on kernel 6.12 (CI): the link stays up while ServicesResolved turns false and true again, nothing from the wearable → needsRepair")
    func forgottenBondTogglingServices() {
        var h = Harness.connected()             // proven: the bond worked until now
        var reconnects = 0
        for round in 1...4 {
            h.advance(.seconds(3))
            let lost = h.send(.servicesLost(watch))
            if round < 4 {
                #expect(h.stateName(watch) == "discovering", "round \(round)")
                #expect(lost.disconnects == 0)
                h.send(.servicesResolved(watch)) // from BlueZ's cache
                reconnects += h.send(.setUpLinkFinished(watch, failure: nil)).reports(.reconnected).count
            } else {
                // the first loss was on the proven link; the next three on unproven ones
                #expect(h.state(watch) == .needsRepair(reason: .suspectedBondLoss))
                #expect(lost.contains(.setTrusted(watch, false)))
                #expect(lost.disconnects == 1, "the useless link is dropped")
            }
        }
        #expect(reconnects == 3)
        var connects = 0
        for _ in 0..<20 { connects += h.fireNext().connects() }
        #expect(connects == 0)
        #expect(h.armed.isEmpty)
    }

    @Test("forgotten bond, the bed's timeline (fb-run4): the link stays up and loses its services 4, 31 and 34 s after they resolved (ATT gives up) → needsRepair at the third")
    func forgottenBondAttTimeoutCycle() {
        var h = Harness.connected()
        h.send(.linkDown(watch, linkLoss))       // forget-bond drops the proven link
        h.send(.linkUp(watch))
        for (round, after) in [(1, 4.0), (2, 30.8), (3, 34.3)] {
            h.send(.servicesResolved(watch))     // from the cache, 0.1–0.3 s after the loss
            h.send(.setUpLinkFinished(watch, failure: nil))
            h.advance(.milliseconds(Int64(after * 1000)))
            h.send(.servicesLost(watch))
            if round < 3 {
                #expect(h.stateName(watch) == "discovering")
                #expect(h.machine.devices[watch]?.setupFailures == round)
            }
        }
        #expect(h.state(watch) == .needsRepair(reason: .suspectedBondLoss))
    }

    @Test("a set-up reply that arrives after the services went does not make the link connected")
    func staleSetUpReplyAfterServicesLost() {
        var h = Harness.connected()
        h.send(.servicesLost(watch))
        h.send(.servicesResolved(watch))          // setUpLink #2 issued
        h.send(.servicesLost(watch))              // ignored in discovering, but the link is unresolved
        #expect(h.send(.setUpLinkFinished(watch, failure: nil)).reports(.reconnected).isEmpty)
        #expect(h.stateName(watch) == "discovering")
        h.send(.servicesResolved(watch))
        #expect(h.send(.setUpLinkFinished(watch, failure: nil)).reports(.reconnected).count == 1)
        #expect(h.state(watch)?.isConnected == true)
    }

    @Test("BlueZ may signal ServicesResolved=false before Connected=false: a proven link going that way is a plain link loss")
    func provenLinkLosingServicesThenDropping() {
        var h = Harness.connected()
        for _ in 0..<5 {
            h.advance(.seconds(60))
            h.send(.servicesLost(watch))
            let out = h.send(.linkDown(watch, linkLoss))
            #expect(out.reports(.linkLost).count == 1)
            #expect(h.stateName(watch) == "waitingForDevice")
            #expect(h.machine.devices[watch]?.setupFailures == 0)
            h.send(.linkUp(watch))
            h.send(.servicesResolved(watch))
            h.send(.linkProven(watch))
            h.send(.setUpLinkFinished(watch, failure: nil))
        }
        #expect(h.state(watch)?.isConnected == true)
    }

    @Test("wearable forgot its bond, seen on the 6.12 bed: each unproven link loses its services, then drops — one failed set-up each, needsRepair at the third")
    func forgottenBondServicesLostThenDrop() {
        var h = Harness.connected()
        h.send(.linkDown(watch, linkLoss))       // forget-bond: the proven link drops
        for round in 1...3 {
            h.send(.linkUp(watch))
            h.send(.servicesResolved(watch))     // from the cache
            h.send(.setUpLinkFinished(watch, failure: nil))
            h.advance(.seconds(2))
            let lost = h.send(.servicesLost(watch))
            if round < 3 {
                #expect(h.stateName(watch) == "discovering")
                #expect(h.machine.devices[watch]?.setupFailures == round)
                h.send(.linkDown(watch, linkLoss))
                #expect(h.machine.devices[watch]?.setupFailures == round, "the drop is the same failure")
                #expect(h.stateName(watch) == "waitingForDevice")
            } else {
                #expect(h.state(watch) == .needsRepair(reason: .suspectedBondLoss))
                #expect(lost.disconnects == 1)
            }
        }
    }

    @Test("services re-read on a live link (Service Changed) over which the wearable answers each time never trip the lost-bond heuristic")
    func servicesRereadOnProvenLinks() {
        var h = Harness.connected()
        for _ in 0..<20 {
            h.advance(.seconds(1))
            h.send(.servicesLost(watch))
            h.send(.servicesResolved(watch))
            h.send(.linkProven(watch))
            h.send(.setUpLinkFinished(watch, failure: nil))
            #expect(h.state(watch)?.isConnected == true)
        }
    }

    @Test("a quiet link (nothing ever proves it) whose services are re-read now and then is not a lost bond")
    func quietLinkServicesRereadRarely() {
        var h = Harness.connected()
        for _ in 0..<10 {
            h.advance(MachineConfig().proofWindow + .seconds(1))
            h.send(.servicesLost(watch))
            h.send(.servicesResolved(watch))
            h.send(.setUpLinkFinished(watch, failure: nil))
            #expect(h.state(watch)?.isConnected == true)
        }
    }

    @Test("a link that becomes usable clears the count of failed setups")
    func setupFailuresReset() {
        var h = Harness.connected()
        for _ in 0..<5 {
            h.send(.linkDown(watch, linkLoss))
            h.send(.linkUp(watch))
            h.send(.linkDown(watch, linkLoss))
            h.send(.linkUp(watch))
            h.send(.servicesResolved(watch))
            h.send(.linkProven(watch))
            h.send(.setUpLinkFinished(watch, failure: nil))
            #expect(h.state(watch)?.isConnected == true)
        }
    }


    @Test("a flapping link over which the wearable answers each time (the bond works) never trips the lost-bond heuristic")
    func flappingProvenLinkIsNotABondLoss() {
        var h = Harness.connected()
        var connects = 0
        for _ in 0..<50 {
            connects += h.send(.linkDown(watch, linkLoss)).connects()
            h.send(.linkUp(watch))
            h.send(.servicesResolved(watch))
            h.send(.linkProven(watch))         // a notification or the battery read came through…
            connects += h.send(.linkDown(watch, linkLoss)).connects() // …dropped before setUpLink replied
            h.send(.linkUp(watch))
            h.send(.servicesResolved(watch))
            h.send(.linkProven(watch))
            #expect(h.stateName(watch) == "discovering")
        }
        #expect(connects == 0)
        h.send(.setUpLinkFinished(watch, failure: nil))
        #expect(h.state(watch)?.isConnected == true)
    }

    @Test("wearable forgot its bond, seen on kernel 6.12: links resolve from BlueZ's cache and even set up, then drop seconds later with nothing from the wearable → needsRepair")
    func forgottenBondResolvingFromCache() {
        var h = Harness.connected()
        h.send(.linkDown(watch, linkLoss))     // forget-bond drops the link: any link loss
        for round in 1...3 {
            h.send(.linkUp(watch))              // kernel auto-connect
            h.send(.servicesResolved(watch))    // from the cache
            let setUp = h.send(.setUpLinkFinished(watch, failure: nil)) // StartNotify accepted; ReadValue "Not connected"
            #expect(setUp.reports(.reconnected).count == 1)
            h.advance(.seconds(4))
            let out = h.send(.linkDown(watch, linkLoss)) // encryption with the stale key failed
            if round < 3 {
                #expect(h.stateName(watch) == "waitingForDevice")
                #expect(out.reports(.linkLost).count == 1)
            } else {
                #expect(h.state(watch) == .needsRepair(reason: .suspectedBondLoss))
            }
        }
    }

    @Test("a long-lived link that never carried data (a quiet ring) dropping is a plain link loss, however often")
    func quietLongLinksAreNotCounted() {
        var h = Harness.connected()
        for _ in 0..<10 {
            h.send(.linkDown(watch, linkLoss))
            h.send(.linkUp(watch))
            h.send(.servicesResolved(watch))
            h.send(.setUpLinkFinished(watch, failure: nil))
            h.advance(MachineConfig().proofWindow + .seconds(1))
        }
        h.send(.linkDown(watch, linkLoss))
        #expect(h.stateName(watch) == "waitingForDevice")
    }

    @Test("a resolved link that is not set up in time is dropped and retried, but not counted as a lost bond")
    func slowSetUpOfResolvedLinkIsRetried() {
        var h = Harness.connected()
        h.send(.linkDown(watch, linkLoss))
        h.send(.linkUp(watch))
        for _ in 0..<5 {
            h.send(.servicesResolved(watch))
            let out = h.fireNext() // discovery countdown: StartNotify never answered
            #expect(out.disconnects == 1)
            #expect(h.stateName(watch) == "connecting")
            // our own disconnect, seen while waiting for it: Connect() at once
            #expect(h.send(.linkDown(watch, linkLoss)).connects() == 1)
            h.send(.linkUp(watch))
        }
        #expect(h.stateName(watch) == "discovering", "after 5 timeouts of a resolved link: still trying, not needsRepair")
    }
    @Test("our Connect answered by the old link before our own disconnect took: that drop is ours; connect again, count nothing")
    func connectRacingOwnDisconnect() {
        var h = Harness.connected()
        for _ in 0..<3 {
            h.send(.linkDown(watch, linkLoss))
            h.send(.linkUp(watch))
            #expect(h.fireNext().disconnects == 1)     // discovery countdown (failed setup 1): drop it ourselves
            #expect(h.fireNext().connects(watch) == 1) // LinkDownWait over, but BlueZ has not dropped it yet…
            h.connectSucceeded(watch)                  // …so 5.66 answers Connect at once
            #expect(h.stateName(watch) == "discovering")
            let out = h.send(.linkDown(watch, linkLoss)) // now our disconnect takes effect
            #expect(out.reports(.linkLost).isEmpty, "our own disconnect is no link loss")
            #expect(out.connects(watch) == 1, "connect again at once, not wait passively")
            #expect(h.stateName(watch) == "connecting")
            h.connectSucceeded(watch)
            #expect(h.fireNext().disconnects == 1, "discovery countdown again (failed setup 2): not yet needsRepair")
            #expect(h.stateName(watch) == "connecting")
            h.fireNext()
            h.connectSucceeded(watch)
            h.send(.servicesResolved(watch))
            h.send(.linkProven(watch))
            h.send(.setUpLinkFinished(watch, failure: nil))
            #expect(h.state(watch)?.isConnected == true)
        }
        // A drop we did not ask for is a link loss again.
        let out = h.send(.linkDown(watch, linkLoss))
        #expect(out.reports(.linkLost).count == 1)
    }

    @Test("Connect failing authentication (the wearable forgot us) means needsRepair")
    func connectAuthFailure() {
        var h = Harness.connected()
        h.send(.linkDown(watch, linkLoss))
        h.fireNext()
        _ = h.connectFailed(watch, BlueZFailure(errorName: "org.bluez.Error.AuthenticationFailed", message: ""))
        #expect(h.stateName(watch) == "needsRepair")
    }

    @Test("re-pairing a needsRepair wearable whose BlueZ object already lost the bond: nothing to remove, paired again once heard")
    func repair() {
        var h = Harness.connected()
        h.send(.bondLost(watch))
        var out = h.send(.userPair(PairRequest(address: watch)))
        #expect(!out.contains(.removeDevice(watch)), "a bond is removed only once the wearable is heard (TrustPairingTests)")
        out = h.send(.candidateFound(Candidate(address: watch, name: "Watch", rssi: -60)))
        #expect(!out.contains(.removeDevice(watch)), "its object holds no bond: nothing to remove")
        #expect(out.contains { if case .pair = $0 { true } else { false } })
        h.send(.pairSucceeded(watch, call: h.lastPairCall!))
        _ = h.connectSucceeded(watch)
        h.send(.servicesResolved(watch))
        out = h.send(.setUpLinkFinished(watch, failure: nil))
        #expect(h.state(watch)?.isConnected == true)
        #expect(out.pairingOutcome == .success(watch, name: "Watch"))
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
