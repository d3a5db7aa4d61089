/// A power cycle's second half (after a resume that brought nothing back, or a wedged adapter):
/// Powered=true is tried `PowerOnRetry.tries` times, `PowerOnRetry.interval` apart, because an
/// adapter left off would be worse than what the cycle was meant to clear. The runtime makes the
/// cycle and its first Powered=true (`Action.powerCycleAdapter`, `.powerCycle(adapter:)`) and
/// answers a failed one with `Event.powerOnFailed`; the tries after it, and when to stop, are
/// decided here. An rfkill block is never tried against: a person or a switch set it.
extension PairingMachine {
    mutating func powerOnFailed(_ adapter: DeviceAddress?, attempt: Int, _ failure: BlueZFailure, _ now: Moment, _ actions: inout [Action]) {
        if failure.rfkillBlocked { return actions.append(.powerOnReport(.rfkillBlocked(failure))) }
        guard attempt < PowerOnRetry.tries else {
            return actions.append(.powerOnReport(.gaveUp(tries: attempt, failure)))
        }
        let c = countdown(.adapterPower(adapter), .powerOnRetry, now + PowerOnRetry.interval)
        powerOnRetries[c.id] = PowerOnRetry(adapter: adapter, attempt: attempt + 1)
        actions.append(.powerOnReport(.retrying(after: PowerOnRetry.interval, failure)))
        actions.append(.arm(c))
    }

    mutating func powerOnRetryDue(_ id: Countdown.ID, _ now: Moment, _ actions: inout [Action]) {
        guard let retry = powerOnRetries.removeValue(forKey: id) else { return } // stale: ignored
        actions.append(.powerOn(adapter: retry.adapter, attempt: retry.attempt))
    }
}

/// The next Powered=true of a power cycle, and how many tries a cycle gets.
public struct PowerOnRetry: Sendable, Hashable {
    public static let tries = 3
    public static let interval: Duration = .seconds(1)
    public var adapter: DeviceAddress?
    public var attempt: Int
}

/// What the machine makes of a failed Powered=true (`Action.powerOnReport`).
public enum PowerOnOutcome: Sendable, Hashable {
    /// Tried again after this long.
    case retrying(after: Duration, BlueZFailure)
    /// That many tries failed: the adapter stays off.
    case gaveUp(tries: Int, BlueZFailure)
    /// rfkill blocks the adapter: not tried again.
    case rfkillBlocked(BlueZFailure)
}
