/// A point in time as the state machine sees it. The machine never reads a clock: the runtime
/// passes `now` with every event.
///
/// `uptime` orders events and drives countdowns (the runtime feeds it from `CLOCK_BOOTTIME`, so
/// time spent suspended counts, as for `ContinuousClock`). `unixTime` is the wall-clock reading
/// taken at the same instant; it is only ever *reported* (`since`, `lastDisconnect.at`, the state
/// file's timestamps), never compared, so a wall-clock jump cannot fire or starve a countdown.
public struct Moment: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// Monotonic time since an arbitrary origin (boot, for the runtime).
    public var uptime: Duration
    /// Seconds since 1970-01-01T00:00:00Z.
    public var unixTime: Double

    public init(uptime: Duration, unixTime: Double) {
        self.uptime = uptime
        self.unixTime = unixTime
    }

    /// A moment `seconds` after an origin whose wall clock reads `epoch`; handy for tests.
    public static func at(_ seconds: Double, epoch: Double = 1_800_000_000) -> Moment {
        Moment(uptime: .nanoseconds(Int64((seconds * 1e9).rounded())), unixTime: epoch + seconds)
    }

    public static func < (a: Moment, b: Moment) -> Bool { a.uptime < b.uptime }
    public static func == (a: Moment, b: Moment) -> Bool { a.uptime == b.uptime }
    public func hash(into h: inout Hasher) { h.combine(uptime) }

    public static func + (m: Moment, d: Duration) -> Moment {
        Moment(uptime: m.uptime + d, unixTime: m.unixTime + d.seconds)
    }

    /// How long from `earlier` to `self` (negative if `earlier` is later).
    public func since(_ earlier: Moment) -> Duration { uptime - earlier.uptime }

    public var description: String { "t+\(uptime.seconds)s" }
}

extension Duration {
    /// The duration as fractional seconds.
    public var seconds: Double {
        let (s, atto) = components
        return Double(s) + Double(atto) / 1e18
    }

    /// A duration from fractional seconds, rounded to the nanosecond.
    public static func fractionalSeconds(_ s: Double) -> Duration {
        .nanoseconds(Int64((s * 1e9).rounded()))
    }
}
