import Foundation
import Testing
import EventLoop
@testable import Paird
@testable import PairCtlCommands
import PairingCore

/// Issue 43 items 4–6 on disk: the per-wearable cap, the age cap against the clock, a full disk,
/// a failed compaction and a failed reopen.
@Suite("The availability record on disk: its guards (HistoryStore)")
struct HistoryStoreGuardsTests {
    static let a = "00:AA:01:01:00:01"
    static let b = "00:AA:01:01:00:02"
    static let t0 = 1_800_000_000.0
    let base = HistoryStoreTests()

    func battery(_ n: Int, _ device: String, from t: Double) -> [HistoryRecord] {
        (0..<n).map { HistoryRecord(kind: .battery, at: t + Double($0) * 60, device: device, level: $0 % 100) }
    }

    @Test("quotas: under the cap each keeps all; over it the biggest loses first, the rest in key order")
    func quotas() {
        #expect(HistoryStore.quotas(["a": 3, "b": 4], max: 10) == ["a": 3, "b": 4])
        #expect(HistoryStore.quotas(["a": 300, "b": 20, "": 5], max: 100) == ["a": 75, "b": 20, "": 5])
        #expect(HistoryStore.quotas(["a": 60, "b": 60], max: 101) == ["a": 51, "b": 50])
        #expect(HistoryStore.quotas(["a": 60, "b": 60], max: 100).values.reduce(0, +) == 100)
    }

    @Test("the count cap is per wearable: one flooding the record loses its own oldest lines, the other keeps all of its")
    func perWearableCap() throws {
        let path = try base.tempPath()
        let others = battery(20, Self.b, from: Self.t0)             // older, few
        let flood = battery(300, Self.a, from: Self.t0 + 3600)      // newer, many
        try base.write(others + flood, to: path)
        let s = HistoryStore(path: path, cap: .init(maxAge: .seconds(86400 * 30), maxRecords: 100))
        try s.open()
        try s.compact(now: Self.t0 + 86400)
        let kept = try s.load().records
        #expect(kept.filter { $0.device == Self.b } == others, "every one of the other wearable's records")
        #expect(kept.filter { $0.device == Self.a } == Array(flood.suffix(80)), "the flood's newest 80")
        #expect(kept == others + flood.suffix(80), "in file order")
    }

    @Test("the age cap on a forward jump: without both clocks agreeing nothing goes for its age; lines stamped in the future stay either way")
    func ageAndClock() throws {
        let path = try base.tempPath()
        let written = battery(10, Self.a, from: Self.t0)
        let future = HistoryRecord(kind: .battery, at: Self.t0 + 86400 * 100, device: Self.a, level: 1)
        try base.write(written + [future], to: path)
        let s = HistoryStore(path: path, cap: .init(maxAge: .seconds(86400 * 30), maxRecords: 1000))
        try s.open()
        let jumped = Self.t0 + 86400 * 40
        #expect(!s.needsCompaction(now: jumped, byAge: false))
        #expect(s.needsCompaction(now: jumped, byAge: true))
        try s.compact(now: jumped, byAge: false)
        #expect(try s.load().records == written + [future], "nothing lost on the jump")
        try s.compact(now: jumped, byAge: true)
        #expect(try s.load().records == [future], "with the clocks agreeing: the old ones go, the future line stays")
    }

