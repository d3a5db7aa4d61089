/// Link health on a `connected` link (`LinkHealth`): the first data's deadline, subscriptions
/// BlueZ ends, the silence watch over characteristics that notify periodically, and its probe.
/// Every remedy is the same: end the link and make it again (`dropUnusableLink`), with the reason
/// in the journal.
extension PairingMachine {
    /// The health a link starts `connected` with: the first data's deadline while none came over it
    /// (unless that was already given up on for this wearable, or a configured characteristic is
    /// missing on it: a new link would not bring that back, `characteristicsMissing` said so), else
    /// the silence watch.
    mutating func initialHealth(_ i: Int, _ link: Link, _ now: Moment) -> LinkHealth {
        let a = slots[i].address
        if !link.dataSeen, let t = config.firstDataTimeout, slots[i].healthRemakes < config.healthRemakesInRow,
           slots[i].missingCharacteristics.isEmpty {
            return .awaitingFirstData(countdown(.device(a), .firstData, now + t))
        }
        return silenceWatch(i, link, now)
    }

    /// The silence watch: the periodic characteristic (over this link) due soonest, or `.quiet`.
    mutating func silenceWatch(_ i: Int, _ link: Link, _ now: Moment) -> LinkHealth {
        guard let (ch, due) = silenceDue(i, link) else { return .quiet }
        return .watchingSilence(characteristic: ch, countdown(.device(slots[i].address), .silence, max(due, now)))
    }

    /// When the periodic characteristic that delivered over `link` is due to be called silent, the
    /// earliest first; nil when none is periodic.
    func silenceDue(_ i: Int, _ link: Link) -> (String, Moment)? {
        var best: (String, Moment)?
        for (ch, r) in slots[i].learned.rhythms.sorted(by: { $0.key < $1.key }) {
            guard r.lastLink == link.upAt, let last = r.lastAt,
                  let allowance = r.silenceAllowance(periods: config.silencePeriods, minimum: config.silenceMinimum) else { continue }
            let due = last + allowance
            if best == nil || due < best!.1 { best = (ch, due) }
        }
        return best
    }

    // MARK: Events

    mutating func dataReceived(_ a: DeviceAddress, _ ch: String, _ now: Moment, _ actions: inout [Action]) {
        guard let i = slot[a], let link = slots[i].state.link else { return }
        slots[i].learned.rhythms[ch, default: NotificationRhythm()].record(now, link: link.upAt)
        slots[i].lastDataAt = now
        slots[i].healthRemakes = 0
        updateLink(i) { $0.dataSeen = true; $0.resubscribes = 0 }
        guard case .connected(let l, let health) = slots[i].state else { return }
        switch health {
        case .awaitingFirstData, .quiet, .probing:
            // Data: the first came, or the flow is back; a probe in flight is moot (its answer is stale).
            let next = silenceWatch(i, l, now)
            if next != health { move(i, to: .connected(l, health: next), now, &actions) }
        case .watchingSilence:
            break // checked when its countdown fires: no action per notification
        }
    }

    mutating func subscriptionEnded(_ a: DeviceAddress, _ ch: String, _ now: Moment, _ actions: inout [Action]) {
        guard let i = slot[a], let link = slots[i].state.link, link.resolved else { return }
        switch slots[i].state {
        case .discovering, .connected: break
        case .restoring, .connecting, .waitingForDevice, .disconnected, .needsRepair, .adapterUnavailable: return
        }
        if link.resubscribes < config.resubscribesPerLink {
            updateLink(i) { $0.resubscribes += 1 }
            actions.append(.resubscribe(a, characteristic: ch))
            return
        }
        guard slots[i].healthRemakes < config.healthRemakesInRow else { return } // given up on this wearable until it delivers
        remakeForHealth(i, link, now, &actions, reason: .subscriptionLost, weak: true)
    }

