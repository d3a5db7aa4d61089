/// Attribution without anyone's word (issue 49): bluetoothd leaving the bus within
/// `attributionWindow` of one wearable's link coming up, twice in a row for that wearable, makes
/// it the cause, whatever systemd, a supervisor or nobody said of the death (a clean exit, no
/// unit, a unit that never settles). The crash-loop rule of `PairingMachine+Bluetoothd` acts only
/// on a crash systemd reports; this one needs only the timing, which paird sees itself.
///
/// The case it is for: on Debian 12's kernel 6.1 a factory-reset wearable (it lost its bond, the
/// host still has the old key) takes bluetoothd down in a loop: the kernel's LE auto-connect brings
/// the link up, encryption with the old key fails, the kernel oopses (list_del corruption in
/// `hci_chan_del`) and bluetoothd dies ~0.14 s after the link came up; it comes back (D-Bus
/// activation, a supervisor, systemd), the auto-connect is armed again, every ~6 s.
///
/// The wearable found so is disarmed at the second death, before anything else of that departure
/// is handled: `needsRepair` (untrusted and disconnected by `move`, which turns BlueZ's
/// auto-connect off for it; its services leave the auto-connect profile; no Connect(), no
/// fallback, no wedge probe; `adapterReady` disarms it again on the next bluetoothd). Its reason:
/// `.bluetoothdDiedOnLink` when the evidence points at its bond (both links died in their set-up,
/// before the wearable ever answered over them, or its last link ended in an authentication
/// failure), else `.bluetoothdCrashes` (disarmed, as the crash-loop rule does). `pairctl pair`
/// clears it (its stale object, with the old key, is removed before the new `Pair()`:
/// `candidateFound`). At most two deaths of bluetoothd per reset is the aim. bluetoothd may die on
/// the link before it signals it (on the bed's 6.1, 2026-11-28, 3 of 6 deaths in one run): such a
/// departure, within `unseenLinkWindow` of bluetoothd's return, counts for the one wearable
/// already counted once whose link is still not up; the first death of a reset still has to be
/// seen on its link-up.
///
/// A departure near several wearables' link-ups (they came back together after bluetoothd's
/// return) counts for the one among them whose link was still being set up, if only one was;
/// otherwise for none, and their counts stay as they were (neither counted nor cleared).
extension PairingMachine {
    /// How soon after a wearable's link came up a departure of bluetoothd counts against it. The
    /// kernel takes 0.14 s (6.1, a reset wearable), but both instants are when paird *handled* the
    /// signals, and on a loaded host the link-up and the departure reached paird 1.4–1.7 s apart
    /// (the bed in systemd mode, 2026-11-28): 3 s.
    public static let attributionWindow: Duration = .seconds(3)
    /// Departures in a row on one wearable's link-up that make it the cause.
    public static let deathsBeforeAttribution = 2

    /// How long a counted departure is remembered: the next one must come within this to make two
    /// in a row (on 6.1 the loop turns every 6–11 s; a death next week says nothing of today's).
    public static let attributionMemory: Duration = .seconds(120)
    /// A departure this soon after bluetoothd came back, with no link-up paird saw, may be one on a
    /// link bluetoothd died on before it signalled it (on the bed's 6.1, 2026-11-28: 3 of 6 deaths).
    /// (20 s: bluetoothd loads its adapters and arms the auto-connect after it owns the bus name,
    /// which took 10 s and more on a loaded host.)
    public static let unseenLinkWindow: Duration = .seconds(20)
    /// A wearable whose link ended less than this before a departure with no link-up seen, the
    /// only one waiting while the others are connected, is that departure's likely culprit (a
    /// reset drops the link, the kernel's auto-connect links it again within seconds).
    public static let freshLossWindow: Duration = .seconds(30)

