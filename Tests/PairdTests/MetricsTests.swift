import Foundation
import Testing
import EventLoop
@testable import Paird
import PairingCore

/// The samples of an exposition, by `name{labels}` as swift-prometheus prints them (labels in
/// the order given: address, name, then reason or le); comment lines left out.
func samples(_ bytes: [UInt8]) -> [String: Double] {
    var out: [String: Double] = [:]
    for line in String(decoding: bytes, as: UTF8.self).split(separator: "\n") where !line.hasPrefix("#") {
        guard let sp = line.lastIndex(of: " ") else { continue }
        out[String(line[..<sp])] = Double(line[line.index(after: sp)...])
    }
    return out
}

@Suite("Metrics for Prometheus: the model and the textfile")
struct MetricsTests {
    static let d = "00:AA:01:01:00:01"
    static let t0 = 1_800_000_000.0
    let l = #"address="00:AA:01:01:00:01",name="Watch""#

    func up(_ at: Double, latency: Double? = nil) -> HistoryRecord {
        HistoryRecord(kind: .up, at: at, device: Self.d, name: "Watch", latency: latency, away: latency)
    }
    func down(_ at: Double, _ reason: String, _ condition: HistoryRecord.Condition = .away) -> HistoryRecord {
        HistoryRecord(kind: .down, at: at, device: Self.d, name: "Watch", condition: condition, reason: reason)
    }

