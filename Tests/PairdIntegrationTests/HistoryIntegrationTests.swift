import Foundation
import Testing
import PairingCore

/// The availability record end to end: the real paird records, serves it over GetHistory, and the
/// real pairctl shows it.
@Suite("pairctl history against a mocked BlueZ", .serialized)
struct HistoryIntegrationTests {
    let watch = MockedHost.watch

    func historyJSON(_ host: MockedHost, _ args: String...) throws -> [String: Any] {
        let r = host.run(MockedHost.pairctlBin, ["history", "--json"] + args)
        try host.must(r, "pairctl history --json")
        return try #require(try JSONSerialization.jsonObject(with: Data(r.out.utf8)) as? [String: Any], "\(r.out)")
    }

    @Test("pair, lose the link, get it back: history --json reports the drop with its reason, the reconnect, and keeps them across a restart")
    func dropAndReconnect() throws {
        let host = try MockedHost()
        // No GATT in the mock: no data would ever come, and the first-data watch would remake the link.
        try "[Health]\nFirstDataTimeout = 0\n".write(toFile: host.dir.appendingPathComponent("paird.conf").path, atomically: true, encoding: .utf8)
        try host.startPaird()
        try host.pairWatchOK()
        try waitFor("connected", deadline: 10) { host.state() == "connected" }

        try host.setDevice(watch, "'Connected': False, 'ServicesResolved': False") // link loss
        try waitFor("waitingForDevice", deadline: 10) { host.state() == "waitingForDevice" }
        try host.setDevice(watch, "'Connected': True, 'ServicesResolved': True")   // back in range
        try waitFor("connected again", deadline: 10) { host.state() == "connected" }

        func check(_ doc: [String: Any], _ when: String) throws {
            #expect(doc["schemaVersion"] as? Int == 1, "\(when)")
            #expect(doc["skippedLines"] as? Int == 0, "\(when)")
            let devices = try #require(doc["devices"] as? [[String: Any]], "\(when): \(doc)")
            #expect(devices.count == 1, "\(when)")
            let d = try #require(devices.first)
            #expect(d["address"] as? String == watch)
            #expect(d["name"] as? String == "Watch")
            let drops = try #require(d["drops"] as? [[String: Any]], "\(when): \(d)")
            #expect(drops.count == 1, "\(when): \(drops)")
            #expect(drops.first?["reason"] as? String == "link-loss", "\(when): \(drops)")
            #expect((d["dropsByReason"] as? [String: Int]) == ["link-loss": 1], "\(when)")
            let latency = try #require(d["reconnectLatency"] as? [String: Any], "\(when): \(d)")
            #expect(latency["count"] as? Int == 1, "\(when)")
            let percent = try #require(d["availabilityPercent"] as? Double, "\(when): \(d)")
            #expect(percent > 0 && percent < 100, "\(when): a drop was measured: \(percent)")
            let gap = try #require(d["longestGap"] as? [String: Any], "\(when): \(d)")
            // The longest is the link loss or the connecting after the pairing, whichever took longer here.
            #expect(["link-loss", "connecting"].contains(gap["reason"] as? String ?? ""), "\(when): \(gap)")
            #expect((gap["seconds"] as? Double ?? 0) > 0, "\(when): \(gap)")
        }
        try check(try historyJSON(host), "while running")

        // A restart keeps the record, also after a write cut short (a torn last line); the file
        // holds it as JSON lines.
        try host.stopPaird()
        let file = host.dir.appendingPathComponent("history.jsonl").path
        let torn = try #require(FileHandle(forWritingAtPath: file))
        torn.seekToEndOfFile()
        torn.write(Data(#"{"at":"2026-11-26T16:1"#.utf8))
        try torn.close()
        try host.setDevice(watch, "'Connected': True, 'ServicesResolved': True")
        try host.startPaird()
        try waitFor("connected after restart", deadline: 10) { host.state() == "connected" }
        try check(try historyJSON(host, watch), "after a restart, by address")
        let lines = try String(contentsOfFile: file, encoding: .utf8)
            .split(separator: "\n")
        #expect(lines.filter { $0.contains("\"type\":\"start\"") }.count == 2, "\(lines)")
        #expect(lines.filter { $0.contains("\"type\":\"stop\"") }.count == 1, "\(lines)")
        #expect(lines.filter { $0.contains("\"type\":\"down\"") && $0.contains("\"reason\":\"link-loss\"") }.count == 1, "\(lines)")
        #expect(lines.allSatisfy { HistoryRecord.parse(line: Array($0.utf8)) != nil }, "the torn tail was cut, nothing glued to it: \(lines)")

        let text = host.pairctl("history", "watch")
        #expect(text.status == 0, "\(text.err)")
        #expect(text.out.contains("Watch (\(watch))"), "\(text.out)")
        #expect(text.out.contains("drops: 1 (link-loss 1)"), "\(text.out)")
        #expect(text.out.contains("reconnect latency: p50 "), "\(text.out)")
        #expect(text.out.contains("timeline (1 char = 1 hour"), "\(text.out)")
        #expect(host.pairctl("history", "C0:FF:EE:00:00:01").status == 7, "nothing about that wearable")
        #expect(host.pairctl("history", "--since", "yesterday-ish").status == 64)
    }
}

/// Issue 43 item 6 end to end: the real paird cannot write its record, keeps running, and once it
/// can, the record says what it could not write. The full disk is a file-size limit
/// (RLIMIT_FSIZE, set on the running paird with prlimit; SIGXFSZ ignored): its writes fail with
/// EFBIG where a full disk's fail with ENOSPC, through the same path; a real full filesystem is
/// the bed's.
@Suite("pairctl history when paird cannot write its record", .serialized)
struct HistoryDiskFullIntegrationTests {
    let watch = MockedHost.watch

    @Test("a write limit reached: paird runs on, and once it is lifted the not-recorded span is in the file and in pairctl history")
    func notRecorded() throws {
        let host = try MockedHost()
        try "[Health]\nFirstDataTimeout = 0\n".write(toFile: host.dir.appendingPathComponent("paird.conf").path, atomically: true, encoding: .utf8)
        // Older lines of another wearable, so the record is far bigger than the state file (the limit is on every file).
        let file = host.dir.appendingPathComponent("history.jsonl").path
        let now = Date().timeIntervalSince1970
        try (0..<400).map { HistoryRecord(kind: .battery, at: now - 3600 + Double($0), device: "C0:FF:EE:00:00:09", level: $0 % 100).line + "\n" }
            .joined().write(toFile: file, atomically: false, encoding: .utf8)
        try host.startPaird(shell: "trap '' XFSZ;")
        try host.pairWatchOK()
        try waitFor("connected", deadline: 10) { host.state() == "connected" }
        let pid = try #require(host.paird?.processIdentifier)
        func size() throws -> Int { (try FileManager.default.attributesOfItem(atPath: file)[.size] as? NSNumber)?.intValue ?? -1 }
        let full = try size()
        try host.must(host.run("/usr/bin/prlimit", ["--pid", "\(pid)", "--fsize=\(full):unlimited"]), "prlimit")

        try host.setDevice(watch, "'Connected': False, 'ServicesResolved': False") // link loss: not recorded
        try waitFor("waitingForDevice", deadline: 10) { host.state() == "waitingForDevice" }
        try host.setDevice(watch, "'Connected': True, 'ServicesResolved': True")   // back: not recorded
        try waitFor("connected again", deadline: 10) { host.state() == "connected" }
        #expect(try size() == full, "nothing written, nothing half-written")
        #expect(host.paird?.isRunning == true)
        #expect(host.log().contains("could not write the availability record"), "\(host.log())")

        try host.must(host.run("/usr/bin/prlimit", ["--pid", "\(pid)", "--fsize=unlimited"]), "prlimit")
        try host.setDevice(watch, "'Connected': False, 'ServicesResolved': False") // recorded, after the span
        try waitFor("waitingForDevice", deadline: 10) { host.state() == "waitingForDevice" }
        let lines = try String(contentsOfFile: file, encoding: .utf8).split(separator: "\n").compactMap { HistoryRecord.parse(line: Array($0.utf8)) }
        let spans = lines.filter { $0.kind == .notRecorded }
        #expect(spans.count == 1, "\(lines.suffix(6))")
        #expect((spans.first?.lost ?? 0) >= 2, "the drop and the reconnect at least: \(spans)")
        #expect(lines.last?.kind == .down || lines.suffix(3).contains { $0.kind == .down }, "\(lines.suffix(4))")

        let r = host.run(MockedHost.pairctlBin, ["history", "--json"])
        try host.must(r, "pairctl history --json")
        let doc = try #require(try JSONSerialization.jsonObject(with: Data(r.out.utf8)) as? [String: Any])
        let listed = try #require(doc["notRecorded"] as? [[String: Any]], "\(r.out)")
        #expect(listed.count == 1 && (listed.first?["lost"] as? Int ?? 0) >= 2, "\(listed)")
        let text = host.pairctl("history")
        #expect(text.out.contains("not-recorded: "), "\(text.out)")
    }
}
