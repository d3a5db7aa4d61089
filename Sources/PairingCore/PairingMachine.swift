#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The whole daemon's decision-making, as pure code: events and `now` in, actions out.
///
/// One value owns every managed wearable's `DeviceState` plus at most one `PairingSession`.
/// It performs no I/O and reads no clock; the runtime feeds it every outside happening (a BlueZ
/// signal, a call's reply, a countdown firing, a pairctl request) and performs the returned
/// actions in order. Countdowns are carried by the timed states themselves (`DeviceState.countdown`,
/// `PairingSession.countdown`); every state change goes through `move(_:to:)`, which emits the
/// `cancel` for the countdown being left and the `arm` for the one being entered, so at most one
/// countdown per owner is ever live.
public struct PairingMachine: Sendable {
    public let config: MachineConfig
    /// Devices live in `slots`; `slot` maps an address to its position, so an event costs one
    /// hash lookup and every later read or write is in place.
    var slots: [ManagedDevice] = []
    var slot: [DeviceAddress: Int] = [:]

    /// Every managed wearable by address (a copy; for status and tests).
    public var devices: [DeviceAddress: ManagedDevice] {
        Dictionary(uniqueKeysWithValues: slots.map { ($0.address, $0) })
    }

    public func device(_ a: DeviceAddress) -> ManagedDevice? { slot[a].map { slots[$0] } }

    /// Addresses in a stable order, for loops that must not depend on hashing.
    var sortedAddresses: [DeviceAddress] { slots.map(\.address).sorted() }
    public internal(set) var pairing: PairingSession?
    /// `Pair()` calls of ended sessions still in flight, by device: when BlueZ answers one (its
    /// bonding over), what it left behind (a link, a half-made device) is removed.
    var abandonedPairs: [DeviceAddress: UInt64] = [:]
    /// Abandoned pairs whose clean-up went to a bluetoothd that was going away (the session ended
    /// because Bluetooth went away, or the Pair() got no reply): the next bluetoothd may still
    /// show the pairing's link (the kernel keeps it through a crash) and, while it lasts, the
    /// wearable does not advertise. Cleaned up again when the adapter is back, if that is within
    /// `leftoverPairWindow` (a Pair() without reply from a bluetoothd that stayed is none of this).
    var leftoverPairs: [DeviceAddress: Moment] = [:]
    static let leftoverPairWindow: Duration = .seconds(120)
    /// Some adapter is ready.
    public internal(set) var adapterUp = false
    /// The address of the adapter in use, as last told (`Event.adapterInUse`): with several, the
    /// one that became ready last.
    public internal(set) var adapterInUse: DeviceAddress?
    /// The ready adapters, by address (those told by `adapterInUse` before their `adapterReady`).
    public internal(set) var upAdapters: Set<DeviceAddress> = []
    /// The devices BlueZ's auto-connect is armed for now (`Event.autoConnectArmed`).
    public internal(set) var autoConnectArmed: Set<DeviceAddress> = []
    /// bluetoothd on the bus, and after a crash its restarts (`PairingMachine+Bluetoothd`).
    public internal(set) var bluetoothd = BluetoothdWatch()
    /// The host's sleeps (`PairingMachine+Sleep`): asleep now, and the last sleep with who was back when.
    public internal(set) var host = HostWatch()
    /// Adapters taken for wedged, and their power cycles (`PairingMachine+Wedge`).
    public internal(set) var wedge = WedgeWatch()
    /// Powered=true tried again after a power cycle: the countdown's, the adapter and the try.
    var powerOnRetries: [Countdown.ID: PowerOnRetry] = [:]
    /// The configured adapters' addresses, as first seen (`PersistedState.adapters`).
    public internal(set) var adapters: [PersistedAdapter] = []

    /// The config's durations in nanoseconds, converted once (see `Moment`).
    let connectReplyNanos: Int64
    let discoveryNanos: Int64
    let resolveNanos: Int64
    let fallbackNanos: Int64
    let headStartNanos: Int64

    var generation: UInt64 = 0
    var rng: SplitMix64

