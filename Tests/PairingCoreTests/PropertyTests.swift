import Testing
import PairingCore
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Thousands of random event sequences, each checked after every step against the invariants
/// the daemon's promises rest on. Seeded, so a failure names the seed that reproduces it.
@Suite("Random event sequences")
struct PropertyTests {
    static let addresses = [Harness.watch, Harness.ring, DeviceAddress("AA:BB:CC:00:00:03")!]

    /// A generator of plausible and implausible events: mostly what BlueZ and the user could
    /// send in the current state, sometimes stale or nonsensical input.
    struct Generator {
        var rng: SplitMix64
        mutating func int(_ n: Int) -> Int { Int(rng.next() % UInt64(n)) }
        mutating func chance(_ p: Double) -> Bool { rng.nextUnit() < p }

        mutating func event(for h: Harness) -> Event {
            let a = PropertyTests.addresses[int(PropertyTests.addresses.count)]
            let failures: [BlueZFailure] = [.abortedByLocal, .busy, .noReply, .canceled, .authentication, .deviceGone,
                                             .adapterUnavailable, .other(name: "x", message: "y")]
            switch int(27) {
            case 0, 1, 2: return .countdownFired(h.armed.keys.sorted { $0.generation < $1.generation }.randomElement(using: &rng) ?? staleID(a))
            case 3: return .countdownFired(staleID(a))
            case 4: return .linkUp(a)
            case 5: return .servicesResolved(a)
            case 6: return chance(0.7) ? .servicesResolved(a) : .servicesLost(a)
            case 7, 8: return .linkDown(a, .init(reason: chance(0.5) ? nil : DisconnectClassifier.Reason.allCases[int(6)],
                                                stillBonded: chance(0.9), deviceExists: chance(0.95), adapterUp: chance(0.95)))
            case 9: return chance(0.4) ? .bondLost(a) : chance(0.6) ? .deviceRemoved(a) : .bondedDeviceAppeared(a)
            case 10: return .connectSucceeded(a, call: h.lastConnectCall[a] ?? 0)
            case 11: return .connectFailed(a, call: h.lastConnectCall[a] ?? 0, failures[int(failures.count)])
            case 12:
                if chance(0.15) { return .characteristicsMissing(a, chance(0.5) ? [] : [ServiceUUID.heartRateMeasurement]) }
                if chance(0.05) { return .characteristicAppeared(a, ServiceUUID.heartRateMeasurement) }
                return .setUpLinkFinished(a, failure: chance(0.8) ? nil : failures[int(failures.count)])
            case 13: return chance(0.7) ? .adapterReady(views()) : .adapterLost
            case 14: return .userPair(PairRequest(address: chance(0.5) ? a : nil))
            case 15: return .candidateFound(Candidate(address: a, name: "dev", rssi: chance(0.8) ? -60 : nil, serviceUUIDs: [ServiceUUID.heartRate],
                                                       bonded: chance(0.3)))
            case 16: return chance(0.8) ? .pairSucceeded(a, call: h.lastPairCall ?? 0)
                                        : .pairFailed(a, call: h.lastPairCall ?? 0, failures[int(failures.count)])
            case 17: return .userConnect(a)
            case 18: return .userDisconnect(a)
            case 19: return chance(0.3) ? .userUnpair(a) : .userCancelPairing
            case 20: return chance(0.5) ? .discoveryFailed(.busy) : .removeDeviceAnswered(a, chance(0.7) ? nil : failures[int(failures.count)])
            case 21: return .autoConnectArmed(Set(PropertyTests.addresses.filter { _ in chance(0.6) }))
            case 22: return .dataReceived(a, characteristic: chance(0.8) ? ServiceUUID.heartRateMeasurement : ServiceUUID.batteryLevel)
            case 23: return .subscriptionEnded(a, characteristic: ServiceUUID.heartRateMeasurement)
            case 24: return .probeFinished(a, call: h.lastProbeCall[a] ?? 0,
                                           chance(0.5) ? .answered : chance(0.5) ? .failed(failures[int(failures.count)]) : .unavailable)
            case 25:
                // bluetoothd leaving (a crash systemd reports), coming back
                if chance(0.4) { return .bluetoothdLeft }
                if chance(0.5) {
                    return .bluetoothdUnit(BluetoothdUnitState(activeState: "failed", result: "core-dump", execMainCode: 3, execMainStatus: 11,
                                                              execMainStart: rng.next() % 1000))
                }
                return .bluetoothdBack
            default: return .connectFailed(a, call: h.lastConnectCall[a] ?? 0, .abortedByLocal)
            }
        }

        mutating func views() -> [DeviceAddress: BlueZDeviceView] {
            var v: [DeviceAddress: BlueZDeviceView] = [:]
            for a in PropertyTests.addresses where chance(0.8) {
                let connected = chance(0.4)
                v[a] = BlueZDeviceView(exists: true, bonded: chance(0.9), connected: connected, servicesResolved: connected && chance(0.5))
            }
            return v
        }