    @Test("a full disk: the records that failed become a not-recorded span (from, to, how many), written first once the disk has room, with each wearable's condition again")
    func diskFull() throws {
        let path = try base.tempPath()
        let s = HistoryStore(path: path, cap: .init())
        try s.open()
        let first = HistoryRecord(kind: .start, at: Self.t0)
        #expect(s.record([first], now: Self.t0) == nil)
        s.writeLine = { _, _ in errno = ENOSPC; return -1 }
        let down = HistoryRecord(kind: .down, at: Self.t0 + 10, device: Self.a, condition: .away, reason: "link-loss")
        let up = HistoryRecord(kind: .up, at: Self.t0 + 70, device: Self.a)
        #expect(s.record([down], now: Self.t0 + 10) != nil)
        #expect(s.record([up], now: Self.t0 + 70) != nil)
        #expect(s.notRecorded == NotRecordedSpan(from: Self.t0 + 10, to: Self.t0 + 70, lost: 2))
        #expect(s.lostTotal == 2)
        #expect(try s.load().records == [first], "nothing half-written")
        s.writeLine = { fd, bytes in bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) } }
        let battery = HistoryRecord(kind: .battery, at: Self.t0 + 100, device: Self.b, level: 50)
        let resync = HistoryRecord(kind: .change, at: Self.t0 + 100, device: Self.a, condition: .connected, detail: "resync")
        #expect(s.record([battery], now: Self.t0 + 100, resync: { [resync] }) == nil)
        #expect(s.notRecorded == nil)
        #expect(try s.load().records == [first, HistoryRecord(kind: .notRecorded, at: Self.t0 + 10, lasted: 60, lost: 2), battery, resync])
        #expect(s.lostTotal == 2)
    }

    @Test("the retry with no new record writes the span alone (paird tries it every minute); a failed retry loses nothing more")
    func retrySpanAlone() throws {
        let path = try base.tempPath()
        let s = HistoryStore(path: path, cap: .init())
        try s.open()
        s.writeLine = { _, _ in errno = ENOSPC; return -1 }
        let up = HistoryRecord(kind: .up, at: Self.t0 + 70, device: Self.a)
        #expect(s.record([up], now: up.at) != nil)
        #expect(s.record([], now: Self.t0 + 130) != nil)
        #expect(s.notRecorded == NotRecordedSpan(from: up.at, to: up.at, lost: 1))
        s.writeLine = { fd, bytes in bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) } }
        #expect(s.record([], now: Self.t0 + 190) == nil)
        #expect(s.notRecorded == nil)
        #expect(try s.load().records == [HistoryRecord(kind: .notRecorded, at: up.at, lasted: 0, lost: 1)])
        #expect(s.record([], now: Self.t0 + 250) == nil)
        #expect(try s.load().records.count == 1, "nothing to write")
    }

    @Test("a failed compaction backs off: not tried again at the next record, but a minute later (then doubling)")
    func compactionBackoff() throws {
        let path = try base.tempPath()
        let s = HistoryStore(path: path, cap: .init(maxAge: .seconds(86400 * 30), maxRecords: 100))
        try s.open()
        try s.append(battery(120, Self.a, from: Self.t0))
        // The temporary file cannot be made: a directory in its place.
        try FileManager.default.createDirectory(atPath: path + ".tmp", withIntermediateDirectories: false)
        let loop = try EventLoop()
        let at = Moment(uptimeNanoseconds: 1_000_000_000_000, unixTime: Self.t0 + 120 * 60)
        #expect(s.compactionDue(now: at, byAge: true))
        var outcome: Error??
        s.compactInBackground(now: at.unixTime, on: loop, uptime: { at.uptimeNanoseconds }) { outcome = .some($0) }
        try loop.run(until: { outcome != nil })
        #expect(outcome! != nil, "it failed")
        #expect(!s.compactionDue(now: at + .seconds(1), byAge: true), "not at the next record")
        #expect(!s.compactionDue(now: at + .seconds(59), byAge: true))
        #expect(s.compactionDue(now: at + .seconds(60), byAge: true))
        var b = s.backoff
        b.failed(at: 0)
        #expect(!b.allows(at: 119_000_000_000) && b.allows(at: 120_000_000_000), "the second failure waits two minutes")
    }

    @Test("a reopen that fails after the rename: an error, nothing written into the unlinked old file, and appends resume once it opens")
    func reopenFails() throws {
        let path = try base.tempPath()
        let s = HistoryStore(path: path, cap: .init(maxAge: .seconds(86400 * 30), maxRecords: 100))
        try s.open()
        try s.append(battery(120, Self.a, from: Self.t0))
        let old = open(path, O_RDONLY)
        defer { close(old) }
        let oldSize = lseek(old, 0, SEEK_END)
        s.reopen = { _ in errno = EMFILE; return -1 }
        #expect(throws: SystemError.self) { try s.compact(now: Self.t0 + 120 * 60) }
        #expect(!s.isOpen)
        #expect(s.lineCount == 100, "the renamed file's lines, not the old one's")
        let next = HistoryRecord(kind: .stop, at: Self.t0 + 200 * 60)
        #expect(s.record([next], now: next.at) != nil, "still not open: not written")
        #expect(lseek(old, 0, SEEK_END) == oldSize, "nothing went into the old, unlinked file")
        #expect(try s.load().records.count == 100, "the compacted record, as renamed")
        s.reopen = { open($0, O_RDWR | O_APPEND | O_CLOEXEC) }
        let later = HistoryRecord(kind: .alive, at: Self.t0 + 201 * 60)
        #expect(s.record([later], now: later.at) == nil)
        let back = try s.load().records
        #expect(back.count == 102)
        #expect(back.suffix(2) == [HistoryRecord(kind: .notRecorded, at: next.at, lasted: 0, lost: 1), later])
    }

    @Test("pairctl history shows the not-recorded span, the clock's jump and the lines after now, in text and JSON; nothing when all is well")
    func shown() throws {
        let records = [
            HistoryRecord(kind: .notRecorded, at: Self.t0 + 100, lasted: 600, lost: 12),
            HistoryRecord(kind: .clock, at: Self.t0 + 800, jump: 86400 * 40),
            HistoryRecord(kind: .alive, at: Self.t0 + 86400 * 41),
        ]
        let notes = HistoryNotes.of(records, since: Self.t0, until: Self.t0 + 1000)
        let text = HistoryText.render(notes)
        #expect(text.count == 3)
        #expect(text[0].hasPrefix("not-recorded: 10 min from ") && text[0].contains("12 record(s) lost"))
        #expect(text[1].hasPrefix("clock: the wall clock jumped forward 40 d at "))
        #expect(text[2].hasPrefix("(1 line(s) of the record are stamped after now"))
        #expect(HistoryText.render(HistoryNotes()).isEmpty)
        let json = HistoryDocument(since: Self.t0, until: Self.t0 + 1000, skippedLines: 0, analyses: [], notes: notes).json()
        let doc = try JSONSerialization.jsonObject(with: Data(json.utf8)) as! [String: Any]
        #expect((doc["notRecorded"] as? [[String: Any]])?.first?["lost"] as? Int == 12)
        #expect(((doc["clockJumps"] as? [[String: Any]])?.first?["seconds"] as? NSNumber)?.doubleValue == 3_456_000.0)
        #expect(doc["futureLines"] as? Int == 1)
    }

    @Test("paird_history_not_recorded_total: 0 from the start, then the records lost")
    func metric() {
        let m = WearableMetrics()
        #expect(samples(m.render())["paird_history_not_recorded_total"] == 0)
        m.notRecorded(3)
        m.notRecorded(2)
        #expect(samples(m.render())["paird_history_not_recorded_total"] == 5)
    }

    @Test("[History] BatteryStep and BatteryInterval are read and checked")
    func config() throws {
        let (c, warnings) = try DaemonConfig.parse("[History]\nBatteryStep = 10\nBatteryInterval = 30min\n", file: "t.conf")
        #expect(warnings.isEmpty)
        #expect(c.historyBattery == HistoryRecorder.BatteryLimit(step: 10, interval: .seconds(1800)))
        #expect(DaemonConfig().historyBattery == HistoryRecorder.BatteryLimit(step: 5, interval: .seconds(600)))
        #expect(throws: DaemonConfig.Error.self) { try DaemonConfig.parse("[History]\nBatteryStep = 0\n", file: "t.conf") }
        #expect(throws: DaemonConfig.Error.self) { try DaemonConfig.parse("[History]\nBatteryInterval = 2d\n", file: "t.conf") }
    }
}
