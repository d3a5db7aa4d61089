/// What paird watches of a `connected` link's data flow, each watch a countdown carried here
/// (so `DeviceState.countdown` sees it and `move` swaps it like any other):
///
/// ```
///   set up ──▶ awaitingFirstData ──data──▶ watchingSilence (a periodic characteristic)
///                 │ countdown               │ or quiet (none periodic, or nothing learned yet)
///                 ▼                         │ silent past SilencePeriods × its period
///            link made again                ▼
///            ("no-data")                 probing ──answered──▶ quiet (re-subscribed; watched again
///                                           │ failed / countdown        when data comes)
///                                           ▼
///                                      link made again ("probe-failed" / "probe-timeout")
/// ```
public enum LinkHealth: Sendable, Hashable {
    /// Nothing is timed: no characteristic is known to notify periodically (it notifies on change,
    /// or paird has not learned its period yet), or a probe showed the wearable answering.
    case quiet
    /// Subscribed; the first notification must come by the countdown (`MachineConfig.firstDataTimeout`).
    case awaitingFirstData(Countdown)
    /// `characteristic` notifies periodically; the countdown is due when it is silent for
    /// `MachineConfig.silencePeriods` of its periods (checked again when it fires: data that came
    /// meanwhile moves it on without an action per notification).
    case watchingSilence(characteristic: String, Countdown)
    /// A read (`Action.probe`) is in flight and must answer by the countdown.
    case probing(call: UInt64, characteristic: String, Countdown)

    public var countdown: Countdown? {
        switch self {
        case .quiet: nil
        case .awaitingFirstData(let c), .watchingSilence(_, let c), .probing(_, _, let c): c
        }
    }
}

/// The answer to `Action.probe`.
public enum ProbeResult: Sendable, Hashable {
    /// The wearable answered the read: the link works.
    case answered
    /// The read failed (or timed out in D-Bus).
    case failed(BlueZFailure)
    /// Nothing readable to probe (no Battery Level, the characteristic not readable).
    case unavailable
}

/// The rhythm of one subscribed characteristic's notifications: the recent intervals between
/// them (within a link: an interval never spans a reconnect) and from them its period, if it has
/// one. Pure value; `record` is called for each notification.
///
/// A characteristic is *periodic* when at least `minimumSamples` intervals are known and the
/// middle 80 % of them lie within half and twice their median: a heart-rate strap (1 s), a sensor
/// streaming at a fixed rate, also with the jitter of a loaded host (the bed's 1 Hz strap, with
/// the host busy, notified at 1–2 s intervals: ±50 % called it irregular and never watched it).
/// One that notifies on change (a step counter, a button) has irregular intervals and no period:
/// it is never probed for silence.
public struct NotificationRhythm: Sendable, Hashable {
    /// Intervals kept (the most recent), in nanoseconds.
    public static let capacity = 16
    public static let minimumSamples = 8

    public private(set) var intervals: [Int64] = []
    /// The last notification, and the link it came over (`Link.upAt`).
    public private(set) var lastAt: Moment?
    public private(set) var lastLink: Moment?

    public init() {}

    /// One notification at `now` over the link that came up at `link`.
    public mutating func record(_ now: Moment, link: Moment) {
        if let last = lastAt, lastLink == link {
            let d = now.since(last).nanoseconds
            if d >= 0 {
                if intervals.count == Self.capacity { intervals.removeFirst() }
                intervals.append(d)
            }
        }
        lastAt = now
        lastLink = link
    }

    /// Forgets what was learned: after a silence that a probe ended (the wearable answered), so the
    /// gap is never taken for an interval and a wearable that changed its rate is learned anew.
    public mutating func restart() {
        intervals = []
        lastAt = nil
        lastLink = nil
    }

    /// The median interval when the characteristic is periodic; nil when it is not (or not yet known).
    public var period: Duration? {
        guard intervals.count >= Self.minimumSamples else { return nil }
        let sorted = intervals.sorted()
        let median = sorted[sorted.count / 2]
        guard median > 0 else { return nil }
        let trim = sorted.count / 10
        let middle = sorted[trim..<(sorted.count - trim)]
        guard let lo = middle.first, let hi = middle.last,
              Double(lo) >= Double(median) * 0.5, Double(hi) <= Double(median) * 2 else { return nil }
        return .nanoseconds(median)
    }

    /// How long it may be silent before a probe: `periods` of its period, at least `minimum`;
    /// nil when it has no period.
    public func silenceAllowance(periods: Int, minimum: Duration) -> Duration? {
        guard let p = period else { return nil }
        return max(p * periods, minimum)
    }
}
