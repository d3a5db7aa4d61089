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
    private var slots: [ManagedDevice] = []
    private var slot: [DeviceAddress: Int] = [:]

    /// Every managed wearable by address (a copy; for status and tests).
    public var devices: [DeviceAddress: ManagedDevice] {
        Dictionary(uniqueKeysWithValues: slots.map { ($0.address, $0) })
    }

    public func device(_ a: DeviceAddress) -> ManagedDevice? { slot[a].map { slots[$0] } }

    /// Addresses in a stable order, for loops that must not depend on hashing.
    private var sortedAddresses: [DeviceAddress] { slots.map(\.address).sorted() }
    public private(set) var pairing: PairingSession?
    public private(set) var adapterUp = false
    /// The devices BlueZ's auto-connect is armed for now (`Event.autoConnectArmed`).
    public private(set) var autoConnectArmed: Set<DeviceAddress> = []

    /// The config's durations in nanoseconds, converted once (see `Moment`).
    private let connectReplyNanos: Int64
    private let discoveryNanos: Int64
    private let fallbackNanos: Int64
    private let headStartNanos: Int64

    private var generation: UInt64 = 0
    private var rng: SplitMix64

    /// Starts with the devices of the state file, all `restoring` until `adapterReady` or `adapterLost`.
    public init(config: MachineConfig = MachineConfig(), restoring state: PersistedState? = nil, now: Moment) {
        self.config = config
        self.rng = SplitMix64(seed: config.jitterSeed)
        self.connectReplyNanos = (config.connectTimeout + config.replySlack).nanoseconds
        self.discoveryNanos = config.discoveryTimeout.nanoseconds
        self.fallbackNanos = config.fallbackInterval.nanoseconds
        self.headStartNanos = config.autoConnectHeadStart.nanoseconds
        for p in state?.devices ?? [] where slot[p.address] == nil {
            slot[p.address] = slots.count
            slots.append(ManagedDevice(
                identity: p.identity, wanted: p.wanted, state: .restoring, since: now,
                pairedAt: p.pairedAt.timeIntervalSince1970, updatedAt: p.updatedAt.timeIntervalSince1970, lastDisconnect: nil,
                reconnectAttempts: 0, setupFailures: 0, hasBeenConnected: false))
        }
    }

    /// Convenience for tests and tools; the runtime uses the `into:` form to reuse one buffer.
    public mutating func handle(_ event: Event, now: Moment) -> [Action] {
        var actions: [Action] = []
        handle(event, now: now, into: &actions)
        return actions
    }

    public mutating func handle(_ event: Event, now: Moment, into actions: inout [Action]) {
        let start = actions.endIndex
        let autoConnectBefore = autoConnectUUIDs
        defer { keepAutoConnectInStep(since: start, before: autoConnectBefore, &actions) }
        switch event {
        case .adapterReady(let views): adapterReady(views, now, &actions)
        case .adapterLost: adapterLost(now, &actions)
        case .autoConnectArmed(let devices): autoConnectArmed(devices, now, &actions)
        case .linkUp(let a): linkUp(a, now, &actions)
        case .servicesResolved(let a): servicesResolved(a, now, &actions)
        case .servicesLost(let a): servicesLost(a, now, &actions)
        case .linkProven(let a): linkProven(a)
        case .linkDown(let a, let evidence): linkDown(a, evidence, now, &actions)
        case .bondLost(let a): lostBond(a, reason: .bondRemoved, now, &actions)
        case .deviceRemoved(let a): lostBond(a, reason: .deviceRemoved, now, &actions)
        case .bondedDeviceAppeared(let a): bondedDeviceAppeared(a, now, &actions)
        case .connectSucceeded(let a, let call): connectSucceeded(a, call, now, &actions)
        case .connectFailed(let a, let call, let f): connectFailed(a, call, f, now, &actions)
        case .linkSetUp(let a, let failure): linkSetUp(a, failure, now, &actions)
        case .pairSucceeded(let a, let call): pairAnswered(a, call, failure: nil, now, &actions)
        case .pairFailed(let a, let call, let f): pairAnswered(a, call, failure: f, now, &actions)
        case .candidateFound(let c): candidateFound(c, now, &actions)
        case .discoveryFailed(let f): discoveryFailed(f, now, &actions)
        case .countdownFired(let id): countdownFired(id, now, &actions)
        case .userPair(let request): userPair(request, now, &actions)
        case .userCancelPairing: endPairing(.canceled, now, &actions)
        case .userConnect(let a): userConnect(a, now, &actions)
        case .userDisconnect(let a): userDisconnect(a, now, &actions)
        case .userUnpair(let a): userUnpair(a, now, &actions)
        }
    }

    /// BlueZ's auto-connect list follows what the machine wants, whatever changed it in this step
    /// (a state or an intent): if the step's last update (or, with none, the list before it)
    /// differs from what the machine wants now, one more update goes out at the end.
    private func keepAutoConnectInStep(since start: Int, before: [String], _ actions: inout [Action]) {
        let wanted = autoConnectUUIDs
        var last = before
        for case .updateAutoConnect(let uuids) in actions[start...] { last = uuids }
        if last != wanted { actions.append(.updateAutoConnect(wanted)) }
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
            PersistedDevice(identity: $0.identity, wanted: $0.wanted, pairedAt: $0.pairedAt, updatedAt: $0.updatedAt)
        })
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
            case .needsRepair: parts.append("\(label) needs re-pairing")
            case .restoring, .discovering, .connected, .disconnected, .adapterUnavailable:
                parts.append("\(label) \(d.state.name)")
            }
        }
        if sorted.count > 3 { parts.append("+\(sorted.count - 3) more") }
        if parts.isEmpty { return "No wearables paired" }
        return parts.joined(separator: "; ")
    }

    // MARK: Adapter

    private mutating func adapterReady(_ views: [DeviceAddress: BlueZDeviceView], _ now: Moment, _ actions: inout [Action]) {
        adapterUp = true
        for a in sortedAddresses {
            guard let i = slot[a] else { continue }
            let d = slots[i]
            switch d.state {
            case .restoring, .adapterUnavailable:
                reconcile(i, view: views[a] ?? .absent, now, &actions)
            case .connecting, .discovering, .connected, .waitingForDevice, .disconnected, .needsRepair:
                break // already in step with BlueZ
            }
        }
        actions.append(.updateAutoConnect(autoConnectUUIDs))
    }

    /// Restoration: what the state file wants, against what BlueZ has now. A link that is up is
    /// adopted (no disconnect, no reconnect).
    private mutating func reconcile(_ i: Int, view: BlueZDeviceView, _ now: Moment, _ actions: inout [Action]) {
        let a = slots[i].address
        let d = slots[i]
        if d.wanted == .disconnected {
            move(i, to: .disconnected, now, &actions)
        } else if !view.exists {
            move(i, to: .needsRepair(reason: .deviceRemoved), now, &actions)
        } else if !view.bonded {
            move(i, to: .needsRepair(reason: .bondRemoved), now, &actions)
        } else if view.connected {
            slots[i].linkResolved = view.servicesResolved
            slots[i].adoptedUnresolved = !view.servicesResolved
            slots[i].ownDisconnectPending = false
            slots[i].linkProven = false
            slots[i].linkUpAt = now
            slots[i].setupVerdict = nil
            move(i, to: .discovering(countdown: countdown(.device(a), .discovery, now.advanced(byNanoseconds: discoveryNanos))), now, &actions)
            if view.servicesResolved { actions.append(.setUpLink(a)) }
        } else {
            restoreConnect(i, now, &actions)
        }
    }

    /// A wanted, bonded device that is not connected after a (re)start, the adapter's return or
    /// the user's `connect`: the kernel's auto-connect first (the wearable may be advertising right
    /// now), one Connect() of our own when `autoConnectHeadStart` runs out, as after any wait;
    /// 0 = Connect() at once.
    private mutating func restoreConnect(_ i: Int, _ now: Moment, _ actions: inout [Action]) {
        guard headStartNanos > 0 else { return startConnect(i, attempt: 1, now, &actions) }
        let a = slots[i].address
        move(i, to: .waitingForDevice(.fallbackDue(countdown: countdown(.device(a), .fallbackConnect, now.advanced(byNanoseconds: headStartNanos)))),
             now, &actions)
    }

    /// BlueZ arms the kernel's auto-connect for a bonded device offering a service our registered
    /// GattProfile1 lists (bluez-notes §4; 5.66 `probe_service` → `device_set_auto_connect`).
    private func autoConnectCovers(_ i: Int) -> Bool {
        autoConnectArmed.contains(slots[i].address)
    }

    /// What BlueZ arms changed. A device waiting on an auto-connect that is no longer armed for
    /// it gets its fallback Connect() timer back; one with a fallback already due keeps it.
    private mutating func autoConnectArmed(_ devices: Set<DeviceAddress>, _ now: Moment, _ actions: inout [Action]) {
        autoConnectArmed = devices
        for a in sortedAddresses {
            guard let i = slot[a], slots[i].state == .waitingForDevice(.onAutoConnect), !autoConnectCovers(i) else { continue }
            waitPassively(i, now, &actions)
        }
    }

    private mutating func adapterLost(_ now: Moment, _ actions: inout [Action]) {
        adapterUp = false
        for a in sortedAddresses {
            guard let i = slot[a] else { continue }
            let d = slots[i]
            switch d.state {
            case .restoring, .connecting, .discovering, .connected, .waitingForDevice:
                move(i, to: .adapterUnavailable, now, &actions, reason: "adapter-gone")
            case .adapterUnavailable, .disconnected, .needsRepair:
                break
            }
        }
        endPairing(.adapterUnavailable, now, &actions)
    }

    // MARK: Link events

    private mutating func linkUp(_ a: DeviceAddress, _ now: Moment, _ actions: inout [Action]) {
        guard let i = slot[a] else { return }
        let d = slots[i]
        slots[i].linkResolved = false
        slots[i].adoptedUnresolved = false
        slots[i].ownDisconnectPending = false // a new link: the old one went down unseen
        slots[i].linkProven = false
        slots[i].linkUpAt = now
        slots[i].setupVerdict = nil
        switch d.state {
        case .connecting, .waitingForDevice:
            move(i, to: .discovering(countdown: countdown(.device(a), .discovery, now.advanced(byNanoseconds: discoveryNanos))), now, &actions)
        case .disconnected:
            actions.append(.disconnect(a)) // the user wants it down: something else brought it up
        case .restoring, .discovering, .connected, .needsRepair, .adapterUnavailable:
            break
        }
    }

    private mutating func servicesResolved(_ a: DeviceAddress, _ now: Moment, _ actions: inout [Action]) {
        guard let i = slot[a] else { return }
        let d = slots[i]
        slots[i].linkResolved = true
        slots[i].adoptedUnresolved = false
        slots[i].setupVerdict = nil // a new set-up of the link begins
        switch d.state {
        case .connecting, .waitingForDevice:
            // A reconnect made by Connect() often signals no Connected=true: resolved means usable.
            if d.linkUpAt == nil { slots[i].linkUpAt = now; slots[i].linkProven = false }
            move(i, to: .discovering(countdown: countdown(.device(a), .discovery, now.advanced(byNanoseconds: discoveryNanos))), now, &actions)
            actions.append(.setUpLink(a))
        case .discovering:
            actions.append(.setUpLink(a))
        case .disconnected:
            actions.append(.disconnect(a))
        case .restoring, .connected, .needsRepair, .adapterUnavailable:
            break
        }
    }

    /// A usable link lost its services without dropping: treat it as a link being set up again,
    /// so the discovery countdown (and, if it keeps failing, the lost-bond heuristic) decides.
    /// The wearable must answer again before the link counts as proven (BlueZ forgets the
    /// proof with the services). Losing them on an unproven link within `proofWindow` of its
    /// set-up counts as a failed setup, like a quick unproven drop: on the 6.12 bed a wearable that
    /// forgot its bond can keep the link up while ServicesResolved turns false and true again
    /// (4–35 s apart), and without this paird reported `reconnected` forever. Either way the set-up gets
    /// its `setupVerdict`, so a drop right after is not counted again.
    private mutating func servicesLost(_ a: DeviceAddress, _ now: Moment, _ actions: inout [Action]) {
        guard let i = slot[a] else { return }
        slots[i].linkResolved = false
        guard case .connected = slots[i].state else { return }
        let d = slots[i]
        slots[i].linkProven = false
        slots[i].linkUpAt = now // the set-up starts again: so does the window for its proof
        let counted = d.setupVerdict == nil && unprovenWithinProofWindow(d, now)
        if d.setupVerdict == nil { slots[i].setupVerdict = counted ? .counted : .excused }
        if counted, countSetupFailure(i) {
            move(i, to: .needsRepair(reason: .suspectedBondLoss), now, &actions)
            return
        }
        move(i, to: .discovering(countdown: countdown(.device(a), .discovery, now.advanced(byNanoseconds: discoveryNanos))),
             now, &actions, reason: "services-lost")
    }

    private mutating func linkSetUp(_ a: DeviceAddress, _ failure: BlueZFailure?, _ now: Moment, _ actions: inout [Action]) {
        guard let i = slot[a], case .discovering = slots[i].state else { return }
        let d = slots[i]
        guard let failure else {
            // A reply to a set-up made before the services went: its subscriptions went with them.
            // The set-up that follows their return decides.
            guard d.linkResolved else { return }
            let kind: Report.Kind = d.hasBeenConnected ? .reconnected : .connected
            let attempts = d.reconnectAttempts
            slots[i].hasBeenConnected = true
            slots[i].reconnectAttempts = 0
            slots[i].ownDisconnectPending = false // bounded: a drop it would have excused is a loss now
            move(i, to: .connected, now, &actions, kind: kind, attempt: attempts)
            if case .settling(a)? = pairing?.phase {
                endPairing(.success(a, name: d.identity.name), now, &actions)
            }
            return
        }
        switch ConnectFailureClassifier.classify(failure, elapsed: .zero, absentAfter: config.absentAfter) {
        case .bondLost: move(i, to: .needsRepair(reason: RepairReason(bondFailure: failure)), now, &actions)
        case .adapterGone, .transient, .deviceAbsent: break // the link-down signal or the discovery countdown decides
        }
    }

    private mutating func linkDown(_ a: DeviceAddress, _ e: DisconnectClassifier.Evidence, _ now: Moment, _ actions: inout [Action]) {
        guard let i = slot[a] else { return }
        let d = slots[i]
        slots[i].linkResolved = false
        slots[i].adoptedUnresolved = false
        slots[i].ownDisconnectPending = false
        slots[i].linkProven = false
        slots[i].linkUpAt = nil
        slots[i].setupVerdict = nil
        let verdict = DisconnectClassifier.classify(e, weAskedForIt: d.ownDisconnectPending)
        switch d.state {
        case .connected, .discovering:
            switch verdict {
            case .requested where d.ownDisconnectPending:
                // The link we dropped at the discovery timeout, after a Connect that it answered
                // while still up: the wearable was there a moment ago, so connect again now.
                startConnect(i, attempt: 1, now, &actions)
            case .linkLoss(let reason):
                slots[i].lastDisconnect = .init(reason: reason, at: now)
                if d.setupVerdict == nil, unprovenWithinProofWindow(d, now), countSetupFailure(i) {
                    move(i, to: .needsRepair(reason: .suspectedBondLoss), now, &actions)
                } else {
                    waitPassively(i, now, &actions, reason: reason)
                }
            case .requested:
                // Unreachable with weAskedForIt == false (our own disconnects leave these states
                // first); in a release build, waiting is the state that forgets nothing.
                assertionFailure("linkDown: 'requested' verdict without a disconnect of ours pending (\(a))")
                slots[i].lastDisconnect = .init(reason: "local", at: now)
                waitPassively(i, now, &actions, reason: "local")
            case .bondLost(let reason):
                slots[i].lastDisconnect = .init(reason: reason.token, at: now)
                move(i, to: .needsRepair(reason: reason), now, &actions)
            case .adapterGone:
                slots[i].lastDisconnect = .init(reason: "adapter-gone", at: now)
                move(i, to: .adapterUnavailable, now, &actions, reason: "adapter-gone")
            }
        case .connecting, .waitingForDevice:
            // A Connect (ours or the kernel's) did not take; only a lost bond changes the plan.
            if case .bondLost(let reason) = verdict {
                move(i, to: .needsRepair(reason: reason), now, &actions)
            }
        case .restoring, .disconnected, .needsRepair, .adapterUnavailable:
            break
        }
    }

    private mutating func lostBond(_ a: DeviceAddress, reason: RepairReason, _ now: Moment, _ actions: inout [Action]) {
        guard let i = slot[a] else { return }
        let d = slots[i]
        switch d.state {
        case .connecting, .discovering, .connected, .waitingForDevice, .disconnected:
            move(i, to: .needsRepair(reason: reason), now, &actions)
        case .restoring, .adapterUnavailable, .needsRepair:
            break // BlueZ drops every object when bluetoothd or the adapter goes: reconciliation decides
        }
    }

    /// Only a device marked "removed from BlueZ" comes back this way (a lost *bond* needs pairing).
    private mutating func bondedDeviceAppeared(_ a: DeviceAddress, _ now: Moment, _ actions: inout [Action]) {
        guard adapterUp, let i = slot[a], slots[i].state == .needsRepair(reason: .deviceRemoved) else { return }
        slots[i].setupFailures = 0
        if slots[i].wanted == .disconnected {
            move(i, to: .disconnected, now, &actions)
            return
        }
        actions.append(.setTrusted(a, true))
        restoreConnect(i, now, &actions)
        actions.append(.updateAutoConnect(autoConnectUUIDs))
    }

    // MARK: Connect

    private mutating func startConnect(_ i: Int, attempt: Int, _ now: Moment, _ actions: inout [Action]) {
        let a = slots[i].address
        let call = nextGeneration()
        slots[i].reconnectAttempts += 1
        move(i, to: .connecting(.calling(call: call, startedAt: now), attempt: attempt,
                                countdown: countdown(.device(a), .connectReply, now.advanced(byNanoseconds: connectReplyNanos))),
             now, &actions, attempt: attempt)
        actions.append(.connect(a, call: call, timeout: config.connectTimeout))
    }

    private mutating func fallbackConnect(_ i: Int, _ now: Moment, _ actions: inout [Action]) {
        let a = slots[i].address
        let call = nextGeneration()
        slots[i].reconnectAttempts += 1
        move(i, to: .waitingForDevice(.fallbackConnecting(call: call, startedAt: now,
                                               countdown: countdown(.device(a), .connectReply, now.advanced(byNanoseconds: connectReplyNanos)))),
             now, &actions)
        actions.append(.connect(a, call: call, timeout: config.connectTimeout))
    }

    /// Out of range: the kernel's auto-connect waits for it, with no timer of ours while it is
    /// armed for this device (no wake-ups however long the wearable is away, and no Connect() to
    /// meet the wearable as it returns: BENCHMARKS.md finding 15); otherwise one fallback
    /// Connect() every `fallbackInterval`.
    private mutating func waitPassively(_ i: Int, _ now: Moment, _ actions: inout [Action], reason: String? = nil) {
        let a = slots[i].address
        let phase: DeviceState.WaitPhase = autoConnectCovers(i)
            ? .onAutoConnect
            : .fallbackDue(countdown: countdown(.device(a), .fallbackConnect, now.advanced(byNanoseconds: fallbackNanos)))
        move(i, to: .waitingForDevice(phase), now, &actions, reason: reason)
    }

    private mutating func connectSucceeded(_ a: DeviceAddress, _ call: UInt64, _ now: Moment, _ actions: inout [Action]) {
        guard let i = slot[a], slots[i].state.pendingCall == call else { return }
        slots[i].linkResolved = false
        slots[i].adoptedUnresolved = false
        slots[i].linkProven = false
        slots[i].linkUpAt = now
        slots[i].setupVerdict = nil
        move(i, to: .discovering(countdown: countdown(.device(a), .discovery, now.advanced(byNanoseconds: discoveryNanos))), now, &actions)
    }

    private mutating func connectFailed(_ a: DeviceAddress, _ call: UInt64, _ f: BlueZFailure, _ now: Moment, _ actions: inout [Action]) {
        guard let i = slot[a], slots[i].state.pendingCall == call else { return }
        let d = slots[i]
        connectDidNotTake(i, d.state, f, now, &actions)
    }

    /// A Connect failed or never answered: decide between retry, wait, repair and adapter loss.
    private mutating func connectDidNotTake(_ i: Int, _ state: DeviceState, _ f: BlueZFailure, _ now: Moment, _ actions: inout [Action]) {
        let a = slots[i].address
        let startedAt: Moment
        /// The attempt number of a Connect that a transient failure may retry at once, with backoff;
        /// nil for a fallback Connect (its failure goes back to waiting).
        let retryable: Int?
        switch state {
        case .connecting(.calling(_, let s), let n, _): startedAt = s; retryable = n < config.fastAttempts ? n : nil
        case .waitingForDevice(.fallbackConnecting(_, let s, _)): startedAt = s; retryable = nil
        case .restoring, .connecting(.backingOff, _, _), .discovering, .connected, .waitingForDevice(.onAutoConnect), .waitingForDevice(.fallbackDue),
             .disconnected, .needsRepair, .adapterUnavailable:
            return
        }
        let verdict = ConnectFailureClassifier.classify(f, elapsed: now.since(startedAt), absentAfter: config.absentAfter)
        if verdict == .transient, f == .abortedByLocal, countSetupFailure(i) {
            // The wearable answered (no 40 s wait) yet the link never came up, again and again:
            // on 5.66 this is how a wearable that forgot its bond looks (encryption fails).
            move(i, to: .needsRepair(reason: .suspectedBondLoss), now, &actions)
            return
        }
        switch verdict {
        case .transient where retryable != nil:
            let attempt = retryable!
            let delay = config.backoff.delay(attempt: attempt, unit: rng.nextUnit())
            move(i, to: .connecting(.backingOff, attempt: attempt, countdown: countdown(.device(a), .retryBackoff, now + delay)),
                 now, &actions, reason: f.token, attempt: attempt)
        case .transient, .deviceAbsent:
            waitPassively(i, now, &actions, reason: f.token)
        case .bondLost:
            move(i, to: .needsRepair(reason: RepairReason(bondFailure: f)), now, &actions)
        case .adapterGone:
            move(i, to: .adapterUnavailable, now, &actions, reason: f.token)
        }
    }

    // MARK: Countdowns

    private mutating func countdownFired(_ id: Countdown.ID, _ now: Moment, _ actions: inout [Action]) {
        switch id.owner {
        case .pairing:
            guard let p = pairing, p.countdown.id == id else { return }
            switch p.phase {
            case .scanning: endPairing(.noDeviceFound, now, &actions)
            case .pairing: endPairing(.timedOut(phase: "pairing"), now, &actions)
            case .settling: endPairing(.timedOut(phase: "connecting"), now, &actions)
            }
        case .device(let a):
            guard let i = slot[a], slots[i].state.countdown?.id == id else { return } // stale: ignored
            let d = slots[i]
            switch d.state {
            case .connecting(.calling, _, _), .waitingForDevice(.fallbackConnecting):
                connectDidNotTake(i, d.state, .noReply, now, &actions)
            case .connecting(.backingOff, let attempt, _):
                startConnect(i, attempt: attempt + 1, now, &actions)
            case .discovering:
                // Not usable in time: drop this link and start over (it is our own disconnect,
                // so the link-down that follows finds us `connecting` and is not a link loss).
                // Only a link whose services never resolved counts toward the lost-bond heuristic.
                // An adopted link that never resolved is no evidence either (see adoptedUnresolved).
                if !d.linkResolved, !d.adoptedUnresolved, d.setupVerdict != .counted, countSetupFailure(i) { // entering needsRepair disconnects too
                    move(i, to: .needsRepair(reason: .suspectedBondLoss), now, &actions)
                    return
                }
                slots[i].adoptedUnresolved = false
                slots[i].ownDisconnectPending = true
                actions.append(.disconnect(a))
                let delay = config.backoff.delay(attempt: 1, unit: rng.nextUnit())
                move(i, to: .connecting(.backingOff, attempt: 1, countdown: countdown(.device(a), .retryBackoff, now + delay)),
                     now, &actions, reason: "discovery-timeout")
            case .waitingForDevice(.fallbackDue):
                fallbackConnect(i, now, &actions)
            case .restoring, .connected, .waitingForDevice(.onAutoConnect), .disconnected, .needsRepair, .adapterUnavailable:
                // Untimed states carry no countdown, so the guard above already returned.
                assertionFailure("countdown \(id) fired in the untimed state \(d.state.name)")
            }
        }
    }

    // MARK: Pairing

    private mutating func userPair(_ request: PairRequest, _ now: Moment, _ actions: inout [Action]) {
        guard pairing == nil else { return } // the runtime refuses a second session before it gets here
        guard adapterUp else {
            actions.append(.pairingEnded(.adapterUnavailable))
            return
        }
        var removed = Set<DeviceAddress>()
        if let a = request.address, let i = slot[a] {
            let d = slots[i]
            switch d.state {
            case .needsRepair:
                actions.append(.pairingProgress(.removingStaleBond(a)))
                actions.append(.removeDevice(a))
                removed.insert(a)
            case .restoring, .connecting, .discovering, .connected, .waitingForDevice, .disconnected, .adapterUnavailable:
                actions.append(.pairingEnded(.alreadyPaired(a)))
                return
            }
        }
        let c = countdown(.pairing, .scan, now + (request.scanTimeout ?? config.scanTimeout))
        pairing = PairingSession(request: request, phase: .scanning, countdown: c, removedForRepair: removed)
        actions.append(.arm(c))
        actions.append(.startDiscovery(request))
        actions.append(.pairingProgress(.scanning))
    }

    private mutating func candidateFound(_ c: Candidate, _ now: Moment, _ actions: inout [Action]) {
        guard var p = pairing, case .scanning = p.phase, p.request.matches(c) else { return }
        if let i = slot[c.address] {
            let d = slots[i]
            switch d.state {
            case .needsRepair:
                if !p.removedForRepair.contains(c.address) {
                    // BlueZ still holds the dead bond; Pair() would answer AlreadyExists. Forget it
                    // and let the next advertisement bring a fresh device object.
                    p.removedForRepair.insert(c.address)
                    pairing = p
                    actions.append(.pairingProgress(.removingStaleBond(c.address)))
                    actions.append(.removeDevice(c.address))
                    return
                }
            case .restoring, .connecting, .discovering, .connected, .waitingForDevice, .disconnected, .adapterUnavailable:
                return // already managed
            }
        }
        let call = nextGeneration()
        let cd = countdown(.pairing, .pair, now + config.pairTimeout)
        actions.append(.cancel(p.countdown.id))
        actions.append(.arm(cd))
        p.phase = .pairing(c, call: call)
        p.countdown = cd
        pairing = p
        actions.append(.stopDiscovery)
        actions.append(.pairingProgress(.found(c)))
        actions.append(.pairingProgress(.pairing(c.address)))
        actions.append(.pair(c.address, call: call, timeout: config.pairTimeout))
    }

    private mutating func pairAnswered(_ a: DeviceAddress, _ call: UInt64, failure: BlueZFailure?, _ now: Moment, _ actions: inout [Action]) {
        guard var p = pairing, case .pairing(let c, call) = p.phase, c.address == a else { return }
        if let failure, failure != .alreadyExists {
            switch failure {
            case .authentication, .authenticationAborted:
                endPairing(.authenticationFailed(failure.token), now, &actions)
            case .abortedByLocal, .abortedByRemote, .connectTimeout, .noReply, .busy, .canceled, .adapterUnavailable,
                 .alreadyExists, .deviceGone, .notConnected, .other:
                endPairing(.failed(failure.token), now, &actions)
            }
            return
        }
        // Bonded. Record identity and intent, trust it, and bring the link to `connected`.
        var uuids = Set(p.request.serviceUUIDs)
        uuids.formUnion(c.serviceUUIDs)
        let identity = DeviceIdentity(address: a, addressType: c.addressType, name: c.name,
                                      adapter: config.adapter, serviceUUIDs: uuids.sorted())
        if let i = slot[a] {
            slots[i].identity = identity
            slots[i].wanted = .connected
            slots[i].pairedAt = now.unixTime
            slots[i].updatedAt = now.unixTime
            slots[i].setupFailures = 0
        } else {
            slot[a] = slots.count
            slots.append(ManagedDevice(identity: identity, wanted: .connected, state: .restoring, since: now,
                                       pairedAt: now.unixTime, updatedAt: now.unixTime, lastDisconnect: nil,
                                       reconnectAttempts: 0, setupFailures: 0, hasBeenConnected: false))
        }
        let settle = countdown(.pairing, .settle, now + config.connectTimeout + config.discoveryTimeout)
        actions.append(.cancel(p.countdown.id))
        actions.append(.arm(settle))
        p.phase = .settling(a)
        p.countdown = settle
        pairing = p
        actions.append(.persist)
        actions.append(.report(Report(kind: .paired, device: a, name: c.name, to: "paired")))
        actions.append(.pairingProgress(.paired(a)))
        actions.append(.setTrusted(a, true))
        if let i = slot[a] { startConnect(i, attempt: 1, now, &actions) }
        actions.append(.updateAutoConnect(autoConnectUUIDs))
    }

    private mutating func discoveryFailed(_ f: BlueZFailure, _ now: Moment, _ actions: inout [Action]) {
        guard let p = pairing, case .scanning = p.phase else { return }
        endPairing(.failed(f.token), now, &actions)
    }

    private mutating func endPairing(_ outcome: PairingOutcome, _ now: Moment, _ actions: inout [Action]) {
        guard let p = pairing else { return }
        pairing = nil
        actions.append(.cancel(p.countdown.id))
        switch p.phase {
        case .scanning: actions.append(.stopDiscovery)
        case .pairing(let c, _): actions.append(.cancelPairing(c.address))
        case .settling: break
        }
        if !outcome.succeeded {
            actions.append(.report(Report(kind: .pairingFailed, device: nil, to: p.phase.name, reason: "\(outcome)")))
        }
        actions.append(.pairingEnded(outcome))
    }

    // MARK: User intent

    /// Records the user's intent; intent is what the state file is for, so a change is persisted.
    private mutating func setWanted(_ i: Int, _ wanted: Wanted, _ now: Moment, _ actions: inout [Action]) {
        guard slots[i].wanted != wanted else { return }
        slots[i].wanted = wanted
        slots[i].updatedAt = now.unixTime
        actions.append(.persist)
    }

    private mutating func userConnect(_ a: DeviceAddress, _ now: Moment, _ actions: inout [Action]) {
        guard let i = slot[a] else { return }
        let d = slots[i]
        setWanted(i, .connected, now, &actions)
        switch d.state {
        case .disconnected:
            actions.append(.setTrusted(a, true))
            if adapterUp {
                // The auto-connect list gets it back below, so the kernel connects it as soon as it
                // advertises; a Connect() of ours at the same moment made two links (finding 16).
                slots[i].reconnectAttempts = 0
                restoreConnect(i, now, &actions)
            } else {
                move(i, to: .adapterUnavailable, now, &actions)
            }
            actions.append(.updateAutoConnect(autoConnectUUIDs))
        case .waitingForDevice(.onAutoConnect), .waitingForDevice(.fallbackDue):
            fallbackConnect(i, now, &actions) // asked for: one Connect() now, whatever the auto-connect does
        case .connecting(.backingOff, let attempt, _):
            startConnect(i, attempt: attempt + 1, now, &actions)
        case .restoring, .connecting(.calling, _, _), .discovering, .connected, .waitingForDevice(.fallbackConnecting),
             .needsRepair, .adapterUnavailable:
            break
        }
    }

    private mutating func userDisconnect(_ a: DeviceAddress, _ now: Moment, _ actions: inout [Action]) {
        guard let i = slot[a] else { return }
        let d = slots[i]
        setWanted(i, .disconnected, now, &actions)
        switch d.state {
        case .connecting, .discovering, .connected, .waitingForDevice:
            // Untrusted + Disconnect() also turns BlueZ's auto-connect off for it (device.c dev_disconnect).
            actions.append(.setTrusted(a, false))
            actions.append(.disconnect(a))
            move(i, to: .disconnected, now, &actions, reason: "user")
            actions.append(.updateAutoConnect(autoConnectUUIDs))
        case .restoring, .adapterUnavailable:
            move(i, to: .disconnected, now, &actions, reason: "user")
            actions.append(.updateAutoConnect(autoConnectUUIDs))
        case .disconnected, .needsRepair:
            break
        }
    }

    private mutating func userUnpair(_ a: DeviceAddress, _ now: Moment, _ actions: inout [Action]) {
        guard let i = slot[a] else { return }
        let d = slots[i]
        if let c = d.state.countdown { actions.append(.cancel(c.id)) }
        if case .settling(a)? = pairing?.phase { endPairing(.canceled, now, &actions) }
        forget(at: i)
        actions.append(.removeDevice(a))
        actions.append(.persist)
        actions.append(.report(Report(kind: .unpaired, device: a, name: d.identity.name, from: d.state.name, to: "unpaired")))
        actions.append(.updateAutoConnect(autoConnectUUIDs))
    }

    // MARK: Plumbing

    private mutating func nextGeneration() -> UInt64 {
        generation &+= 1
        return generation
    }

    private mutating func countdown(_ owner: CountdownOwner, _ purpose: CountdownPurpose, _ deadline: Moment) -> Countdown {
        Countdown(id: .init(owner: owner, purpose: purpose, generation: nextGeneration()), deadline: deadline)
    }

    /// The one place a device changes state: swaps countdowns and reports a change of name.
    private mutating func move(_ i: Int, to new: DeviceState, _ now: Moment, _ actions: inout [Action],
                               reason: String? = nil, kind: Report.Kind? = nil, attempt: Int? = nil) {
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
        let renamed = old.name != new.name
        if renamed { slots[i].since = now }
        if renamed || kind != nil {
            var reason = reason
            if reason == nil, case .needsRepair(let why) = new { reason = why.token }
            actions.append(.report(Report(kind: kind ?? Self.reportKind(from: old, to: new), device: a, name: slots[i].identity.name,
                                          from: old.name, to: new.name, reason: reason, attempt: attempt)))
        }
        if case .needsRepair = new, renamed {
            // A device that needs pairing again leaves the auto-connect list, whichever way it got here.
            actions.append(.updateAutoConnect(autoConnectUUIDs))
        }
    }

    /// The wearable answered over the link: the bond works, and the failed setups before it were not
    /// a lost bond.
    private mutating func linkProven(_ a: DeviceAddress) {
        guard let i = slot[a] else { return }
        slots[i].linkProven = true
        slots[i].setupFailures = 0
    }

    /// The current set-up failed (the link dropped, or lost its services) within
    /// `MachineConfig.proofWindow` of its start without the wearable ever answering over it; a
    /// link adopted unresolved says nothing (`adoptedUnresolved`).
    private func unprovenWithinProofWindow(_ d: ManagedDevice, _ now: Moment) -> Bool {
        guard !d.linkProven, !d.adoptedUnresolved else { return false }
        guard let up = d.linkUpAt else {
            assertionFailure("a set-up judged with no link-up time (\(d.address)): every way up sets it")
            return true
        }
        return now.since(up) < config.proofWindow
    }

    /// Counts a link that came up (or a Connect the wearable answered) but never became usable.
    /// BlueZ 5.66 does not say why (the reason stays below D-Bus); several in a row are how a
    /// lost bond looks, and chasing it would be a reconnect loop. True at the threshold.
    private mutating func countSetupFailure(_ i: Int) -> Bool {
        slots[i].setupFailures += 1
        return slots[i].setupFailures >= config.setupFailuresBeforeRepair
    }

    /// Removes a device, keeping `slots` dense (the last one takes its place).
    private mutating func forget(at i: Int) {
        let a = slots[i].address
        let last = slots.count - 1
        if i != last {
            slots.swapAt(i, last)
            slot[slots[i].address] = i
        }
        slots.removeLast()
        slot[a] = nil
    }

    private static func reportKind(from old: DeviceState, to new: DeviceState) -> Report.Kind {
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