    @Test("events in → the exposition has connected, drops by reason, the reconnect histogram, last data, battery, notifications")
    func eventsToSamples() {
        let m = WearableMetrics()
        m.seed(Self.d, name: "Watch")
        var s = samples(m.render())
        #expect(s["paird_wearable_connected{\(l)}"] == 0)
        #expect(s["paird_bluetoothd_crashes_total"] == 0)
        for reason in WearableMetrics.dropReasons { #expect(s["paird_wearable_drops_total{\(l),reason=\"\(reason)\"}"] == 0, "\(reason)") }
        #expect(s["paird_wearable_last_data_timestamp_seconds{\(l)}"] == nil, "no data yet: no timestamp, not 0")
        #expect(s["paird_wearable_battery_percent{\(l)}"] == nil)

        m.take([up(Self.t0)])
        m.notification(Self.d, name: "Watch", characteristic: ServiceUUID.heartRateMeasurement, at: Self.t0 + 1.5)
        m.notification(Self.d, name: "Watch", characteristic: ServiceUUID.batteryLevel, at: Self.t0 + 9)
        m.battery(Self.d, name: "Watch", level: 87)
        s = samples(m.render())
        #expect(s["paird_wearable_connected{\(l)}"] == 1)
        #expect(s["paird_wearable_notifications_total{\(l)}"] == 2)
        #expect(s["paird_wearable_last_data_timestamp_seconds{\(l)}"] == Self.t0 + 1.5, "Battery Level's notification is no data")
        #expect(s["paird_wearable_battery_percent{\(l)}"] == 87)

        m.take([down(Self.t0 + 60, HistoryRecord.Reason.linkLoss)])
        #expect(samples(m.render())["paird_wearable_connected{\(l)}"] == 0)
        m.take([up(Self.t0 + 90, latency: 1.5)])
        m.take([down(Self.t0 + 100, HistoryRecord.Reason.user, .unwanted)])
        s = samples(m.render())
        #expect(s["paird_wearable_connected{\(l)}"] == 0)
        #expect(s["paird_wearable_drops_total{\(l),reason=\"link-loss\"}"] == 1)
        #expect(s["paird_wearable_drops_total{\(l),reason=\"user\"}"] == 1)
        #expect(s["paird_wearable_reconnect_seconds_count{\(l)}"] == 1)
        #expect(s["paird_wearable_reconnect_seconds_sum{\(l)}"] == 1.5)
        #expect(s["paird_wearable_reconnect_seconds_bucket{\(l),le=\"1.0\"}"] == 0)
        #expect(s["paird_wearable_reconnect_seconds_bucket{\(l),le=\"2.0\"}"] == 1)
        #expect(s["paird_wearable_reconnect_seconds_bucket{\(l),le=\"+Inf\"}"] == 1)
        let text = String(decoding: m.render(), as: UTF8.self)
        #expect(text.contains("# TYPE paird_wearable_drops_total counter"))
        #expect(text.contains("# TYPE paird_wearable_reconnect_seconds histogram"))
        #expect(text.contains("# HELP paird_wearable_connected "))
    }

    @Test("a drop when bluetoothd leaves waits for systemd's verdict: a crash counts it as bluetoothd-crash, else bluetoothd-gone")
    func bluetoothdVerdict() {
        let m = WearableMetrics()
        m.take([up(Self.t0), down(Self.t0 + 1, HistoryRecord.Reason.bluetoothdGone, .down)])
        #expect(samples(m.render())["paird_wearable_drops_total{\(l),reason=\"bluetoothd-gone\"}"] == 0, "not counted before the verdict")
        m.take([HistoryRecord(kind: .reason, at: Self.t0 + 2, device: Self.d, name: "Watch", reason: HistoryRecord.Reason.bluetoothdCrash)])
        m.bluetoothdVerdict(crashed: true)
        var s = samples(m.render())
        #expect(s["paird_wearable_drops_total{\(l),reason=\"bluetoothd-crash\"}"] == 1)
        #expect(s["paird_wearable_drops_total{\(l),reason=\"bluetoothd-gone\"}"] == 0)
        #expect(s["paird_bluetoothd_crashes_total"] == 1)

        m.take([up(Self.t0 + 10, latency: 0.4), down(Self.t0 + 20, HistoryRecord.Reason.bluetoothdGone, .down)])
        m.bluetoothdVerdict(crashed: false) // stopped by an administrator
        s = samples(m.render())
        #expect(s["paird_wearable_drops_total{\(l),reason=\"bluetoothd-gone\"}"] == 1)
        #expect(s["paird_bluetoothd_crashes_total"] == 1)

        // No verdict (not yet): the wearable's next line settles it.
        m.take([up(Self.t0 + 30), down(Self.t0 + 40, HistoryRecord.Reason.bluetoothdGone, .down), up(Self.t0 + 50)])
        #expect(samples(m.render())["paird_wearable_drops_total{\(l),reason=\"bluetoothd-gone\"}"] == 2)
    }

    @Test("a link loss is counted after the cause window, under the reason the record gave it meanwhile")
    func linkLossSettles() {
        let m = WearableMetrics()
        let drops = { (reason: String) in samples(m.render())["paird_wearable_drops_total{\(self.l),reason=\"\(reason)\"}"] }
        // A plain link loss: held back, then counted as one.
        m.take([up(Self.t0), down(Self.t0 + 1, HistoryRecord.Reason.linkLoss)])
        #expect(drops("link-loss") == 0 && m.pendingDrop(Self.d) == "link-loss")
        m.settleLinkLosses()
        #expect(drops("link-loss") == 1 && m.pendingDrop(Self.d) == nil)
        // bluetoothd stopping: the link first, its adapter 3.3 s later (the record's reason and
        // change lines), bluetoothd leaving after: counted once, as bluetoothd's, at its verdict.
        m.take([up(Self.t0 + 10), down(Self.t0 + 20, HistoryRecord.Reason.linkLoss)])
        m.take([HistoryRecord(kind: .reason, at: Self.t0 + 23.3, device: Self.d, name: "Watch", reason: HistoryRecord.Reason.adapterGone),
                HistoryRecord(kind: .change, at: Self.t0 + 23.3, device: Self.d, name: "Watch", condition: .down,
                              reason: HistoryRecord.Reason.adapterGone)])
        m.take([HistoryRecord(kind: .reason, at: Self.t0 + 23.5, device: Self.d, name: "Watch", reason: HistoryRecord.Reason.bluetoothdGone)])
        m.settleLinkLosses() // the window is over: bluetoothd's drop still waits for its verdict
        #expect(drops("bluetoothd-gone") == 0 && drops("adapter-gone") == 0 && drops("link-loss") == 1)
        m.bluetoothdVerdict(crashed: false)
        #expect(drops("bluetoothd-gone") == 1 && drops("adapter-gone") == 0 && drops("link-loss") == 1)
        // A controller unplugged: adapter-gone, counted when the window is over.
        m.take([up(Self.t0 + 30), down(Self.t0 + 40, HistoryRecord.Reason.linkLoss)])
        m.take([HistoryRecord(kind: .reason, at: Self.t0 + 40.2, device: Self.d, name: "Watch", reason: HistoryRecord.Reason.adapterGone)])
        m.settleLinkLosses()
        #expect(drops("adapter-gone") == 1 && drops("link-loss") == 1)
        // bluetoothd stopping with the link seen going only with the adapter: adapter-gone at
        // first, bluetoothd's when it leaves, counted at its verdict.
        m.take([up(Self.t0 + 50), down(Self.t0 + 60, HistoryRecord.Reason.adapterGone, .down)])
        m.take([HistoryRecord(kind: .reason, at: Self.t0 + 60.2, device: Self.d, name: "Watch", reason: HistoryRecord.Reason.bluetoothdGone)])
        m.settleLinkLosses()
        m.bluetoothdVerdict(crashed: false)
        #expect(drops("adapter-gone") == 1 && drops("bluetoothd-gone") == 2)
    }

    /// The metrics and the record's reading (`HistoryAnalysis`, what `pairctl history` says) take
    /// the same lines: they must count the same drops under the same reasons. The second sequence
    /// is paird_sleep's on Debian 12's 6.1 (docs/development.md): a link loss, the host's sleep and
    /// resume, then an Oops taking bluetoothd within the cause window of the resume.
    @Test("drops by reason: the metrics and the record's reading agree, a sleep and a bluetoothd crash after the resume included")
    func dropsAgreeWithTheRecord() {
        func rec(_ kind: HistoryRecord.Kind, _ at: Double, _ condition: HistoryRecord.Condition? = nil, _ reason: String? = nil) -> HistoryRecord {
            HistoryRecord(kind: kind, at: Self.t0 + at, device: Self.d, name: "Watch", condition: condition, reason: reason)
        }
        typealias R = HistoryRecord.Reason
        enum Then { case settle, crashed, stopped }
        let sequences: [[(HistoryRecord?, Then?)]] = [
            // A link loss found to be bluetoothd's stop.
            [(rec(.up, 0), nil), (rec(.down, 10, .away, R.linkLoss), nil), (rec(.reason, 13, nil, R.adapterGone), nil),
             (rec(.change, 13, .down, R.adapterGone), nil), (rec(.reason, 13.5, nil, R.bluetoothdGone), nil), (nil, .settle),
             (nil, .stopped), (rec(.up, 40), nil)],
            // The 6.1 sleep: the drop stays the link loss it was when the sleep took it.
            [(rec(.up, 0), nil), (rec(.down, 1, .away, R.linkLoss), nil), (rec(.change, 3, .unwanted, R.hostAsleep), nil),
             (rec(.change, 100, .away, R.linkLoss), nil), (rec(.reason, 102, nil, R.adapterGone), nil),
             (rec(.change, 102, .down, R.adapterGone), nil), (rec(.reason, 103, nil, R.bluetoothdGone), nil),
             (rec(.reason, 104, nil, R.bluetoothdCrash), nil), (nil, .crashed), (nil, .settle), (rec(.up, 120), nil)],
            // A crash with the link up: bluetoothd's, at its verdict.
            [(rec(.up, 0), nil), (rec(.down, 5, .down, R.bluetoothdGone), nil), (rec(.reason, 6, nil, R.bluetoothdCrash), nil),
             (nil, .crashed), (rec(.up, 30), nil)],
        ]
        for (n, sequence) in sequences.enumerated() {
            let m = WearableMetrics()
            var records: [HistoryRecord] = []
            for (r, then) in sequence {
                if let r { m.take([r]); records.append(r) }
                switch then {
                case .settle?: m.settleLinkLosses()
                case .crashed?: m.bluetoothdVerdict(crashed: true)
                case .stopped?: m.bluetoothdVerdict(crashed: false)
                case nil: break
                }
            }
            let counted = samples(m.render()).filter { $0.key.hasPrefix("paird_wearable_drops_total{") && $0.value > 0 }
                .reduce(into: [String: Int]()) { out, s in
                    out[String(s.key.split(separator: "reason=\"").last!.dropLast(2))] = Int(s.value)
                }
            let read = HistoryAnalysis.analyse(records, device: Self.d, since: Self.t0, until: Self.t0 + 200).dropsByReason
            #expect(counted == read, "sequence \(n): metrics \(counted), the record's reading \(read)")
        }
    }

    @Test("unpaired: its series go; renamed or a new address: new series with the counters carried over")
    func unpairRenameMove() {
        let m = WearableMetrics()
        m.take([up(Self.t0), down(Self.t0 + 1, HistoryRecord.Reason.linkLoss)])
        m.notification(Self.d, name: "", characteristic: ServiceUUID.heartRateMeasurement, at: Self.t0)
        m.take([HistoryRecord(kind: .up, at: Self.t0 + 5, device: Self.d, name: "Watch 2")])
        var s = samples(m.render())
        let l2 = #"address="00:AA:01:01:00:01",name="Watch 2""#
        #expect(s["paird_wearable_connected{\(l)}"] == nil)
        #expect(s["paird_wearable_connected{\(l2)}"] == 1)
        #expect(s["paird_wearable_drops_total{\(l2),reason=\"link-loss\"}"] == 1)
        #expect(s["paird_wearable_notifications_total{\(l2)}"] == 1)
        #expect(s["paird_wearable_last_data_timestamp_seconds{\(l2)}"] == Self.t0)

        m.addressChanged(Self.d, to: "00:AA:01:01:00:02")
        s = samples(m.render())
        #expect(s["paird_wearable_connected{\(l2)}"] == nil)
        #expect(s[#"paird_wearable_connected{address="00:AA:01:01:00:02",name="Watch 2"}"#] == 1)

        m.take([HistoryRecord(kind: .down, at: Self.t0 + 9, device: "00:AA:01:01:00:02", name: "Watch 2", condition: .unwanted,
                              reason: HistoryRecord.Reason.unpaired)])
        m.notification("00:AA:01:01:00:02", name: "Watch 2", characteristic: ServiceUUID.heartRateMeasurement, at: Self.t0 + 10)
        m.battery("00:AA:01:01:00:02", name: "Watch 2", level: 40)
        s = samples(m.render())
        #expect(s.keys.filter { $0.hasPrefix("paird_wearable_") }.isEmpty, "a late notification or battery of the unpaired: no series: \(s)")
        #expect(s["paird_bluetoothd_crashes_total"] == 0)
    }

    func tempDir() throws -> String {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("paird-metrics-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        return dir
    }

    @Test("the textfile: written atomically (no temporary file left), mode 0640 by default whatever the umask, rewritten only when its bytes change")
    func textfileWrites() throws {
        let dir = try tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let f = MetricsTextfile(path: dir + "/paird.prom")
        #expect(f.tmpPath == dir + "/.paird.prom.tmp", "node_exporter reads only *.prom")
        // A temporary file a crash left, mode 0600 (paird's UMask=0077 makes every new file so):
        // the file is 0640 all the same (it holds battery levels: not for every user) (umask is the process's, not
        // changed here: the other suites run meanwhile).
        #expect(FileManager.default.createFile(atPath: f.tmpPath, contents: Data("torn".utf8), attributes: [.posixPermissions: 0o600]))
        #expect(try f.write(Array("a 1\n".utf8)))
        var st = stat()
        #expect(stat(f.path, &st) == 0)
        #expect(st.st_mode & 0o777 == 0o640)
        let inode = st.st_ino
        #expect(try !f.write(Array("a 1\n".utf8)), "the same bytes: not written")
        #expect(stat(f.path, &st) == 0 && st.st_ino == inode)
        #expect(try f.write(Array("a 2\n".utf8)))
        #expect(stat(f.path, &st) == 0 && st.st_ino != inode, "replaced by rename, never written in place")
        #expect(try String(contentsOfFile: f.path, encoding: .utf8) == "a 2\n")
        #expect(f.writes == 2)
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir) == ["paird.prom"])

        // A directory it cannot create in: an error, nothing left behind, the old file kept.
        let g = MetricsTextfile(path: dir + "/missing/paird.prom")
        #expect(throws: SystemError.self) { try g.write(Array("x 1\n".utf8)) }
    }

