/// The state machine's vocabulary: why a wearable's state changed, as typed values. Each has a
/// stable `token`, the exact words the journal (`PAIRD_REASON=`), the D-Bus `StateChanged`
/// signal, the history record and the metrics have always carried; a payload (an address, a
/// count, a BlueZ failure) rides as an associated value and is formatted only in `token`.
/// `VocabularyTokenTests` pins every token.

/// The reason a `Report` carries (and `move` is given).
public enum ReportReason: Sendable, Hashable {
    /// The user's `pairctl disconnect` (or unpair).
    case user
    /// The link went down at paird's own asking (its `Disconnect()`), no other cause known.
    case local
    /// The adapter went away (removed, powered off, bluetoothd gone).
    case adapterGone
    /// The wearable's bond is on another adapter than the one present.
    case bondOnAdapter(DeviceAddress)
    /// The GATT services of a connected wearable went away: discovered again.
    case servicesLost
    /// The host is going to sleep (`HostWatch.asleepReason`).
    case hostAsleep
    /// The host woke up: the wearable is connected again.
    case hostResumed
    /// Let back on trial after bluetoothd's crashes were put on it.
    case onTrialAfterCrashes
    /// Its object had no usable services after a crash of bluetoothd / after bluetoothd left.
    case unresolvableAfterCrash
    case unresolvableAfterBluetoothdLeft
    /// Waiting for its wedged adapter (`WedgeWatch.reason`).
    case adapterWedged
    /// Resolving / discovering the services took too long: the link is made again.
    case resolveTimeout
    case discoveryTimeout
    /// The link was lost: BlueZ's `Disconnected` reason when it said one, else `link-loss`.
    case linkLoss(DisconnectClassifier.Reason?)
    /// A BlueZ request failed (`Connect()`, …).
    case failure(BlueZFailure)
    /// The link's health failed: it is made again.
    case health(HealthReason)
    /// The wearable needs pairing again.
    case repair(RepairReason)
    /// An adapter taken for wedged (`Report.Kind.adapterWedged`).
    case wedge(WedgeReport)
    /// A step after the host's resume (`Report.Kind.resumeEscalation`).
    case resume(ResumeEscalation)
    /// Configured characteristics missing on the link (UUIDs, sorted).
    case missingCharacteristics([String])
    /// A pairing session ended without a pairing.
    case pairing(PairingOutcome)
    /// A pairing candidate on a private address could not be reached: scanning again.
    case rescan(BlueZFailure, rescan: Int, of: Int)
    /// BlueZ's agent question about a pairing nobody started.
    case refused(AgentQuestion)

    public var token: String {
        switch self {
        case .user: "user"
        case .local: "local"
        case .adapterGone: "adapter-gone"
        case .bondOnAdapter(let a): "bond-on-adapter \(a)"
        case .servicesLost: "services-lost"
        case .hostAsleep: "host-asleep"
        case .hostResumed: "host-resumed"
        case .onTrialAfterCrashes: "on-trial-after-crashes"
        case .unresolvableAfterCrash: "unresolvable-after-crash"
        case .unresolvableAfterBluetoothdLeft: "unresolvable-after-bluetoothd-left"
        case .adapterWedged: "adapter-wedged"
        case .resolveTimeout: "resolve-timeout"
        case .discoveryTimeout: "discovery-timeout"
        case .linkLoss(let r): r?.token ?? "link-loss"
        case .failure(let f): f.token
        case .health(let h): h.token
        case .repair(let r): r.token
        case .wedge(let w): w.token
        case .resume(let r): r.token
        case .missingCharacteristics(let uuids): uuids.joined(separator: " ")
        case .pairing(let outcome): "\(outcome)"
        case .rescan(let f, let n, let max): "\(f.token) on a private address, rescan \(n) of \(max)"
        case .refused(let q): q.token
        }
    }
}

/// Why paird drops a connected link and makes it again (`PairingMachine+Health`).
public enum HealthReason: Sendable, Hashable {
    /// Subscriptions kept ending (weak).
    case subscriptionLost
    /// No first data in time (weak).
    case noData
    /// The probe's read failed.
    case probeFailed(BlueZFailure)
    /// The probe's read got no answer in time.
    case probeTimeout

    public var token: String {
        switch self {
        case .subscriptionLost: "subscription-lost"
        case .noData: "no-data"
        case .probeFailed(let f): "probe-failed:\(f.token)"
        case .probeTimeout: "probe-timeout"
        }
    }
}

/// What an `adapterWedged` report says: a power cycle started, or the cap of them reached.
public enum WedgeReport: Sendable, Hashable {
    /// Power cycle `attempt` of at most `of`, of the adapter.
    case powerCycle(attempt: Int, of: Int, adapter: DeviceAddress)
    /// `done` power cycles of at most `of` brought nothing back: no more.
    case capReached(done: Int, of: Int, adapter: DeviceAddress)

