#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// paird's own `Connect()` calls (first, retried with backoff, fallback while the auto-connect
/// is not armed), their answers, the passive wait, and the device countdowns firing.
extension PairingMachine {
    // MARK: Connect

    mutating func startConnect(_ i: Int, attempt: Int, _ now: Moment, _ actions: inout [Action]) {
        let a = slots[i].address
        let call = nextGeneration()
        slots[i].reconnectAttempts += 1
        move(i, to: .connecting(.calling(call: call, startedAt: now), attempt: attempt,
                                countdown: countdown(.device(a), .connectReply, now.advanced(byNanoseconds: connectReplyNanos))),
             now, &actions, attempt: attempt)
        actions.append(.connect(a, call: call, timeout: config.connectTimeout))
    }

    mutating func fallbackConnect(_ i: Int, _ now: Moment, _ actions: inout [Action]) {
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
    mutating func waitPassively(_ i: Int, _ now: Moment, _ actions: inout [Action], reason: ReportReason? = nil, kind: Report.Kind? = nil) {
        let a = slots[i].address
        let phase: DeviceState.WaitPhase = autoConnectCovers(i)
            ? .onAutoConnect
            : .fallbackDue(countdown: countdown(.device(a), .fallbackConnect, now.advanced(byNanoseconds: fallbackNanos)))
        move(i, to: .waitingForDevice(phase), now, &actions, reason: reason, kind: kind)
    }

    mutating func connectSucceeded(_ a: DeviceAddress, _ call: UInt64, _ now: Moment, _ actions: inout [Action]) {
        guard let i = slot[a], slots[i].state.pendingCall == call else { return }
        // Unresolved yet (the daemon asks BlueZ at once): ServicesResolved by the resolve deadline.
        move(i, to: .discovering(Link(upAt: now), countdown: resolveCountdown(a, now)), now, &actions)
    }

    mutating func connectFailed(_ a: DeviceAddress, _ call: UInt64, _ f: BlueZFailure, _ now: Moment, _ actions: inout [Action]) {
        guard let i = slot[a], slots[i].state.pendingCall == call else { return }
        let d = slots[i]
        connectDidNotTake(i, d.state, f, now, &actions)
    }

    /// A Connect failed or never answered: decide between retry, wait, repair and adapter loss.
    mutating func connectDidNotTake(_ i: Int, _ state: DeviceState, _ f: BlueZFailure, _ now: Moment, _ actions: inout [Action]) {
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
        // Refused at once: a wedged adapter if every wearable on it is (`+Wedge`), judged after this one's own step.
        let refused = verdict == .transient && f == .abortedByLocal
        if refused { wedge.refused[a] = now }
        defer {
            if refused {
                let adapter = slots[i].identity.adapterAddress ?? adapterInUse
                checkWedged(adapter: adapter, now, &actions)
                probeAlongside(adapter: adapter, now, &actions)
            }
        }
        if refused, countSetupFailure(i) {
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
                 now, &actions, reason: .failure(f), attempt: attempt)
        case .transient, .deviceAbsent:
            waitPassively(i, now, &actions, reason: .failure(f))
        case .bondLost:
            move(i, to: .needsRepair(reason: RepairReason(bondFailure: f)), now, &actions)
        case .adapterGone:
            move(i, to: .adapterUnavailable, now, &actions, reason: .failure(f))
        }
    }

    /// Drops a link that is not usable (its countdown ran out, or it cannot resolve) and connects
    /// again after the first backoff step. It is our own disconnect, so the link-down that follows
    /// finds us `connecting` and is not a link loss.
    mutating func dropUnusableLink(_ i: Int, _ link: Link, _ now: Moment, _ actions: inout [Action], reason: ReportReason) {
        let a = slots[i].address
        var dropped = link
        dropped.adoptedUnresolved = false
        slots[i].ownDrop = dropped
        actions.append(.disconnect(a))
        // Connect again once the dropped link is seen down (`linkDown`), at the latest after
        // `linkDownWait`: a Connect() sent while it is still going down is answered at once by it
        // and only adds a set-up round (BENCHMARKS.md §6: stalled ATT, 3 of 3 reps, ~12–15 s).
        move(i, to: .connecting(.backingOff, attempt: 1, countdown: countdown(.device(a), .linkDown, now + config.linkDownWait)),
             now, &actions, reason: reason)
    }

    // MARK: Countdowns

    mutating func countdownFired(_ id: Countdown.ID, _ now: Moment, _ actions: inout [Action]) {
        switch id.owner {
        case .bluetoothd:
            bluetoothdCountdownFired(id, now, &actions)
        case .host where id.purpose == .sleepRelease:
            sleepReleaseDue(id, now, &actions)
        case .host:
            resumeDeadlineFired(id, now, &actions)
        case .adapter(let adapter):
            wedgeProbeDue(id, adapter: adapter, now, &actions)
        case .adapterPower:
            powerOnRetryDue(id, now, &actions)
        case .pairing:
            guard let p = pairing else { return }
            if case .scanning(let restart) = p.phase, restart.countdown.id == id {
                return scanRestartDue(restart, now, &actions)
            }
            guard p.countdown.id == id else { return } // stale: ignored
            switch p.phase {
            case .scanning: endPairing(p.rescanAfter.map { .failed($0.token) } ?? .noDeviceFound, now, &actions)
            case .removingBond: endPairing(.timedOut(phase: "removing the old bond"), now, &actions)
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
            case .discovering(let link, _):
                // Not usable in time: drop this link and start over (it is our own disconnect,
                // so the link-down that follows finds us `connecting` and is not a link loss).
                // Only a link whose services never resolved counts toward the lost-bond heuristic.
                // An adopted link that never resolved is no evidence either (`Link.adoptedUnresolved`),
                // nor one ended at a learned resolve deadline: the next link gets the whole one.
                let cutShort = id.purpose == .resolve && slots[i].learned.resolveCountdown == id.generation
                if cutShort { slots[i].learned.resolveCutShort = true }
                if !cutShort, !link.resolved, !link.adoptedUnresolved, link.setupVerdict != .counted, countSetupFailure(i) { // entering needsRepair disconnects too
                    move(i, to: .needsRepair(reason: .suspectedBondLoss), now, &actions)
                    return
                }
                dropUnusableLink(i, link, now, &actions, reason: id.purpose == .resolve ? .resolveTimeout : .discoveryTimeout)
            case .waitingForDevice(.fallbackDue):
                fallbackConnect(i, now, &actions)
            case .connected(let link, let health):
                healthCountdownFired(i, link, health, now, &actions)
            case .restoring, .waitingForDevice(.onAutoConnect), .disconnected, .needsRepair, .adapterUnavailable:
                // Untimed states carry no countdown, so the guard above already returned.
                assertionFailure("countdown \(id) fired in the untimed state \(d.state.name)")
            }
        }
    }
}
