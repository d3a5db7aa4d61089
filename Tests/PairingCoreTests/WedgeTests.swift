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

    func restored(_ devices: [DeviceAddress], cycles: Int = 2) -> Harness {
        var config = MachineConfig()
        config.wedgePowerCycles = cycles
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
            let out = h.fireNext()
            all += out
            if out.isEmpty && h.armed.isEmpty { break }
            for case .connect(let a, _, _) in out {
                all += h.connectFailed(a, .abortedByLocal, after: .seconds(1))
            }
        }
        return all
    }

    static func wedgeReports(_ actions: [Action]) -> [String] {
        actions.compactMap { if case .report(let r) = $0, r.kind == .adapterWedged { r.reason } else { nil } }
    }

    static func isWedgedWait(_ s: DeviceState?) -> Bool { s == .adapterUnavailable }

    @Test("two wearables refused at once: both wait for the adapter (adapter-wedged, trusted again), one power cycle of it, not needsRepair")
    func twoRefusedPowerCycle() {
        var t = self
        var h = restored([watch, ring])
        let out = t.refuseAll(&h) { h in Self.wedgeReports(h.log).count == 1 }
        #expect(Self.wedgeReports(out) == ["power-cycle 1/2 00:AA:01:00:00:00"])
        #expect(out.contains(.powerCycle(adapter: Self.adapterA)))
        #expect(h.state(watch) == .adapterUnavailable && h.state(ring) == .adapterUnavailable)
        #expect(out.contains(.setTrusted(watch, true)) && out.contains(.setTrusted(ring, true)), "needsRepair untrusted them")
        #expect(out.contains { if case .report(let r) = $0 { r.device == watch && r.to == "adapterUnavailable" && r.reason == "adapter-wedged" } else { false } })
        // The power cycle: the adapter goes and comes back; both are brought back as after a restart.
        h.send(.adapterLost)
        h.send(.adapterInUse(Self.adapterA))
        h.send(.adapterReady([watch: BlueZDeviceView(connected: false), ring: BlueZDeviceView(connected: false)]))
        #expect(h.stateName(watch) == "waitingForDevice" && h.stateName(ring) == "waitingForDevice")
        _ = h.linkComesUp(watch)
        #expect(h.state(watch)?.isConnected == true)
        #expect(h.machine.wedge.cycles.isEmpty, "a connection on the adapter counts the power cycles from zero again")
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
}
