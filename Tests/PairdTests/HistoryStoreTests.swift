import Foundation
import Testing
import EventLoop
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

    func write(_ records: [HistoryRecord], to path: String, tail: String = "") throws {
        try (records.map { $0.line + "\n" }.joined() + tail).write(toFile: path, atomically: false, encoding: .utf8)
    }

    @Test("restart keeps earlier records: write, close, reopen, read; mode 0600; one line per record")
    func reopen() throws {
        let path = try tempPath()
        let written = records(5)
        do {
            let s = HistoryStore(path: path, cap: .init())
            try s.open()
            try s.append(Array(written.prefix(3)))
            try s.append(Array(written.suffix(2)))
        }
        let again = HistoryStore(path: path, cap: .init())
        #expect(try again.open() == written, "the tail it returns (the recorder's battery seed) is every record here")
        #expect(again.lineCount == 5)
        #expect(again.oldestAt == Self.t0)
        let (back, skipped) = try again.load()
        #expect(back == written)
        #expect(skipped == 0)
        #expect(try bytes(path).filter { $0 == UInt8(ascii: "\n") }.count == 5)
        let attrs = try FileManager.default.attributesOfItem(atPath: path)
        #expect((attrs[.posixPermissions] as? NSNumber)?.intValue == 0o600)
        try again.append([HistoryRecord(kind: .stop, at: Self.t0 + 700)])
        #expect(try again.load().records.count == 6)
    }

    @Test("a torn last line (a crash mid-write) is skipped when read, never fatal, nothing earlier lost; opening cuts it so the next record starts clean",
          arguments: [1, 17, 40])
    func tornTail(keep: Int) throws {
        let path = try tempPath()
        let written = records(4)
        try write(written, to: path, tail: String(HistoryRecord(kind: .up, at: Self.t0 + 999, device: Self.d).line.prefix(keep)))
        let s = HistoryStore(path: path, cap: .init())
        let (read, skipped) = try s.load()
        #expect(read == written)
        #expect(skipped == 1, "the torn line is no record")
        #expect(try s.open() == written)
        #expect(s.lineCount == 4)
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
        try write(written, to: path)
        // Age: at t0 + 299 min with 100 min kept → the records at minutes 199…299 (101).
        let byAge = HistoryStore(path: path, cap: .init(maxAge: .seconds(100 * 60), maxRecords: 1000))
        try byAge.open()
        #expect(byAge.needsCompaction(now: Self.t0 + 299 * 60), "the oldest is 299 min old, more than 110")
        try byAge.compact(now: Self.t0 + 299 * 60)
        #expect(try byAge.load().records == Array(written[199...]))
        #expect(byAge.lineCount == 101)
        #expect(byAge.oldestAt == Self.t0 + 199 * 60)
        // Count: 50 of those 101, the newest.
        let byCount = HistoryStore(path: path, cap: .init(maxAge: .seconds(86400), maxRecords: 50))
        try byCount.open()
        try byCount.compact(now: Self.t0 + 299 * 60)
        #expect(try byCount.load().records == Array(written[250...]))
        #expect(!FileManager.default.fileExists(atPath: path + ".tmp"), "the temporary file was renamed")
    }

    @Test("compaction streams: a record of several read chunks keeps its newest lines byte for byte (a hand-written one too), drops garbled ones and lines past the snapshot")
    func compactionStreams() throws {
        let path = try tempPath()
        // ~6000 lines of ~110 bytes: past two of compactFile's 256 KiB chunks, so lines straddle them.
        let written = records(6000)
        var lines = written.map(\.line)
        // A line a person edited (spaces, another key order: JSONDecoder reads it) and a garbled one.
        lines[5990] = #"{ "type": "battery", "level": 40, "at": "\#(HistoryRecord.formatTime(written[5990].at))", "device": "\#(Self.d)" }"#
        lines.insert("{\"type\":\"up\",\"at\":", at: 5995)
        let text = lines.joined(separator: "\n") + "\n"
        #expect(text.utf8.count > 2 * HistoryStore.chunkSize)
        let appendedLater = HistoryRecord(kind: .stop, at: Self.t0 + 7000 * 60).line + "\n"
        try (text + appendedLater).write(toFile: path, atomically: false, encoding: .utf8)
        let cap = HistoryStore.Cap(maxAge: .seconds(86400 * 30), maxRecords: 3000)
        let kept = try HistoryStore.compactFile(path: path, tmp: path + ".tmp", upTo: text.utf8.count, cap: cap, now: Self.t0 + 6000 * 60)
        #expect(kept == 3000)
        let expected = lines.filter { $0 != "{\"type\":\"up\",\"at\":" }.suffix(3000).joined(separator: "\n") + "\n"
        #expect(String(decoding: try bytes(path + ".tmp"), as: UTF8.self) == expected,
                "the newest 3000 records as they were written, the garbled line gone, nothing past the snapshot")
        // By age: the last 1000 minutes of records.
        let byAge = try HistoryStore.compactFile(path: path, tmp: path + ".tmp", upTo: text.utf8.count,
                                                 cap: .init(maxAge: .seconds(1000 * 60), maxRecords: 100_000), now: Self.t0 + 5999 * 60)
        #expect(byAge == 1001, "minutes 4999…5999: 1001 records (the garbled line, an extra one, not counted)")
    }

    @Test("compaction is due only a tenth past the count or the age")
    func due() throws {
        let path = try tempPath()
        let s = HistoryStore(path: path, cap: .init(maxAge: .seconds(1000 * 60), maxRecords: 100))
        try s.open()
        let written = records(111)
        try s.append(Array(written.prefix(110)))
        #expect(!s.needsCompaction(now: Self.t0 + 110 * 60), "110 of 100: not yet")
        try s.append([written[110]])
        #expect(s.needsCompaction(now: Self.t0 + 111 * 60))
        let few = HistoryStore(path: try tempPath(), cap: .init(maxAge: .seconds(1000 * 60), maxRecords: 100))
        try few.open()
        try few.append(records(2))
        #expect(!few.needsCompaction(now: Self.t0 + 1100 * 60), "the oldest is 1100 min old: a tenth past 1000 is 1100, not yet")
        #expect(few.needsCompaction(now: Self.t0 + 1101 * 60))
    }

    @Test("records appended while the cap is applied elsewhere are kept: snapshot, compact it, append, finish")
    func appendsDuringCompaction() throws {
        let path = try tempPath()
        let s = HistoryStore(path: path, cap: .init(maxAge: .seconds(86400 * 30), maxRecords: 100))
        try s.open()
        let written = records(115)
        try s.append(Array(written.prefix(113)))
        // What the thread does: the file as it is now.
        let size = try bytes(path).count
        let kept = try HistoryStore.compactFile(path: path, tmp: path + ".tmp", upTo: size, cap: s.cap, now: Self.t0 + 113 * 60)
        #expect(kept == 100)
        // Meanwhile the loop appends.
        try s.append(Array(written.suffix(2)))
        try s.finishCompaction(snapshotSize: size, kept: kept)
        #expect(try s.load().records == Array(written[13...]), "the 100 newest of the snapshot, then the 2 appended meanwhile")
        #expect(s.lineCount == 102)
        let after = HistoryRecord(kind: .stop, at: Self.t0 + 200 * 60)
        try s.append([after])
        #expect(try s.load().records.last == after, "appending goes on into the renamed file")
    }

    @Test("compactInBackground: the cap is applied on a thread; the loop finishes it and goes on")
    func background() throws {
        let path = try tempPath()
        let s = HistoryStore(path: path, cap: .init(maxAge: .seconds(86400 * 30), maxRecords: 100))
        try s.open()
        let written = records(120)
        try s.append(written)
        let loop = try EventLoop()
        var outcome: String?
        s.compactInBackground(now: Self.t0 + 120 * 60, on: loop) { error in outcome = error.map { "\($0)" } ?? "done" }
        #expect(s.compacting)
        try loop.run(until: { outcome != nil })
        #expect(outcome == "done")
        #expect(!s.compacting)
        #expect(try s.load().records == Array(written[20...]))
        #expect(s.lineCount == 100)
    }

    @Test("openForReading: a descriptor of the record as it is, read from its start")
    func forReading() throws {
        let path = try tempPath()
        let s = HistoryStore(path: path, cap: .init())
        try s.open()
        try s.append(records(3))
        let fd = try s.openForReading()
        defer { close(fd) }
        var buf = [UInt8](repeating: 0, count: 4096)
        let n = buf.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        #expect(HistoryRecord.parse(lines: buf[0..<max(0, n)]).records == records(3))
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
