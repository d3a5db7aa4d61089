/// bluetoothd leaving the bus and coming back: systemd asked why, a crash answered with a start
/// by bus activation (backoff, cap), an administrator's stop respected, and the wearables whose
/// link was being set up when it died remembered, so one whose links keep killing it is
/// disarmed instead of driving a crash loop.
extension PairingMachine {
    /// The next question to systemd when it has not settled the unit yet.
    static let unitQueryInterval: Duration = .milliseconds(250)
    /// At most this many questions (5 s): then paird waits, as without systemd.
    static let unitQueryLimit = 20
    /// While a start runs, systemd is asked this often whether it failed, at most `startPollLimit` times.
    static let startPollInterval: Duration = .seconds(1)
    static let startPollLimit = 60

    mutating func bluetoothdLeft(_ now: Moment, _ actions: inout [Action]) {
        if let c = bluetoothd.phase.countdown { actions.append(.cancel(c.id)) }
        // First: a wearable whose link-ups it keeps dying on is disarmed whatever systemd says
        // (`PairingMachine+Attribution`); it is then no longer being set up nor awaited.
        attributeDeparture(now, &actions)
        bluetoothd.goneSince = now
        bluetoothd.leftSinceReady = true
        bluetoothd.settingUpAtLoss = sortedAddresses.filter { a in
            if case .discovering = slots[slot[a]!].state { true } else { false }
        }
        bluetoothd.linkedAtLoss = sortedAddresses.filter { a in slots[slot[a]!].state.link != nil }
        bluetoothd.phase = .asking(queries: 1, countdown: nil)
        actions.append(.queryBluetoothdUnit)
    }

    mutating func bluetoothdUnit(_ unit: BluetoothdUnitState?, _ now: Moment, _ actions: inout [Action]) {
        if case .starting(let polls, nil) = bluetoothd.phase {
            // A start runs: did systemd already fail a new run? Else ask again in a moment.
            let failedNewRun = unit.map { $0.execMainStart != bluetoothd.crashedRun && BluetoothdExit.classify($0) == .crashed } ?? false
            if !failedNewRun {
                guard polls < Self.startPollLimit else { return } // the StartServiceByName reply decides
                let c = countdown(.bluetoothd, .unitQuery, now + Self.startPollInterval)
                bluetoothd.phase = .starting(polls: polls, countdown: c)
                actions.append(.arm(c))
                return
            }
            bluetoothd.goneSince = now
            bluetoothd.phase = .asking(queries: 1, countdown: nil)
        }
        guard case .asking(let queries, let pending) = bluetoothd.phase else { return } // stale answer
        if let pending { actions.append(.cancel(pending.id)) }
        switch BluetoothdExit.classify(unit) {
        case .notSettled where queries < Self.unitQueryLimit:
            let c = countdown(.bluetoothd, .unitQuery, now + Self.unitQueryInterval)
            bluetoothd.phase = .asking(queries: queries, countdown: c)
            actions.append(.arm(c))
        case .notSettled, .unknown:
            bluetoothd.phase = .waiting(reason: unit == nil ? .noSystemdUnit : .unitNotSettled)
            actions.append(.bluetoothdReport(.waiting(unit: unit)))
        case .stopped:
            bluetoothd.phase = .stoppedByAdmin
            actions.append(.bluetoothdReport(.stopped))
        case .failedOther:
            bluetoothd.phase = .waiting(reason: .unitResult(unit!.result))
            actions.append(.bluetoothdReport(.waiting(unit: unit)))
        case .crashedSystemdRestarts:
            bluetoothd.phase = .waiting(reason: .systemdRestarts)
            crashed(unit!, action: "systemd restarts it", attempt: nil, now, &actions)
        case .crashed:
            bluetoothd.crashedRun = unit!.execMainStart
            let attempt = bluetoothd.starts + 1
            if bluetoothd.starts >= config.bluetoothdRestartCap {
                bluetoothd.phase = .gaveUp
                crashed(unit!, action: "gave up after \(bluetoothd.starts) starts", attempt: nil, now, &actions)
            } else if bluetoothd.starts == 0 {
                crashed(unit!, action: "started again", attempt: attempt, now, &actions)
                startBluetoothd(now, &actions)
            } else {
                let delay = config.bluetoothdRestart.delay(attempt: bluetoothd.starts, unit: 0.5)
                let c = countdown(.bluetoothd, .bluetoothdStart, now + delay)
                bluetoothd.phase = .restartDue(c)
                actions.append(.arm(c))
                crashed(unit!, action: "start \(attempt) in \(delay.seconds.rounded()) s", attempt: attempt, now, &actions)
            }
        }
    }

