/// A wedged adapter (issue 32): present and powered, yet it refuses every new link. On BlueZ 5.66
/// a refused `Connect()` comes back fast as `le-connection-abort-by-local`, which is also how a
/// wearable that forgot its bond looks (`suspectedBondLoss`): one wearable alone cannot tell
/// them apart, and keeps going to `needsRepair` as before. When *every* wanted wearable on an
/// adapter (two or more, none connected there) went to `needsRepair` from refused `Connect()`s
/// within `window` of each other, the adapter is the likelier cause than as many lost bonds at
/// once: they wait for the adapter (`adapterUnavailable`, reason `adapter-wedged`) and the
/// adapter is power-cycled (HCI Reset at its power-on clears a controller stuck refusing
/// connections); its return reconciles them. At most `MachineConfig.wedgePowerCycles` in a row
/// (counted until a wearable on that adapter connects again); past the cap paird says so and
/// waits: it has no rung above (an mgmt or USB reset needs CAP_NET_ADMIN, which paird's unit
/// does not give it), and a person's power cycle or replug brings the wearables back.
extension PairingMachine {
    /// A wearable's `Connect()` refusals (each one fast) made it `needsRepair(suspectedBondLoss)`:
    /// that, and whether the adapter's other wearables did the same.
    mutating func refusedUntilRepair(_ i: Int, _ now: Moment, _ actions: inout [Action]) {
        move(i, to: .needsRepair(reason: .suspectedBondLoss), now, &actions)
        wedge.refused[slots[i].address] = now
        checkWedged(adapter: slots[i].identity.adapterAddress ?? adapterInUse, now, &actions)
    }

    mutating func checkWedged(adapter: DeviceAddress?, _ now: Moment, _ actions: inout [Action]) {
        guard let adapter else { return }
        let on = slots.indices.filter { slots[$0].wanted == .connected && (slots[$0].identity.adapterAddress ?? adapterInUse) == adapter }
        guard on.count >= 2, on.allSatisfy({ i in
            guard case .needsRepair(.suspectedBondLoss) = slots[i].state, let at = wedge.refused[slots[i].address] else { return false }
            return now.since(at) <= WedgeWatch.window
        }) else { return }
        let done = wedge.cycles[adapter, default: 0]
        let cap = config.wedgePowerCycles
        for i in on {
            wedge.refused[slots[i].address] = nil
            slots[i].setupFailures = 0
            actions.append(.setTrusted(slots[i].address, true)) // needsRepair took it; the adapter's return needs it
            move(i, to: .adapterUnavailable, now, &actions, reason: WedgeWatch.reason)
        }
        if done < cap {
            wedge.cycles[adapter] = done + 1
            actions.append(.report(Report(kind: .adapterWedged, device: nil, reason: "power-cycle \(done + 1)/\(cap) \(adapter)")))
            actions.append(.powerCycle(adapter: adapter))
        } else {
            actions.append(.report(Report(kind: .adapterWedged, device: nil, reason: "cap-reached \(done)/\(cap) \(adapter)")))
        }
    }

    /// A wearable connected: its adapter works, its power cycles count from zero again.
    mutating func wedgeCleared(_ i: Int) {
        wedge.refused[slots[i].address] = nil
        if let adapter = slots[i].identity.adapterAddress ?? adapterInUse { wedge.cycles[adapter] = nil }
    }
}

/// What paird knows of wedged adapters.
public struct WedgeWatch: Sendable, Hashable {
    /// The status and journal reason of a wearable waiting for its wedged adapter.
    public static let reason = "adapter-wedged"
    /// How close together the wearables' refusals must be to be the adapter's.
    public static let window: Duration = .seconds(120)
    /// When each wearable last went to `needsRepair` from refused `Connect()`s.
    public internal(set) var refused: [DeviceAddress: Moment] = [:]
    /// Power cycles of each adapter (by address) since a wearable last connected on it.
    public internal(set) var cycles: [DeviceAddress: Int] = [:]
    public init() {}
}
