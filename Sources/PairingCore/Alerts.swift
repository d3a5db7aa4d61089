/// The thresholds of the host's own alerts (paird.conf `[Alerts]`). A threshold that is nil
/// (0 in the file) turns its alert off.
public struct AlertConfig: Sendable, Hashable {
    /// A battery reading under this percentage is low (`[Alerts] BatteryLow`); nil: off.
    public var batteryLow: Int? = 15
    /// After a low-battery alert, the level must reach `batteryLow + batteryHysteresis` before
    /// a drop under `batteryLow` alerts again (`[Alerts] BatteryHysteresis`).
    public var batteryHysteresis: Int = 5
    /// A wanted wearable not connected for this long (`[Alerts] AwayLongerThan`); nil: off.
    public var awayLongerThan: Duration? = .seconds(600)
    /// A connected wearable that delivered no data on its subscribed characteristics for this
    /// long (`[Alerts] NoDataFor`); nil: off (the daemon also turns it off when nothing is
    /// subscribed: no data is awaited then).
    public var noDataFor: Duration? = .seconds(300)

    public init() {}
}

/// One alert: what happened, to which wearable, with what the dispatcher's scripts are told.
public struct Alert: Sendable, Hashable, CustomStringConvertible {
    /// Its name is `PAIRD_EVENT` for the dispatcher's scripts and in the journal.
    public enum Kind: String, Sendable, Hashable, CaseIterable {
        /// A battery reading crossed `batteryLow` downwards.
        case batteryLow
        /// A wanted wearable has not been connected for `awayLongerThan`.
        case awayTooLong
        /// A connected wearable sent no data for `noDataFor`.
        case noData
        /// The wearable's bond no longer works (`Report.Kind.needsRepair`).
        case needsRepair
        /// systemd called bluetoothd's exit a crash (`BluetoothdReport.crashed`).
        case bluetoothdCrashed
    }

    public var kind: Kind
    public var device: DeviceAddress?
    public var name: String
    /// The wearable's last battery reading, if any.
    public var battery: Int?
    /// needsRepair: why; bluetoothdCrashed: the exit (signal, core dump…); awayTooLong: the
    /// reason of the drop that began the absence, when known.
    public var reason: String?
    /// awayTooLong: how long away; noData: how long without data.
    public var duration: Duration?

    public init(kind: Kind, device: DeviceAddress?, name: String = "", battery: Int? = nil, reason: String? = nil,
                duration: Duration? = nil) {
        self.kind = kind
        self.device = device
        self.name = name
        self.battery = battery
        self.reason = reason
        self.duration = duration
    }

    public var description: String {
        var s = "\(kind.rawValue)"
        if let device { s += " \(device)" }
        if !name.isEmpty { s += " \"\(name)\"" }
        if let battery { s += " battery=\(battery)" }
        if let reason { s += " reason=\(reason)" }
        if let duration { s += " after=\(Int(duration.seconds.rounded()))s" }
        return s
    }
}

/// Decides the host's own alerts (issue 33, item 4) from what the daemon already sees: the
/// machine's reports (`Action.report`), battery levels, bluetoothd's crash reports, the host's
/// sleep, and a `tick` when a deadline it gave is due. A wearable's battery level and last data
/// are the machine's facts (`WearableFacts`): read when needed, not copied. Pure: no clock, no
/// I/O; fed the same `Observation`s as `HistoryRecorder`, it returns the alerts to raise, each once:
///
/// - `batteryLow`: a reading under `batteryLow` while armed; re-armed only by a reading of at
///   least `batteryLow + batteryHysteresis`. The first reading after paird's start counts as a
///   crossing when it is already low (paird cannot know it was said before).
/// - `awayTooLong`: a wanted wearable not connected for `awayLongerThan` (once per absence;
///   a user's disconnect, an unpair, a needsRepair and the host's sleep are no absence, the
///   time asleep does not count).
/// - `noData`: connected, and no data for `noDataFor` since the later of its last data and the
///   moment it connected (once per silence: data, or a new connection after an absence, re-arm
///   it). A link paird made again for lack of data (`no-data`, `probe-*`, `subscription-lost`)
///   is the same silence: its clock is not restarted.
/// - `needsRepair`, `bluetoothdCrashed`: as the machine reports them.
///
/// Time-based alerts are decided at `tick`; `nextDeadline` says when the next could be due so
/// the daemon arms one timer (no periodic wake-up).
public struct AlertDecider: Sendable {
    struct Device: Sendable, Hashable {
        var name = ""
        var connected = false
        /// Not connected, and paird is trying to bring it back (waiting, connecting…).
        var pursued = false
        /// When the current absence began (nil: none, or asleep).
        var awayAt: Moment?
        var awayReason: String?
        var awayAlerted = false
        /// The start of the current connected time without data (the connection's start).
        var connectedAt: Moment?
        /// The start of the silence a `noData` alert was raised for (the later of the connection's
        /// start and the last data then): new data or a new connection starts another one.
        var silenceAlertedFor: Moment?
        /// The last drop was paird's own remake for lack of data: the silence goes on.
        var remakingForData = false
        var batteryArmed = true
    }

