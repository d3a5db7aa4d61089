/// A wedged adapter (issue 32): present and powered, yet it refuses every new link. On BlueZ 5.66
/// a refused `Connect()` comes back fast as `le-connection-abort-by-local` (an absent wearable's
/// takes the kernel's whole ~40 s window), which is also how a wearable that forgot its bond
/// looks: one wearable alone cannot tell them apart, and goes on as before (retries, then
/// `needsRepair` after `setupFailuresBeforeRepair`). When *every* wanted wearable on an adapter
/// (two or more, none with a link on it) had a `Connect()` refused so within `window`, the
/// adapter is the likelier cause than as many lost bonds at once: they wait for the adapter
/// (`adapterUnavailable`, reason `adapter-wedged`) and the adapter is power-cycled (HCI Reset at
/// its power-on clears a controller stuck refusing connections); its return reconciles them.
/// One refusal each is enough: after one, a wearable waits on the kernel's auto-connect, whose
/// refusals BlueZ 5.66 does not report (the bed, `paird_wedged`: the kernel's mgmt Connect Failed
/// goes to bluetoothd, which tells D-Bus nothing for a bonded device), so more may never come.
/// For the same reason a wedge that sets in while the wearables are away, or as their links drop,
/// would go unseen: while every wanted wearable on an adapter (two or more) waits on the
/// auto-connect, one of them gets a `Connect()` every `MachineConfig.wedgeProbeInterval`, in turn
/// (`wedgeProbeDue`); an absent wearable's takes BlueZ's whole window and nothing follows. A
/// refusal at once, there or anywhere, while no wearable on the adapter has a link, sends one
/// `Connect()` to each of the others waiting on the auto-connect (`probeAlongside`), so that the
/// wedge is judged on all of them within `window`. At
/// most `MachineConfig.wedgePowerCycles` in a row (counted until a wearable on that adapter
/// connects again); past the cap paird says so and waits: it has no rung above (an mgmt or USB
/// reset needs CAP_NET_ADMIN, which paird's unit does not give it), and a person's power cycle
/// or replug brings the wearables back.
extension PairingMachine {
    mutating func checkWedged(adapter: DeviceAddress?, _ now: Moment, _ actions: inout [Action]) {
        guard let adapter else { return }
        let on = wantedOn(adapter)
        guard on.count >= 2, on.allSatisfy({ i in
            guard slots[i].state.link == nil, slots[i].state != .adapterUnavailable, let at = wedge.refused[slots[i].address] else { return false }
            return now.since(at) <= WedgeWatch.window
        }) else { return }
        let done = wedge.cycles[adapter, default: 0]
        let cap = config.wedgePowerCycles
        for i in on {
            wedge.refused[slots[i].address] = nil
            slots[i].setupFailures = 0
            // needsRepair untrusted it; the adapter's return needs it trusted.
            if case .needsRepair = slots[i].state { actions.append(.setTrusted(slots[i].address, true)) }
            move(i, to: .adapterUnavailable, now, &actions, reason: .adapterWedged)
        }
        if done < cap {
            wedge.cycles[adapter] = done + 1
            actions.append(.report(Report(kind: .adapterWedged, device: nil, reason: .wedge(.powerCycle(attempt: done + 1, of: cap, adapter: adapter)))))
            actions.append(.powerCycle(adapter: adapter))
        } else {
            actions.append(.report(Report(kind: .adapterWedged, device: nil, reason: .wedge(.capReached(done: done, of: cap, adapter: adapter)))))
        }
    }