    @Test("the textfile's mode and group are settings ([Metrics] TextfileMode, TextfileGroup), applied at each write")
    func textfileModeAndGroup() throws {
        let dir = try tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let group = getgid()   // a group this process may give its files, whoever runs the tests
        let f = MetricsTextfile(path: dir + "/paird.prom", mode: 0o600, group: group)
        #expect(try f.write(Array("a 1\n".utf8)))
        var st = stat()
        #expect(stat(f.path, &st) == 0)
        #expect(st.st_mode & 0o777 == 0o600 && st.st_gid == group)
        let (c, _) = try DaemonConfig.parse("[Metrics]\nTextfileMode=0600\nTextfileGroup=prometheus\n", file: "paird.conf")
        #expect(c.metricsTextfileMode == 0o600 && c.metricsTextfileGroup == "prometheus")
        #expect(DaemonConfig().metricsTextfileMode == 0o640)
        #expect(throws: DaemonConfig.Error.self) { try DaemonConfig.parse("[Metrics]\nTextfileMode=0666\n", file: "paird.conf") }
    }

    @Test("the exporter: the first change is written at once, later ones at most once per Interval, an idle model writes nothing")
    func exporterThrottles() throws {
        let dir = try tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let loop = try EventLoop()
        let e = MetricsExporter(path: dir + "/paird.prom", interval: .milliseconds(400), loop: loop)
        e.model.seed(Self.d, name: "Watch")
        #expect(e.writePending)
        try loop.run(until: { !e.writePending })
        #expect(e.file.writes == 1)
        let first = loop.now()
        e.model.take([up(Self.t0)])
        e.model.notification(Self.d, name: "Watch", characteristic: ServiceUUID.heartRateMeasurement, at: Self.t0 + 1)
        #expect(e.writePending)
        try loop.run(until: { !e.writePending })
        #expect(e.file.writes == 2, "two changes, one write")
        #expect(first.duration(to: loop.now()) >= .milliseconds(350), "not before Interval passed")
        let s = samples(try Array(Data(contentsOf: URL(fileURLWithPath: dir + "/paird.prom"))))
        #expect(s["paird_wearable_connected{\(l)}"] == 1)
        #expect(s["paird_wearable_last_data_timestamp_seconds{\(l)}"] == Self.t0 + 1)

        // A change that leaves the values as they were (the same battery level twice) writes nothing.
        e.model.battery(Self.d, name: "Watch", level: 50)
        try loop.run(until: { !e.writePending })
        e.model.battery(Self.d, name: "Watch", level: 50)
        #expect(!e.writePending)
        e.model.take([up(Self.t0 + 5)]) // connected already: the same bytes
        try loop.run(until: { !e.writePending })
        #expect(e.file.writes == 3)
    }

