import EventLoop
import PairingCore
import Prometheus
#if canImport(Glibc)
import Glibc
#endif

/// paird's metrics for Prometheus, kept in a swift-prometheus `PrometheusCollectorRegistry`
/// and rendered by its `emit(into:)` (never formatted by hand). Fed on the loop from what the
/// daemon already sees: the availability record's lines (`HistoryRecorder`'s output: up, down,
/// the late reason of a drop), notifications, battery readings and bluetoothd's verdicts.
///
/// Every series of a wearable carries the labels `address` and `name`. A wearable that changes
/// address (a private one resolving) or name gets new series: the gauges and counters carry
/// their values over, the reconnect histogram starts empty. An unpaired wearable's series go.
///
/// Counters start at zero when paird starts: Prometheus takes a counter going back to zero for
/// a reset (`rate`, `increase` handle it); the availability record is what survives restarts.
public final class WearableMetrics {
    public enum Name {
        public static let connected = "paird_wearable_connected"
        public static let drops = "paird_wearable_drops_total"
        public static let reconnect = "paird_wearable_reconnect_seconds"
        public static let lastData = "paird_wearable_last_data_timestamp_seconds"
        public static let battery = "paird_wearable_battery_percent"
        public static let notifications = "paird_wearable_notifications_total"
        public static let crashes = "paird_bluetoothd_crashes_total"
        public static let notRecorded = "paird_history_not_recorded_total"
        public static let mqttConnected = "paird_mqtt_connected"
    }

    static let help: [String: String] = [
        Name.connected: "1 while the wearable is connected and set up, else 0.",
        Name.drops: "Connected intervals that ended, by reason (link-loss, user, bluetoothd-crash, bluetoothd-gone, adapter-gone, bond-lost, host-asleep).",
        Name.reconnect: "Seconds from the start of the attempt that made the link to connected, for each reconnect after a drop.",
        Name.lastData: "Unix time of the last notification of a subscribed characteristic other than Battery Level.",
        Name.battery: "The last Battery Level read or notified, percent.",
        Name.notifications: "Notifications received from the wearable, every characteristic.",
        Name.crashes: "bluetoothd exits that systemd called a crash.",
        Name.mqttConnected: "1 while paird is connected to the MQTT broker of [MQTT], else 0 (absent without [MQTT]).",
        Name.notRecorded: "Availability records that could not be written (a full disk): each span of them is a not-recorded line once it can be.",
    ]

    /// Seconds: reconnects are mostly under a few seconds (the link is back, paird sets it up);
    /// the long tail is a wearable that needed several Connect attempts.
    public static let reconnectBuckets: [Double] = [0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300]

    /// The reasons a drop is counted under, made at zero for each wearable (so `increase` sees
    /// the first drop of each); `HistoryRecord.Reason`.
    public static let dropReasons = [
        HistoryRecord.Reason.linkLoss, HistoryRecord.Reason.user, HistoryRecord.Reason.bluetoothdCrash,
        HistoryRecord.Reason.bluetoothdGone, HistoryRecord.Reason.adapterGone, HistoryRecord.Reason.bondLost,
        HistoryRecord.Reason.hostAsleep,
    ]

    public let registry = PrometheusCollectorRegistry()
    private let crashes: Counter
    private let notRecordedCounter: Counter
    private var crashCount = 0

    /// What is known of one wearable; its series are made from it.
    struct Values {
        var name: String
        var connected = false
        var battery: Int?
        var lastData: Double?
        var notifications = 0
        var drops: [String: Int] = [:]
    }

    private struct Series {
        var connected: Gauge
        var notifications: Counter
        var reconnect: ValueHistogram
        var drops: [String: Counter]
        var battery: Gauge?
        var lastData: Gauge?
    }

    private var values: [String: Values] = [:]
    private var series: [String: Series] = [:]
    /// Drops whose reason may still change, counted once it is settled:
    /// - `bluetoothd-gone`: systemd's verdict, which may make it a crash, is not in yet. Counted
    ///   at the verdict (`bluetoothdVerdict`) or the wearable's next up or down, whichever is first;
    /// - `link-loss` and `adapter-gone`: the adapter or bluetoothd may turn out to have taken the
    ///   link (`DisconnectClassifier.causeWindow`: bluetoothd stopping drops the links, then
    ///   powers the adapter off, then leaves). Counted by `settleLinkLosses` after that window
    ///   (under the reason the record gave it meanwhile), or at the wearable's next up or down.
    private var pendingDrops: [String: String] = [:]

