import PairingCore
import Testing

/// The availability maths on hand-made records: intervals of known length, exact results.
@Suite("HistoryAnalysis: availability, gaps, drops, latency, battery, timeline")
struct HistoryAnalysisTests {
    static let d = "00:AA:01:01:00:01"
    static let t0 = 1_800_000_000.0 // a whole hour: 2027-01-15T08:00:00Z

    static func up(_ t: Double, latency: Double? = nil) -> HistoryRecord {
        HistoryRecord(kind: .up, at: t0 + t, device: d, name: "Watch", latency: latency)
    }
    static func down(_ t: Double, _ c: HistoryRecord.Condition, _ reason: String) -> HistoryRecord {
        HistoryRecord(kind: .down, at: t0 + t, device: d, name: "Watch", condition: c, reason: reason)
    }
    static func change(_ t: Double, _ c: HistoryRecord.Condition, _ reason: String) -> HistoryRecord {
        HistoryRecord(kind: .change, at: t0 + t, device: d, name: "Watch", condition: c, reason: reason)
    }
    static func mark(_ k: HistoryRecord.Kind, _ t: Double) -> HistoryRecord { HistoryRecord(kind: k, at: t0 + t) }
    static func battery(_ t: Double, _ l: Int) -> HistoryRecord { HistoryRecord(kind: .battery, at: t0 + t, device: d, level: l) }

    /// 10 h, in seconds from t0:
    ///   0–3600      connected          (1 h)
    ///   3600–4200   away, link loss    (600 s)   → up after 600 s, latency 2 s
    ///   4200–9000   connected          (4800 s)
    ///   9000–9900   unwanted, user     (900 s)   left out
    ///   9900–10000  away (connecting)  (100 s)   → up, no latency (after the user)
    ///   10000–14000 connected          (4000 s)
    ///   14000       down, bluetoothd-gone, named bluetoothd-crash by a reason record
    ///   14000–14300 down               (300 s)
    ///   14300–14400 away (still down: one gap with the next) — a change to away, link-loss (100 s)
    ///   14400–18000 connected          (3600 s) latency 4 s
    ///   18000       paird stopped; 18000–19800 unknown (1800 s) left out
    ///   19800       paird started; 19800–19810 down paird-start (10 s)
    ///   19810–36000 connected          (16190 s) then 36000 = until
    static let record: [HistoryRecord] = [
        mark(.start, 0), up(0),
        battery(100, 90),
        down(3600, .away, "link-loss"), up(4200, latency: 2),
        down(9000, .unwanted, "user"), change(9900, .away, "connecting"), up(10000),
        down(14000, .down, "bluetoothd-gone"),
        HistoryRecord(kind: .reason, at: t0 + 14000.3, device: d, reason: "bluetoothd-crash"),
        change(14300, .away, "link-loss"),
        up(14400, latency: 4),
        battery(17000, 85), battery(17500, 85 - 5),
        mark(.stop, 18000),
        mark(.start, 19800), change(19800, .down, "paird-start"), up(19810),
    ]

    @Test("exact availability, left-out time, gap, drops, latency and battery over the whole record")
    func whole() {
        let a = HistoryAnalysis.analyse(Self.record, device: Self.d, since: Self.t0, until: Self.t0 + 36000)
        let connected = 3600.0 + 4800 + 4000 + 3600 + 16190
        let away = 600.0 + 100 + 100
        let down = 300.0 + 10
        #expect(a.connectedSeconds == connected)
        #expect(a.awaySeconds == away)
        #expect(a.downSeconds == down)
        #expect(a.wantedSeconds == connected + away + down)
        #expect(a.wantedSeconds == 33300)
        #expect(a.notWantedSeconds == 900)
        #expect(a.unknownSeconds == 1800)
        #expect(a.availabilityPercent == 32190.0 / 33300 * 100) // 96.666…%
        #expect(a.longestGap == HistoryAnalysis.Gap(start: Self.t0 + 3600, seconds: 600, reason: "link-loss"))
        #expect(a.drops.map(\.reason) == ["link-loss", "user", "bluetoothd-crash"])
        #expect(a.dropsByReason == ["link-loss": 1, "user": 1, "bluetoothd-crash": 1])
        #expect(a.reconnectLatency == HistoryAnalysis.Latency(count: 2, p50: 2, p95: 4, max: 4))
        #expect(a.battery == HistoryAnalysis.Battery(first: 90, firstAt: Self.t0 + 100, last: 80, lastAt: Self.t0 + 17500, readings: 3))
        #expect(a.name == "Watch")
    }

