#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A link's life: up, services resolved or lost, set up, proven, down (classified), and the bond
/// lost or back; the lost-bond heuristic's counting.
extension PairingMachine {
    // MARK: Link events

    mutating func linkUp(_ a: DeviceAddress, _ now: Moment, _ actions: inout [Action]) {
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

    mutating func servicesResolved(_ a: DeviceAddress, _ now: Moment, _ actions: inout [Action]) {
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
    mutating func servicesLost(_ a: DeviceAddress, _ now: Moment, _ actions: inout [Action]) {
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

    mutating func setUpLinkFinished(_ a: DeviceAddress, _ failure: BlueZFailure?, _ now: Moment, _ actions: inout [Action]) {
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

    mutating func linkDown(_ a: DeviceAddress, _ e: DisconnectClassifier.Evidence, _ now: Moment, _ actions: inout [Action]) {
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

    mutating func lostBond(_ a: DeviceAddress, reason: RepairReason, _ now: Moment, _ actions: inout [Action]) {
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
    mutating func bondedDeviceAppeared(_ a: DeviceAddress, _ now: Moment, _ actions: inout [Action]) {
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


    /// The wearable answered over the link: the bond works, and the failed setups before it were not
    /// a lost bond.
    mutating func linkProven(_ a: DeviceAddress) {
        guard let i = slot[a] else { return }
        slots[i].linkProven = true
        slots[i].setupFailures = 0
    }

    /// The current set-up failed (the link dropped, or lost its services) within
    /// `MachineConfig.proofWindow` of its start without the wearable ever answering over it; a
    /// link adopted unresolved says nothing (`adoptedUnresolved`).
    func unprovenWithinProofWindow(_ d: ManagedDevice, _ now: Moment) -> Bool {
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
    mutating func countSetupFailure(_ i: Int) -> Bool {
        slots[i].setupFailures += 1
        return slots[i].setupFailures >= config.setupFailuresBeforeRepair
    }
}