    /// Called after every change (the textfile writer schedules a write).
    public var onChange: () -> Void = {}

    public init() {
        crashes = registry.makeCounter(name: Name.crashes, help: Self.help[Name.crashes]!)
        notRecordedCounter = registry.makeCounter(name: Name.notRecorded, help: Self.help[Name.notRecorded]!)
    }

    private var mqttGauge: Gauge?

    /// paird's link to the MQTT broker (`[MQTT]`): the gauge made at the first call.
    public func mqtt(connected: Bool) {
        if mqttGauge == nil { mqttGauge = registry.makeGauge(name: Name.mqttConnected, labels: [], help: Self.help[Name.mqttConnected]!) }
        mqttGauge!.set(to: connected ? 1 : 0)
        onChange()
    }

    /// `count` availability records could not be written.
    public func notRecorded(_ count: Int) {
        notRecordedCounter.increment(by: Int64(count))
        onChange()
    }

    /// The exposition, as the library renders it.
    public func render() -> [UInt8] {
        var out: [UInt8] = []
        registry.emit(into: &out)
        return out
    }

    /// The wearables known, by address (tests).
    var addresses: [String] { values.keys.sorted() }

    // MARK: Inputs

    /// A wearable paird manages (at start: the state file's), not connected until a line says so.
    public func seed(_ address: String, name: String) {
        guard values[address] == nil else { return }
        values[address] = Values(name: name)
        makeSeries(address)
        onChange()
    }

    /// The availability record's new lines.
    public func take(_ records: [HistoryRecord]) {
        var changed = false
        for r in records {
            guard let a = r.device else { continue }
            switch r.kind {
            case .up, .down, .change:
                // A change with the held-back drop's reason continues that drop (a link loss found
                // to be its adapter's: away, then down); one with another reason (the host's sleep,
                // a resume) ends what may change of it, as for the record's reading of it
                // (`HistoryAnalysis`: a later reason line no longer moves that drop).
                if r.kind != .change || pendingDrops[a].map({ $0 != r.reason }) == true { settle(a) }
                if r.reason == HistoryRecord.Reason.unpaired {
                    if values[a] != nil { remove(a); changed = true }
                    continue
                }
                touch(a, name: r.name)
                values[a]!.connected = r.kind == .up
                series[a]!.connected.set(to: r.kind == .up ? 1 : 0)
                if r.kind == .up, let latency = r.latency { series[a]!.reconnect.record(latency) }
                if r.kind == .down, let reason = r.reason {
                    if Self.mayChange.contains(reason) {
                        pendingDrops[a] = reason
                    } else {
                        countDrop(a, reason)
                    }
                }
                changed = true
            case .reason:
                if pendingDrops[a] != nil, let reason = r.reason { pendingDrops[a] = reason }
            case .battery, .start, .stop, .alive, .clock, .notRecorded:
                break // battery: `battery(_:)`, from BlueZ directly (the record leaves out unchanged levels)
            }
        }
        if changed { onChange() }
    }

    /// A notification from the wearable at `at` (unix time). Battery Level's is no data. Only
    /// for a wearable known here (seeded, or in the record): a late one of a wearable just
    /// unpaired makes no series.
    public func notification(_ address: String, name: String, characteristic: String, at: Double) {
        guard values[address] != nil else { return }
        touch(address, name: name)
        values[address]!.notifications += 1
        series[address]!.notifications.increment()
        if characteristic != ServiceUUID.batteryLevel {
            values[address]!.lastData = at
            lastDataGauge(address).set(to: at)
        }
        onChange()
    }

    public func battery(_ address: String, name: String, level: Int) {
        guard values[address] != nil else { return }
        touch(address, name: name)
        guard values[address]!.battery != level else { return }
        values[address]!.battery = level
        batteryGauge(address).set(to: Double(level))
        onChange()
    }

    /// systemd's verdict on bluetoothd leaving the bus (crash, stop, or paird waits): a crash is
    /// counted, and the drops it caused are counted under their now settled reason.
    public func bluetoothdVerdict(crashed: Bool) {
        if crashed { crashCount += 1; crashes.increment() }
        for a in pendingDrops.keys.sorted() { settle(a) }
        onChange()
    }

    /// The drop reasons held back (`pendingDrops`).
    static let mayChange: Set = [HistoryRecord.Reason.bluetoothdGone, HistoryRecord.Reason.linkLoss, HistoryRecord.Reason.adapterGone]