    mutating func probeFinished(_ a: DeviceAddress, _ call: UInt64, _ result: ProbeResult, _ now: Moment, _ actions: inout [Action]) {
        guard let i = slot[a], case .connected(let link, .probing(call, let ch, _)) = slots[i].state else { return } // stale
        switch result {
        case .answered, .unavailable:
            // The wearable answers (or nothing can tell): the link stays. Its subscription may be
            // what went (BlueZ 5.66 can drop a session silently, BENCHMARKS.md finding 17): made
            // again. Watched again when data comes.
            // The silence is no interval of its rhythm: learned anew from the data that follows
            // (the first bench run: two such gaps among 16 intervals made the strap "irregular",
            // and the third drop went unwatched).
            slots[i].learned.rhythms[ch]?.restart()
            move(i, to: .connected(link, health: .quiet), now, &actions)
            actions.append(.resubscribe(a, characteristic: ch))
        case .failed(let f):
            remakeForHealth(i, link, now, &actions, reason: .probeFailed(f), weak: false)
        }
    }

    /// A health countdown of a `connected` state fired (the caller checked it is the state's).
    mutating func healthCountdownFired(_ i: Int, _ link: Link, _ health: LinkHealth, _ now: Moment, _ actions: inout [Action]) {
        let a = slots[i].address
        switch health {
        case .quiet:
            return
        case .awaitingFirstData:
            remakeForHealth(i, link, now, &actions, reason: .noData, weak: true)
        case .watchingSilence:
            guard let (ch, due) = silenceDue(i, link) else {
                move(i, to: .connected(link, health: .quiet), now, &actions)
                return
            }
            if due > now {
                // Data came meanwhile: watch on to the new due moment.
                move(i, to: .connected(link, health: .watchingSilence(characteristic: ch, countdown(.device(a), .silence, due))), now, &actions)
                return
            }
            let call = nextGeneration()
            move(i, to: .connected(link, health: .probing(call: call, characteristic: ch,
                                                          countdown(.device(a), .probe, now + config.probeTimeout))), now, &actions)
            actions.append(.probe(a, call: call, characteristic: ch, timeout: config.probeTimeout))
        case .probing:
            remakeForHealth(i, link, now, &actions, reason: .probeTimeout, weak: false)
        }
    }

    /// Ends the link and makes it again; `weak` reasons (no data, subscriptions ending) count
    /// toward `healthRemakesInRow`.
    mutating func remakeForHealth(_ i: Int, _ link: Link, _ now: Moment, _ actions: inout [Action], reason: HealthReason, weak: Bool) {
        if weak { slots[i].healthRemakes += 1 }
        dropUnusableLink(i, link, now, &actions, reason: .health(reason))
    }
}

/// A health countdown as `pairctl status` shows it.
public struct HealthWatch: Sendable, Hashable {
    /// `firstData`, `silence` or `probe`.
    public var purpose: CountdownPurpose
    /// The characteristic watched or probed (128-bit UUID); nil for the first data.
    public var characteristic: String?
    /// When it runs out. For the silence watch, the moment the characteristic will have been
    /// silent long enough (its countdown fires at or before it and moves on when data came).
    public var deadline: Moment

    public init(purpose: CountdownPurpose, characteristic: String?, deadline: Moment) {
        self.purpose = purpose
        self.characteristic = characteristic
        self.deadline = deadline
    }
}

extension PairingMachine {
    /// The health countdown running for the device, if any.
    public func healthWatch(_ a: DeviceAddress) -> HealthWatch? {
        guard let i = slot[a], case .connected(let link, let health) = slots[i].state else { return nil }
        switch health {
        case .quiet: return nil
        case .awaitingFirstData(let c): return HealthWatch(purpose: .firstData, characteristic: nil, deadline: c.deadline)
        case .watchingSilence(let ch, let c):
            let due = silenceDue(i, link).map { max($0.1, c.deadline) } ?? c.deadline
            return HealthWatch(purpose: .silence, characteristic: ch, deadline: due)
        case .probing(_, let ch, let c): return HealthWatch(purpose: .probe, characteristic: ch, deadline: c.deadline)
        }
    }
}
