/// A point in time as the state machine sees it. The machine never reads a clock: the runtime
/// passes `now` with every event.
///
/// `uptime` orders events and drives countdowns (the runtime feeds it from `CLOCK_BOOTTIME`, so
/// time spent suspended counts, as for `ContinuousClock`). `unixTime` is the wall-clock reading
/// taken at the same instant; it is only ever *reported* (`since`, `lastDisconnect.at`, the state
/// file's timestamps), never compared, so a wall-clock jump cannot fire or starve a countdown.
public struct Moment: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// Monotonic nanoseconds since an arbitrary origin (boot, for the runtime). Kept as an
    /// integer: `Duration` arithmetic goes through 128-bit division, too slow for the hot path.
    public var uptimeNanoseconds: Int64
    /// Seconds since 1970-01-01T00:00:00Z.
    public var unixTime: Double

    public init(uptimeNanoseconds: Int64, unixTime: Double) {
        self.uptimeNanoseconds = uptimeNanoseconds
        self.unixTime = unixTime
    }

    public init(uptime: Duration, unixTime: Double) {
        self.init(uptimeNanoseconds: uptime.nanoseconds, unixTime: unixTime)
    }

    /// Monotonic time since an arbitrary origin.
    public var uptime: Duration { .nanoseconds(uptimeNanoseconds) }

    /// A moment `seconds` after an origin whose wall clock reads `epoch`; handy for tests.
    public static func at(_ seconds: Double, epoch: Double = 1_800_000_000) -> Moment {
        Moment(uptimeNanoseconds: Int64((seconds * 1e9).rounded()), unixTime: epoch + seconds)
    }

    public static func < (a: Moment, b: Moment) -> Bool { a.uptimeNanoseconds < b.uptimeNanoseconds }
    public static func == (a: Moment, b: Moment) -> Bool { a.uptimeNanoseconds == b.uptimeNanoseconds }
    public func hash(into h: inout Hasher) { h.combine(uptimeNanoseconds) }

    public static func + (m: Moment, d: Duration) -> Moment { m.advanced(byNanoseconds: d.nanoseconds) }

    public func advanced(byNanoseconds n: Int64) -> Moment {
        Moment(uptimeNanoseconds: uptimeNanoseconds &+ n, unixTime: unixTime + Double(n) / 1e9)
    }

    /// How long from `earlier` to `self` (negative if `earlier` is later).
    public func since(_ earlier: Moment) -> Duration { .nanoseconds(uptimeNanoseconds &- earlier.uptimeNanoseconds) }

    public var description: String { "t+\(Double(uptimeNanoseconds) / 1e9)s" }
}

extension Duration {
    /// The duration as fractional seconds.
    public var seconds: Double {
        let (s, atto) = components
        return Double(s) + Double(atto) / 1e18
    }

    /// Whole nanoseconds (truncated), saturating at Int64's range.
    public var nanoseconds: Int64 {
        let (s, atto) = components
        let (ns, overflow) = s.multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return s < 0 ? .min : .max }
        return ns &+ atto / 1_000_000_000
    }

    /// A duration from fractional seconds, rounded to the nanosecond.
    public static func fractionalSeconds(_ s: Double) -> Duration {
        .nanoseconds(Int64((s * 1e9).rounded()))
    }
}