    /// At the end of every step: an adapter whose wanted wearables (two or more) all wait for
    /// their return, one at least on the kernel's auto-connect, has a probe countdown (armed
    /// `wedgeProbeInterval` after they all came to wait, again after each probe); any other has
    /// none. Not while the host sleeps, nor for an adapter that is not ready, nor while a pairing
    /// runs (its scan and `Pair()` are not to meet a probe's `Connect()`).
    mutating func keepWedgeProbes(_ now: Moment, _ actions: inout [Action]) {
        // Nothing waits on the auto-connect, nothing armed: nothing to do (the common step).
        if autoConnectArmed.isEmpty && wedge.probes.isEmpty { return }
        var due: Set<DeviceAddress> = []
        if config.wedgeProbeInterval > .zero, adapterUp, !host.asleep, pairing == nil {
            var count: [DeviceAddress: (all: Int, waiting: Int, onAutoConnect: Int)] = [:]
            for d in slots where d.wanted == .connected {
                guard let adapter = d.identity.adapterAddress ?? adapterInUse else { continue }
                var c = count[adapter, default: (0, 0, 0)]
                c.all += 1
                if case .waitingForDevice(let phase) = d.state {
                    c.waiting += 1
                    if phase == .onAutoConnect { c.onAutoConnect += 1 }
                }
                count[adapter] = c
            }
            for (adapter, c) in count where c.all >= 2 && c.waiting == c.all && c.onAutoConnect > 0
                && (upAdapters.isEmpty || upAdapters.contains(adapter)) {
                due.insert(adapter)
            }
        }
        for (adapter, c) in wedge.probes.sorted(by: { $0.key < $1.key }) where !due.contains(adapter) {
            actions.append(.cancel(c.id))
            wedge.probes[adapter] = nil
        }
        for adapter in due.sorted() where wedge.probes[adapter] == nil {
            let c = countdown(.adapter(adapter), .wedgeProbe, now + config.wedgeProbeInterval)
            wedge.probes[adapter] = c
            actions.append(.arm(c))
        }
    }

    /// The probe is due: the wearable on the adapter probed longest ago (never first) that waits on
    /// the auto-connect gets one `Connect()`; its answer goes the usual way (`connectDidNotTake`:
    /// a refusal at once is noted, and probes the others).
    mutating func wedgeProbeDue(_ id: Countdown.ID, adapter: DeviceAddress, _ now: Moment, _ actions: inout [Action]) {
        guard wedge.probes[adapter]?.id == id else { return } // stale: ignored
        wedge.probes[adapter] = nil
        let waiting = wantedOn(adapter).filter { slots[$0].state == .waitingForDevice(.onAutoConnect) }
        func key(_ i: Int) -> (Int64, DeviceAddress) {
            (wedge.probed[slots[i].address]?.uptimeNanoseconds ?? .min, slots[i].address)
        }
        guard let i = waiting.min(by: { key($0) < key($1) }) else { return }
        wedge.probed[slots[i].address] = now
        fallbackConnect(i, now, &actions)
    }

    /// A `Connect()` on `adapter` was refused at once. If no wanted wearable on it has a link, each
    /// other one waiting on the auto-connect (or for its fallback) without a refusal within
    /// `window` gets a `Connect()` now: the auto-connect would not tell paird of its refusals.
    mutating func probeAlongside(adapter: DeviceAddress?, _ now: Moment, _ actions: inout [Action]) {
        guard let adapter, config.wedgeProbeInterval > .zero, adapterUp, !host.asleep else { return }
        let on = wantedOn(adapter)
        guard on.count >= 2, on.allSatisfy({ slots[$0].state.link == nil }) else { return }
        for i in on.sorted(by: { slots[$0].address < slots[$1].address }) {
            switch slots[i].state {
            case .waitingForDevice(.onAutoConnect), .waitingForDevice(.fallbackDue):
                let a = slots[i].address
                if let at = wedge.refused[a], now.since(at) <= WedgeWatch.window { continue }
                wedge.probed[a] = now
                fallbackConnect(i, now, &actions)
            case .restoring, .connecting, .discovering, .connected, .waitingForDevice(.fallbackConnecting), .disconnected,
                 .needsRepair, .adapterUnavailable:
                continue
            }
        }
    }

    /// The slots of the wanted wearables on `adapter` (their bond's, else the one in use).
    func wantedOn(_ adapter: DeviceAddress) -> [Int] {
        slots.indices.filter { slots[$0].wanted == .connected && (slots[$0].identity.adapterAddress ?? adapterInUse) == adapter }
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
    public static let reason = ReportReason.adapterWedged.token
    /// How close together the wearables' refusals must be to be the adapter's.
    public static let window: Duration = .seconds(120)
    /// When each wearable's `Connect()` was last refused at once.
    public internal(set) var refused: [DeviceAddress: Moment] = [:]
    /// Power cycles of each adapter (by address) since a wearable last connected on it.
    public internal(set) var cycles: [DeviceAddress: Int] = [:]
    /// The armed probe of each adapter whose wearables all wait (`keepWedgeProbes`).
    public internal(set) var probes: [DeviceAddress: Countdown] = [:]
    /// When each wearable last got a probe's `Connect()`, so that they take turns.
    public internal(set) var probed: [DeviceAddress: Moment] = [:]
    public init() {}
}