    mutating func startBluetoothd(_ now: Moment, _ actions: inout [Action]) {
        bluetoothd.starts += 1
        bluetoothd.lastStartAt = now
        let c = countdown(.bluetoothd, .unitQuery, now + Self.startPollInterval)
        bluetoothd.phase = .starting(polls: 0, countdown: c)
        actions.append(.startBluetoothd)
        actions.append(.arm(c))
    }

    /// `StartServiceByName` failed (the unit failed to start): ask systemd again, which decides
    /// the next try (or the cap).
    mutating func bluetoothdStartFailed(_ now: Moment, _ actions: inout [Action]) {
        guard case .starting(_, let c) = bluetoothd.phase else { return }
        if let c { actions.append(.cancel(c.id)) }
        bluetoothd.phase = .asking(queries: 1, countdown: nil)
        actions.append(.queryBluetoothdUnit)
    }

    /// `org.bluez` had no owner at paird's first look: not running (paird never starts a
    /// bluetoothd it did not see leave). Only the first answer counts: later ones are stale.
    mutating func bluetoothdAbsent(_ now: Moment, _ actions: inout [Action]) {
        guard bluetoothd.phase == .unknown else { return }
        bluetoothd.phase = .waiting(reason: .notOnBusAtStart)
    }

    /// `org.bluez` has an owner: for the first time since paird started, or again.
    mutating func bluetoothdBack(_ now: Moment, _ actions: inout [Action]) {
        if let c = bluetoothd.phase.countdown { actions.append(.cancel(c.id)) }
        bluetoothd.phase = .present
        bluetoothd.backAt = now
        if bluetoothd.lastCrash?.backAt == nil, bluetoothd.goneSince != nil { bluetoothd.lastCrash?.backAt = now }
        bluetoothd.goneSince = nil
    }

    mutating func bluetoothdCountdownFired(_ id: Countdown.ID, _ now: Moment, _ actions: inout [Action]) {
        guard bluetoothd.phase.countdown?.id == id else { return } // stale: ignored
        switch bluetoothd.phase {
        case .asking(let queries, _):
            bluetoothd.phase = .asking(queries: queries + 1, countdown: nil)
            actions.append(.queryBluetoothdUnit)
        case .restartDue:
            startBluetoothd(now, &actions)
        case .starting(let polls, _):
            bluetoothd.phase = .starting(polls: polls + 1, countdown: nil)
            actions.append(.queryBluetoothdUnit)
        case .unknown, .present, .stoppedByAdmin, .waiting, .gaveUp:
            assertionFailure("bluetoothd countdown \(id) fired in \(bluetoothd.phase.name)")
        }
    }

