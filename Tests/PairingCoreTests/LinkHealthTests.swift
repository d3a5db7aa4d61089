import Testing
import PairingCore

/// Link health (issue 18, "No stall"): a fresh link that does not resolve, a set-up link whose
/// subscriptions deliver nothing, a subscription BlueZ ends while the link stays, and a periodic
/// wearable that falls silent. Each limit is a countdown in the state it belongs to.
@Suite("Link health")
struct LinkHealthTests {
    let watch = Harness.watch
    static let hr = ServiceUUID.heartRateMeasurement

    static var config: MachineConfig {
        var c = MachineConfig()
        c.firstDataTimeout = .seconds(5)
        return c
    }

    func health(_ h: Harness) -> LinkHealth? {
        if case .connected(_, let health) = h.state(watch) { health } else { nil }
    }

    /// `n` notifications of Heart Rate Measurement, `every` apart (the first at once).
    mutating func notify(_ h: inout Harness, _ n: Int, every: Duration) {
        for k in 0..<n {
            if k > 0 { h.advance(every) }
            h.send(.dataReceived(watch, characteristic: Self.hr))
        }
    }

    /// Lets the silence countdown fire (moving on while data came) until the probe goes out.
    func silenceUntilProbe(_ h: inout Harness) -> [Action] {
        for _ in 0..<5 {
            let out = h.fireNext()
            if case .probing? = health(h) { return out }
        }
        Issue.record("no probe; health \(String(describing: health(h)))")
        return []
    }

    // MARK: The resolve deadline on fresh links

    @Test("a fresh link whose ATT answers stall (never resolves) is ended at ResolveTimeout and made again")
    func freshLinkStalls() {
        var h = Harness.connected(config: Self.config)
        h.send(.linkDown(watch, linkLoss))
        #expect(h.stateName(watch) == "waitingForDevice")
        h.advance(.seconds(3))
        h.send(.linkUp(watch))       // the kernel's auto-connect: the link is up, discovery stalls
        let resolve = h.state(watch)!.countdown!
        #expect(resolve.id.purpose == .resolve)
        #expect(resolve.deadline == h.now + MachineConfig().resolveTimeout)
        let out = h.fireNext()
        #expect(out.disconnects == 1)
        #expect(out.reports(.stateChanged).last?.reasonToken == "resolve-timeout")
        #expect(h.stateName(watch) == "connecting")
        // The dropped link is seen down: Connect() at once (not after a backoff); the next link works.
        #expect(h.send(.linkDown(watch, linkLoss)).connects(watch) == 1)
        h.connectSucceeded(watch)
        h.send(.servicesResolved(watch))
        h.send(.setUpLinkFinished(watch, failure: nil))
        h.send(.dataReceived(watch, characteristic: Self.hr))
        #expect(h.state(watch)?.isConnected == true)
    }

    // MARK: First data

    @Test("set up: the first notification is awaited by FirstDataTimeout; it comes: nothing more timed")
    func firstDataComes() {
        var h = Harness.connected(config: Self.config)
        guard case .awaitingFirstData(let c)? = health(h) else {
            Issue.record("expected awaitingFirstData, got \(String(describing: health(h)))"); return
        }
        #expect(c.id.purpose == .firstData && c.deadline == .at(5))
        h.advance(.milliseconds(300))
        let out = h.send(.dataReceived(watch, characteristic: Self.hr))
        #expect(out == [.cancel(c.id)])
        #expect(health(h) == .quiet, "one notification tells no period yet")
        #expect(h.armed.isEmpty)
        #expect(h.machine.device(watch)?.lastDataAt == .at(0.3))
    }

    @Test("no notification by FirstDataTimeout: the link is ended and made again, the journal says no-data")
    func noFirstData() {
        var h = Harness.connected(config: Self.config)
        let out = h.fireNext()
        #expect(h.now == .at(5))
        #expect(out.disconnects == 1)
        let r = out.reports(.stateChanged)
        #expect(r.count == 1 && r[0].from == .state(.connected) && r[0].to == .state(.connecting) && r[0].reasonToken == "no-data")
        // Our own drop; the next link delivers.
        #expect(h.send(.linkDown(watch, linkLoss)).connects(watch) == 1, "down: connect again at once")
        #expect(h.stateName(watch) == "connecting")
        h.connectSucceeded(watch)
        h.send(.servicesResolved(watch))
        h.send(.setUpLinkFinished(watch, failure: nil))
        if case .awaitingFirstData? = health(h) {} else { Issue.record("the new link awaits its first data too") }
        h.send(.dataReceived(watch, characteristic: Self.hr))
        #expect(health(h) == .quiet)
        #expect(h.machine.device(watch)?.healthRemakes == 0)
    }