    @Test("a window cuts segments at its edges; the crash gap (down then away) is one gap")
    func window() {
        // 13000–15000: connected 1000 (13000–14000), down 300, away 100, connected 600.
        let a = HistoryAnalysis.analyse(Self.record, device: Self.d, since: Self.t0 + 13000, until: Self.t0 + 15000)
        #expect(a.connectedSeconds == 1600)
        #expect(a.downSeconds == 300)
        #expect(a.awaySeconds == 100)
        #expect(a.availabilityPercent == 1600.0 / 2000 * 100)
        #expect(a.longestGap == HistoryAnalysis.Gap(start: Self.t0 + 14000, seconds: 400, reason: "bluetoothd-crash"))
        #expect(a.dropsByReason == ["bluetoothd-crash": 1])
        #expect(a.reconnectLatency == HistoryAnalysis.Latency(count: 1, p50: 4, p95: 4, max: 4))
    }

    @Test("a paird crash (no stop line): the time from its last line to the next start is unknown, not counted")
    func pairdCrash() {
        let rec: [HistoryRecord] = [
            Self.mark(.start, 0), Self.up(0), Self.mark(.alive, 3600),
            Self.mark(.start, 5000), Self.change(5000, .down, "paird-start"), Self.up(5002),
        ]
        let a = HistoryAnalysis.analyse(rec, device: Self.d, since: Self.t0, until: Self.t0 + 7200)
        #expect(a.connectedSeconds == 3600 + 2198)
        #expect(a.downSeconds == 2)
        #expect(a.unknownSeconds == 1400)
    }

    @Test("timeline: one character per hour up to 48 h; '#' only when connected all its wanted time")
    func timeline() {
        let a = HistoryAnalysis.analyse(Self.record, device: Self.d, since: Self.t0, until: Self.t0 + 36000)
        // hours: 0 '#'; 1 '.' (600 s away); 2 '.' (connected, 900 s unwanted, 100 s away);
        // 3 'x' (down 300 s > away 100 s); 4 '#'; 5 'x' (unknown 1800 s, down 10 s); 6–9 '#'.
        #expect(a.timeline.bucketSeconds == 3600)
        #expect(a.timeline.strip == "#..x#x####")
        let week = HistoryAnalysis.analyse(Self.record, device: Self.d, since: Self.t0 - 6 * 86400, until: Self.t0 + 36000)
        #expect(week.timeline.bucketSeconds == 86400)
        #expect(week.timeline.strip == "      .", "six days unknown, then the day with the outages: away 800 s > down 310 s")
    }

    @Test("unpaired: its time ends there (not counted as not wanted afterwards); one unpaired before the window is not listed")
    func unpaired() {
        let rec: [HistoryRecord] = [
            Self.mark(.start, 0), Self.up(0), Self.down(1000, .unwanted, "unpaired"),
            HistoryRecord(kind: .up, at: Self.t0 + 500, device: "C0:FF:EE:00:00:02", name: "Ring"),
        ]
        let a = HistoryAnalysis.analyse(rec, device: Self.d, since: Self.t0, until: Self.t0 + 4000)
        #expect(a.connectedSeconds == 1000)
        #expect(a.notWantedSeconds == 0)
        #expect(a.unknownSeconds == 3000)
        #expect(a.dropsByReason == ["unpaired": 1])
        #expect(HistoryAnalysis.analyse(rec, since: Self.t0, until: Self.t0 + 4000).map(\.device) == ["00:AA:01:01:00:01", "C0:FF:EE:00:00:02"])
        #expect(HistoryAnalysis.analyse(rec, since: Self.t0 + 2000, until: Self.t0 + 4000).map(\.device) == ["C0:FF:EE:00:00:02"],
                "the watch was unpaired before the window")
    }

    @Test("nearest-rank percentiles of 20 latencies: p50 the 10th, p95 the 19th")
    func percentiles() {
        var rec = [Self.mark(.start, 0)]
        for i in 1...20 {
            rec.append(Self.down(Double(i) * 100, .away, "link-loss"))
            rec.append(Self.up(Double(i) * 100 + 50, latency: Double(i)))
        }
        let a = HistoryAnalysis.analyse(rec, device: Self.d, since: Self.t0, until: Self.t0 + 3000)
        #expect(a.reconnectLatency == HistoryAnalysis.Latency(count: 20, p50: 10, p95: 19, max: 20))
        #expect(a.drops.count == 20)
    }
}