    /// Whether a drop with this reason is counted only after `DisconnectClassifier.causeWindow`
    /// (`settleLinkLosses`).
    public static func waitsForCause(_ reason: String?) -> Bool {
        reason == HistoryRecord.Reason.linkLoss || reason == HistoryRecord.Reason.adapterGone
    }

    /// Counts the drops held back as link losses or the adapter's (under their reason now),
    /// except those that became bluetoothd's (they wait for its verdict). Called
    /// `DisconnectClassifier.causeWindow` after such a drop.
    public func settleLinkLosses() {
        let due = pendingDrops.filter { $0.value != HistoryRecord.Reason.bluetoothdGone }.keys.sorted()
        guard !due.isEmpty else { return }
        for a in due { settle(a) }
        onChange()
    }

    /// Whether a drop of this wearable is held back (tests).
    func pendingDrop(_ a: String) -> String? { pendingDrops[a] }

    /// A private address resolved to the wearable's identity.
    public func addressChanged(_ old: String, to new: String) {
        guard let v = values[old] else { return }
        let pending = pendingDrops.removeValue(forKey: old)
        remove(old)
        values[new] = v
        pendingDrops[new] = pending
        makeSeries(new)
        onChange()
    }

    // MARK: Series

    private func labels(_ address: String) -> [(String, String)] {
        [("address", address), ("name", values[address]!.name)]
    }

    /// Makes the wearable known, or gives its series a new name.
    private func touch(_ address: String, name: String?) {
        guard var v = values[address] else {
            values[address] = Values(name: name ?? "")
            makeSeries(address)
            return
        }
        if let name, !name.isEmpty, name != v.name {
            removeSeries(address)
            v.name = name
            values[address] = v
            makeSeries(address)
        }
    }

    private func makeSeries(_ a: String) {
        let v = values[a]!
        let l = labels(a)
        let connected = registry.makeGauge(name: Name.connected, labels: l, help: Self.help[Name.connected]!)
        connected.set(to: v.connected ? 1 : 0)
        let notifications = registry.makeCounter(name: Name.notifications, labels: l, help: Self.help[Name.notifications]!)
        if v.notifications > 0 { notifications.increment(by: Int64(v.notifications)) }
        var drops: [String: Counter] = [:]
        for reason in Set(Self.dropReasons).union(v.drops.keys) {
            let c = registry.makeCounter(name: Name.drops, labels: l + [("reason", reason)], help: Self.help[Name.drops]!)
            if let n = v.drops[reason], n > 0 { c.increment(by: Int64(n)) }
            drops[reason] = c
        }
        let reconnect = registry.makeValueHistogram(name: Name.reconnect, labels: l, buckets: Self.reconnectBuckets,
                                                    help: Self.help[Name.reconnect]!)
        series[a] = Series(connected: connected, notifications: notifications, reconnect: reconnect, drops: drops)
        if let b = v.battery { batteryGauge(a).set(to: Double(b)) }
        if let t = v.lastData { lastDataGauge(a).set(to: t) }
    }

    private func batteryGauge(_ a: String) -> Gauge {
        if let g = series[a]!.battery { return g }
        let g = registry.makeGauge(name: Name.battery, labels: labels(a), help: Self.help[Name.battery]!)
        series[a]!.battery = g
        return g
    }

    private func lastDataGauge(_ a: String) -> Gauge {
        if let g = series[a]!.lastData { return g }
        let g = registry.makeGauge(name: Name.lastData, labels: labels(a), help: Self.help[Name.lastData]!)
        series[a]!.lastData = g
        return g
    }

    private func removeSeries(_ a: String) {
        guard let s = series.removeValue(forKey: a) else { return }
        registry.unregisterGauge(s.connected)
        registry.unregisterCounter(s.notifications)
        registry.unregisterValueHistogram(s.reconnect)
        for c in s.drops.values { registry.unregisterCounter(c) }
        if let g = s.battery { registry.unregisterGauge(g) }
        if let g = s.lastData { registry.unregisterGauge(g) }
    }

    private func remove(_ a: String) {
        removeSeries(a)
        values[a] = nil
        pendingDrops[a] = nil
    }

    private func countDrop(_ a: String, _ reason: String) {
        values[a]!.drops[reason, default: 0] += 1
        if let c = series[a]!.drops[reason] {
            c.increment()
        } else {
            let c = registry.makeCounter(name: Name.drops, labels: labels(a) + [("reason", reason)], help: Self.help[Name.drops]!)
            c.increment()
            series[a]!.drops[reason] = c
        }
    }

