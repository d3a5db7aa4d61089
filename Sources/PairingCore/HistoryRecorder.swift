/// Turns what the daemon already sees (the machine's reports of state changes with their reasons,
/// bluetoothd leaving and its crash, battery readings, paird's own start and stop) into the
/// availability record's lines. Pure: no clock, no file; the daemon appends what it returns
/// (`HistoryStore`).
///
/// Per device it keeps one *condition* (`HistoryRecord.Condition`) with its reason and writes a
/// record only when that changes: `up` when it reaches `connected`, `down` when a connected
/// interval ends (the drop, with its reason), `change` when a wearable that is not connected
/// changes how it is not. A wearable that is not connected and being pursued (waiting, connecting,
/// discovering) keeps the condition of the drop that began it until it is connected again: the
/// time away after a link loss is `away` however paird tries, the time after a bluetoothd crash is
/// `down` until the link is back.
public struct HistoryRecorder: Sendable {
    struct Device: Sendable {
        var condition: HistoryRecord.Condition?
        var reason: String?
        var name: String
        /// When the current connected interval started.
        var upAt: Moment?
        /// When the current drop happened (seen by this paird).
        var droppedAt: Moment?
        /// When the attempt that is making the link started (link up, or a Connect of paird's).
        var attemptAt: Moment?
        /// What it was before the host's sleep took it (`hostAsleep`), restored at the resume.
        var beforeSleep: HistoryRecord.Condition?
        var reasonBeforeSleep: String?
    }

    var devices: [DeviceAddress: Device] = [:]
    /// The last battery level recorded per device (seeded from the file, so a restart does not
    /// record an unchanged level again).
    var battery: [String: Int] = [:]
    /// When each device's last battery record was made (this paird's monotonic clock).
    var batteryAt: [String: Moment] = [:]
    /// `[History] BatteryStep`, `BatteryInterval`: what a battery reading must differ by, and how
    /// long after the last one, to be recorded (a wearable alternating 49/50 % cannot flood the record).
    public var batteryLimit: BatteryLimit
    /// Between `bluetoothdLeft` and the next `adapterReady`: an adapter lost meanwhile is bluetoothd's.
    var bluetoothdGone = false

    /// `earlier`: the records already in the file (only their battery readings are used).
    public init(earlier: [HistoryRecord] = [], batteryLimit: BatteryLimit = BatteryLimit()) {
        self.batteryLimit = batteryLimit
        for r in earlier where r.kind == .battery {
            if let d = r.device, let l = r.level { battery[d] = l }
        }
    }

    /// `facts`: the machine's (whether the host is asleep), read as `WearableFacts` says.
    public mutating func handle(_ input: Observation, now: Moment, facts: some WearableFacts) -> [HistoryRecord] {
        let t = now.unixTime
        switch input {
        case .pairdStarted:
            devices.removeAll()
            bluetoothdGone = false
            return [HistoryRecord(kind: .start, at: t)]
        case .pairdStopping:
            return [HistoryRecord(kind: .stop, at: t)]
        case .alive:
            return [HistoryRecord(kind: .alive, at: t)]
        case .bluetoothdLeft:
            bluetoothdGone = true
            // The adapter's loss just before (bluetoothd powers it off as it stops) was bluetoothd's.
            var out: [HistoryRecord] = []
            for a in devices.keys.sorted(by: { $0.description < $1.description }) {
                guard let d = devices[a], d.reason == HistoryRecord.Reason.adapterGone, causedNow(d, now) else { continue }
                devices[a]!.reason = HistoryRecord.Reason.bluetoothdGone
                out.append(HistoryRecord(kind: .reason, at: t, device: a.description, name: d.name,
                                         reason: HistoryRecord.Reason.bluetoothdGone))
            }
            return out
        case .adapterReady:
            bluetoothdGone = false
            return []
        case .bluetoothdCrashed:
            var out: [HistoryRecord] = []
            for a in devices.keys.sorted(by: { $0.description < $1.description }) {
                if devices[a]!.reasonBeforeSleep == HistoryRecord.Reason.bluetoothdGone {
                    devices[a]!.reasonBeforeSleep = HistoryRecord.Reason.bluetoothdCrash // asleep: said at the resume
                }
                guard devices[a]!.reason == HistoryRecord.Reason.bluetoothdGone else { continue }
                devices[a]!.reason = HistoryRecord.Reason.bluetoothdCrash
                out.append(HistoryRecord(kind: .reason, at: t, device: a.description, name: devices[a]!.name,
                                         reason: HistoryRecord.Reason.bluetoothdCrash))
            }
            return out
        case .battery(let a, let level):
            let key = a.description
            guard batteryLimit.records(Int(level), last: battery[key], lastAt: batteryAt[key], now: now) else { return [] }
            battery[key] = Int(level)
            batteryAt[key] = now
            return [HistoryRecord(kind: .battery, at: t, device: key, name: devices[a]?.name, level: Int(level))]
        case .report(let r):
            guard let a = r.device else { return [] }
            return stateChanged(a, r, now, asleep: facts.hostAsleep)
        case .hostSleeping:
            var out: [HistoryRecord] = []
            for a in devices.keys.sorted(by: { $0.description < $1.description }) {
                guard var d = devices[a], d.condition == .away || d.condition == .down else { continue }
                (d.beforeSleep, d.reasonBeforeSleep) = (d.condition, d.reason)
                (d.condition, d.reason, d.droppedAt) = (.unwanted, HistoryRecord.Reason.hostAsleep, nil)
                devices[a] = d
                out.append(HistoryRecord(kind: .change, at: t, device: a.description, name: d.name, condition: .unwanted,
                                         reason: HistoryRecord.Reason.hostAsleep))
            }
            return out
        case .hostResumed:
            var out: [HistoryRecord] = []
            for a in devices.keys.sorted(by: { $0.description < $1.description }) {
                guard var d = devices[a], d.condition == .unwanted, d.reason == HistoryRecord.Reason.hostAsleep else { continue }
                let condition = d.beforeSleep ?? .away
                let reason = d.reasonBeforeSleep ?? HistoryRecord.Reason.hostAsleep
                (d.condition, d.reason, d.droppedAt, d.beforeSleep, d.reasonBeforeSleep) = (condition, reason, now, nil, nil)
                devices[a] = d
                out.append(HistoryRecord(kind: .change, at: t, device: a.description, name: d.name, condition: condition, reason: reason))
            }
            return out
        case .addressChanged(let old, let new):
            if let d = devices.removeValue(forKey: old) { devices[new] = d }
            if let l = battery.removeValue(forKey: old.description) { battery[new.description] = l }
            if let t = batteryAt.removeValue(forKey: old.description) { batteryAt[new.description] = t }
            return []
        case .tick:
            return [] // the record is written as things happen, not by time
        }
    }

