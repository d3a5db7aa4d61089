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
        guard let i = slot[a] else {
            leftoverLinkUp(a, now, &actions)
            return
        }
        slots[i].ownDrop = nil // a new link: the old one went down unseen
        slots[i].linkUpAt = now // for `attributeDeparture`
        let fresh = Link(upAt: now)
        // Every fresh link gets the resolve countdown (a link whose ATT answers stall, or the
        // first link after a bluetoothd crash, which may be the kernel's kept one that the new
        // bluetoothd never resolves: bed, 3 of 7 set-up crashes); resolved, the discovery one.
        switch slots[i].state {
        case .connecting, .waitingForDevice:
            move(i, to: .discovering(fresh, countdown: resolveCountdown(a, now)), now, &actions)
        case .discovering(_, let c):
            slots[i].state = .discovering(fresh, countdown: c)
        case .connected:
            // A new link under a set-up one (the old went down unseen): its health starts over.
            move(i, to: .connected(fresh, health: .quiet), now, &actions)
        case .disconnected:
            actions.append(.disconnect(a)) // the user wants it down: something else brought it up
        case .needsRepair:
            dropRepairLink(a, &actions)
        case .restoring, .adapterUnavailable:
            break
        }
    }

    /// A link up to a wearable that needs pairing again is dropped, whenever it comes up, unless
    /// it is the pairing's own `Pair()` to it: entering `needsRepair` turns the auto-connect off
    /// (`move`), but the kernel's pending connection can still win that race (seen 50 ms after,
    /// issue 30), and while the link lasts the wearable does not advertise, so no scan finds it.
    mutating func dropRepairLink(_ a: DeviceAddress, _ actions: inout [Action]) {
        if case .pairing(let c, _, _)? = pairing?.phase, c.address == a { return }
        actions.append(.disconnect(a))
    }

    mutating func servicesResolved(_ a: DeviceAddress, _ now: Moment, _ actions: inout [Action]) {
        guard let i = slot[a] else { return }
        switch slots[i].state {
        case .connecting, .waitingForDevice:
            // A reconnect made by Connect() often signals no Connected=true: resolved means usable.
            // The link we asked to drop, still up and resolving late, keeps its age and proof.
            let link = slots[i].ownDrop.map { Link(upAt: $0.upAt, resolved: true, proven: $0.proven) }
                ?? Link(upAt: now, resolved: true)
            move(i, to: .discovering(link, countdown: discoveryCountdown(a, now)), now, &actions)
            actions.append(.setUpLink(a))
        case .discovering(var link, let c):
            if c.id.purpose == .resolve, !link.resolved, !link.adoptedUnresolved {
                learnResolveTime(i, now.since(link.upAt))
            }
            link.resolved = true; link.adoptedUnresolved = false; link.setupVerdict = nil // a new set-up begins
            if c.id.purpose == .resolve {
                // Resolved in time: the rest of the set-up gets the discovery countdown.
                move(i, to: .discovering(link, countdown: discoveryCountdown(a, now)), now, &actions)
            } else {
                slots[i].state = .discovering(link, countdown: c)
            }
            actions.append(.setUpLink(a))
        case .connected:
            updateLink(i) { $0.resolved = true; $0.adoptedUnresolved = false; $0.setupVerdict = nil }
        case .disconnected:
            actions.append(.disconnect(a))
        case .needsRepair:
            dropRepairLink(a, &actions) // BlueZ may say ServicesResolved without Connected=true
        case .restoring, .adapterUnavailable:
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
        updateLink(i) { $0.resolved = false }
        guard case .connected(let old, _) = slots[i].state else { return }
        let counted = old.setupVerdict == nil && unprovenWithinProofWindow(old, now)
        if counted, countSetupFailure(i) {
            move(i, to: .needsRepair(reason: .suspectedBondLoss), now, &actions)
            return
        }
        // The set-up starts again: so does the window for its proof.
        let link = Link(upAt: now, setupVerdict: old.setupVerdict ?? (counted ? .counted : .excused))
        move(i, to: .discovering(link, countdown: discoveryCountdown(a, now)), now, &actions, reason: .servicesLost)
    }

    mutating func setUpLinkFinished(_ a: DeviceAddress, _ failure: BlueZFailure?, _ now: Moment, _ actions: inout [Action]) {
        guard let i = slot[a], case .discovering(let link, _) = slots[i].state else { return }
        let d = slots[i]
        guard let failure else {
            // A reply to a set-up made before the services went: its subscriptions went with them.
            // The set-up that follows their return decides.
            guard link.resolved else { return }
            let kind: Report.Kind = d.hasBeenConnected ? .reconnected : .connected
            let attempts = d.reconnectAttempts
            slots[i].hasBeenConnected = true
            slots[i].reconnectAttempts = 0
            slots[i].ownDrop = nil // bounded: a drop it would have excused is a loss now
            move(i, to: .connected(link, health: initialHealth(i, link, now)), now, &actions, kind: kind, attempt: attempts)
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
        let ownDrop = slots[i].ownDrop != nil
        slots[i].ownDrop = nil
        let verdict = DisconnectClassifier.classify(e, weAskedForIt: ownDrop)
        switch slots[i].state {
        // (A `where` binds to the last pattern only: one case per state.)
        case .connected(let link, _) where sleepTookLink(i, link, now) && verdict.mayBeSleep:
            letGoForSleep(i, now, &actions)
        case .discovering(let link, _) where sleepTookLink(i, link, now) && verdict.mayBeSleep:
            letGoForSleep(i, now, &actions)
        case .connected(let link, _), .discovering(let link, _):
            switch verdict {
            case .requested where ownDrop:
                // The link we dropped at the discovery timeout, after a Connect that it answered
                // while still up: the wearable was there a moment ago, so connect again now.
                startConnect(i, attempt: 1, now, &actions)
            case .linkLoss(let reason):
                slots[i].lastDisconnect = .init(reason: .linkLoss(reason), at: now)
                if link.setupVerdict == nil, unprovenWithinProofWindow(link, now), countSetupFailure(i) {
                    move(i, to: .needsRepair(reason: .suspectedBondLoss), now, &actions)
                } else {
                    waitPassively(i, now, &actions, reason: .linkLoss(reason))
                }
            case .requested:
                // Unreachable with weAskedForIt == false (our own disconnects leave these states
                // first); in a release build, waiting is the state that forgets nothing.
                assertionFailure("linkDown: 'requested' verdict without a disconnect of ours pending (\(a))")
                slots[i].lastDisconnect = .init(reason: .local, at: now)
                waitPassively(i, now, &actions, reason: .local)
            case .bondLost(let reason):
                slots[i].lastDisconnect = .init(reason: .repair(reason), at: now)
                move(i, to: .needsRepair(reason: reason), now, &actions)
            case .adapterGone:
                slots[i].lastDisconnect = .init(reason: .adapterGone, at: now)
                move(i, to: .adapterUnavailable, now, &actions, reason: .adapterGone)
            }
        case .connecting(.backingOff, let attempt, let c) where ownDrop && c.id.purpose == .linkDown && verdict == .requested:
            // The unusable link we dropped is down: connect again now (`dropUnusableLink`).
            startConnect(i, attempt: attempt + 1, now, &actions)
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
        guard let i = slot[a], adapterUp(for: i), slots[i].state == .needsRepair(reason: .deviceRemoved) else { return }
        slots[i].setupFailures = 0
        if slots[i].wanted == .disconnected {
            move(i, to: .disconnected, now, &actions)
            return
        }
        actions.append(.setTrusted(a, true))
        restoreConnect(i, now, &actions)
    }


    /// The wearable answered over the link: the bond works, and the failed setups before it were not
    /// a lost bond.
    mutating func linkProven(_ a: DeviceAddress) {
        guard let i = slot[a] else { return }
        slots[i].setupFailures = 0
        updateLink(i) { $0.proven = true }
        slots[i].ownDrop?.proven = true // the link we asked to drop may answer before it goes
    }

    /// The current set-up failed (the link dropped, or lost its services) within
    /// `MachineConfig.proofWindow` of its start without the wearable ever answering over it; a
    /// link adopted unresolved says nothing (`Link.adoptedUnresolved`).
    func unprovenWithinProofWindow(_ link: Link, _ now: Moment) -> Bool {
        !link.proven && !link.adoptedUnresolved && now.since(link.upAt) < config.proofWindow
    }

    /// Changes the link a linked state carries, in place (no change of state, no countdown).
    mutating func updateLink(_ i: Int, _ change: (inout Link) -> Void) {
        switch slots[i].state {
        case .discovering(var link, let c): change(&link); slots[i].state = .discovering(link, countdown: c)
        case .connected(var link, let h): change(&link); slots[i].state = .connected(link, health: h)
        case .restoring, .connecting, .waitingForDevice, .disconnected, .needsRepair, .adapterUnavailable: break
        }
    }

    mutating func discoveryCountdown(_ a: DeviceAddress, _ now: Moment) -> Countdown {
        countdown(.device(a), .discovery, now.advanced(byNanoseconds: discoveryNanos))
    }

    /// For a link that is up and unresolved: `MachineConfig.resolveTimeout` to resolve, else it is
    /// dropped and connected again (`countdownFired`, as at the discovery timeout). Every link
    /// that enters `discovering` unresolved carries it: a fresh one (`linkUp`, `connectSucceeded`)
    /// and one adopted at reconciliation.
    /// A wearable paird has seen resolve often enough gets a learned deadline instead
    /// (`MachineConfig.resolveFloor`), unless its last link was ended at one.
    mutating func resolveCountdown(_ a: DeviceAddress, _ now: Moment) -> Countdown {
        guard let i = slot[a] else { return countdown(.device(a), .resolve, now.advanced(byNanoseconds: resolveNanos)) }
        let learned = slots[i].learned.resolveCutShort ? nil : learnedResolveNanos(i)
        slots[i].learned.resolveCutShort = false
        let c = countdown(.device(a), .resolve, now.advanced(byNanoseconds: learned ?? resolveNanos))
        slots[i].learned.resolveCountdown = learned == nil ? nil : c.id.generation
        return c
    }

    /// `resolveLearnFactor` × the slowest of the wearable's recent resolutions, at least
    /// `resolveFloor`; nil while it has too few of them or the result is not below `resolveTimeout`.
    func learnedResolveNanos(_ i: Int) -> Int64? {
        let times = slots[i].learned.resolveTimes
        guard times.count >= config.resolveLearnAfter, let slowest = times.max() else { return nil }
        let nanos = max(config.resolveFloor.nanoseconds, slowest.nanoseconds * Int64(config.resolveLearnFactor))
        return nanos < resolveNanos ? nanos : nil
    }

    mutating func learnResolveTime(_ i: Int, _ took: Duration) {
        slots[i].learned.resolveTimes.append(took)
        if slots[i].learned.resolveTimes.count > MachineConfig.resolveSamples { slots[i].learned.resolveTimes.removeFirst() }
    }

    /// Counts a link that came up (or a Connect the wearable answered) but never became usable.
    /// BlueZ 5.66 does not say why (the reason stays below D-Bus); several in a row are how a
    /// lost bond looks, and chasing it would be a reconnect loop. True at the threshold.
    mutating func countSetupFailure(_ i: Int) -> Bool {
        slots[i].setupFailures += 1
        return slots[i].setupFailures >= config.setupFailuresBeforeRepair
    }
}

extension PairingMachine {
    /// What a set-up link lacks of the configured characteristics: remembered, and reported once
    /// (a report when one goes missing that was not already; none while the same ones stay
    /// missing link after link, so a wearable that dropped one is not a journal line per link).
    mutating func characteristicsMissing(_ a: DeviceAddress, _ uuids: [String], _ actions: inout [Action]) {
        guard let i = slot[a] else { return }
        let missing = Set(uuids)
        let newlyMissing = missing.subtracting(slots[i].missingCharacteristics)
        slots[i].missingCharacteristics = missing
        guard !newlyMissing.isEmpty else { return }
        actions.append(.report(Report(kind: .characteristicMissing, device: a, name: slots[i].identity.name,
                                      to: .state(slots[i].state.kind), reason: .missingCharacteristics(newlyMissing.sorted()))))
    }
}