    /// Counts the wearable's drop whose reason was waiting for bluetoothd's verdict.
    private func settle(_ a: String) {
        guard let reason = pendingDrops.removeValue(forKey: a), values[a] != nil else { return }
        countDrop(a, reason)
    }
}

/// The textfile node_exporter's textfile collector reads (`[Metrics] Textfile`): written
/// atomically (a temporary file in the same directory, fsync, rename, fsync of the directory),
/// with `mode` (`[Metrics] TextfileMode`, 0640: it holds battery levels) and `group`
/// (`[Metrics] TextfileGroup`, nil: paird's own) whatever paird's umask, set on the temporary file
/// before the rename, and only when its bytes differ from the last written.
public final class MetricsTextfile {
    public let path: String
    public let mode: mode_t
    public let group: gid_t?
    /// What is in the file (nil: nothing written yet by this paird).
    public private(set) var written: [UInt8]?
    /// How many times the file was (re)written.
    public private(set) var writes = 0

    public init(path: String, mode: mode_t = 0o640, group: gid_t? = nil) {
        self.path = path
        self.mode = mode
        self.group = group
    }

    /// `.paird.prom.tmp` beside it: node_exporter reads only names ending in `.prom`.
    public var tmpPath: String {
        let dir = HistoryStore.directory(of: path)
        let base = path.lastIndex(of: "/").map { String(path[path.index(after: $0)...]) } ?? path
        return (dir == "/" ? "" : dir) + "/." + base + ".tmp"
    }

    /// Writes `bytes` unless they are what the file already holds. Returns whether it wrote.
    @discardableResult
    public func write(_ bytes: [UInt8]) throws -> Bool {
        guard bytes != written else { return false }
        let tmp = tmpPath
        let fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0o600)
        if fd < 0 { throw SystemError("create \(tmp)", errno) }
        do {
            defer { close(fd) }
            if let group, fchown(fd, uid_t.max, group) != 0 { throw SystemError("chgrp \(tmp) to gid \(group)", errno) }
            if fchmod(fd, mode) != 0 { throw SystemError("chmod \(tmp)", errno) }
            var off = 0
            while off < bytes.count {
                let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + off, $0.count - off) }
                if n < 0 { if errno == EINTR { continue }; throw SystemError("write \(tmp)", errno) }
                off += n
            }
            if fsync(fd) != 0 { throw SystemError("fsync \(tmp)", errno) }
        } catch {
            unlink(tmp)
            throw error
        }
        if rename(tmp, path) != 0 {
            let e = errno
            unlink(tmp)
            throw SystemError("rename \(tmp) to \(path)", e)
        }
        let dfd = open(HistoryStore.directory(of: path), O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if dfd >= 0 { fsync(dfd); close(dfd) }
        written = bytes
        writes += 1
        return true
    }
}

/// The model, the file, and when to write: a change schedules one write on the loop, at once
/// when the last was at least `interval` ago, else when it will be; changes meanwhile are taken
/// by that one write. So a burst of events (or a 1 Hz heart rate moving the last-data time) costs
/// at most one small write per `interval`, and an idle paird writes nothing.
public final class MetricsExporter {
    public let model = WearableMetrics()
    public let file: MetricsTextfile
    public let interval: Duration
    private let loop: EventLoop
    private var timer: TimerHandle?
    private var lastWrite: ContinuousClock.Instant?
    /// Why the last write failed; nil once one succeeds (logged once per failure spell).
    public private(set) var error: String?
    public var log: (_ error: String?) -> Void = { _ in }

    public init(path: String, interval: Duration, loop: EventLoop, mode: mode_t = 0o640, group: gid_t? = nil) {
        file = MetricsTextfile(path: path, mode: mode, group: group)
        self.interval = interval
        self.loop = loop
        model.onChange = { [unowned self] in scheduleWrite() }
    }

    deinit { timer?.cancel() }

    public var writePending: Bool { timer?.isPending ?? false }

    func scheduleWrite() {
        guard timer?.isPending != true else { return }
        let now = loop.now()
        let due = lastWrite.map { max(now, $0 + interval) } ?? now
        timer = loop.schedule(at: due) { [unowned self] in
            timer = nil
            writeNow()
        }
    }

    /// Renders and writes now (also at paird's stop, for what is still pending).
    public func writeNow() {
        timer?.cancel()
        timer = nil
        do {
            if try file.write(model.render()) { lastWrite = loop.now() }
            if error != nil { error = nil; log(nil) }
        } catch {
            if self.error == nil { log("\(error)") }
            self.error = "\(error)"
        }
    }
}
