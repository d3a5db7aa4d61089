/// Records that could not be appended (a full disk, the file gone): kept in memory as one span,
/// from the first lost record to the last, and how many, until it can be written as a
/// `not-recorded` line ahead of the next records. Pure.
public struct NotRecordedSpan: Sendable, Hashable {
    public var from: Double
    public var to: Double
    public var lost: Int

    public init(from: Double, to: Double, lost: Int) { self.from = from; self.to = to; self.lost = lost }

    /// `records` could not be written: the span grows to hold them (none: it stays as it is).
    public static func adding(_ records: [HistoryRecord], to span: NotRecordedSpan?, at now: Double) -> NotRecordedSpan? {
        guard !records.isEmpty else { return span }
        let times = records.map(\.at)
        let from = min(span?.from ?? .infinity, times.min()!)
        let to = max(span?.to ?? -.infinity, times.max()!)
        return NotRecordedSpan(from: from, to: to, lost: (span?.lost ?? 0) + records.count)
    }

    /// Its line.
    public var record: HistoryRecord {
        HistoryRecord(kind: .notRecorded, at: from, lasted: max(0, to - from), lost: lost)
    }
}
