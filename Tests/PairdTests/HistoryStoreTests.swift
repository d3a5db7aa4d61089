import Foundation
import Testing
@testable import Paird
import PairingCore

@Suite("The availability record on disk (HistoryStore)")
struct HistoryStoreTests {
    static let d = "00:AA:01:01:00:01"
    static let t0 = 1_800_000_000.0

    func tempPath() throws -> String {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("paird-history-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        return dir + "/history.jsonl"
    }

    func records(_ n: Int, from t: Double = t0, step: Double = 60) -> [HistoryRecord] {
        (0..<n).map { (i: Int) -> HistoryRecord in
            let at = t + Double(i) * step
            if i % 2 == 0 { return HistoryRecord(kind: .up, at: at, device: Self.d, name: "Watch") }
            return HistoryRecord(kind: .down, at: at, device: Self.d, name: "Watch", condition: .away, reason: "link-loss")
        }
    }

    func bytes(_ path: String) throws -> [UInt8] { Array(try Data(contentsOf: URL(fileURLWithPath: path))) }

    @Test("restart keeps earlier records: write, close, reopen, read; mode 0600; one line per record")
    func reopen() throws {
        let path = try tempPath()
        let written = records(5)
        do {
            let s = HistoryStore(path: path, cap: .init())
            try s.open(now: Self.t0 + 600)
            try s.append(Array(written.prefix(3)))
            try s.append(Array(written.suffix(2)))
        }
        let again = HistoryStore(path: path, cap: .init())
        let (back, skipped) = try again.open(now: Self.t0 + 600)
        #expect(back == written)
        #expect(skipped == 0)
        #expect(try bytes(path).filter { $0 == UInt8(ascii: "\n") }.count == 5)
        let attrs = try FileManager.default.attributesOfItem(atPath: path)
        #expect((attrs[.posixPermissions] as? NSNumber)?.intValue == 0o600)
        try again.append([HistoryRecord(kind: .stop, at: Self.t0 + 700)])
        #expect(try again.load().records.count == 6)
    }

    @Test("a torn last line (a crash mid-write) is skipped, never fatal; nothing earlier is lost; the next record starts clean",
          arguments: [1, 17, 40])
    func tornTail(keep: Int) throws {
        let path = try tempPath()
        let written = records(4)
        var text = written.map { $0.line + "\n" }.joined()
        text += String(HistoryRecord(kind: .up, at: Self.t0 + 999, device: Self.d).line.prefix(keep)) // no newline
        try text.write(toFile: path, atomically: false, encoding: .utf8)
        let s = HistoryStore(path: path, cap: .init())
        let (back, skipped) = try s.open(now: Self.t0 + 600)
        #expect(back == written)
        #expect(skipped == 1)
        let next = HistoryRecord(kind: .stop, at: Self.t0 + 1000)
        try s.append([next])
        let (all, skippedNow) = try HistoryStore(path: path, cap: .init()).load()
        #expect(all == written + [next], "the torn bytes do not glue onto the next line")
        #expect(skippedNow == 0)
    }

    @Test("a garbled line in the middle is skipped, the lines around it are kept")
    func garbledMiddle() throws {
        let path = try tempPath()
        let written = records(3)
        let text = written[0].line + "\n" + "{\"type\":\"up\",\"at\":\"no time\"}\n\u{0}\u{0}\u{0}\n" + written[1].line + "\n" + written[2].line + "\n"
        try text.write(toFile: path, atomically: false, encoding: .utf8)
        let (back, skipped) = try HistoryStore(path: path, cap: .init()).load()
        #expect(back == written)
        #expect(skipped == 2)
    }

    @Test("the cap: records older than MaxAge go, and only the newest MaxRecords are kept; the file is rewritten so")
    func cap() throws {
        let path = try tempPath()
        // 300 records a minute apart: t0 … t0 + 299 min.
        let written = records(300)
        try written.map { $0.line + "\n" }.joined().write(toFile: path, atomically: false, encoding: .utf8)
        // Age: at t0 + 299 min with 100 min kept → the records at minutes 199…299 (101).
        let byAge = HistoryStore(path: path, cap: .init(maxAge: .seconds(100 * 60), maxRecords: 1000))
        let (kept, _) = try byAge.open(now: Self.t0 + 299 * 60)
        #expect(kept == Array(written[199...]))
        #expect(try HistoryStore(path: path, cap: .init()).load().records == Array(written[199...]), "on disk too")
        // Count: 50 of those 101, the newest.
        let byCount = HistoryStore(path: path, cap: .init(maxAge: .seconds(86400), maxRecords: 50))
        let (newest, _) = try byCount.open(now: Self.t0 + 299 * 60)
        #expect(newest == Array(written[250...]))
        #expect(!FileManager.default.fileExists(atPath: path + ".tmp"), "the temporary file was renamed")
    }

    @Test("compaction is due only a tenth past the cap, and brings the file back to it")
    func compaction() throws {
        let path = try tempPath()
        let s = HistoryStore(path: path, cap: .init(maxAge: .seconds(86400 * 30), maxRecords: 100))
        try s.open(now: Self.t0)
        let written = records(111)
        try s.append(Array(written.prefix(110)))
        #expect(!s.needsCompaction, "110 of 100: not yet")
        try s.append([written[110]])
        #expect(s.needsCompaction)
        try s.compact(now: Self.t0 + 111 * 60)
        #expect(s.lineCount == 100)
        #expect(try s.load().records == Array(written[11...]))
        try s.append([HistoryRecord(kind: .stop, at: Self.t0 + 112 * 60)])
        #expect(try s.load().records.count == 101, "appending goes on after the rename")
    }

    @Test("history.jsonl lives beside the state file")
    func path() {
        #expect(HistoryStore.path(besideStateFile: "/var/lib/paird/state.json") == "/var/lib/paird/history.jsonl")
        #expect(HistoryStore.path(besideStateFile: "state.json") == "./history.jsonl")
        #expect(HistoryStore.path(besideStateFile: "/state.json") == "/history.jsonl")
    }

    @Test("[History] in paird.conf: MaxAgeDays and MaxRecords are read, and checked")
    func config() throws {
        let (c, warnings) = try DaemonConfig.parse("[History]\nMaxAgeDays = 7\nMaxRecords = 5000\n", file: "t.conf")
        #expect(warnings.isEmpty)
        #expect(c.history == HistoryStore.Cap(maxAge: .seconds(7 * 86400), maxRecords: 5000))
        #expect(DaemonConfig().history == HistoryStore.Cap(maxAge: .seconds(30 * 86400), maxRecords: 100_000))
        #expect(throws: DaemonConfig.Error.self) { try DaemonConfig.parse("[History]\nMaxAgeDays = 0\n", file: "t.conf") }
        #expect(throws: DaemonConfig.Error.self) { try DaemonConfig.parse("[History]\nMaxRecords = ten\n", file: "t.conf") }
    }
}