    @Test("data during discovery counts: the link starts connected without the first-data countdown")
    func dataBeforeSetUp() {
        var h = Harness.connected(config: Self.config)
        h.send(.dataReceived(watch, characteristic: Self.hr))
        h.send(.linkDown(watch, linkLoss))
        h.send(.linkUp(watch))
        h.send(.servicesResolved(watch))
        h.send(.dataReceived(watch, characteristic: Self.hr))   // before setUpLink answered
        h.send(.setUpLinkFinished(watch, failure: nil))
        #expect(health(h) == .quiet)
        #expect(h.armed.isEmpty)
    }

    @Test("a wearable that never notifies is made again at most HealthRemakesInRow times, then left connected")
    func quietWearableNoLoop() {
        var h = Harness.connected(config: Self.config)
        var remakes = 0
        for _ in 0..<6 {
            guard case .awaitingFirstData? = health(h) else { break }
            h.fireNext()
            remakes += 1
            h.send(.linkDown(watch, linkLoss))
            h.fireNext()
            h.connectSucceeded(watch)
            h.send(.servicesResolved(watch))
            h.send(.setUpLinkFinished(watch, failure: nil))
        }
        #expect(remakes == MachineConfig().healthRemakesInRow)
        #expect(health(h) == .quiet)
        #expect(h.armed.isEmpty, "connected, nothing timed")
    }

    @Test("without FirstDataTimeout (nothing subscribed) no first data is awaited")
    func off() {
        let h = Harness.connected()
        #expect(health(h) == .quiet)
        #expect(h.armed.isEmpty)
    }

    // MARK: Subscriptions BlueZ ends

    @Test("BlueZ ends a subscription while the link stays: subscribed again at once, bounded per link")
    func resubscribe() {
        var h = Harness.connected(config: Self.config)
        h.send(.dataReceived(watch, characteristic: Self.hr))
        for k in 1...MachineConfig().resubscribesPerLink {
            let out = h.send(.subscriptionEnded(watch, characteristic: Self.hr))
            #expect(out == [.resubscribe(watch, characteristic: Self.hr)], "try \(k)")
            #expect(h.state(watch)?.isConnected == true)
        }
        // BlueZ keeps ending (or refusing) it without data between: the link is made again.
        let out = h.send(.subscriptionEnded(watch, characteristic: Self.hr))
        #expect(out.disconnects == 1)
        #expect(out.reports(.stateChanged).last?.reasonToken == "subscription-lost")
        #expect(h.stateName(watch) == "connecting")
    }

    @Test("data between ends resets the bound: a subscription that ends now and then is always made again")
    func resubscribeResetByData() {
        var h = Harness.connected(config: Self.config)
        for _ in 0..<10 {
            h.send(.dataReceived(watch, characteristic: Self.hr))
            #expect(h.send(.subscriptionEnded(watch, characteristic: Self.hr)) == [.resubscribe(watch, characteristic: Self.hr)])
        }
        #expect(h.state(watch)?.isConnected == true)
    }

    @Test("a subscription ending on a link that is not up or not resolved is not acted on")
    func resubscribeOnlyOnLiveLink() {
        var h = Harness.connected(config: Self.config)
        h.send(.linkDown(watch, linkLoss))
        #expect(h.send(.subscriptionEnded(watch, characteristic: Self.hr)) == [])
        h.send(.linkUp(watch))
        #expect(h.send(.subscriptionEnded(watch, characteristic: Self.hr)) == [])
    }

    // MARK: Silence

