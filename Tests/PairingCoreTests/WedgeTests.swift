import PairingCore
import Testing

/// A wedged adapter (issue 32, `PairingMachine+Wedge`): every wanted wearable on it refused at
/// once, fast, as a lost bond looks on BlueZ 5.66 → the adapter is power-cycled, capped; one
/// wearable alone keeps going to needsRepair (it cannot be told from a lost bond).
@Suite("A wedged adapter")
struct WedgeTests {
    let watch = Harness.watch
    let ring = Harness.ring
    static let adapterA = DeviceAddress("00:AA:01:00:00:00")!

    func restored(_ devices: [DeviceAddress], cycles: Int = 2, setupFailures: Int = 3) -> Harness {
        var config = MachineConfig()
        config.wedgePowerCycles = cycles
        config.setupFailuresBeforeRepair = setupFailures
        var h = Harness(config: config, state: PersistedState(devices: devices.map { a in
            PersistedDevice(identity: DeviceIdentity(address: a, name: a == watch ? "Watch" : "Ring", adapter: "",
                                                     serviceUUIDs: [ServiceUUID.heartRate], adapterAddress: Self.adapterA),
                            wanted: .connected, pairedAt: 0, updatedAt: 0)
        }))
        h.send(.adapterInUse(Self.adapterA))
        h.send(.adapterReady(Dictionary(uniqueKeysWithValues: devices.map { ($0, BlueZDeviceView(connected: false)) })))
        return h
    }

    /// Lets time pass, refusing every Connect() one second after it is made, until `until` holds
    /// or nothing is armed; returns every action on the way.
    mutating func refuseAll(_ h: inout Harness, until: (Harness) -> Bool) -> [Action] {
        var all: [Action] = []
        for _ in 0..<200 where !until(h) {
            var out = h.fireNext()
            all += out
            if out.isEmpty && h.armed.isEmpty { break }
            // A refusal may ask others at once (`probeAlongside`): theirs are refused too.
            while let a = out.lazy.compactMap({ if case .connect(let a, _, _) = $0 { a } else { nil } }).first {
                out.removeFirst(out.firstIndex { if case .connect = $0 { true } else { false } }! + 1)
                let more = h.connectFailed(a, .abortedByLocal, after: .seconds(1))
                all += more
                out += more
            }
        }
        return all
    }

    static func wedgeReports(_ actions: [Action]) -> [String] {
        actions.compactMap { if case .report(let r) = $0, r.kind == .adapterWedged { r.reasonToken } else { nil } }
    }

    static func isWedgedWait(_ s: DeviceState?) -> Bool { s == .adapterUnavailable }

    @Test("two wearables refused at once, one refusal each: both wait for the adapter (adapter-wedged), one power cycle of it, never needsRepair")
    func twoRefusedPowerCycle() {
        var t = self
        var h = restored([watch, ring])
        let out = t.refuseAll(&h) { h in Self.wedgeReports(h.log).count == 1 }
        #expect(Self.wedgeReports(out) == ["power-cycle 1/2 00:AA:01:00:00:00"])
        #expect(out.contains(.powerCycle(adapter: Self.adapterA)))
        #expect(h.state(watch) == .adapterUnavailable && h.state(ring) == .adapterUnavailable)
        #expect(!out.contains { if case .setTrusted = $0 { true } else { false } }, "never needsRepair: never untrusted")
        #expect(out.filter { if case .connect = $0 { true } else { false } }.count == 2, "one refused Connect() each was enough")
        #expect(out.contains { if case .report(let r) = $0 { r.device == watch && r.to == .state(.adapterUnavailable) && r.reasonToken == "adapter-wedged" } else { false } })
        // The power cycle: the adapter goes and comes back; both are brought back as after a restart.
        h.send(.adapterLost)
        h.send(.adapterInUse(Self.adapterA))
        h.send(.adapterReady([watch: BlueZDeviceView(connected: false), ring: BlueZDeviceView(connected: false)]))
        #expect(h.stateName(watch) == "waitingForDevice" && h.stateName(ring) == "waitingForDevice")
        _ = h.linkComesUp(watch)
        #expect(h.state(watch)?.isConnected == true)
        #expect(h.machine.wedge.cycles.isEmpty, "a connection on the adapter counts the power cycles from zero again")
    }

    @Test("one already sent to needsRepair by its refusals (SetupFailuresBeforeRepair = 1) is taken back when the other is refused too, and trusted again")
    func fromNeedsRepair() {
        var t = self
        var h = restored([watch, ring], setupFailures: 1)
        let out = t.refuseAll(&h) { h in Self.wedgeReports(h.log).count == 1 }
        #expect(out.contains(.setTrusted(watch, false)), "the first refused went to needsRepair")
        #expect(out.contains(.setTrusted(watch, true)), "needsRepair untrusted it; the adapter's return needs it trusted")
        #expect(h.state(watch) == .adapterUnavailable && h.state(ring) == .adapterUnavailable)
        #expect(out.contains(.powerCycle(adapter: Self.adapterA)))
    }