    /// Starts with the devices of the state file, all `restoring` until `adapterReady` or `adapterLost`.
    public init(config: MachineConfig = MachineConfig(), restoring state: PersistedState? = nil, now: Moment) {
        self.config = config
        self.rng = SplitMix64(seed: config.jitterSeed)
        self.connectReplyNanos = (config.connectTimeout + config.replySlack).nanoseconds
        self.discoveryNanos = config.discoveryTimeout.nanoseconds
        self.resolveNanos = config.resolveTimeout.nanoseconds
        self.fallbackNanos = config.fallbackInterval.nanoseconds
        self.headStartNanos = config.autoConnectHeadStart.nanoseconds
        self.adapters = state?.adapters ?? []
        for p in state?.devices ?? [] where slot[p.address] == nil {
            slot[p.address] = slots.count
            slots.append(ManagedDevice(
                identity: p.identity, wanted: p.wanted, state: .restoring, since: now,
                pairedAt: p.pairedAt.timeIntervalSince1970, updatedAt: p.updatedAt.timeIntervalSince1970, lastDisconnect: nil,
                reconnectAttempts: 0, setupFailures: 0, hasBeenConnected: false,
                bluetoothdCrashedOnLink: p.bluetoothdCrashedOnLink ?? false))
        }
    }

    /// Convenience for tests and tools; the runtime uses the `into:` form to reuse one buffer.
    public mutating func handle(_ event: Event, now: Moment) -> [Action] {
        var actions: [Action] = []
        handle(event, now: now, into: &actions)
        return actions
    }

    /// The dispatch table: every event, and the handler for it. Handlers live by event family in
    /// `PairingMachine+Adapter` (adapter, restoration, auto-connect), `+Link` (a link's life and
    /// the lost-bond heuristic), `+Connect` (paird's Connect() calls and the device countdowns),
    /// `+Pairing` (the pairing session), `+Agent` (BlueZ's questions and the user's answers) and `+Intent` (pairctl connect/disconnect/unpair).
    public mutating func handle(_ event: Event, now: Moment, into actions: inout [Action]) {
        let start = actions.endIndex
        let autoConnectBefore = autoConnectUUIDs
        defer {
            keepAutoConnectInStep(since: start, before: autoConnectBefore, &actions)
            keepWedgeProbes(now, &actions)
            // A device BlueZ is asked to forget has no battery level known any more.
            for case .removeDevice(let a) in actions[start...] { if let i = slot[a] { slots[i].battery = nil } }
        }
        switch event {
        case .adapterReady(let views): adapterReady(views, now, &actions)
        case .adapterIdentified(let configured, let address, let name): adapterIdentified(configured, address, name, now, &actions)
        case .adapterInUse(let address): adapterInUse = address
        case .adapterLost: adapterLost(now, &actions)
        case .adapterGone(let address): adapterGone(address, now, &actions)
        case .autoConnectArmed(let devices): autoConnectArmed(devices, now, &actions)
        case .bluetoothdLeft: bluetoothdLeft(now, &actions)
        case .bluetoothdUnit(let unit): bluetoothdUnit(unit, now, &actions)
        case .bluetoothdStartFailed: bluetoothdStartFailed(now, &actions)
        case .bluetoothdBack: bluetoothdBack(now, &actions)
        case .bluetoothdAbsent: bluetoothdAbsent(now, &actions)
        case .hostSleeping: hostSleeping(now, &actions)
        case .hostResumed: hostResumed(now, &actions)
        case .disconnectAnswered(let a): disconnectAnswered(a, now, &actions)
        case .batteryRead(let a, let level): batteryRead(a, level, &actions)
        case .powerOnFailed(let adapter, let attempt, let failure): powerOnFailed(adapter, attempt: attempt, failure, now, &actions)
        case .linkUp(let a): linkUp(a, now, &actions)
        case .servicesResolved(let a): servicesResolved(a, now, &actions)
        case .servicesLost(let a): servicesLost(a, now, &actions)
        case .linkProven(let a): linkProven(a)
        case .dataReceived(let a, let ch): dataReceived(a, ch, now, &actions)
        case .subscriptionEnded(let a, let ch): subscriptionEnded(a, ch, now, &actions)
        case .probeFinished(let a, let call, let result): probeFinished(a, call, result, now, &actions)
        case .linkDown(let a, let evidence): linkDown(a, evidence, now, &actions)
        case .bondLost(let a): lostBond(a, reason: .bondRemoved, now, &actions)
        case .deviceRemoved(let a):
            if let i = slot[a] { slots[i].battery = nil }
            lostBond(a, reason: .deviceRemoved, now, &actions)
            staleBondRemoved(a, failure: nil, now, &actions)
        case .removeDeviceAnswered(let a, let failure): staleBondRemoved(a, failure: failure, now, &actions)
        case .bondedDeviceAppeared(let a): bondedDeviceAppeared(a, now, &actions)
        case .connectSucceeded(let a, let call): connectSucceeded(a, call, now, &actions)
        case .connectFailed(let a, let call, let f): connectFailed(a, call, f, now, &actions)
        case .setUpLinkFinished(let a, let failure): setUpLinkFinished(a, failure, now, &actions)
        case .characteristicsMissing(let a, let uuids): characteristicsMissing(a, uuids, &actions)
        case .characteristicAppeared(let a, let uuid): if let i = slot[a] { slots[i].missingCharacteristics.remove(uuid) }
        case .pairSucceeded(let a, let call): pairAnswered(a, call, failure: nil, now, &actions)
        case .pairFailed(let a, let call, let f): pairAnswered(a, call, failure: f, now, &actions)
        case .candidateFound(let c): candidateFound(c, now, &actions)
        case .discoveryFailed(let f): discoveryFailed(f, now, &actions)
        case .countdownFired(let id): countdownFired(id, now, &actions)
        case .userPair(let request): userPair(request, now, &actions)
        case .userCancelPairing: endPairing(.canceled, now, &actions)
        case .agentAsked(let a, let request, let q): agentAsked(a, request, q, now, &actions)
        case .agentCanceled: agentCanceled(now, &actions)
        case .addressChanged(let old, let new, let type): addressChanged(old, to: new, type, now, &actions)
        case .userAnswer(let answer): userAnswered(answer, now, &actions)
        case .userConnect(let a): userConnect(a, now, &actions)
        case .userDisconnect(let a): userDisconnect(a, now, &actions)
        case .userUnpair(let a): userUnpair(a, now, &actions)
        }
    }

