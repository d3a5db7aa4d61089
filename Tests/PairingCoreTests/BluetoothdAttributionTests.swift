import Testing
import PairingCore

/// Issue 49: bluetoothd leaving the bus within a second of one wearable's link coming up, twice in
/// a row, makes that wearable the cause, whatever systemd said (or nobody said) of the death. The
/// case: a factory-reset wearable on Debian 12's kernel 6.1 (the old key fails, the kernel oopses,
/// bluetoothd dies 0.14 s after the link came up, comes back, the auto-connect links it again).
/// Whole action lists at the steps that decide.
@Suite("bluetoothd dies on one wearable's link: attribution without anyone's word")
struct BluetoothdAttributionTests {
    let watch = Harness.watch
    let ring = Harness.ring
    /// The watch offers a service of its own, so its leaving the auto-connect profile shows.
    static let watchService = "0000feed-0000-1000-8000-00805f9b34fb"
    static let segv = BluetoothdUnitState(activeState: "failed", result: "core-dump", execMainCode: 3, execMainStatus: 11, execMainStart: 100)
    static let cleanExit = BluetoothdUnitState(activeState: "inactive", result: "success", execMainCode: 1, execMainStatus: 0)

    /// The watch away (waiting on the auto-connect's head start), the ring connected.
    func setUp() -> Harness {
        var h = Harness(state: PersistedState(devices: [
            PersistedDevice(identity: DeviceIdentity(address: watch, name: "Watch", serviceUUIDs: [Self.watchService]),
                            wanted: .connected, pairedAt: 0, updatedAt: 0),
            PersistedDevice(identity: DeviceIdentity(address: ring, name: "Ring", serviceUUIDs: [ServiceUUID.heartRate]),
                            wanted: .connected, pairedAt: 0, updatedAt: 0),
        ]))
        h.send(.adapterReady([watch: BlueZDeviceView(), ring: BlueZDeviceView(connected: true, servicesResolved: true)]))
        h.send(.linkProven(ring))
        h.send(.setUpLinkFinished(ring, failure: nil))
        precondition(h.state(ring)?.isConnected == true && h.stateName(watch) == "waitingForDevice")
        return h
    }

    /// The journal's reason for the watch, disarmed `ms` after its link came up.
    /// The report's reason: the bare token (the journal's words come from `RepairReason.explanation`).
    func diedOnLinkReason(ms: Int) -> ReportReason { .repair(.bluetoothdDiedOnLink) }

    /// One turn of the loop: the kernel's auto-connect brings `who`'s link up, bluetoothd leaves
    /// the bus `after` later (then the adapter goes). Returns the actions of `bluetoothdLeft`.
    func linkUpThenDeath(_ h: inout Harness, _ who: DeviceAddress, after: Duration = .milliseconds(140)) -> [Action] {
        h.advance(.seconds(6))
        h.send(.linkUp(who))
        h.advance(after)
        let left = h.send(.bluetoothdLeft)
        h.send(.adapterLost)
        return left
    }

    /// bluetoothd is back (a supervisor, D-Bus activation, systemd): the links went with the old one.
    func back(_ h: inout Harness) -> [Action] {
        h.advance(.milliseconds(500))
        h.send(.bluetoothdBack)
        return h.send(.adapterReady([watch: BlueZDeviceView(), ring: BlueZDeviceView()]))
    }

    /// The countdown `a`'s state carries; a recorded issue (and a stand-in) when it carries none,
    /// so a broken machine fails the test instead of crashing the run.
    func countdown(_ h: Harness, _ a: DeviceAddress, sourceLocation: SourceLocation = #_sourceLocation) -> Countdown {
        guard let c = h.state(a)?.countdown else {
            Issue.record("\(a) carries no countdown in \(String(describing: h.state(a)))", sourceLocation: sourceLocation)
            return Countdown(id: .init(owner: .device(a), purpose: .resolve, generation: 0), deadline: h.now)
        }
        return c
    }