    public var token: String {
        switch self {
        case .powerCycle(let k, let n, let a): "power-cycle \(k)/\(n) \(a)"
        case .capReached(let k, let n, let a): "cap-reached \(k)/\(n) \(a)"
        }
    }

    public var adapter: DeviceAddress {
        switch self {
        case .powerCycle(_, _, let a), .capReached(_, _, let a): a
        }
    }
}

/// A step after the host's resume, with what it is told with: the power cycles so far (for the
/// power-cycle steps) and, for a wearable, the time since the resume and its deadline.
public struct ResumeEscalation: Sendable, Hashable {
    public var step: ResumeStep
    /// Power cycles in vain so far, and the most allowed.
    public var powerCycles: Int?
    public var powerCycleCap: Int?
    /// Since the resume, and the wearable's learned deadline.
    public var after: Duration?
    public var deadline: Duration?

    public init(step: ResumeStep, powerCycles: Int? = nil, powerCycleCap: Int? = nil,
                after: Duration? = nil, deadline: Duration? = nil) {
        self.step = step
        self.powerCycles = powerCycles
        self.powerCycleCap = powerCycleCap
        self.after = after
        self.deadline = deadline
    }

    public var token: String {
        let d = detail
        return d.isEmpty ? step.rawValue : "\(step.rawValue) \(d)"
    }

    /// The words after the step's: `k/N`, then `after X s (deadline Y s)`, as there are.
    public var detail: String {
        var words: [String] = []
        if let k = powerCycles, let n = powerCycleCap { words.append("\(k)/\(n)") }
        if let after, let deadline { words.append("after \(Self.tenths(after)) s (deadline \(Self.tenths(deadline)) s)") }
        return words.joined(separator: " ")
    }

    static func tenths(_ d: Duration) -> String {
        let t = Int((d.seconds * 10).rounded())
        return "\(t / 10).\(t % 10)"
    }
}

/// Why paird waits for bluetoothd (`Bluetoothd.Phase.waiting`).
public enum BluetoothdWait: Sendable, Hashable {
    case noSystemdUnit
    case unitNotSettled
    /// The unit's `Result` (`start-limit-hit`, `resources`, …).
    case unitResult(String)
    case systemdRestarts
    case notOnBusAtStart

    public var token: String {
        switch self {
        case .noSystemdUnit: "no systemd unit"
        case .unitNotSettled: "systemd did not settle bluetooth.service"
        case .unitResult(let r): r
        case .systemdRestarts: "systemd restarts it"
        case .notOnBusAtStart: "not on the bus when paird started"
        }
    }
}

extension DeviceState {
    /// The state without its payload: what reports, the status and the journal name.
    public enum Kind: Sendable, Hashable, CaseIterable {
        case restoring, connecting, discovering, connected, waitingForDevice, disconnected, needsRepair, adapterUnavailable

        public var token: String {
            switch self {
            case .restoring: "restoring"
            case .connecting: "connecting"
            case .discovering: "discovering"
            case .connected: "connected"
            case .waitingForDevice: "waitingForDevice"
            case .disconnected: "disconnected"
            case .needsRepair: "needsRepair"
            case .adapterUnavailable: "adapterUnavailable"
            }
        }

        /// The kind a token names (the status JSON's `state`); nil for one this build does not know.
        public init?(token: String) {
            guard let k = Self.allCases.first(where: { $0.token == token }) else { return nil }
            self = k
        }
    }

    public var kind: Kind {
        switch self {
        case .restoring: .restoring
        case .connecting: .connecting
        case .discovering: .discovering
        case .connected: .connected
        case .waitingForDevice: .waitingForDevice
        case .disconnected: .disconnected
        case .needsRepair: .needsRepair
        case .adapterUnavailable: .adapterUnavailable
        }
    }
}

/// A pairing session's phase without its payload (`PairingSession.Phase`).
public enum PairingStep: Sendable, Hashable, CaseIterable {
    case scanning, removingOldBond, pairing, settling

    public var token: String {
        switch self {
        case .scanning: "scanning"
        case .removingOldBond: "removing-old-bond"
        case .pairing: "pairing"
        // Settling waits for the paired wearable's link: said as the state it is in.
        case .settling: "connecting"
        }
    }
}

/// What a `Report` goes from and to: a wearable's state, or a word of the pairing session's.
public enum ReportState: Sendable, Hashable {
    case state(DeviceState.Kind)
    /// Paired by the session / unpaired by the user.
    case paired, unpaired
    /// BlueZ's agent question refused.
    case refused
    /// A pairing session's phase.
    case pairing(PairingStep)

    public var token: String {
        switch self {
        case .state(let k): k.token
        case .paired: "paired"
        case .unpaired: "unpaired"
        case .refused: "refused"
        case .pairing(let p): p.token
        }
    }
}
