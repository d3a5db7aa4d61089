#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import PairingCore
import Testing

/// Issue 43 items 4–6, the pure parts: the battery flood limiter, the clock watch, the
/// not-recorded span, the new lines read back and shown (`HistoryNotes`, `HistoryAnalysis`).
@Suite("The availability record's guards: flood, clock, disk full")
struct HistoryGuardsTests {
    let watch = Harness.watch
    let epoch = 1_800_000_000.0

    @Test("a wearable alternating 49/50 % at 20 Hz for 2 minutes makes one battery record; a step of 5 % after the interval makes the next")
    func batteryFlood() {
        var rec = HistoryRecorder()
        var made: [HistoryRecord] = []
        for i in 0..<(20 * 120) {
            made += rec.handle(.battery(watch, level: i % 2 == 0 ? 49 : 50), now: .at(Double(i) / 20), facts: AwakeHost())
        }
        #expect(made.map(\.level) == [49])
        #expect(rec.handle(.battery(watch, level: 44), now: .at(300), facts: AwakeHost()).isEmpty, "5 % down, but within 10 min of the last record")
        #expect(rec.handle(.battery(watch, level: 46), now: .at(601), facts: AwakeHost()).isEmpty, "10 min on, but only 3 % from 49")
        #expect(rec.handle(.battery(watch, level: 44), now: .at(602), facts: AwakeHost()).map(\.level) == [44])
        let other = DeviceAddress("00:AA:01:01:00:02")!
        #expect(rec.handle(.battery(other, level: 80), now: .at(603), facts: AwakeHost()).map(\.level) == [80], "per wearable: another's first reading is recorded")
    }

    @Test("connectivity records are never coalesced: a flapping link's every drop and reconnect is recorded amid a battery flood")
    func connectivityNotCoalesced() {
        var r = HistoryRecorderTests().connectedAt10()
        for k in 0..<5 {
            r.input(.battery(watch, level: UInt8(50 + k % 2)))
            r.h.advance(.seconds(60))
            r.send(.linkDown(watch, linkLoss))
            r.h.advance(.seconds(30))
            r.linkComesUp(watch)
        }
        #expect(r.records.filter { $0.kind == .down }.count == 5)
        #expect(r.records.filter { $0.kind == .up }.count == 6)
        #expect(r.records.filter { $0.kind == .battery }.count == 1)
    }

    @Test("the clock watch: agreeing clocks are no jump; +40 days is one, and the clocks disagree until it is set back")
    func clockJump() {
        var w = ClockWatch()
        #expect(w.check(.at(0)) == nil)
        #expect(w.check(.at(3600)) == nil)
        #expect(w.agree)
        // 30 s of NTP slew or step: under the threshold.
        #expect(w.check(Moment(uptimeNanoseconds: 7200_000_000_000, unixTime: epoch + 7230)) == nil)
        #expect(w.agree)
        let forty = 40.0 * 86400
        let jump = w.check(Moment(uptimeNanoseconds: 7300_000_000_000, unixTime: epoch + 7330 + forty))
        #expect(jump == forty)
        #expect(!w.agree, "the age cap waits")
        #expect(w.check(Moment(uptimeNanoseconds: 7400_000_000_000, unixTime: epoch + 7430 + forty)) == nil, "no new jump")
        #expect(!w.agree)
        let back = w.check(Moment(uptimeNanoseconds: 7500_000_000_000, unixTime: epoch + 7530))
        #expect(back == -forty)
        #expect(w.agree, "set back: both clocks agree again")
    }

    @Test("a not-recorded span grows from the first lost record to the last, counting them; its line says so and reads back")
    func notRecordedSpan() throws {
        let lost = [HistoryRecord(kind: .down, at: epoch + 10, device: watch.description, condition: .away, reason: "link-loss"),
                    HistoryRecord(kind: .up, at: epoch + 40, device: watch.description)]
        var span = NotRecordedSpan.adding(lost, to: nil, at: epoch + 40)
        span = NotRecordedSpan.adding([HistoryRecord(kind: .battery, at: epoch + 100, device: watch.description, level: 40)], to: span, at: epoch + 100)
        #expect(span == NotRecordedSpan(from: epoch + 10, to: epoch + 100, lost: 3))
        let line = span!.record
        #expect(line == HistoryRecord(kind: .notRecorded, at: epoch + 10, lasted: 90, lost: 3))
        #expect(line.line.contains(#""type":"not-recorded""#))
        #expect(HistoryRecord.fastParse(ArraySlice(line.line.utf8)) == line)
        let clock = HistoryRecord(kind: .clock, at: epoch, jump: -3_456_000.5)
        #expect(HistoryRecord.fastParse(ArraySlice(clock.line.utf8)) == clock)
        #expect(try JSONDecoder().decode(HistoryRecord.self, from: Data(clock.line.utf8)) == clock)
    }

    @Test("history: a not-recorded span ends what was known (unknown until the resync line); notes list it, the jump and lines after now")
    func notes() {
        let d = watch.description
        let records = [
            HistoryRecord(kind: .start, at: epoch),
            HistoryRecord(kind: .up, at: epoch, device: d, name: "Watch"),
            HistoryRecord(kind: .notRecorded, at: epoch + 100, lasted: 50, lost: 4),
            HistoryRecord(kind: .change, at: epoch + 150, device: d, name: "Watch", condition: .connected, detail: "resync"),
            HistoryRecord(kind: .clock, at: epoch + 160, jump: 86400 * 40),
            HistoryRecord(kind: .battery, at: epoch + 160 + 86400 * 40, device: d, level: 50),
        ]
        let a = HistoryAnalysis.analyse(records, device: d, since: epoch, until: epoch + 200)
        #expect(a.connectedSeconds == 150, "0…100 and 150…200")
        #expect(a.unknownSeconds == 50, "the span")
        #expect(a.availabilityPercent == 100)
        let n = HistoryNotes.of(records, since: epoch, until: epoch + 200)
        #expect(n.notRecorded == [.init(at: epoch + 100, seconds: 50, lost: 4)])
        #expect(n.clockJumps == [.init(at: epoch + 160, seconds: 86400 * 40)])
        #expect(n.futureLines == 1)
    }
}
