/// Delays between retries of a *transient* connect failure: exponential from `initial`, capped
/// at `maximum`, each multiplied by a jitter factor in `1 ± jitter` so that several daemons (or
/// devices) that failed together do not retry together.
///
/// With the defaults (1 s, ×2, cap 60 s, ±20 %) attempts 1…7 wait about
/// 1, 2, 4, 8, 16, 32, 60 s, and 60 s from then on — the shape of BlueZ's own
/// `ReconnectIntervals=1,2,4,8,16,32,64`, without its `ReconnectAttempts` limit: the state machine
/// decides when to stop retrying fast and start waiting passively, never when to give up.
public struct Backoff: Sendable, Hashable {
    public var initial: Duration
    public var maximum: Duration
    public var multiplier: Double
    public var jitter: Double

    public init(initial: Duration = .seconds(1), maximum: Duration = .seconds(60), multiplier: Double = 2, jitter: Double = 0.2) {
        precondition(initial > .zero && maximum >= initial && multiplier >= 1 && (0..<1).contains(jitter),
                     "invalid backoff bounds")
        self.initial = initial
        self.maximum = maximum
        self.multiplier = multiplier
        self.jitter = jitter
    }

    /// The delay before retry number `attempt` (1-based), with `unit` a uniform draw in [0, 1).
    public func delay(attempt: Int, unit: Double) -> Duration {
        let exponent = Double(max(0, attempt - 1))
        let base = min(initial.seconds * pow2(multiplier, exponent), maximum.seconds)
        let factor = 1 - jitter + 2 * jitter * unit
        return .fractionalSeconds(base * factor)
    }

    private func pow2(_ m: Double, _ e: Double) -> Double {
        // Small integer exponents only (attempt counts); avoids importing Foundation for pow().
        var r = 1.0
        var i = 0.0
        while i < e && r < 1e12 { r *= m; i += 1 }
        return r
    }
}

/// SplitMix64: a tiny deterministic generator, so jitter is reproducible from a seed in tests
/// and the machine stays free of global randomness.
public struct SplitMix64: RandomNumberGenerator, Sendable, Hashable {
    public var state: UInt64
    public init(seed: UInt64) { state = seed }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A uniform draw in [0, 1).
    public mutating func nextUnit() -> Double { Double(next() >> 11) / Double(1 << 53) }
}
