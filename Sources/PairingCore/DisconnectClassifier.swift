/// Why a link went down, as far as the daemon can tell — the out-of-range heuristic.
///
/// BlueZ ≥ 5.83 sends `Device1.Disconnected(reason, message)` just before `Connected` turns false;
/// 5.66 (Debian 12) sends only `Connected=false`, the reason stays below D-Bus. So the classifier
/// takes every piece of evidence the runtime has and decides in this order:
///
/// 1. the adapter (or bluetoothd) is gone            → `.adapterGone`
/// 2. the device object vanished, or `Paired`/`Bonded`
///    is false, or the reason is `Authentication`     → `.bondLost`
/// 3. we asked for this disconnect                   → `.requested`
/// 4. anything else (Timeout, Remote, Unknown, Suspend,
///    a Local we did not ask for, or no reason at all) → `.linkLoss` — wait for it, however long
public enum DisconnectClassifier {
    /// The `org.bluez.Reason.*` of BlueZ ≥ 5.83's `Disconnected` signal.
    public enum Reason: String, Sendable, Hashable, CaseIterable {
        case unknown = "org.bluez.Reason.Unknown"
        case timeout = "org.bluez.Reason.Timeout"
        case local = "org.bluez.Reason.Local"
        case remote = "org.bluez.Reason.Remote"
        case authentication = "org.bluez.Reason.Authentication"
        case suspend = "org.bluez.Reason.Suspend"

        /// Parses a reason name; an unrecognised name (a future BlueZ) counts as `.unknown`.
        public init(name: String) { self = Reason(rawValue: name) ?? .unknown }

        public var token: String {
            switch self {
            case .unknown: "unknown"
            case .timeout: "timeout"
            case .local: "local"
            case .remote: "remote"
            case .authentication: "authentication"
            case .suspend: "suspend"
            }
        }
    }

    /// What the runtime knows at the moment the link went down.
    public struct Evidence: Sendable, Hashable {
        /// From `Device1.Disconnected`, when BlueZ sends it (≥ 5.83); nil on 5.66.
        public var reason: Reason?
        /// `Paired` (and `Bonded` where present) as BlueZ reports them now.
        public var stillBonded: Bool
        /// The device object still exists in BlueZ.
        public var deviceExists: Bool
        /// The adapter is present and powered, and bluetoothd owns its name.
        public var adapterUp: Bool

        public init(reason: Reason? = nil, stillBonded: Bool = true, deviceExists: Bool = true, adapterUp: Bool = true) {
            self.reason = reason
            self.stillBonded = stillBonded
            self.deviceExists = deviceExists
            self.adapterUp = adapterUp
        }
    }

    public enum Verdict: Sendable, Hashable {
        case requested
        case linkLoss(reason: Reason?)
        case bondLost(reason: RepairReason)
        case adapterGone
    }

    /// A link lost this long before its adapter or bluetoothd went was theirs, not the wearable's:
    /// the record and the status take that cause once it shows. BlueZ 5.66, stopped cleanly
    /// (`systemctl restart bluetooth`), drops every link (`Connected=false`, no reason) 3.3 s
    /// before its adapter's `Powered=false` and its leaving the bus (BENCHMARKS §7), more on a
    /// loaded host; a controller unplugged takes its links with it the same way. The price: a
    /// real link loss this close before an unplug is counted as the adapter's.
    public static let causeWindow: Duration = .seconds(10)

    public static func classify(_ e: Evidence, weAskedForIt: Bool) -> Verdict {
        if !e.adapterUp { return .adapterGone }
        if !e.deviceExists { return .bondLost(reason: .deviceRemoved) }
        if !e.stillBonded { return .bondLost(reason: .bondRemoved) }
        if e.reason == .authentication { return .bondLost(reason: .authentication) }
        if weAskedForIt { return .requested }
        return .linkLoss(reason: e.reason)
    }
}

/// What a failed `Connect()` means for the device (the connect-side twin of `DisconnectClassifier`).
public enum ConnectFailureClassifier {
    public enum Verdict: Sendable, Hashable {
        /// Retry soon, with backoff: the stack hiccupped.
        case transient
        /// The wearable is not there: on 5.66 a Connect against an absent device blocks ~40 s,
        /// then fails `le-connection-abort-by-local`. Wait for it, passively.
        case deviceAbsent
        /// The bond no longer works, or BlueZ forgot the device: ask for re-pairing, do not loop.
        case bondLost
        /// The adapter or bluetoothd went away.
        case adapterGone
    }

    /// - Parameters:
    ///   - elapsed: how long the Connect call took; `absentAfter` separates "the stack refused at
    ///     once" from "nobody answered for the kernel's whole connect window".
    public static func classify(_ failure: BlueZFailure, elapsed: Duration, absentAfter: Duration) -> Verdict {
        switch failure {
        case .authentication, .deviceGone: return .bondLost
        case .adapterUnavailable: return .adapterGone
        case .abortedByLocal, .connectTimeout, .noReply, .canceled:
            return elapsed >= absentAfter ? .deviceAbsent : .transient
        case .abortedByRemote, .busy, .authenticationAborted, .alreadyExists, .notConnected, .connectionLimit, .other:
            // (The controller's connection limit: another link going makes room; backed off meanwhile.)
            return .transient
        }
    }
}