    /// BlueZ's auto-connect list follows what the machine wants, whatever changed it in this step
    /// (a state or an intent): if the step's last update (or, with none, the list before it)
    /// differs from what the machine wants now, one more update goes out at the end. This is how
    /// a device entering `needsRepair` leaves the list, whichever way it got there.
    func keepAutoConnectInStep(since start: Int, before: [String], _ actions: inout [Action]) {
        let wanted = autoConnectUUIDs
        var last = before
        for case .updateAutoConnect(let uuids) in actions[start...] { last = uuids }
        if last != wanted { actions.append(.updateAutoConnect(wanted)) }
    }

    /// A battery reading: kept, and said only when it changed (a wearable notifies its level
    /// again and again).
    mutating func batteryRead(_ a: DeviceAddress, _ level: UInt8, _ actions: inout [Action]) {
        guard let i = slot[a], slots[i].battery != level else { return }
        slots[i].battery = level
        actions.append(.batteryChanged(a, level: level))
    }

    // MARK: Queries

    /// The service UUIDs the auto-connect profile should list: those of every device we pursue.
    public var autoConnectUUIDs: [String] {
        var set = Set<String>()
        for d in slots where d.wanted == .connected && d.state.isPursuing {
            set.formUnion(d.identity.serviceUUIDs)
        }
        return set.sorted()
    }

    /// The document the state file holds: identity and intent only.
    public func persistedState() -> PersistedState {
        PersistedState(devices: slots.sorted { $0.address < $1.address }.map {
            PersistedDevice(identity: $0.identity, wanted: $0.wanted, pairedAt: $0.pairedAt, updatedAt: $0.updatedAt,
                            bluetoothdCrashedOnLink: $0.bluetoothdCrashedOnLink ? true : nil)
        }, adapters: adapters.isEmpty ? nil : adapters)
    }