    @Test("a periodic wearable is watched: silent for SilencePeriods of its period → probed")
    mutating func silenceProbe() {
        var h = Harness.connected(config: Self.config)
        notify(&h, 10, every: .seconds(1))
        guard case .watchingSilence(let ch, let c)? = health(h) else {
            Issue.record("expected watchingSilence, got \(String(describing: health(h)))"); return
        }
        #expect(ch == Self.hr && c.id.purpose == .silence)
        #expect(h.machine.healthWatch(watch) == HealthWatch(purpose: .silence, characteristic: Self.hr, deadline: h.now + .seconds(5)),
                "5 periods of 1 s after the last notification")
        #expect(c.deadline <= h.now + .seconds(5))
        // Data keeps coming: no action per notification; the countdown, when it fires, moves on.
        let quiet = h.send(.dataReceived(watch, characteristic: Self.hr))
        #expect(quiet == [])
        h.advance(.seconds(1))
        h.send(.dataReceived(watch, characteristic: Self.hr))
        let last = h.now
        #expect(h.machine.healthWatch(watch)?.deadline == last + .seconds(5))
        // Now it falls silent.
        var out = silenceUntilProbe(&h)
        #expect(h.now == last + .seconds(5))
        #expect(h.log.filter { if case .probe = $0 { true } else { false } }.count == 1, "one probe, none while data came")
        guard case .probing(let call, Self.hr, let p)? = health(h) else { Issue.record("expected probing, got \(String(describing: health(h)))"); return }
        #expect(out.contains(.probe(watch, call: call, characteristic: Self.hr, timeout: MachineConfig().probeTimeout)))
        #expect(p.id.purpose == .probe && p.deadline == h.now + MachineConfig().probeTimeout)
        // It answers: the link stays, its subscription is made again, and nothing is timed until data comes.
        out = h.send(.probeFinished(watch, call: call, .answered))
        #expect(out.contains(.resubscribe(watch, characteristic: Self.hr)))
        #expect(health(h) == .quiet && h.armed.isEmpty)
        h.advance(.seconds(1))
        h.send(.dataReceived(watch, characteristic: Self.hr))
        #expect(health(h) == .quiet, "the period is learned anew: the silence was no interval")
        h.advance(.seconds(1))
        notify(&h, 8, every: .seconds(1))
        if case .watchingSilence? = health(h) {} else { Issue.record("watched again once the period is learned again") }
    }

    @Test("a probe that fails or does not answer in time ends the link and makes it again")
    mutating func probeFails() {
        for timeout in [false, true] {
            var h = Harness.connected(config: Self.config)
            notify(&h, 10, every: .seconds(1))
            _ = silenceUntilProbe(&h)
            guard case .probing(let call, _, _)? = health(h) else { Issue.record("expected probing"); return }
            let out = timeout ? h.fireNext() : h.send(.probeFinished(watch, call: call, .failed(.noReply)))
            #expect(out.disconnects == 1)
            #expect(out.reports(.stateChanged).last?.reasonToken == (timeout ? "probe-timeout" : "probe-failed:\(BlueZFailure.noReply.token)"))
            #expect(h.stateName(watch) == "connecting")
            // A late answer to that probe is stale.
            #expect(h.send(.probeFinished(watch, call: call, .answered)) == [])
        }
    }

    @Test("data during a probe ends it; the probe's late answer is stale")
    mutating func dataDuringProbe() {
        var h = Harness.connected(config: Self.config)
        notify(&h, 10, every: .seconds(1))
        _ = silenceUntilProbe(&h)
        guard case .probing(let call, _, let p)? = health(h) else { Issue.record("expected probing"); return }
        let out = h.send(.dataReceived(watch, characteristic: Self.hr))
        #expect(out.first == .cancel(p.id))
        if case .watchingSilence? = health(h) {} else { Issue.record("watching again") }
        #expect(h.send(.probeFinished(watch, call: call, .failed(.noReply))) == [])
        #expect(h.state(watch)?.isConnected == true)
    }

    @Test("a characteristic that notifies only on change (irregular intervals) is never probed")
    func onChangeNeverProbed() {
        var h = Harness.connected(config: Self.config)
        var rng = SplitMix64(seed: 18)
        for _ in 0..<60 {
            h.advance(.milliseconds(Int64(200 + rng.next() % 30_000)))
            h.send(.dataReceived(watch, characteristic: Self.hr))
            #expect(health(h) == .quiet)
        }
        h.advance(.seconds(3600))
        #expect(h.armed.isEmpty)
        #expect(h.log.contains { if case .probe = $0 { true } else { false } } == false)
    }

    @Test("the silence allowance is at least SilenceMinimum for a fast stream")
    mutating func fastStreamFloor() {
        var h = Harness.connected(config: Self.config)
        notify(&h, 20, every: .milliseconds(20))
        guard case .watchingSilence? = health(h) else { Issue.record("expected watchingSilence"); return }
        #expect(h.machine.healthWatch(watch)?.deadline == h.now + MachineConfig().silenceMinimum)
    }

    // MARK: The rhythm

    @Test("rhythm: a steady period is learned (median), irregular intervals give none, a reconnect is no interval")
    func rhythm() {
        var r = NotificationRhythm()
        let link = Moment.at(0)
        for k in 0..<NotificationRhythm.minimumSamples {
            r.record(.at(Double(k)), link: link)
        }
        #expect(r.period == nil, "\(NotificationRhythm.minimumSamples) notifications are one interval short")
        r.record(.at(8.1), link: link)
        #expect(r.period == .seconds(1))
        #expect(r.silenceAllowance(periods: 5, minimum: .seconds(3)) == .seconds(5))
        // The link drops; 100 s later the next link's first notification is no interval.
        let next = Moment.at(108)
        r.record(.at(108), link: next)
        #expect(r.intervals.count == NotificationRhythm.minimumSamples)
        #expect(r.period == .seconds(1))

        // A periodic source jittering on a loaded host (1-2 s around a 1 s median) is periodic.
        var jittery = NotificationRhythm()
        var t = 0.0
        for k in 0..<12 {
            jittery.record(.at(t), link: link)
            t += [1.0, 1.1, 2.0, 1.0, 0.9, 1.9][k % 6]
        }
        #expect(jittery.period != nil)

        var irregular = NotificationRhythm()
        for (k, t) in [0.0, 0.5, 4, 4.2, 12, 30, 31, 45, 46.1, 80, 81].enumerated() {
            irregular.record(.at(t), link: link)
            _ = k
        }
        #expect(irregular.period == nil)
        #expect(irregular.silenceAllowance(periods: 5, minimum: .seconds(3)) == nil)
    }
}