    @Test("[Metrics]: off by default; Textfile must be absolute and end in .prom; Interval in 1…3600 s")
    func config() throws {
        #expect(DaemonConfig().metricsTextfile.isEmpty, "off by default")
        let (c, w) = try DaemonConfig.parse("[Metrics]\nTextfile = /var/lib/prometheus/node-exporter/paird.prom\nInterval = 5\n", file: "p")
        #expect(c.metricsTextfile == "/var/lib/prometheus/node-exporter/paird.prom")
        #expect(c.metricsInterval == .seconds(5))
        #expect(w.isEmpty)
        for bad in ["Textfile = paird.prom", "Textfile = /tmp/paird.txt", "Textfile = /tmp/.prom", "Interval = 0", "Interval = x"] {
            #expect(throws: DaemonConfig.Error.self, "\(bad)") { try DaemonConfig.parse("[Metrics]\n\(bad)\n", file: "p") }
        }
        let errors = DaemonConfig.parseAll("[Metrics]\nTextfile = relative.prom\n", file: "p").2
        #expect(errors.first?.line == 2)
        #expect(errors.first?.problem.contains("absolute") == true)
    }

    @Test("--check-config warns when the Textfile's directory does not exist")
    func checkWarnsMissingDirectory() throws {
        let dir = try tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let conf = dir + "/paird.conf"
        try "[Metrics]\nTextfile = \(dir)/nope/paird.prom\n".write(toFile: conf, atomically: true, encoding: .utf8)
        let checked = DaemonConfig.check(path: conf)
        #expect(checked.errors.isEmpty)
        #expect(checked.warnings.contains { $0.contains("no directory \(dir)/nope") }, "\(checked.warnings)")
        try "[Metrics]\nTextfile = \(dir)/paird.prom\n".write(toFile: conf, atomically: true, encoding: .utf8)
        #expect(DaemonConfig.check(path: conf).warnings.isEmpty)
    }

    @Test("paird_mqtt_connected: absent until [MQTT] says, then 1 while connected, 0 while away")
    func mqttConnected() {
        let m = WearableMetrics()
        #expect(samples(m.render())["paird_mqtt_connected"] == nil)
        m.mqtt(connected: false)
        #expect(samples(m.render())["paird_mqtt_connected"] == 0)
        m.mqtt(connected: true)
        #expect(samples(m.render())["paird_mqtt_connected"] == 1)
        m.mqtt(connected: false)
        #expect(samples(m.render())["paird_mqtt_connected"] == 0)
    }
}