    /// bluetoothd left the bus: counts the departure against the wearable whose link just came up
    /// (or, with no link-up seen, the one `unseenCulprit` names), clears the counts of the others,
    /// and disarms one at its second departure in a row if paird saw at least one of them on its
    /// link-up. A departure that points at no one neither counts nor clears (a count lasts
    /// `attributionMemory`).
    mutating func attributeDeparture(_ now: Moment, _ actions: inout [Action]) {
        bluetoothd.attributedAtLoss = []
        for i in slots.indices {
            if let t = slots[i].deathsOnLink.lastAt, now.since(t) > Self.attributionMemory { slots[i].deathsOnLink = DeathsOnLink() }
        }
        var suspects = sortedAddresses.filter { a in
            let d = slots[slot[a]!]
            guard d.wanted == .connected, d.state.isPursuing, let up = d.linkUpAt, up <= now else { return false }
            return now.since(up) <= Self.attributionWindow
        }
        if suspects.count > 1 { suspects = suspects.filter { inSetUp(slot[$0]!) } }
        var culprit = suspects.count == 1 ? suspects[0] : nil
        let seen = culprit != nil
        if suspects.isEmpty { culprit = unseenCulprit(now) }
        for a in sortedAddresses {
            guard let i = slot[a] else { continue }
            if a == culprit {
                slots[i].deathsOnLink.count += 1
                if inSetUp(i) { slots[i].deathsOnLink.inSetUp += 1 }
                if seen { slots[i].deathsOnLink.seen += 1 }
                slots[i].deathsOnLink.lastAt = now
            } else if culprit != nil {
                slots[i].deathsOnLink = DeathsOnLink()
            }
        }
        // Two in a row, at least one of them on a link-up paird saw: departures it only inferred
        // (an administrator's restarts while a wearable was away) never disarm anyone alone.
        guard let a = culprit, let i = slot[a], slots[i].deathsOnLink.count >= Self.deathsBeforeAttribution,
              slots[i].deathsOnLink.seen >= 1 else { return }
        attribute(i, now, &actions)
    }

    /// A departure with no link-up near it may still be one on a link bluetoothd never signalled
    /// (it dies 0.14 s after the link came up on 6.1, sometimes before it tells D-Bus). The one
    /// wearable it can be: pursued, not connected, no link of its own since bluetoothd's return,
    /// and either already counted once with bluetoothd back less than `unseenLinkWindow` ago, or
    /// whose link ended less than `freshLossWindow` ago (the reset dropped it; the kernel's
    /// auto-connect links it again at once) while every other wanted wearable is connected.
    func unseenCulprit(_ now: Moment) -> DeviceAddress? {
        let waiting = sortedAddresses.filter { a in
            let i = slot[a]!, d = slots[i]
            return d.wanted == .connected && d.state.isPursuing && inSetUp(i)
        }
        if let back = bluetoothd.backAt, now.since(back) <= Self.unseenLinkWindow {
            let counted = waiting.filter { a in
                let d = slots[slot[a]!]
                return d.deathsOnLink.count > 0 && (d.linkUpAt.map { $0 < back } ?? true)
            }
            if counted.count == 1 { return counted[0] }
        }
        let othersConnected = sortedAddresses.allSatisfy { a in
            let d = slots[slot[a]!]
            if waiting.contains(a) || d.wanted != .connected { return true }
            if case .connected = d.state { return true }
            return false
        }
        let fresh = waiting.filter { a in
            let d = slots[slot[a]!]
            guard d.state.link == nil, let t = d.lastDisconnect?.at else { return false }
            return now.since(t) <= Self.freshLossWindow
        }
        return fresh.count == 1 && waiting.count == 1 && othersConnected ? fresh[0] : nil
    }

    /// Its link has not been set up (not `connected`) and the wearable never answered over it.
    func inSetUp(_ i: Int) -> Bool {
        if case .connected = slots[i].state { return false }
        return slots[i].state.link?.proven != true
    }

    /// The wearable is the cause: disarmed, with the reason its evidence supports.
    mutating func attribute(_ i: Int, _ now: Moment, _ actions: inout [Action]) {
        let a = slots[i].address
        let d = slots[i]
        let bondEvidence = d.deathsOnLink.inSetUp >= Self.deathsBeforeAttribution
            || d.lastDisconnect?.reason == .repair(.authentication)
        let reason: RepairReason = bondEvidence ? .bluetoothdDiedOnLink : .bluetoothdCrashes
        slots[i].deathsOnLink = DeathsOnLink()
        if slots[i].bluetoothdCrashedOnLink {
            slots[i].bluetoothdCrashedOnLink = false // decided: the crash-loop rule has nothing left to count
            actions.append(.persist)
        }
        bluetoothd.probation.removeAll { $0 == a }
        bluetoothd.attributedAtLoss.append(a)
        // The report's reason stays the bare token (journal PAIRD_REASON, the record, metrics and
        // alerts key on it); the journal's words come from the reason's explanation (JournalEntry).
        move(i, to: .needsRepair(reason: reason), now, &actions)
    }
}

/// bluetoothd's departures in a row that came within `PairingMachine.attributionWindow` of one
/// wearable's link coming up (`ManagedDevice.deathsOnLink`).
public struct DeathsOnLink: Sendable, Hashable {
    public var count = 0
    /// Of those, the departures that came while that link was still being set up (not
    /// `connected`, the wearable never answered over it).
    public var inSetUp = 0
    /// Of those, the departures on a link-up paird saw (the others it inferred: `unseenCulprit`).
    public var seen = 0
    /// When the last of them came (forgotten `PairingMachine.attributionMemory` later).
    public var lastAt: Moment?
    public init() {}
}