        mutating func staleID(_ a: DeviceAddress) -> Countdown.ID {
            // Never armed: generations far above anything the machine hands out in a run.
            let purpose = CountdownPurpose.allCases[int(CountdownPurpose.allCases.count)]
            return Countdown(id: .init(owner: chance(0.2) ? .pairing : .device(a), purpose: purpose, generation: 1 << 40 + rng.next() % 1000),
                             deadline: .at(0)).id
        }
    }

    /// Per-device promises, tracked across a run.
    struct Promises {
        /// Devices the user disconnected and has not asked to connect (or re-paired) since.
        var userDown: Set<DeviceAddress> = []
        /// Devices that entered needsRepair and were not paired again since.
        var repairPending: Set<DeviceAddress> = []
    }

    @Test("invariants hold over 4,000 random sequences of 150 events")
    func randomSequences() {
        var totalSteps = 0
        for seed in UInt64(1)...4_000 {
            var gen = Generator(rng: SplitMix64(seed: seed))
            let initial = PersistedState(devices: PropertyTests.addresses.prefix(gen.int(4)).map {
                PersistedDevice(identity: DeviceIdentity(address: $0, serviceUUIDs: [ServiceUUID.heartRate]),
                                wanted: gen.chance(0.8) ? .connected : .disconnected, pairedAt: 0, updatedAt: 0)
            })
            var config = MachineConfig()
            config.jitterSeed = seed
            if seed % 2 == 0 { config.firstDataTimeout = .seconds(5) }
            var h = Harness(config: config, state: initial)
            var promises = Promises()
            for a in initial.devices where a.wanted == .disconnected { promises.userDown.insert(a.address) }
            var lastAutoConnect: [String]?
            for step in 0..<150 {
                let event = gen.event(for: h)
                if case .countdownFired(let id) = event, let c = h.armed[id] {
                    if c.deadline > h.now { h.now = c.deadline }
                    h.armed[id] = nil
                } else {
                    h.advance(.milliseconds(Int64(gen.int(5_000))))
                }
                let before = h.machine.devices
                let persistedBefore = h.machine.persistedState()
                let actions = h.send(event)
                let context = "seed \(seed) step \(step) event \(event)"
                if !check(h, before: before, event: event, actions: actions, promises: &promises, context: context) { return }
                if !checkPersistence(persistedBefore, h.machine.persistedState(), actions, context) { return }
                // BlueZ's auto-connect list follows the machine: the last update sent is what it wants now.
                for case .updateAutoConnect(let uuids) in actions { lastAutoConnect = uuids }
                if let sent = lastAutoConnect, sent != h.machine.autoConnectUUIDs {
                    Issue.record("auto-connect last set to \(sent), the machine wants \(h.machine.autoConnectUUIDs) — \(context)")
                    return
                }
                totalSteps += 1
            }
        }
        #expect(totalSteps == 600_000)
    }

    /// The state file is written when intent or identity changed, and only then: a `.persist`
    /// comes with a change of the document beyond its `updatedAt` stamps, and no change of the
    /// document goes without one (link losses, reconnects, adapter loss write nothing).
    func checkPersistence(_ old: PersistedState, _ new: PersistedState, _ actions: [Action], _ context: String) -> Bool {
        func unstamped(_ s: PersistedState) -> PersistedState {
            var t = s; for i in t.devices.indices { t.devices[i].updatedAt = Date(timeIntervalSince1970: 0) }; return t
        }
        let persisted = actions.contains(.persist)
        if persisted && unstamped(old) == unstamped(new) {
            Issue.record("a state-file write without a change of intent or identity — \(context)"); return false
        }
        if !persisted && old != new {
            Issue.record("the persisted document changed without a write: \(old.devices) → \(new.devices) — \(context)"); return false
        }
        return true
    }