    /// One crash: the record, its report, and the crash-loop rule. A wearable whose link was being
    /// set up when bluetoothd died is remembered (in the state file); if bluetoothd dies during
    /// its set-up again before it ever reached `connected`, its link is presumed to be what kills
    /// bluetoothd (a BlueZ bug): it is disarmed (`needsRepair`, `.bluetoothdCrashes`) so that
    /// neither paird nor the kernel's auto-connect drives a crash loop. Others keep their links.
    mutating func crashed(_ unit: BluetoothdUnitState, action: String, attempt: Int?, _ now: Moment, _ actions: inout [Action]) {
        var crash = BluetoothdCrash(at: bluetoothd.goneSince ?? now, unit: unit, action: action, attempt: attempt,
                                    awaited: bluetoothd.linkedAtLoss)
        var remembered = false
        var blamed: [DeviceAddress] = []
        // Disarmed at this departure by its timing (`attributeDeparture`): one outcome, said here too.
        crash.disarmed += bluetoothd.attributedAtLoss
        crash.awaited.removeAll { bluetoothd.attributedAtLoss.contains($0) }
        bluetoothd.attributedAtLoss = []
        for a in bluetoothd.settingUpAtLoss {
            guard let i = slot[a], slots[i].state.isPursuing else { continue }
            if bluetoothd.onTrial == a || slots[i].bluetoothdCrashedOnLink {
                // On trial (let back alone after being disarmed with others) and bluetoothd died
                // on its set-up again: the culprit. Or its second set-up crash in a row.
                if bluetoothd.onTrial == a { bluetoothd.onTrial = nil } else { blamed.append(a) }
                slots[i].bluetoothdCrashedOnLink = false
                move(i, to: .needsRepair(reason: .bluetoothdCrashes), now, &actions)
                crash.disarmed.append(a)
                crash.awaited.removeAll { $0 == a }
            } else {
                slots[i].bluetoothdCrashedOnLink = true
            }
            remembered = true
        }
        if blamed.count > 1 {
            // Several at once: the one whose link kills bluetoothd and any that was reconnecting
            // beside it look alike. They come back one at a time (`releaseOnTrial`).
            bluetoothd.probation += blamed.filter { !bluetoothd.probation.contains($0) }
        }
        if remembered { actions.append(.persist) }
        bluetoothd.settingUpAtLoss = []
        bluetoothd.crashedSinceReady = true
        bluetoothd.lastCrash = crash
        actions.append(.bluetoothdReport(.crashed(crash)))
    }

    /// A link reached `connected`: it did not kill bluetoothd, and it counts as back after a crash.
    /// One on trial is cleared, and the next one disarmed with it is let back.
    mutating func linkSetUp(_ i: Int, _ now: Moment, _ actions: inout [Action]) {
        let a = slots[i].address
        backAfterSleep(a, now, &actions)
        if slots[i].bluetoothdCrashedOnLink {
            slots[i].bluetoothdCrashedOnLink = false
            actions.append(.persist)
        }
        slots[i].deathsOnLink = DeathsOnLink() // its link-up did not kill bluetoothd
        if let c = bluetoothd.lastCrash, c.awaited.contains(a), c.backTimes[a] == nil {
            bluetoothd.lastCrash?.backTimes[a] = now
        }
        if bluetoothd.onTrial == a {
            bluetoothd.onTrial = nil
            releaseOnTrial(now, &actions)
        }
    }

    /// The one on trial left the trial without a verdict on bluetoothd (needs pairing for another
    /// reason, the user's disconnect or unpair): the next one disarmed with it is let back. Before,
    /// `onTrial` stayed set and the others stayed disarmed for good.
    mutating func endTrial(_ now: Moment, _ actions: inout [Action]) {
        bluetoothd.onTrial = nil
        releaseOnTrial(now, &actions)
    }

    /// Lets the next wearable disarmed with others back (Trusted again, reconnected as after a
    /// restart), alone, while bluetoothd and the adapter are up and none is on trial.
    mutating func releaseOnTrial(_ now: Moment, _ actions: inout [Action]) {
        while bluetoothd.onTrial == nil, adapterUp, bluetoothd.phase == .present, !bluetoothd.probation.isEmpty {
            let a = bluetoothd.probation.removeFirst()
            // Paired again, unpaired or gone meanwhile: no longer the probation's.
            guard let i = slot[a], slots[i].state == .needsRepair(reason: .bluetoothdCrashes), slots[i].wanted == .connected else { continue }
            bluetoothd.onTrial = a
            actions.append(.setTrusted(a, true))
            restoreConnect(i, now, &actions, reason: .onTrialAfterCrashes)
        }
    }
}

/// What the journal hears about bluetoothd (one entry per crash; one per stop or wait).
public enum BluetoothdReport: Sendable, Hashable {
    case crashed(BluetoothdCrash)
    /// Stopped by an administrator: paird does not start it.
    case stopped
    /// Gone, and paird waits (no systemd, or a failure it does not act on).
    case waiting(unit: BluetoothdUnitState?)
}
