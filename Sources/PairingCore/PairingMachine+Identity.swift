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
        guard let i = slot[old], slot[new] == nil else { return }
        slot[old] = nil
        slot[new] = i
        slots[i].identity.address = new
        slots[i].identity.addressType = type
        if autoConnectArmed.remove(old) != nil { autoConnectArmed.insert(new) }
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