extension LinkHealthTests {
    @Test("after a return (data before the set-up finished) the silence watch still runs and probes")
    mutating func silenceAfterReturn() {
        var h = Harness.connected(config: Self.config)
        notify(&h, 10, every: .seconds(1))
        h.send(.linkDown(watch, linkLoss))
        h.advance(.seconds(3))
        h.send(.linkUp(watch))
        h.advance(.milliseconds(100))
        h.send(.dataReceived(watch, characteristic: Self.hr))
        h.send(.servicesResolved(watch))
        h.advance(.milliseconds(500))
        h.send(.dataReceived(watch, characteristic: Self.hr))
        h.send(.setUpLinkFinished(watch, failure: nil))
        notify(&h, 5, every: .seconds(1))
        let out = silenceUntilProbe(&h)
        #expect(out.contains { if case .probe = $0 { true } else { false } })
    }
}

extension LinkHealthTests {
    @Test("drop after drop: each silence a probe answered is forgotten, so the next one is watched too")
    mutating func repeatedDrops() {
        var h = Harness.connected(config: Self.config)
        notify(&h, 10, every: .seconds(1))
        for round in 1...4 {
            _ = silenceUntilProbe(&h)
            guard case .probing(let call, _, _)? = health(h) else { Issue.record("round \(round): no probe"); return }
            h.send(.probeFinished(watch, call: call, .answered))
            h.advance(.seconds(1))
            notify(&h, 10, every: .seconds(1))   // resubscribed: the flow is back, the period learned anew
            if case .watchingSilence? = health(h) {} else { Issue.record("round \(round): not watched again"); return }
        }
        #expect(h.log.filter { if case .probe = $0 { true } else { false } }.count == 4)
    }

    @Test("a configured characteristic missing on the link (BlueZ lost it, or a firmware update dropped it): no first-data deadline, no remake")
    func missingCharacteristicNoFirstDataRemake() {
        var h = Harness.connected(config: Self.config)
        h.send(.linkDown(watch, linkLoss))
        h.send(.linkUp(watch))
        h.send(.servicesResolved(watch))
        h.send(.characteristicsMissing(watch, [Self.hr]))   // sent before the set-up's answer
        h.send(.setUpLinkFinished(watch, failure: nil))
        #expect(h.state(watch)?.isConnected == true)
        guard case .awaitingFirstData? = health(h) else {
            h.advance(.seconds(60))
            #expect(h.state(watch)?.isConnected == true, "kept connected")
            return
        }
        Issue.record("awaiting first data on a link that lacks the characteristic")
    }
}