    mutating func stateChanged(_ a: DeviceAddress, _ r: Report, _ now: Moment, asleep: Bool) -> [HistoryRecord] {
        var d = devices[a] ?? Device(name: r.name)
        if !r.name.isEmpty { d.name = r.name }
        defer { if r.to == .unpaired { devices[a] = nil } else { devices[a] = d } }
        let new: (HistoryRecord.Condition, String?, String?)
        if r.kind == .hostAsleep, asleep {
            // Its link let go for the sleep: left out of availability until the resume.
            (d.beforeSleep, d.reasonBeforeSleep) = (.away, HistoryRecord.Reason.hostAsleep)
            new = (.unwanted, HistoryRecord.Reason.hostAsleep, nil)
        } else if r.kind == .hostAsleep {
            // A link the sleep took, seen going only after the resume: away from now on.
            new = (.away, HistoryRecord.Reason.hostAsleep, nil)
        } else {
        switch r.to {
        case .state(.connected)?:
            new = (.connected, nil, nil)
        case .state(.disconnected)?:
            new = (.unwanted, HistoryRecord.Reason.user, nil)
        case .unpaired?:
            new = (.unwanted, HistoryRecord.Reason.unpaired, nil)
        case .paired?:
            new = (.away, HistoryRecord.Reason.connecting, "paired")
        case .state(.needsRepair)?:
            new = (.down, HistoryRecord.Reason.bondLost, r.reasonToken)
        case .state(.adapterUnavailable)?:
            let reason = bluetoothdGone ? HistoryRecord.Reason.bluetoothdGone : HistoryRecord.Reason.adapterGone
            if asleep, d.condition == .unwanted, d.reason == HistoryRecord.Reason.hostAsleep {
                // The adapter (or bluetoothd) gone while the host is asleep: the sleep is still
                // left out; from the resume the wearable is down for this reason, until its link
                // is back. (Debian 12's 6.1 kernel oopses bluetoothd as the suspend ends a link
                // that is being set up.)
                (d.beforeSleep, d.reasonBeforeSleep) = (.down, reason)
                return []
            }
            if d.condition == .away, d.reason == HistoryRecord.Reason.linkLoss, causedNow(d, now) {
                // The link was lost moments before its adapter (or bluetoothd) went: their drop,
                // not the wearable's (`DisconnectClassifier.causeWindow`). The drop's reason is
                // replaced, and from now on it is down.
                (d.condition, d.reason) = (.down, reason)
                let t = now.unixTime
                return [HistoryRecord(kind: .reason, at: t, device: a.description, name: d.name, reason: reason),
                        HistoryRecord(kind: .change, at: t, device: a.description, name: d.name, condition: .down, reason: reason)]
            }
            new = (.down, reason, nil)
        case nil, .state(.restoring)?, .state(.connecting)?, .state(.discovering)?, .state(.waitingForDevice)?,
             .refused?, .pairing?: // restoring, connecting, discovering, waitingForDevice: pursued, not connected
            if Self.isAttempt(r.to), !Self.isAttempt(r.from) || d.attemptAt == nil {
                d.attemptAt = now
            } else if !Self.isAttempt(r.to) {
                d.attemptAt = nil
            }
            switch d.condition {
            case .connected:
                // paird's own word when it has one (BlueZ's reason, no-data, probe-timeout…).
                // A bare link loss (no word from BlueZ) says nothing more than the condition's reason.
                let detail: String? = if case .linkLoss(nil)? = r.reason { nil } else { r.reasonToken }
                new = (.away, HistoryRecord.Reason.linkLoss, detail)
            case .down where d.reason == HistoryRecord.Reason.starting && r.to == .state(.waitingForDevice):
                // paird's start found it not connected: it is away, not down.
                new = (.away, HistoryRecord.Reason.awayAtStart, nil)
            case .away, .down:
                return [] // still the drop that began it
            case .unwanted where d.reason == HistoryRecord.Reason.hostAsleep:
                return [] // asleep: the resume decides
            case .unwanted:
                new = (.away, HistoryRecord.Reason.connecting, nil)
            case nil where r.to == .state(.waitingForDevice):
                new = (.away, HistoryRecord.Reason.awayAtStart, nil) // found not connected at paird's start
            case nil:
                new = (.down, HistoryRecord.Reason.starting, nil)
            }
        }
        }
        let (condition, reason, detail) = new
        guard condition != d.condition || reason != d.reason else { return [] }
        let t = now.unixTime
        let key = a.description
        let wasConnected = d.condition == .connected
        d.condition = condition
        d.reason = reason
        if condition == .connected {
            var rec = HistoryRecord(kind: .up, at: t, device: key, name: d.name)
            if let dropped = d.droppedAt {
                rec.away = now.since(dropped).seconds
                rec.latency = now.since(d.attemptAt ?? dropped).seconds
            }
            d.upAt = now
            d.droppedAt = nil
            d.attemptAt = nil
            return [rec]
        }
        if wasConnected {
            d.droppedAt = condition == .unwanted ? nil : now // the user's own drop is no outage to time
            let lasted = d.upAt.map { now.since($0).seconds }
            d.upAt = nil
            return [HistoryRecord(kind: .down, at: t, device: key, name: d.name, condition: condition, reason: reason,
                                  detail: detail, lasted: lasted)]
        }
        if condition == .unwanted { d.droppedAt = nil }
        return [HistoryRecord(kind: .change, at: t, device: key, name: d.name, condition: condition, reason: reason, detail: detail)]
    }
}