    /// One human line for `STATUS=` (what `systemctl status` shows).
    public func statusLine(now: Moment) -> String {
        var parts: [String] = []
        if let p = pairing { parts.append("pairing: \(p.phase.name)") }
        if !adapterUp { parts.append("adapter unavailable") }
        let sorted = slots.sorted { $0.address < $1.address }
        for d in sorted.prefix(3) {
            let label = d.identity.name.isEmpty ? "\(d.address)" : "\(d.identity.name) (\(d.address))"
            switch d.state {
            case .connecting(_, let attempt, _): parts.append("\(label) connecting, attempt \(attempt)")
            case .waitingForDevice: parts.append("\(label) out of range, waiting")
            case .needsRepair(.bluetoothdDiedOnLink):
                parts.append("\(label) needs re-pairing: probably reset, bluetoothd dies on its link; run pairctl pair \(d.address)")
            case .needsRepair: parts.append("\(label) needs re-pairing")
            case .restoring, .discovering, .connected, .disconnected, .adapterUnavailable:
                parts.append("\(label) \(d.state.name)")
            }
        }
        if sorted.count > 3 { parts.append("+\(sorted.count - 3) more") }
        if parts.isEmpty { return "No wearables paired" }
        return parts.joined(separator: "; ")
    }

    // MARK: Plumbing

    mutating func nextGeneration() -> UInt64 {
        generation &+= 1
        return generation
    }

    mutating func countdown(_ owner: CountdownOwner, _ purpose: CountdownPurpose, _ deadline: Moment) -> Countdown {
        Countdown(id: .init(owner: owner, purpose: purpose, generation: nextGeneration()), deadline: deadline)
    }

    /// The one place a device changes state: swaps countdowns and reports a change of name.
    mutating func move(_ i: Int, to new: DeviceState, _ now: Moment, _ actions: inout [Action],
                               reason: ReportReason? = nil, kind: Report.Kind? = nil, attempt: Int? = nil) {
        let a = slots[i].address
        let old = slots[i].state
        if let oc = old.countdown, oc.id != new.countdown?.id { actions.append(.cancel(oc.id)) }
        if let nc = new.countdown, nc.id != old.countdown?.id { actions.append(.arm(nc)) }
        slots[i].state = new
        if case .needsRepair = new, old.name != new.name {
            // Untrusted + Disconnect() turns BlueZ's auto-connect off for it (5.66 dev_disconnect):
            // neither paird nor the kernel keeps knocking with a dead key.
            actions.append(.setTrusted(a, false))
            actions.append(.disconnect(a))
        }
        if case .connected = new, !old.isConnected {
            linkSetUp(i, now, &actions)
            wedgeCleared(i)
        }
        if bluetoothd.onTrial == a, !new.isPursuing { endTrial(now, &actions) }
        let renamed = old.name != new.name
        if renamed { slots[i].since = now }
        if renamed || kind != nil {
            var reason = reason
            if reason == nil, case .needsRepair(let why) = new { reason = .repair(why) }
            actions.append(.report(Report(kind: kind ?? Self.reportKind(from: old, to: new), device: a, name: slots[i].identity.name,
                                          from: .state(old.kind), to: .state(new.kind), reason: reason, attempt: attempt)))
        }
    }

    /// Removes a device, keeping `slots` dense (the last one takes its place).
    mutating func forget(at i: Int) {
        let a = slots[i].address
        let last = slots.count - 1
        if i != last {
            slots.swapAt(i, last)
            slot[slots[i].address] = i
        }
        slots.removeLast()
        slot[a] = nil
        wedge.refused[a] = nil
        wedge.probed[a] = nil
    }

    static func reportKind(from old: DeviceState, to new: DeviceState) -> Report.Kind {
        switch new {
        case .waitingForDevice:
            switch old {
            case .connected, .discovering: return .linkLost
            case .restoring, .connecting, .waitingForDevice, .disconnected, .needsRepair, .adapterUnavailable: return .stateChanged
            }
        case .needsRepair: return .needsRepair
        case .disconnected: return .userDisconnected
        case .adapterUnavailable: return .adapterLost
        case .connected: return .connected
        case .restoring, .connecting, .discovering: return .stateChanged
        }
    }
}

extension DeviceState {
    /// The Connect call this state is waiting on, if any.
    var pendingCall: UInt64? {
        switch self {
        case .connecting(.calling(let call, _), _, _), .waitingForDevice(.fallbackConnecting(let call, _, _)): call
        case .restoring, .connecting(.backingOff, _, _), .discovering, .connected, .waitingForDevice(.onAutoConnect),
             .waitingForDevice(.fallbackDue),
             .disconnected, .needsRepair, .adapterUnavailable: nil
        }
    }
}