    /// Returns false after recording an issue, so one broken seed does not flood the report.
    func check(_ h: Harness, before: [DeviceAddress: ManagedDevice], event: Event, actions: [Action],
               promises: inout Promises, context: String) -> Bool {
        var ok = true
        func fail(_ what: String) { Issue.record("\(what) — \(context)"); ok = false }

        // Countdowns: exactly those the timed states carry; at most one per device, and the
        // pairing session's phase countdown plus, while it scans, its restart.
        var perOwner: [CountdownOwner: Int] = [:]
        for id in h.armed.keys { perOwner[id.owner, default: 0] += 1 }
        for (owner, n) in perOwner where n > 1 && owner != .pairing { fail("\(n) live countdowns for \(owner)") }
        let pairingLive = Set(h.armed.keys.filter { $0.owner == .pairing })
        let pairingCarried = Set(h.machine.pairing?.countdowns.map(\.id) ?? [])
        if pairingLive != pairingCarried { fail("pairing carries \(pairingCarried) but live are \(pairingLive)") }
        for (a, d) in h.machine.devices {
            let live = h.armed.keys.first { $0.owner == .device(a) }
            if live != d.state.countdown?.id { fail("\(a) in \(d.state) but live countdown is \(String(describing: live))") }
        }
        for id in h.armed.keys {
            if case .device(let a) = id.owner, h.machine.devices[a] == nil { fail("countdown left for forgotten \(a)") }
        }

        // Every change of state is one the state's "Can transition to:" list names.
        for case .report(let r) in actions where r.device != nil && r.fromToken != r.toToken {
            guard let allowed = DeviceState.transitions[r.fromToken], DeviceState.transitions[r.toToken] != nil else { continue }
            if !allowed.contains(r.toToken) { fail("\(r.fromToken) → \(r.toToken) is not in DeviceState.transitions") }
        }

        // The user's own requests lift the promises first (they are what allows a Connect again).
        switch event {
        case .userConnect(let a): promises.userDown.remove(a)
        case .userUnpair(let a): promises.userDown.remove(a); promises.repairPending.remove(a)
        case .bondedDeviceAppeared(let a) where before[a]?.state == .needsRepair(reason: .deviceRemoved):
            promises.repairPending.remove(a) // BlueZ has the bond again: not a loop after a lost bond
        case .pairSucceeded(let a, _), .pairFailed(let a, _, .alreadyExists):
            if h.machine.devices[a]?.wanted == .connected, before[a]?.wanted != .connected || before[a]?.state.name == "needsRepair" {
                promises.userDown.remove(a); promises.repairPending.remove(a)
            }
        default: break
        }
        if let a = h.machine.bluetoothd.onTrial, before[a]?.state == .needsRepair(reason: .bluetoothdCrashes),
           h.machine.devices[a]?.state.name != "needsRepair" {
            promises.repairPending.remove(a) // disarmed with others at one crash, let back alone on trial
        }
        for case .connect(let a, _, _) in actions {
            if promises.userDown.contains(a) { fail("Connect \(a) after the user's disconnect") }
            if promises.repairPending.contains(a) { fail("Connect \(a) after a lost bond, before re-pairing") }
        }
        if case .userDisconnect(let a) = event, before[a] != nil { promises.userDown.insert(a) }
        for (a, d) in h.machine.devices {
            if case .needsRepair = d.state { promises.repairPending.insert(a) }
            if d.wanted == .connected, promises.userDown.contains(a), before[a]?.wanted != .connected { promises.userDown.remove(a) }
        }

        // A link loss from a live link ends in waitingForDevice or connecting, never forgets the device.
        // (Repeated failed setups — links the wearable never answered over — may mean a lost bond.)
        if case .linkDown(let a, let e) = event, let old = before[a], let link = old.state.link,
           e.adapterUp, e.deviceExists, e.stillBonded, e.reason != .authentication {
            let now = h.machine.devices[a]?.state.name
            let presumedBondLoss = now == "needsRepair" && !link.proven && !link.adoptedUnresolved
                && old.setupFailures + 1 >= h.machine.config.setupFailuresBeforeRepair
            if now != "waitingForDevice" && now != "connecting" && !presumedBondLoss {
                fail("link loss of \(a) ended in \(String(describing: now))")
            }
        }

        // Only unpair forgets a device.
        for a in before.keys where h.machine.devices[a] == nil {
            if case .userUnpair(a) = event {} else { fail("\(a) forgotten by \(event)") }
        }

        // Intent "connected" with a working bond and adapter is always pursued.
        for (a, d) in h.machine.devices where d.wanted == .connected && h.machine.adapterUp {
            switch d.state {
            case .disconnected: fail("\(a) wanted connected but sits disconnected")
            case .restoring, .connecting, .discovering, .connected, .waitingForDevice, .needsRepair, .adapterUnavailable: break
            }
        }
        // A wait with no timer of ours only while BlueZ holds an auto-connect for the device:
        // otherwise nothing would ever bring it back.
        for (a, d) in h.machine.devices where d.state == .waitingForDevice(.onAutoConnect) {
            if !h.machine.autoConnectArmed.contains(a) {
                fail("\(a) waits on an auto-connect that is not armed (armed: \(h.machine.autoConnectArmed))")
            }
        }

        // A wedge probe is armed only while two or more wanted wearables all wait for their return
        // (one adapter here), and only for an adapter it names.
        for id in h.armed.keys where id.purpose == .wedgeProbe {
            let wanted = h.machine.devices.values.filter { $0.wanted == .connected }
            if case .adapter = id.owner {} else { fail("a wedge probe owned by \(id.owner)") }
            if wanted.count < 2 || !wanted.allSatisfy({ if case .waitingForDevice = $0.state { true } else { false } }) || h.machine.host.asleep || h.machine.pairing != nil {
                fail("wedge probe \(id) armed with \(wanted.map { "\($0.address) \($0.state.name)" })")
            }
        }

        // Every document the runtime would write decodes back to itself.
        if actions.contains(.persist) {
            let doc = h.machine.persistedState()
            if (try? PersistedState.decode(doc.encoded())) != doc { fail("persisted state does not round-trip") }
        }
        return ok
    }
}
