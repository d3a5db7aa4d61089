#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// What the user asks for (`pairctl connect`, `disconnect`, `unpair`): intent, persisted.
extension PairingMachine {
    // MARK: User intent

    /// Records the user's intent; intent is what the state file is for, so a change is persisted.
    mutating func setWanted(_ i: Int, _ wanted: Wanted, _ now: Moment, _ actions: inout [Action]) {
        guard slots[i].wanted != wanted else { return }
        slots[i].wanted = wanted
        slots[i].updatedAt = now.unixTime
        actions.append(.persist)
    }

    mutating func userConnect(_ a: DeviceAddress, _ now: Moment, _ actions: inout [Action]) {
        guard let i = slot[a] else { return }
        let d = slots[i]
        setWanted(i, .connected, now, &actions)
        switch d.state {
        case .disconnected:
            actions.append(.setTrusted(a, true))
            if adapterUp(for: i) {
                // The auto-connect list gets it back at the end of the step (`keepAutoConnectInStep`),
                // so the kernel connects it as soon as it advertises; a Connect() of ours at the same moment made two links (finding 16).
                slots[i].reconnectAttempts = 0
                restoreConnect(i, now, &actions)
            } else {
                move(i, to: .adapterUnavailable, now, &actions)
            }
        case .waitingForDevice(.onAutoConnect), .waitingForDevice(.fallbackDue):
            fallbackConnect(i, now, &actions) // asked for: one Connect() now, whatever the auto-connect does
        case .connecting(.backingOff, let attempt, _):
            startConnect(i, attempt: attempt + 1, now, &actions)
        case .restoring, .connecting(.calling, _, _), .discovering, .connected, .waitingForDevice(.fallbackConnecting),
             .needsRepair, .adapterUnavailable:
            break
        }
    }

    mutating func userDisconnect(_ a: DeviceAddress, _ now: Moment, _ actions: inout [Action]) {
        guard let i = slot[a] else { return }
        let d = slots[i]
        setWanted(i, .disconnected, now, &actions)
        switch d.state {
        case .connecting, .discovering, .connected, .waitingForDevice:
            // Untrusted + Disconnect() also turns BlueZ's auto-connect off for it (device.c dev_disconnect).
            actions.append(.setTrusted(a, false))
            actions.append(.disconnect(a))
            move(i, to: .disconnected, now, &actions, reason: .user)
        case .restoring, .adapterUnavailable:
            move(i, to: .disconnected, now, &actions, reason: .user)
        case .disconnected, .needsRepair:
            break
        }
    }

    mutating func userUnpair(_ a: DeviceAddress, _ now: Moment, _ actions: inout [Action]) {
        guard let i = slot[a] else { return }
        let d = slots[i]
        if let c = d.state.countdown { actions.append(.cancel(c.id)) }
        if case .settling(a)? = pairing?.phase { endPairing(.canceled, now, &actions) }
        forget(at: i)
        if bluetoothd.onTrial == a { endTrial(now, &actions) }
        actions.append(.removeDevice(a))
        actions.append(.persist)
        actions.append(.report(Report(kind: .unpaired, device: a, name: d.identity.name, from: .state(d.state.kind), to: .unpaired)))
    }
}

/// Why the machine turns a user request down before it becomes an event (the D-Bus API answers
/// with an error instead of an acknowledgement).
public enum Refusal: Sendable, Hashable {
    /// `pair` while a pairing session runs.
    case pairingBusy
    /// `cancel` with no pairing session.
    case noPairing
    /// An answer with no question of that kind waiting (none asked, already answered, or withdrawn).
    case noQuestion
    /// `connect`, `disconnect` or `unpair` of a device paird does not manage.
    case unknownDevice(DeviceAddress)
    /// `connect` of a device whose bond is gone: only pairing again helps.
    case needsRepair(DeviceAddress, RepairReason)
}

extension PairingMachine {
    /// The refusal a user request meets in the current state, or nil when the machine takes it.
    /// Events from BlueZ and countdowns are never refused.
    public func refusal(of event: Event) -> Refusal? {
        switch event {
        case .userPair: return pairing == nil ? nil : .pairingBusy
        case .userCancelPairing: return pairing == nil ? .noPairing : nil
        case .userAnswer(let answer):
            guard let p = pairing, case .pairing(_, _, let q?) = p.phase else { return .noQuestion }
            switch (q.question, answer) {
            case (.enterPasskey, .passkey), (.confirmPasskey, .confirm): return nil
            default: return .noQuestion
            }
        case .userConnect(let a):
            guard let d = device(a) else { return .unknownDevice(a) }
            if case .needsRepair(let why) = d.state { return .needsRepair(a, why) }
            return nil
        case .userDisconnect(let a), .userUnpair(let a):
            return device(a) == nil ? .unknownDevice(a) : nil
        case .adapterReady, .adapterIdentified, .adapterInUse, .adapterLost, .adapterGone, .autoConnectArmed, .bluetoothdLeft, .bluetoothdUnit, .bluetoothdStartFailed, .bluetoothdBack, .bluetoothdAbsent, .linkUp, .servicesResolved, .servicesLost, .linkProven,
             .linkDown, .bondLost, .deviceRemoved, .bondedDeviceAppeared, .connectSucceeded, .connectFailed, .setUpLinkFinished,
             .characteristicsMissing, .characteristicAppeared,
             .pairSucceeded, .pairFailed, .removeDeviceAnswered, .candidateFound, .discoveryFailed, .countdownFired, .agentAsked, .agentCanceled, .addressChanged,
             .dataReceived, .subscriptionEnded, .probeFinished, .hostSleeping, .hostResumed, .disconnectAnswered, .powerOnFailed, .batteryRead:
            return nil
        }
    }
}