    public var config: AlertConfig
    var devices: [DeviceAddress: Device] = [:]

    public init(config: AlertConfig) {
        self.config = config
    }

    /// The link-health reasons for which paird itself drops a link and makes it again.
    static func isDataRemake(_ reason: ReportReason?) -> Bool {
        switch reason {
        case .health(let h)?:
            switch h {
            case .noData, .probeTimeout, .subscriptionLost, .probeFailed: true
            }
        case nil, .user?, .local?, .adapterGone?, .bondOnAdapter?, .servicesLost?, .hostAsleep?, .hostResumed?,
             .onTrialAfterCrashes?, .unresolvableAfterCrash?, .unresolvableAfterBluetoothdLeft?, .adapterWedged?,
             .resolveTimeout?, .discoveryTimeout?, .linkLoss?, .failure?, .repair?, .wedge?, .resume?,
             .missingCharacteristics?, .pairing?, .rescan?, .refused?:
            false
        }
    }

    public mutating func handle(_ input: Observation, now: Moment, facts: some WearableFacts) -> [Alert] {
        switch input {
        case .report(let r):
            guard let a = r.device else { return [] }
            return report(a, r, now, facts)
        case .battery(let a, let level):
            var d = devices[a] ?? Device()
            defer { devices[a] = d }
            let l = Int(level)
            guard let low = config.batteryLow else { return [] }
            if d.batteryArmed, l < low {
                d.batteryArmed = false
                return [Alert(kind: .batteryLow, device: a, name: d.name, battery: l)]
            }
            if !d.batteryArmed, l >= low + config.batteryHysteresis { d.batteryArmed = true }
            return []
        case .bluetoothdCrashed(let cause):
            return [Alert(kind: .bluetoothdCrashed, device: nil, reason: cause)]
        case .pairdStarted, .pairdStopping, .alive, .bluetoothdLeft, .adapterReady:
            return [] // what they change for a wearable comes as its reports
        case .addressChanged(let old, let new):
            if let d = devices.removeValue(forKey: old) { devices[new] = d }
            return []
        case .hostSleeping:
            for a in devices.keys { devices[a]!.awayAt = nil; devices[a]!.connectedAt = nil }
            return []
        case .hostResumed:
            // Told before the machine handles the resume: its facts still say asleep.
            for a in devices.keys {
                if devices[a]!.pursued { startAbsence(a, now, reason: ReportReason.hostAsleep.token, asleep: false) }
                if devices[a]!.connected { devices[a]!.connectedAt = now; devices[a]!.silenceAlertedFor = nil }
            }
            return []
        case .tick:
            return due(now, facts)
        }
    }

    mutating func startAbsence(_ a: DeviceAddress, _ now: Moment, reason: String?, asleep: Bool) {
        guard !asleep, devices[a]?.awayAt == nil else { return }
        devices[a]!.awayAt = now
        devices[a]!.awayReason = reason
        devices[a]!.awayAlerted = false
    }