extension HistoryRecorder {
    /// When a battery reading is recorded: the first of a wearable always; later ones only at
    /// least `step` percent from the last recorded and at least `interval` after it. Connectivity
    /// records are never held back.
    public struct BatteryLimit: Sendable, Hashable {
        public var step: Int
        public var interval: Duration
        public init(step: Int = 5, interval: Duration = .seconds(600)) {
            self.step = step
            self.interval = interval
        }

        public func records(_ level: Int, last: Int?, lastAt: Moment?, now: Moment) -> Bool {
            guard let last else { return true }
            guard abs(level - last) >= max(1, step) else { return false }
            guard let lastAt else { return true } // seeded from the file: no time of this paird's
            return now.since(lastAt) >= interval
        }
    }

    /// Each device's current condition, as `change` lines (detail `resync`): written after a
    /// `not-recorded` span, so that what follows it is known again without waiting for a change.
    public func resync(now: Moment) -> [HistoryRecord] {
        devices.keys.sorted(by: { $0.description < $1.description }).compactMap { a in
            guard let d = devices[a], let c = d.condition else { return nil }
            return HistoryRecord(kind: .change, at: now.unixTime, device: a.description, name: d.name, condition: c,
                                 reason: d.reason, detail: "resync")
        }
    }

    /// The device's current drop began within `DisconnectClassifier.causeWindow` of `now`.
    func causedNow(_ d: Device, _ now: Moment) -> Bool {
        d.droppedAt.map { now.since($0) <= DisconnectClassifier.causeWindow } ?? false
    }
}

extension HistoryRecorder {
    /// A connection attempt under way: `connecting` or `discovering` (a pairing's settling is
    /// said as `connecting` too).
    static func isAttempt(_ s: ReportState?) -> Bool {
        switch s {
        case .state(.connecting)?, .state(.discovering)?, .pairing(.settling)?: true
        case nil, .state(.restoring)?, .state(.connected)?, .state(.waitingForDevice)?, .state(.disconnected)?,
             .state(.needsRepair)?, .state(.adapterUnavailable)?, .paired?, .unpaired?, .refused?,
             .pairing(.scanning)?, .pairing(.removingOldBond)?, .pairing(.pairing)?: false
        }
    }
}
