/// Notices the wall clock jumping against the monotonic one (a bad RTC corrected, an NTP step,
/// `date -s`): pure, fed `Moment`s (both clocks read together). Each check compares the time
/// each clock moved since the last check; a difference over `threshold` is a jump (recorded as a
/// `clock` line). `agree` says whether the wall clock is where the monotonic one puts it since
/// paird started: the age cap deletes only then, so a forward jump never erases the record.
public struct ClockWatch: Sendable, Hashable {
    public var threshold: Double
    /// The first check: the clocks as paird found them.
    var base: Moment?
    var last: Moment?

    public init(threshold: Double = 60) { self.threshold = threshold }

    /// The jump since the last check, in seconds (forward positive), if over the threshold.
    public mutating func check(_ now: Moment) -> Double? {
        defer { last = now; if base == nil { base = now } }
        guard let last else { return nil }
        let drift = Self.drift(from: last, to: now)
        return abs(drift) > threshold ? drift : nil
    }

    /// Both clocks moved alike since paird started (within the threshold), as of the last check.
    public var agree: Bool {
        guard let base, let last else { return true }
        return abs(Self.drift(from: base, to: last)) <= threshold
    }

    /// How much more the wall clock moved than the monotonic one from `a` to `b`.
    static func drift(from a: Moment, to b: Moment) -> Double {
        (b.unixTime - a.unixTime) - Double(b.uptimeNanoseconds &- a.uptimeNanoseconds) / 1e9
    }
}