    mutating func report(_ a: DeviceAddress, _ r: Report, _ now: Moment, _ facts: some WearableFacts) -> [Alert] {
        if r.to == .unpaired || r.kind == .unpaired {
            devices[a] = nil
            return []
        }
        var d = devices[a] ?? Device()
        if !r.name.isEmpty { d.name = r.name }
        devices[a] = d
        var out: [Alert] = []
        if r.kind == .hostAsleep {
            // Let go for the sleep: no absence, no silence.
            d.connected = false
            d.pursued = true
            d.awayAt = nil
            d.connectedAt = nil
            devices[a] = d
            return []
        }
        switch r.to {
        case .state(.connected)?:
            let sameSilence = d.remakingForData && d.connectedAt != nil
            d.connected = true
            d.pursued = false
            d.awayAt = nil
            d.awayAlerted = false
            d.remakingForData = false
            if !sameSilence {
                d.connectedAt = facts.hostAsleep ? nil : now
                d.silenceAlertedFor = nil
            }
            devices[a] = d
        // Pursued: paird brings it back (settling's word is `connecting`, as it always was).
        case .state(.restoring)?, .state(.waitingForDevice)?, .state(.connecting)?, .state(.discovering)?,
             .state(.adapterUnavailable)?, .paired?, .pairing(.settling)?:
            if d.connected {
                d.remakingForData = Self.isDataRemake(r.reason)
                if !d.remakingForData { d.connectedAt = nil }
            }
            d.connected = false
            d.pursued = true
            devices[a] = d
            startAbsence(a, now, reason: r.reasonToken ?? (r.kind == .adapterLost ? "adapter-unavailable" : nil), asleep: facts.hostAsleep)
        case nil, .state(.disconnected)?, .state(.needsRepair)?, .unpaired?, .refused?, .pairing(.scanning)?,
             .pairing(.removingOldBond)?, .pairing(.pairing)?: // the user's disconnect, needsRepair: not pursued, not away
            d.connected = false
            d.pursued = false
            d.awayAt = nil
            d.connectedAt = nil
            d.remakingForData = false
            devices[a] = d
            if r.kind == .needsRepair {
                out.append(Alert(kind: .needsRepair, device: a, name: d.name, battery: facts.battery(of: a).map(Int.init), reason: r.reasonToken))
            }
        }
        return out
    }

    /// The time-based alerts due at `now`, each once.
    mutating func due(_ now: Moment, _ facts: some WearableFacts) -> [Alert] {
        var out: [Alert] = []
        for a in devices.keys.sorted(by: { $0.description < $1.description }) {
            var d = devices[a]!
            let battery = facts.battery(of: a).map(Int.init)
            if let limit = config.awayLongerThan, let at = d.awayAt, !d.awayAlerted, now.since(at) >= limit {
                d.awayAlerted = true
                out.append(Alert(kind: .awayTooLong, device: a, name: d.name, battery: battery, reason: d.awayReason,
                                 duration: now.since(at)))
            }
            if let limit = config.noDataFor, let since = unsaidSilence(d, facts.lastData(of: a)), now.since(since) >= limit {
                d.silenceAlertedFor = since
                out.append(Alert(kind: .noData, device: a, name: d.name, battery: battery, duration: now.since(since)))
            }
            devices[a] = d
        }
        return out
    }

    /// The start of a connected wearable's current silence (the later of its connection's start
    /// and its last data), unless a `noData` alert was raised for it already.
    func unsaidSilence(_ d: Device, _ lastData: Moment?) -> Moment? {
        guard d.connected, let c = d.connectedAt else { return nil }
        let since = lastData.map { max(c, $0) } ?? c
        return since == d.silenceAlertedFor ? nil : since
    }

    /// When the next time-based alert could be due (a `tick` then decides; data that comes
    /// meanwhile only moves it later). nil: none is pending.
    public func nextDeadline(_ facts: some WearableFacts) -> Moment? {
        var best: Moment?
        func consider(_ m: Moment) { if best == nil || m < best! { best = m } }
        for (a, d) in devices {
            if let limit = config.awayLongerThan, let at = d.awayAt, !d.awayAlerted { consider(at + limit) }
            if let limit = config.noDataFor, let since = unsaidSilence(d, facts.lastData(of: a)) { consider(since + limit) }
        }
        return best
    }
}

/// The facts the observers read instead of keeping copies: the machine's
/// (`ManagedDevice.battery`, `ManagedDevice.lastDataAt`, `HostWatch.asleep`).
///
/// Read when an observation is handled: for one the machine makes (`Observation.after`) they are
/// the machine's after the step; for one told before the machine handles its event
/// (`Observation.before`: `hostSleeping`, `hostResumed`, …) they are still those before it.
public protocol WearableFacts {
    func battery(of a: DeviceAddress) -> UInt8?
    func lastData(of a: DeviceAddress) -> Moment?
    /// Between the host's `hostSleeping` and its `hostResumed`, as the machine saw them.
    var hostAsleep: Bool { get }
}

extension PairingMachine: WearableFacts {
    public func battery(of a: DeviceAddress) -> UInt8? { slot[a].flatMap { slots[$0].battery } }
    public func lastData(of a: DeviceAddress) -> Moment? { slot[a].flatMap { slots[$0].lastDataAt } }
    public var hostAsleep: Bool { host.asleep }
}