    func ringBackReport() -> Action {
        .report(Report(kind: .stateChanged, device: ring, name: "Ring", from: .state(.adapterUnavailable), to: .state(.waitingForDevice)))
    }

    @Test("(a) two deaths 0.14 s after the watch's link-up, no systemd: attributed, needsRepair bluetoothd-died-on-link, disarmed, no Connect")
    func attributedWithoutSystemd() {
        var h = setUp()
        #expect(linkUpThenDeath(&h, watch) == [.queryBluetoothdUnit], "one death: nothing decided yet")
        #expect(h.send(.bluetoothdUnit(nil)) == [.bluetoothdReport(.waiting(unit: nil))])
        #expect(h.machine.device(watch)?.deathsOnLink.count == 1)
        _ = back(&h)
        #expect(h.stateName(watch) == "waitingForDevice", "one death: still pursued")

        h.advance(.seconds(6))
        h.send(.linkUp(watch))
        let resolve = countdown(h, watch)
        h.advance(.milliseconds(140))
        let left = h.send(.bluetoothdLeft)
        #expect(left == [
            .cancel(resolve.id),
            .setTrusted(watch, false),
            .disconnect(watch),
            .report(Report(kind: .needsRepair, device: watch, name: "Watch", from: .state(.discovering), to: .state(.needsRepair),
                           reason: diedOnLinkReason(ms: 140))),
            .queryBluetoothdUnit,
            .updateAutoConnect([ServiceUUID.heartRate]),
        ])
        #expect(h.state(watch) == .needsRepair(reason: .bluetoothdDiedOnLink))
        #expect(h.machine.statusLine(now: h.now).contains("Watch (\(watch)) needs re-pairing: probably reset, bluetoothd dies on its link; run pairctl pair \(watch)"))
        #expect(RepairReason.bluetoothdDiedOnLink.explanation.contains("probably reset"))
        h.send(.adapterLost)
        #expect(h.send(.bluetoothdUnit(nil)) == [.bluetoothdReport(.waiting(unit: nil))])

        // The next bluetoothd has it Trusted again: disarmed again; its services stay out of the profile.
        let ready = back(&h)
        let ringHeadStart = countdown(h, ring)
        #expect(ready == [
            .setTrusted(watch, false),
            .disconnect(watch),
            .arm(ringHeadStart),
            ringBackReport(),
            .updateAutoConnect([ServiceUUID.heartRate]),
        ])
        // The kernel's pending connection may still win the race: dropped, nothing else.
        h.advance(.seconds(1))
        #expect(h.send(.linkUp(watch)) == [.disconnect(watch)])
        #expect(h.send(.linkDown(watch, linkLoss)) == [])
        var later: [Action] = []
        for _ in 0..<20 { later += h.fireNext() }
        #expect(later.connects(watch) == 0, "no Connect(), no fallback, no probe to it")
        #expect(h.log.connects(watch) == 0)
        #expect(h.state(watch) == .needsRepair(reason: .bluetoothdDiedOnLink))
    }

    @Test("(b) the same with systemd saying crashed: one outcome (attributed at the departure; the crash entry lists it disarmed, no second report)")
    func attributedWithSystemdCrash() {
        var h = setUp()
        _ = linkUpThenDeath(&h, watch)
        var out = h.send(.bluetoothdUnit(Self.segv))
        guard case .starting(_, let poll?) = h.machine.bluetoothd.phase else {
            Issue.record("expected starting, got \(h.machine.bluetoothd.phase)")
            return
        }
        let first = BluetoothdCrash(at: h.now, unit: Self.segv, action: "started again", attempt: 1, awaited: [watch, ring])
        #expect(out == [.persist, .bluetoothdReport(.crashed(first)), .startBluetoothd, .arm(poll)],
                "the crash-loop rule remembers the set-up crash")
        _ = back(&h)

        h.advance(.seconds(6))
        h.send(.linkUp(watch))
        let resolve = countdown(h, watch)
        h.advance(.milliseconds(140))
        let gone = h.now
        let left = h.send(.bluetoothdLeft)
        #expect(left == [
            .persist, // the crash-loop rule's memory, spent
            .cancel(resolve.id),
            .setTrusted(watch, false),
            .disconnect(watch),
            .report(Report(kind: .needsRepair, device: watch, name: "Watch", from: .state(.discovering), to: .state(.needsRepair),
                           reason: diedOnLinkReason(ms: 140))),
            .queryBluetoothdUnit,
            .updateAutoConnect([ServiceUUID.heartRate]),
        ])
        h.send(.adapterLost)
        out = h.send(.bluetoothdUnit(Self.segv))
        guard case .starting(_, let poll2?) = h.machine.bluetoothd.phase else {
            Issue.record("expected starting, got \(h.machine.bluetoothd.phase)")
            return
        }
        let second = BluetoothdCrash(at: gone, unit: Self.segv, action: "started again", attempt: 1, awaited: [], disarmed: [watch])
        #expect(out == [.bluetoothdReport(.crashed(second)), .startBluetoothd, .arm(poll2)],
                "no second needsRepair, no other reason: the crash entry names it disarmed")
        #expect(h.state(watch) == .needsRepair(reason: .bluetoothdDiedOnLink))
        #expect(h.machine.persistedState().devices.allSatisfy { $0.bluetoothdCrashedOnLink == nil })
        #expect(h.machine.bluetoothd.probation.isEmpty && h.machine.bluetoothd.onTrial == nil)
        let ready = back(&h)
        #expect(ready == [.setTrusted(watch, false), .disconnect(watch), .arm(countdown(h, ring)), ringBackReport(),
                          .updateAutoConnect([ServiceUUID.heartRate])])
    }

    @Test("(c) one death on its link-up: no attribution; pursued after the return (head start, then paird's Connect)")
    func oneDeathOnly() {
        var h = setUp()
        #expect(linkUpThenDeath(&h, watch) == [.queryBluetoothdUnit])
        h.send(.bluetoothdUnit(nil))
        let ready = back(&h)
        guard case .waitingForDevice(.fallbackDue(let watchHeadStart)) = h.state(watch),
              case .waitingForDevice(.fallbackDue(let ringHeadStart)) = h.state(ring) else {
            Issue.record("expected both waiting, got \(String(describing: h.state(watch))), \(String(describing: h.state(ring)))")
            return
        }
        #expect(ready == [
            .arm(watchHeadStart),
            .report(Report(kind: .stateChanged, device: watch, name: "Watch", from: .state(.adapterUnavailable), to: .state(.waitingForDevice))),
            .arm(ringHeadStart),
            ringBackReport(),
            .updateAutoConnect([Self.watchService, ServiceUUID.heartRate].sorted()),
        ])
        #expect(h.fireNext().connects(watch) + h.fireNext().connects(watch) == 1, "its Connect after the head start")
        // Its link sets up this time: the count starts over, so a later death is a first one again.
        h.advance(.seconds(1))
        _ = h.linkComesUp(watch)
        #expect(h.state(watch)?.isConnected == true)
        #expect(h.machine.device(watch)?.deathsOnLink == DeathsOnLink())
        #expect(linkUpThenDeath(&h, watch) == [.queryBluetoothdUnit])
        #expect(h.stateName(watch) == "adapterUnavailable")
    }

    @Test("(d) deaths past the window after its link came up (twice, no systemd; and a clean exit): no attribution", arguments: [false, true])
    func deathLongAfterLinkUp(cleanExit: Bool) {
        var h = setUp()
        for _ in 0..<2 {
            #expect(linkUpThenDeath(&h, watch, after: PairingMachine.attributionWindow + .seconds(1)) == [.queryBluetoothdUnit])
            h.send(.bluetoothdUnit(cleanExit ? Self.cleanExit : nil))
            _ = back(&h)
        }
        #expect(h.stateName(watch) == "waitingForDevice")
        #expect(h.machine.device(watch)?.deathsOnLink.count == 0)
    }

    @Test("(d') a clean exit (systemd says success) twice on its link-up: attributed all the same")
    func cleanExitAttributed() {
        var h = setUp()
        _ = linkUpThenDeath(&h, watch)
        #expect(h.send(.bluetoothdUnit(Self.cleanExit)) == [.bluetoothdReport(.stopped)])
        _ = back(&h)
        _ = linkUpThenDeath(&h, watch, after: .milliseconds(900))
        #expect(h.state(watch) == .needsRepair(reason: .bluetoothdDiedOnLink))
    }

    @Test("(e) two deaths on different wearables' link-ups: none attributed")
    func differentWearables() {
        var h = setUp()
        #expect(linkUpThenDeath(&h, watch) == [.queryBluetoothdUnit])
        h.send(.bluetoothdUnit(nil))
        _ = back(&h)
        #expect(linkUpThenDeath(&h, ring) == [.queryBluetoothdUnit])
        h.send(.bluetoothdUnit(nil))
        _ = back(&h)
        #expect(h.stateName(watch) == "waitingForDevice" && h.stateName(ring) == "waitingForDevice")
        #expect(h.machine.device(watch)?.deathsOnLink.count == 0)
        #expect(h.machine.device(ring)?.deathsOnLink.count == 1)
    }

    @Test("(f) the other wearable comes back after each return, and after the attribution; the culprit never")
    func otherWearableUnaffected() {
        var h = setUp()
        for turn in 1...3 {
            _ = linkUpThenDeath(&h, watch)
            h.send(.bluetoothdUnit(nil))
            let ready = back(&h)
            let ringHeadStart = countdown(h, ring)
            if turn == 1 {
                #expect(ready.contains(.updateAutoConnect([Self.watchService, ServiceUUID.heartRate].sorted())))
            } else {
                #expect(ready == [.setTrusted(watch, false), .disconnect(watch), .arm(ringHeadStart), ringBackReport(),
                                  .updateAutoConnect([ServiceUUID.heartRate])], "turn \(turn)")
            }
            // The ring's own return (the kernel's auto-connect, within the head start).
            h.advance(.seconds(1))
            let ringBack = h.linkComesUp(ring)
            #expect(ringBack.reports(.reconnected).map(\.device) == [ring], "turn \(turn)")
            #expect(ringBack.connects() == 0)
            #expect(h.state(ring)?.isConnected == true)
        }
        #expect(h.state(watch) == .needsRepair(reason: .bluetoothdDiedOnLink))
        #expect(h.log.connects(watch) == 0)
        // At most two deaths per reset: the third turn's link-up was the kernel's leftover, dropped;
        // a death after that is not on the watch (it is no longer pursued).
        #expect(h.machine.device(watch)?.deathsOnLink == DeathsOnLink())
    }

    @Test("(h) the second death comes before bluetoothd signalled the link (seen on 6.1): counted for the one wearable counted once, still not linked; attributed")
    func unseenSecondDeath() {
        var h = setUp()
        _ = linkUpThenDeath(&h, watch)
        h.send(.bluetoothdUnit(nil))
        _ = back(&h)
        guard case .waitingForDevice(.fallbackDue(let headStart)) = h.state(watch) else {
            Issue.record("expected the watch waiting on its head start, got \(String(describing: h.state(watch)))")
            return
        }
        // bluetoothd dies 2 s after its return, before it signalled any link.
        h.advance(.seconds(2))
        #expect(h.send(.bluetoothdLeft) == [
            .cancel(headStart.id),
            .setTrusted(watch, false),
            .disconnect(watch),
            .report(Report(kind: .needsRepair, device: watch, name: "Watch", from: .state(.waitingForDevice), to: .state(.needsRepair),
                           reason: .repair(.bluetoothdDiedOnLink))),
            .queryBluetoothdUnit,
            .updateAutoConnect([ServiceUUID.heartRate]),
        ])
        #expect(h.state(watch) == .needsRepair(reason: .bluetoothdDiedOnLink))
        #expect(h.stateName(ring) == "adapterUnavailable" || h.stateName(ring) == "waitingForDevice", "the ring only waits for bluetoothd")
    }

    @Test("(i) a death that points at no one (long after the return, no link-up near it) neither counts nor clears: the next one on the watch's link-up is the second")
    func unrelatedDeathKeepsTheCount() {
        var h = setUp()
        _ = linkUpThenDeath(&h, watch)
        h.send(.bluetoothdUnit(nil))
        _ = back(&h)
        h.advance(PairingMachine.unseenLinkWindow + .seconds(5))
        #expect(h.send(.bluetoothdLeft) == [.queryBluetoothdUnit])
        #expect(h.machine.device(watch)?.deathsOnLink.count == 1)
        h.send(.adapterLost)
        h.send(.bluetoothdUnit(nil))
        _ = back(&h)
        _ = linkUpThenDeath(&h, watch)
        #expect(h.state(watch) == .needsRepair(reason: .bluetoothdDiedOnLink))
    }

    @Test("(j) an unseen death soon after the return, but the watch was never counted, or linked since the return, or its count is too old: not counted")
    func unseenDeathNotCounted() {
        // never counted
        var h = setUp()
        h.send(.bluetoothdLeft); h.send(.adapterLost); h.send(.bluetoothdUnit(nil))
        _ = back(&h)
        h.advance(.seconds(2))
        #expect(h.send(.bluetoothdLeft) == [.queryBluetoothdUnit])
        #expect(h.machine.device(watch)?.deathsOnLink.count == 0 && h.machine.device(ring)?.deathsOnLink.count == 0)

        // linked since the return: its link-up was 3 s before the death, outside the window
        h = setUp()
        _ = linkUpThenDeath(&h, watch)
        h.send(.bluetoothdUnit(nil))
        _ = back(&h)
        h.advance(.seconds(1))
        h.send(.linkUp(watch))
        h.advance(PairingMachine.attributionWindow + .seconds(1))
        #expect(!h.send(.bluetoothdLeft).contains(.setTrusted(watch, false)))
        #expect(h.stateName(watch) != "needsRepair")

        // its count forgotten after attributionMemory: the next death on its link-up is a first one
        h = setUp()
        _ = linkUpThenDeath(&h, watch)
        h.send(.bluetoothdUnit(nil))
        _ = back(&h)
        h.advance(PairingMachine.attributionMemory)
        _ = linkUpThenDeath(&h, watch)
        #expect(h.stateName(watch) != "needsRepair")
        #expect(h.machine.device(watch)?.deathsOnLink.count == 1)
    }

    @Test("(k) the first death comes before bluetoothd signalled the link, just after the watch's link dropped (the reset), the ring connected: counted; the next one on its link-up disarms it")
    func unseenFirstDeath() {
        var h = setUp()
        h.advance(.seconds(5))
        _ = h.linkComesUp(watch)
        h.advance(.seconds(5))
        h.send(.linkDown(watch, linkLoss))          // the reset drops the link
        h.advance(.seconds(2))
        #expect(h.send(.bluetoothdLeft) == [.queryBluetoothdUnit], "one death: nothing decided yet")
        #expect(h.machine.device(watch)?.deathsOnLink.count == 1 && h.machine.device(watch)?.deathsOnLink.seen == 0)
        h.send(.adapterLost)
        h.send(.bluetoothdUnit(nil))
        _ = back(&h)
        _ = linkUpThenDeath(&h, watch)
        #expect(h.state(watch) == .needsRepair(reason: .bluetoothdDiedOnLink))
    }

    @Test("(l) two departures with no link-up seen (an administrator's restarts) after the watch's link dropped: counted, never disarming alone")
    func inferredDeathsAlone() {
        var h = setUp()
        h.advance(.seconds(5))
        _ = h.linkComesUp(watch)
        h.advance(.seconds(5))
        h.send(.linkDown(watch, linkLoss))
        for _ in 0..<2 {
            h.advance(.seconds(2))
            h.send(.bluetoothdLeft)
            h.send(.adapterLost)
            h.send(.bluetoothdUnit(nil))
            _ = back(&h)
        }
        #expect(h.machine.device(watch)?.deathsOnLink.count == 2 && h.machine.device(watch)?.deathsOnLink.seen == 0)
        #expect(h.stateName(watch) == "waitingForDevice")
    }

    @Test("(g) pairctl pair of the attributed address: the old bond removed first, then paired and connected; the attribution cleared")
    func pairClears() {
        var h = setUp()
        _ = linkUpThenDeath(&h, watch)
        h.send(.bluetoothdUnit(nil))
        _ = back(&h)
        _ = linkUpThenDeath(&h, watch)
        h.send(.bluetoothdUnit(nil))
        _ = back(&h)
        #expect(h.state(watch) == .needsRepair(reason: .bluetoothdDiedOnLink))

        h.advance(.seconds(10))
        h.send(.userPair(PairRequest(address: watch)))
        let scanRestart: Countdown.ID
        if case .scanning(let r)? = h.machine.pairing?.phase { scanRestart = r.countdown.id } else {
            Issue.record("expected scanning")
            return
        }
        // Heard advertising (the reset wearable), its BlueZ object still bonded with the old key: removed before anything else.
        let stale = h.send(.candidateFound(Candidate(address: watch, name: "Watch", rssi: -60, serviceUUIDs: [Self.watchService], bonded: true)))
        #expect(stale == [.cancel(scanRestart), .stopDiscovery, .pairingProgress(.removingStaleBond(watch)), .removeDevice(watch)])
        h.send(.removeDeviceAnswered(watch, nil))
        guard let pause = h.armed.keys.first(where: { $0.purpose == .scanRestart }) else {
            Issue.record("no scan restart after the removal: \(String(describing: h.machine.pairing?.phase))")
            return
        }
        h.armed[pause] = nil
        h.send(.countdownFired(pause)) // the restart's pause: scanning again
        h.send(.candidateFound(Candidate(address: watch, name: "Watch", rssi: -60, serviceUUIDs: [Self.watchService], bonded: false)))
        guard let pairCountdown = h.machine.pairing?.countdown, let pairCall = h.lastPairCall else {
            Issue.record("no Pair() of the fresh object: \(String(describing: h.machine.pairing?.phase))")
            return
        }
        let paired = h.send(.pairSucceeded(watch, call: pairCall))
        guard let settle = h.machine.pairing?.countdown, let call = h.lastConnectCall[watch] else {
            Issue.record("not settling with a Connect(): \(paired)")
            return
        }
        let connectReply = countdown(h, watch)
        #expect(paired == [
            .cancel(pairCountdown.id),
            .arm(settle),
            .persist,
            .report(Report(kind: .paired, device: watch, name: "Watch", to: .paired)),
            .pairingProgress(.paired(watch)),
            .setTrusted(watch, true),
            .arm(connectReply),
            .report(Report(kind: .stateChanged, device: watch, name: "Watch", from: .state(.needsRepair), to: .state(.connecting), attempt: 1)),
            .connect(watch, call: call, timeout: MachineConfig().connectTimeout),
            .updateAutoConnect([Self.watchService, ServiceUUID.heartRate].sorted()),
        ])
        let removedAt = h.log.firstIndex(of: .removeDevice(watch)) ?? .max
        let firstConnect = h.log.firstIndex { if case .connect(watch, _, _) = $0 { true } else { false } } ?? -1
        #expect(removedAt < firstConnect, "the old bond removed before anything connects: nothing tries the old key")
        #expect(h.machine.device(watch)?.deathsOnLink == DeathsOnLink())
        // The new bond's first link: a death on it is a first one, not the second.
        h.send(.linkUp(watch))
        h.advance(.milliseconds(140))
        #expect(h.send(.bluetoothdLeft) == [.queryBluetoothdUnit])
        #expect(h.stateName(watch) == "discovering")
    }
}
