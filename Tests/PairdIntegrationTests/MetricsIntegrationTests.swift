import Foundation
import Testing
import PairingCore

/// The Prometheus textfile end to end: the real paird writes it as a wearable connects, drops
/// and comes back; Debian's promtool (package prometheus, Tests/install-build-deps.sh) checks it
/// and the shipped alert rules (Tests/install-build-deps.sh unpacks it; without it those tests
/// fail, saying so: a check that was not made is not a check that passed).
@Suite("Metrics for Prometheus against a mocked BlueZ", .serialized)
struct MetricsIntegrationTests {
    let watch = MockedHost.watch
    static let repo = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../..").standardized
    /// Debian's, unpacked by Tests/install-build-deps.sh into .build/prometheus (else an installed one).
    static func tool(_ name: String) -> String {
        let unpacked = repo.appendingPathComponent(".build/prometheus/usr/bin/\(name)").path
        return FileManager.default.isExecutableFile(atPath: unpacked) ? unpacked : "/usr/bin/\(name)"
    }
    static let promtool = tool("promtool")

    /// `path`, or a test failure naming the tool and how to get it: tests that need Debian's
    /// Prometheus tools fail without them rather than pass having checked nothing.
    static func required(_ path: String) throws -> String {
        try #require(FileManager.default.isExecutableFile(atPath: path),
                     "\((path as NSString).lastPathComponent) is in neither .build/prometheus/usr/bin nor /usr/bin: run Tests/install-build-deps.sh (it unpacks Debian's prometheus and prometheus-node-exporter into .build/prometheus)")
        return path
    }

    func samples(_ path: String) -> [String: Double] {
        var out: [String: Double] = [:]
        let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            guard let sp = line.lastIndex(of: " ") else { continue }
            out[String(line[..<sp])] = Double(line[line.index(after: sp)...])
        }
        return out
    }

    @Test("[Metrics] Textfile: paird writes connected, the drop by reason and the reconnect; promtool accepts the file")
    func textfile() throws {
        let promtool = try Self.required(Self.promtool)
        let host = try MockedHost()
        let prom = host.dir.appendingPathComponent("paird.prom").path
        try "[Health]\nFirstDataTimeout = 0\n[Metrics]\nTextfile = \(prom)\nInterval = 1\n"
            .write(toFile: host.dir.appendingPathComponent("paird.conf").path, atomically: true, encoding: .utf8)
        try host.startPaird()
        try waitFor("the textfile", deadline: 10) { FileManager.default.fileExists(atPath: prom) }
        #expect(samples(prom)["paird_bluetoothd_crashes_total"] == 0)

        try host.pairWatchOK()
        let l = #"address="00:AA:01:01:00:01",name="Watch""#
        try waitFor("connected 1 in the textfile", deadline: 10) { samples(prom)["paird_wearable_connected{\(l)}"] == 1 }

        try host.setDevice(watch, "'Connected': False, 'ServicesResolved': False") // link loss
        // The link loss is counted once DisconnectClassifier.causeWindow (10 s) is over: its
        // adapter or bluetoothd did not turn out to be its cause.
        try waitFor("connected 0 and a link-loss drop", deadline: 25) {
            let s = samples(prom)
            return s["paird_wearable_connected{\(l)}"] == 0 && s["paird_wearable_drops_total{\(l),reason=\"link-loss\"}"] == 1
        }
        try host.setDevice(watch, "'Connected': True, 'ServicesResolved': True")   // back in range
        try waitFor("connected again, one reconnect measured", deadline: 10) {
            let s = samples(prom)
            return s["paird_wearable_connected{\(l)}"] == 1 && s["paird_wearable_reconnect_seconds_count{\(l)}"] == 1
        }
        let s = samples(prom)
        #expect(s["paird_wearable_drops_total{\(l),reason=\"user\"}"] == 0)
        #expect(s["paird_wearable_notifications_total{\(l)}"] == 0, "the mock has no GATT: no notification")
        let left = try FileManager.default.contentsOfDirectory(atPath: host.dir.path).filter { $0.hasSuffix(".tmp") }
        #expect(left.isEmpty, "\(left)")

        // Nothing changes: the file is not rewritten.
        let before = try FileManager.default.attributesOfItem(atPath: prom)[.modificationDate] as? Date
        Thread.sleep(forTimeInterval: 2.5)
        #expect(try FileManager.default.attributesOfItem(atPath: prom)[.modificationDate] as? Date == before)

        let r = host.run("/bin/sh", ["-c", "\(promtool) check metrics < '\(prom)'"])
        #expect(r.status == 0, "promtool check metrics: \(r.out)\(r.err)\n\((try? String(contentsOfFile: prom, encoding: .utf8)) ?? "")")
        try host.stopPaird()
        #expect(samples(prom)["paird_wearable_connected{\(l)}"] == 1, "the file stays as last written when paird stops")
    }

    /// A TCP port free on loopback now (bound to 0, read, closed).
    static func freePort() -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var a = sockaddr_in()
        a.sin_family = sa_family_t(AF_INET)
        a.sin_addr.s_addr = inet_addr("127.0.0.1")
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &a) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) } }
        _ = withUnsafeMutablePointer(to: &a) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
        return Int(UInt16(bigEndian: a.sin_port))
    }

    @Test("a real node_exporter reads paird's textfile and a real Prometheus scrapes it: PromQL answers connected and drops by reason")
    func scrapedByPrometheus() throws {
        let nodeExporter = try Self.required(Self.tool("prometheus-node-exporter"))
        let prometheusBin = try Self.required(Self.tool("prometheus"))
        let host = try MockedHost()
        let textDir = host.dir.appendingPathComponent("textfile")
        try FileManager.default.createDirectory(at: textDir, withIntermediateDirectories: true)
        try "[Health]\nFirstDataTimeout = 0\n[Metrics]\nTextfile = \(textDir.path)/paird.prom\nInterval = 1\n"
            .write(toFile: host.dir.appendingPathComponent("paird.conf").path, atomically: true, encoding: .utf8)
        try host.startPaird()
        try host.pairWatchOK()
        try waitFor("connected", deadline: 10) { host.state() == "connected" }
        try host.setDevice(watch, "'Connected': False, 'ServicesResolved': False")
        try waitFor("waitingForDevice", deadline: 10) { host.state() == "waitingForDevice" }
        try host.setDevice(watch, "'Connected': True, 'ServicesResolved': True")
        try waitFor("connected again", deadline: 10) { host.state() == "connected" }

        // Loopback only, free ports, everything under the host's directory; killed by MockedHost.
        let (nodePort, promPort) = (Self.freePort(), Self.freePort())
        let exporter = host.start(nodeExporter, [
            "--web.listen-address=127.0.0.1:\(nodePort)", "--collector.disable-defaults", "--collector.textfile",
            "--collector.textfile.directory=\(textDir.path)"], timeout: 120)
        defer { kill(exporter.process.processIdentifier, SIGKILL) }
        let config = host.dir.appendingPathComponent("prometheus.yml")
        try "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: node\n    static_configs:\n      - targets: ['127.0.0.1:\(nodePort)']\n"
            .write(to: config, atomically: true, encoding: .utf8)
        let prometheus = host.start(prometheusBin, [
            "--config.file=\(config.path)", "--storage.tsdb.path=\(host.dir.appendingPathComponent("tsdb").path)",
            "--web.listen-address=127.0.0.1:\(promPort)"], timeout: 120)
        defer { kill(prometheus.process.processIdentifier, SIGKILL) }

        func query(_ q: String) -> String {
            host.run("/usr/bin/python3", ["-c", """
                import sys, urllib.parse, urllib.request
                url = 'http://127.0.0.1:\(promPort)/api/v1/query?' + urllib.parse.urlencode({'query': sys.argv[1]})
                print(urllib.request.urlopen(url, timeout=5).read().decode())
                """, q], timeout: 10).out
        }
        var connected = ""
        try waitFor("Prometheus answering paird_wearable_connected", deadline: 30) {
            connected = query("paird_wearable_connected")
            return connected.contains(#""address":"00:AA:01:01:00:01""#)
        }
        #expect(connected.contains(#""name":"Watch""#), "\(connected)")
        #expect(connected.contains(#""1"]"#), "connected: \(connected)")
        // Waited for like `connected`: each answer is a scrape of its own, and the drop (counted
        // at the reconnect above, `WearableMetrics.settle`) need not be in the first one read.
        var drops = ""
        try waitFor("Prometheus answering the link-loss drop", deadline: 30) {
            drops = query("sum by (reason) (paird_wearable_drops_total) > 0")
            return drops.contains(#"{"reason":"link-loss"},"value":["#)
        }
        #expect(drops.contains(#""1"]"#), "one drop: \(drops)")
        #expect(query("node_textfile_scrape_error").contains(#""0"]"#), "node_exporter read the file without error")
    }

    @Test("without [Metrics] Textfile paird writes no metrics")
    func offByDefault() throws {
        let host = try MockedHost()
        try host.startPaird()
        let files = try FileManager.default.contentsOfDirectory(atPath: host.dir.path)
        #expect(!files.contains { $0.hasSuffix(".prom") || $0.hasSuffix(".prom.tmp") }, "\(files)")
        #expect(!host.log().contains("metrics:"))
    }

    @Test("the shipped Grafana dashboard: JSON, its queries parse (promtool, as recording rules) and name only paird's metrics")
    func dashboard() throws {
        let promtool = try Self.required(Self.promtool)
        let data = try Data(contentsOf: Self.repo.appendingPathComponent("etc/grafana/paird-dashboard.json"))
        let doc = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        let panels = try #require(doc["panels"] as? [[String: Any]])
        let exprs = panels.flatMap { ($0["targets"] as? [[String: Any]] ?? []).compactMap { $0["expr"] as? String } }
        #expect(exprs.count >= 8)
        let known: Set = ["paird_wearable_connected", "paird_wearable_drops_total", "paird_wearable_reconnect_seconds_bucket",
                          "paird_wearable_last_data_timestamp_seconds", "paird_wearable_battery_percent",
                          "paird_wearable_notifications_total", "paird_bluetoothd_crashes_total"]
        let names = try Regex(#"paird_[a-z_]+"#)
        for e in exprs {
            for m in e.matches(of: names) { #expect(known.contains(String(e[m.range])), "\(e)") }
        }
        // Grafana's variables replaced as Grafana would; each expression a recording rule.
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("paird-dash-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        var yaml = "groups:\n  - name: dashboard\n    rules:\n"
        for (i, e) in exprs.enumerated() {
            let q = e.replacingOccurrences(of: "$__range", with: "1d").replacingOccurrences(of: "$instance", with: ".*")
            yaml += "      - record: paird:dashboard\(i)\n        expr: '\(q.replacingOccurrences(of: "'", with: "''"))'\n"
        }
        try yaml.write(to: dir.appendingPathComponent("dash.yml"), atomically: true, encoding: .utf8)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: promtool)
        p.arguments = ["check", "rules", dir.appendingPathComponent("dash.yml").path]
        let out = Pipe()
        p.standardOutput = out
        p.standardError = out
        try p.run()
        let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        #expect(p.terminationStatus == 0, "\(text)\n\(yaml)")
    }

    @Test("promtool check rules accepts the shipped alert rules, and its unit tests of them pass")
    func alertRules() throws {
        let promtool = try Self.required(Self.promtool)
        let dir = Self.repo.appendingPathComponent("etc/prometheus")
        for args in [["check", "rules", "paird-alerts.yml"], ["test", "rules", "paird-alerts.test.yml"]] {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: promtool)
            p.arguments = args
            p.currentDirectoryURL = dir
            let out = Pipe()
            p.standardOutput = out
            p.standardError = out
            try p.run()
            let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            p.waitUntilExit()
            #expect(p.terminationStatus == 0, "promtool \(args.joined(separator: " ")): \(text)")
            #expect(text.contains("SUCCESS"), "\(text)")
        }
    }
}