    @Test("a wedge that power cycles do not clear: exactly the cap's power cycles in a row, then the cap said once and no more; the wearables wait")
    func capped() {
        var t = self
        var h = restored([watch, ring], cycles: 2)
        var cycles = 0
        for _ in 0..<4 {
            let out = t.refuseAll(&h) { h in Self.isWedgedWait(h.state(watch)) && Self.isWedgedWait(h.state(ring)) }
            cycles += out.filter { $0 == .powerCycle(adapter: Self.adapterA) }.count
            // The power cycle, or a person's, or nothing: the adapter's return reconciles them.
            h.send(.adapterLost)
            h.send(.adapterInUse(Self.adapterA))
            h.send(.adapterReady([watch: BlueZDeviceView(connected: false), ring: BlueZDeviceView(connected: false)]))
        }
        #expect(cycles == 2)
        #expect(Self.wedgeReports(h.log) == ["power-cycle 1/2 00:AA:01:00:00:00", "power-cycle 2/2 00:AA:01:00:00:00",
                                              "cap-reached 2/2 00:AA:01:00:00:00", "cap-reached 2/2 00:AA:01:00:00:00"])
    }

    @Test("WedgePowerCycles = 0: never a power cycle; the wearables still wait for the adapter rather than for re-pairing")
    func never() {
        var t = self
        var h = restored([watch, ring], cycles: 0)
        let out = t.refuseAll(&h) { h in Self.wedgeReports(h.log).count == 1 }
        #expect(Self.wedgeReports(out) == ["cap-reached 0/0 00:AA:01:00:00:00"])
        #expect(!out.contains(.powerCycle(adapter: Self.adapterA)))
        #expect(h.state(watch) == .adapterUnavailable && h.state(ring) == .adapterUnavailable)
    }

    @Test("one wearable refused: needsRepair (suspected bond loss) as before, no power cycle: alone it cannot be told from a lost bond")
    func oneAlone() {
        var t = self
        var h = restored([watch])
        let out = t.refuseAll(&h) { h in h.state(watch) == .needsRepair(reason: .suspectedBondLoss) }
        #expect(h.state(watch) == .needsRepair(reason: .suspectedBondLoss))
        #expect(Self.wedgeReports(out).isEmpty && !out.contains(.powerCycle(adapter: Self.adapterA)))
    }

    @Test("two wearables, one connected on the adapter: the other's refusals are its own (needsRepair), the adapter works")
    func oneConnected() {
        var t = self
        var h = restored([watch, ring])
        _ = h.linkComesUp(ring)
        let out = t.refuseAll(&h) { h in h.state(watch) == .needsRepair(reason: .suspectedBondLoss) }
        #expect(h.state(watch) == .needsRepair(reason: .suspectedBondLoss))
        #expect(h.state(ring)?.isConnected == true)
        #expect(Self.wedgeReports(out).isEmpty)
    }

    @Test("refusals far apart (more than the window) are not one wedge")
    func farApart() {
        var t = self
        var h = restored([watch, ring])
        // The watch refused until needsRepair while the ring is away (its Connect()s take the whole window).
        var out: [Action] = []
        for _ in 0..<200 where h.state(watch) != .needsRepair(reason: .suspectedBondLoss) {
            let fired = h.fireNext()
            out += fired
            for case .connect(let a, _, _) in fired {
                out += a == watch ? h.connectFailed(a, .abortedByLocal, after: .seconds(1)) : h.connectFailed(a, .abortedByLocal, after: .seconds(40))
            }
        }
        #expect(h.state(watch) == .needsRepair(reason: .suspectedBondLoss))
        h.advance(WedgeWatch.window + .seconds(1))
        out += t.refuseAll(&h) { h in h.state(ring) == .needsRepair(reason: .suspectedBondLoss) }
        #expect(h.state(ring) == .needsRepair(reason: .suspectedBondLoss))
        #expect(Self.wedgeReports(out).isEmpty)
    }

    // MARK: The blind spot after a link loss: the probe

    /// Both connected (the auto-connect armed for both), then both links lost: both wait on the
    /// kernel's auto-connect, which tells paird nothing when the adapter refuses it.
    func bothAway(probe: Duration = .seconds(900), wearables: [DeviceAddress]? = nil) -> Harness {
        var config = MachineConfig()
        config.wedgeProbeInterval = probe
        let all = wearables ?? [watch, ring]
        var h = Harness(config: config, state: PersistedState(devices: all.map { a in
            PersistedDevice(identity: DeviceIdentity(address: a, name: a == watch ? "Watch" : "Ring", adapter: "",
                                                     serviceUUIDs: [ServiceUUID.heartRate], adapterAddress: Self.adapterA),
                            wanted: .connected, pairedAt: 0, updatedAt: 0)
        }))
        h.send(.adapterInUse(Self.adapterA))
        h.send(.autoConnectArmed(Set(all)))
        h.send(.adapterReady(Dictionary(uniqueKeysWithValues: all.map { ($0, BlueZDeviceView(connected: true, servicesResolved: true)) })))
        for a in all { h.send(.setUpLinkFinished(a, failure: nil)) }
        precondition(all.allSatisfy { h.state($0)?.isConnected == true })
        h.advance(.seconds(30))
        for a in all { h.send(.linkDown(a, linkLoss)) }
        precondition(all.allSatisfy { h.state($0) == .waitingForDevice(.onAutoConnect) })
        return h
    }

    static func probes(_ h: Harness) -> [Countdown] {
        h.armed.values.filter { $0.id.purpose == .wedgeProbe }
    }

    @Test("both away on the auto-connect, the adapter wedged: one probe Connect() after WedgeProbeInterval, refused at once → the other asked at once → refused → the power cycle; whole action lists")
    func probeFindsWedge() throws {
        var h = bothAway()
        let probe = try #require(Self.probes(h).first)
        #expect(Self.probes(h).count == 1 && probe.id.owner == .adapter(Self.adapterA))
        #expect(probe.deadline == h.now + .seconds(900), "armed when the last of them came to wait")
        let fired = h.fireNext()
        let watchCall = try #require(h.lastConnectCall[watch])
        let watchCountdown = try #require(h.state(watch)?.countdown)
        let next = try #require(Self.probes(h).first)
        #expect(fired == [.arm(watchCountdown), .connect(watch, call: watchCall, timeout: h.machine.config.connectTimeout), .arm(next)],
                "the first by address, one Connect(); the next probe armed")
        #expect(next.deadline == h.now + .seconds(900))
        let refused = h.connectFailed(watch, .abortedByLocal, after: .milliseconds(70))
        let ringCall = try #require(h.lastConnectCall[ring])
        let ringCountdown = try #require(h.state(ring)?.countdown)
        let watchWait = try #require(h.state(watch))
        #expect(watchWait == .waitingForDevice(.onAutoConnect))
        #expect(refused == [.cancel(watchCountdown.id), .arm(ringCountdown), .connect(ring, call: ringCall, timeout: h.machine.config.connectTimeout)],
                "refused at once: back on the auto-connect, the ring asked at once")
        let wedged = h.connectFailed(ring, .abortedByLocal, after: .milliseconds(70))
        #expect(wedged == [
            .cancel(ringCountdown.id),
            .report(Report(kind: .adapterLost, device: watch, name: "Watch", from: .state(.waitingForDevice), to: .state(.adapterUnavailable), reason: .adapterWedged)),
            .report(Report(kind: .adapterLost, device: ring, name: "Ring", from: .state(.waitingForDevice), to: .state(.adapterUnavailable), reason: .adapterWedged)),
            .report(Report(kind: .adapterWedged, device: nil, reason: .wedge(.powerCycle(attempt: 1, of: 2, adapter: DeviceAddress("00:AA:01:00:00:00")!)))),
            .powerCycle(adapter: Self.adapterA),
            .cancel(next.id),
        ])
        #expect(Self.probes(h).isEmpty, "nobody waits on the auto-connect: no probe")
    }

    @Test("both away, the adapter fine: the probe takes an absent wearable's whole window, nobody else is asked, and the next probe goes to the other one")
    func probeAwayTakesTurns() throws {
        var h = bothAway()
        var probed: [DeviceAddress] = []
        for _ in 0..<4 {
            let out = h.fireNext()
            for case .connect(let a, _, _) in out {
                probed.append(a)
                let after = h.connectFailed(a, .abortedByLocal, after: .seconds(40))
                #expect(after.connects() == 0, "an absent wearable's failure asks nobody else")
            }
        }
        #expect(probed == [watch, ring, watch, ring])
        #expect(h.state(watch) == .waitingForDevice(.onAutoConnect) && h.state(ring) == .waitingForDevice(.onAutoConnect))
        #expect(h.log.reports(.adapterWedged).isEmpty)
        _ = h.linkComesUp(ring)
        #expect(Self.probes(h).isEmpty, "one is back: the adapter makes links, no probe")
    }

    @Test("no probe: one wearable alone; one of two connected; WedgeProbeInterval = 0; while a pairing runs; while the host sleeps")
    func noProbe() {
        #expect(Self.probes(bothAway(wearables: [watch])).isEmpty)
        #expect(Self.probes(bothAway(probe: .zero)).isEmpty)
        var h = bothAway()
        _ = h.linkComesUp(watch)
        #expect(Self.probes(h).isEmpty)
        h.send(.linkDown(watch, linkLoss))
        #expect(Self.probes(h).count == 1)
        h.send(.userPair(PairRequest(address: nil)))
        #expect(h.machine.pairing != nil && Self.probes(h).isEmpty, "a pairing runs: no probe")
        h.send(.userCancelPairing)
        #expect(h.machine.pairing == nil && Self.probes(h).count == 1)
        let out = h.send(.hostSleeping)
        #expect(Self.probes(h).isEmpty && out.contains { if case .cancel(let id) = $0 { id.purpose == .wedgeProbe } else { false } })
        #expect(h.log.connects() == 0)
    }
}
