/// A wearable with a private address (RPA) is discovered, and `Pair()` called, by the address it
/// advertised with; while pairing, BlueZ receives its IRK and identity address and `Device1.Address`
/// becomes the identity (the object path keeps the first address). From then on the wearable is
/// known by its identity: the session's candidate, the device, its countdown and what the state
/// file remembers.
extension PairingMachine {
    mutating func addressChanged(_ old: DeviceAddress, to new: DeviceAddress, _ type: AddressType, _ now: Moment,
                                 _ actions: inout [Action]) {
        guard old != new else { return }
        if var p = pairing {
            switch p.phase {
            case .pairing(var c, let call, let q) where c.address == old:
                c.address = new
                c.addressType = type
                p.phase = .pairing(c, call: call, question: q)
            case .settling(old):
                p.phase = .settling(new)
            case .scanning, .removingBond, .pairing, .settling:
                break
            }
            if p.request.address == old { p.request.address = new }
            pairing = p
        }
        // Every table keyed by or listing a wearable's address follows it (a slot or not: an
        // abandoned Pair() is answered for the identity). `RekeyTests` walks the whole machine
        // after a re-key and fails on any `old` left, so a new table cannot be forgotten.
        abandonedPairs.rekey(old, to: new)
        leftoverPairs.rekey(old, to: new)
        autoConnectArmed.rekey(old, to: new)
        bluetoothd.rekey(old, to: new)
        host.rekey(old, to: new)
        guard let i = slot[old], slot[new] == nil else { return }
        slot[old] = nil
        slot[new] = i
        slots[i].identity.address = new
        slots[i].identity.addressType = type
        // A countdown is owned by an address: the running one moves to the new owner, same deadline.
        if let c = slots[i].state.countdown {
            let moved = Countdown(id: .init(owner: .device(new), purpose: c.id.purpose, generation: nextGeneration()), deadline: c.deadline)
            move(i, to: slots[i].state.replacingCountdown(with: moved), now, &actions)
        }
        actions.append(.persist)
    }
}

extension DeviceState {
    /// The same state with another countdown (for a timed state; the others are returned as they are).
    func replacingCountdown(with c: Countdown) -> DeviceState {
        switch self {
        case .connecting(let phase, let attempt, _): .connecting(phase, attempt: attempt, countdown: c)
        case .discovering(let link, _): .discovering(link, countdown: c)
        case .waitingForDevice(.fallbackDue): .waitingForDevice(.fallbackDue(countdown: c))
        case .waitingForDevice(.fallbackConnecting(let call, let startedAt, _)):
            .waitingForDevice(.fallbackConnecting(call: call, startedAt: startedAt, countdown: c))
        case .restoring, .connected, .waitingForDevice(.onAutoConnect), .disconnected, .needsRepair, .adapterUnavailable: self
        }
    }
}

extension BluetoothdWatch {
    mutating func rekey(_ old: DeviceAddress, to new: DeviceAddress) {
        settingUpAtLoss.rekey(old, to: new)
        attributedAtLoss.rekey(old, to: new)
        linkedAtLoss.rekey(old, to: new)
        probation.rekey(old, to: new)
        if onTrial == old { onTrial = new }
        lastCrash?.awaited.rekey(old, to: new)
        lastCrash?.backTimes.rekey(old, to: new)
        lastCrash?.disarmed.rekey(old, to: new)
    }
}

extension HostWatch {
    mutating func rekey(_ old: DeviceAddress, to new: DeviceAddress) {
        lastSleep?.awaited.rekey(old, to: new)
        lastSleep?.backTimes.rekey(old, to: new)
        lastSleep?.expected.rekey(old, to: new)
        lastSleep?.judged.rekey(old, to: new)
        lettingGo.rekey(old, to: new)
    }
}

extension Dictionary where Key == DeviceAddress {
    /// The entry of `old`, if any, now under `new`.
    mutating func rekey(_ old: DeviceAddress, to new: DeviceAddress) {
        if let v = removeValue(forKey: old) { self[new] = v }
    }
}

extension Set where Element == DeviceAddress {
    mutating func rekey(_ old: DeviceAddress, to new: DeviceAddress) {
        if remove(old) != nil { insert(new) }
    }
}

extension Array where Element == DeviceAddress {
    mutating func rekey(_ old: DeviceAddress, to new: DeviceAddress) {
        for i in indices where self[i] == old { self[i] = new }
    }
}
