/// What `pairctl history` says of the record itself, beside each wearable's analysis: spans paird
/// could not write (`not-recorded`), jumps of the wall clock (`clock`), and lines stamped after
/// now (a clock set back after a forward jump: kept, not trusted). Pure.
public struct HistoryNotes: Sendable, Hashable, Codable {
    public struct NotRecorded: Sendable, Hashable, Codable {
        public var at: Double
        public var seconds: Double
        public var lost: Int
        public init(at: Double, seconds: Double, lost: Int) { self.at = at; self.seconds = seconds; self.lost = lost }
    }

    public struct ClockJump: Sendable, Hashable, Codable {
        public var at: Double
        public var seconds: Double
        public init(at: Double, seconds: Double) { self.at = at; self.seconds = seconds }
    }

    public var notRecorded: [NotRecorded] = []
    public var clockJumps: [ClockJump] = []
    public var futureLines = 0

    public init() {}

    /// Those in `[since, until]`; every line after `until` is counted.
    public static func of(_ records: [HistoryRecord], since: Double, until: Double) -> HistoryNotes {
        var n = HistoryNotes()
        for r in records {
            if r.at > until { n.futureLines += 1; continue }
            switch r.kind {
            case .notRecorded where r.at + (r.lasted ?? 0) >= since:
                n.notRecorded.append(NotRecorded(at: r.at, seconds: r.lasted ?? 0, lost: r.lost ?? 0))
            case .clock where r.at >= since:
                n.clockJumps.append(ClockJump(at: r.at, seconds: r.jump ?? 0))
            default: break
            }
        }
        return n
    }
}
