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
            .report(Report(kind: .stateChanged, device: watch, name: "Watch", from: .state(.restoring), to: .state(.discovering))),
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
            .report(Report(kind: .stateChanged, device: watch, name: "Watch", from: .state(.discovering), to: .state(.connecting),
                           reason: .resolveTimeout)),
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

/// The resolve deadline learned per wearable (`MachineConfig.resolveFloor`): a stalled link of a
/// wearable whose links resolve in about a second is ended after 3 s, not 6.
@Suite("The learned resolve deadline")
struct LearnedResolveTests {
    let watch = Harness.watch

    /// The link drops (a walk-away) and comes back; its services resolve `resolveIn` after it is
    /// up, the wearable answers, and the set-up finishes.
    func away(_ h: inout Harness) {
        h.advance(.seconds(30))
        h.send(.linkDown(watch, linkLoss))
        h.advance(.seconds(20))
    }

    func comesBack(_ h: inout Harness, resolveIn: Duration) {
        h.send(.linkUp(watch))
        h.advance(resolveIn)
        h.send(.servicesResolved(watch))
        h.send(.linkProven(watch))
        h.send(.setUpLinkFinished(watch, failure: nil))
        precondition(h.state(watch)?.isConnected == true)
    }

    /// The deadline of the resolve countdown a fresh link of the watch gets now.
    func nextResolveDeadline(_ h: inout Harness) -> Duration {
        away(&h)
        let up = h.now
        h.send(.linkUp(watch))
        let c = h.state(watch)!.countdown!
        precondition(c.id.purpose == .resolve)
        return c.deadline.since(up)
    }

    func learned(_ times: [Duration], config: MachineConfig = MachineConfig()) -> Harness {
        var h = Harness.connected(config: config)
        for t in times {
            away(&h)
            comesBack(&h, resolveIn: t)
        }
        return h
    }

    @Test("fewer than three resolutions seen: the configured ResolveTimeout")
    func tooFewSamples() {
        var h = learned([.milliseconds(500), .milliseconds(600)])
        #expect(nextResolveDeadline(&h) == MachineConfig().resolveTimeout)
    }

    @Test("three seen: three times the slowest, at least ResolveFloor, at most ResolveTimeout")
    func learnedFromTheSlowest() {
        var quick = learned([.milliseconds(500), .milliseconds(400), .milliseconds(600)])
        #expect(nextResolveDeadline(&quick) == MachineConfig().resolveFloor, "3 × 0.6 s is under the floor")
        var slower = learned([.milliseconds(500), .milliseconds(1300), .milliseconds(600)])
        #expect(nextResolveDeadline(&slower) == .milliseconds(3900))
        var slow = learned([.milliseconds(500), .milliseconds(2500), .milliseconds(600)])
        #expect(nextResolveDeadline(&slow) == MachineConfig().resolveTimeout, "3 × 2.5 s is over ResolveTimeout")
    }

    @Test("only the last eight count: a slow resolution long ago no longer holds the deadline up")
    func window() {
        var h = learned([.milliseconds(1900)] + Array(repeating: .milliseconds(700), count: 8))
        #expect(nextResolveDeadline(&h) == .milliseconds(3000))
        var recent = learned(Array(repeating: .milliseconds(700), count: 7) + [.milliseconds(1900)])
        #expect(nextResolveDeadline(&recent) == .milliseconds(5700))
    }

    @Test("a link adopted unresolved teaches nothing: when it came up is not known")
    func adoptedTeachesNothing() {
        var h = Harness(state: PersistedState(devices: [
            PersistedDevice(identity: DeviceIdentity(address: watch, name: "Watch", serviceUUIDs: [ServiceUUID.heartRate]),
                            wanted: .connected, pairedAt: 0, updatedAt: 0),
        ]))
        h.send(.adapterReady([watch: BlueZDeviceView(connected: true)]))
        h.advance(.seconds(2))
        h.send(.servicesResolved(watch))
        #expect(h.machine.devices[watch]?.learned.resolveTimes == [])
        h.send(.linkProven(watch))
        h.send(.setUpLinkFinished(watch, failure: nil))
        away(&h)
        comesBack(&h, resolveIn: .milliseconds(700))
        #expect(h.machine.devices[watch]?.learned.resolveTimes == [.milliseconds(700)], "a link seen coming up does")
    }

    @Test("ResolveFloor at ResolveTimeout turns the learning off")
    func off() {
        var c = MachineConfig()
        c.resolveFloor = c.resolveTimeout
        var h = learned([.milliseconds(500), .milliseconds(400), .milliseconds(600)], config: c)
        #expect(nextResolveDeadline(&h) == c.resolveTimeout)
    }

    @Test("a stalled link at the learned deadline: dropped, no lost-bond count, the next link gets the whole ResolveTimeout")
    func stalledAtLearned() {
        var h = learned([.milliseconds(500), .milliseconds(400), .milliseconds(600)])
        let floor = nextResolveDeadline(&h)
        #expect(floor == .seconds(3))
        let up = h.now
        let out = h.fireNext()
        #expect(h.now == up + floor)
        #expect(out.disconnects == 1)
        #expect(out.reports(.stateChanged).first?.reasonToken == "resolve-timeout")
        #expect(h.machine.devices[watch]?.setupFailures == 0, "a learned deadline is no evidence of a lost bond")
        // The dropped link goes down: Connect() at once; the new link gets the whole ResolveTimeout.
        #expect(h.send(.linkDown(watch, linkLoss)).connects(watch) == 1)
        h.connectSucceeded(watch)
        let second = h.state(watch)!.countdown!
        #expect(second.id.purpose == .resolve)
        #expect(second.deadline == h.now + MachineConfig().resolveTimeout)
        // It resolves (slowly: a firmware update made BlueZ discover everything): learned again, higher.
        h.advance(.milliseconds(4500))
        h.send(.servicesResolved(watch))
        h.send(.linkProven(watch))
        h.send(.setUpLinkFinished(watch, failure: nil))
        #expect(h.state(watch)?.isConnected == true)
        #expect(nextResolveDeadline(&h) == MachineConfig().resolveTimeout, "3 × 4.5 s: the whole ResolveTimeout")
    }

    @Test("links that never resolve still end in needsRepair: only the whole-ResolveTimeout ones count")
    func neverResolvingStillRepairs() {
        var h = learned([.milliseconds(500), .milliseconds(400), .milliseconds(600)])
        _ = nextResolveDeadline(&h)
        var learnedCuts = 0, fullCuts = 0
        for _ in 0..<12 where h.stateName(watch) != "needsRepair" {
            let c = h.state(watch)!.countdown!
            if c.id.purpose == .resolve {
                let span = c.deadline.since(h.now)
                if span == .seconds(3) { learnedCuts += 1 } else if span == MachineConfig().resolveTimeout { fullCuts += 1 }
                h.fireNext()          // the resolve deadline: dropped
                if h.stateName(watch) == "needsRepair" { break }
                h.send(.linkDown(watch, linkLoss)) // seen down: Connect() at once
                h.connectSucceeded(watch)          // the next link comes up, and stalls too
            } else {
                h.fireNext()
            }
        }
        #expect(h.stateName(watch) == "needsRepair")
        #expect(fullCuts == MachineConfig().setupFailuresBeforeRepair)
        #expect(learnedCuts == fullCuts, "a learned cut, then a whole one, alternately")
    }
}
