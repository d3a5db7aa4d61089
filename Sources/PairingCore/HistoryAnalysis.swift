/// What `pairctl history` shows of one wearable, computed from the availability record alone:
/// pure, so the numbers can be checked exactly against a hand-made record.
///
/// The record is replayed in file order. Each device's `up`/`down`/`change` records cut its time
/// into segments of one condition; `start` ends every segment at the last line written before it
/// (after a crash of paird nothing is known from that line to the start), `stop` ends them at
/// once (and `not-recorded` too: what followed is unknown); a segment still open at the end runs to `until`. Everything is clipped to
/// `[since, until]`.
///
/// - availability = connected ÷ wanted, wanted = connected + away + down. Left out, and said:
///   the time not wanted (the user disconnected or unpaired it) and the time nobody watched
///   (paird not running).
/// - a gap = consecutive away/down segments; the longest is reported with its start.
public struct HistoryAnalysis: Sendable, Hashable, Codable {
    public struct Drop: Sendable, Hashable, Codable {
        public var at: Double
        public var reason: String
        public var detail: String?
    }

    public struct Gap: Sendable, Hashable, Codable {
        public var start: Double
        public var seconds: Double
        /// The reason of the drop (or change) that began it.
        public var reason: String?
        public init(start: Double, seconds: Double, reason: String?) { self.start = start; self.seconds = seconds; self.reason = reason }
    }

    public struct Latency: Sendable, Hashable, Codable {
        public var count: Int
        public var p50: Double
        public var p95: Double
        public var max: Double
        public init(count: Int, p50: Double, p95: Double, max: Double) { self.count = count; self.p50 = p50; self.p95 = p95; self.max = max }
    }

    public struct Battery: Sendable, Hashable, Codable {
        public var first: Int
        public var firstAt: Double
        public var last: Int
        public var lastAt: Double
        public var readings: Int
        public init(first: Int, firstAt: Double, last: Int, lastAt: Double, readings: Int) {
            self.first = first; self.firstAt = firstAt; self.last = last; self.lastAt = lastAt; self.readings = readings
        }
    }

    public struct Timeline: Sendable, Hashable, Codable {
        /// 3600 (≤ 48 h shown) or 86400.
        public var bucketSeconds: Double
        /// One character per bucket, oldest first: `#` connected throughout its wanted time, else
        /// the most of `.` (away, link lost) or `x` (down for another reason); ` ` nothing wanted
        /// (or nothing known) in it.
        public var strip: String
    }

    public var device: String
    public var name: String
    public var since: Double
    public var until: Double
    /// nil when it was never wanted (known) in the window.
    public var availabilityPercent: Double?
    public var wantedSeconds: Double
    public var connectedSeconds: Double
    public var awaySeconds: Double
    public var downSeconds: Double
    /// Left out of availability: not wanted (disconnected by the user, or the host asleep).
    public var notWantedSeconds: Double
    /// Of `notWantedSeconds`: the host asleep (`host-asleep`).
    public var asleepSeconds: Double = 0
    /// Left out of availability: paird not running (or not yet knowing the wearable).
    public var unknownSeconds: Double
    public var drops: [Drop]
    public var dropsByReason: [String: Int]
    public var longestGap: Gap?
    public var reconnectLatency: Latency?
    public var battery: Battery?
    public var timeline: Timeline

    public struct Segment: Sendable, Hashable {
        public var start: Double
        public var end: Double
        public var condition: HistoryRecord.Condition
        public var reason: String?
    }

    /// Every device the record knows something about in `[since, until]`, by address (one
    /// unpaired before the window, with nothing since, is left out).
    public static func analyse(_ records: [HistoryRecord], since: Double, until: Double) -> [HistoryAnalysis] {
        var seen = Set<String>()
        for r in records { if let d = r.device { seen.insert(d) } }
        return seen.sorted().map { analyse(records, device: $0, since: since, until: until) }
            .filter { $0.wantedSeconds + $0.notWantedSeconds > 0 || !$0.drops.isEmpty || $0.battery != nil }
    }

    public static func analyse(_ records: [HistoryRecord], device: String, since: Double, until: Double) -> HistoryAnalysis {
        var segments: [Segment] = []
        var current: Segment?
        var lastLine: Double?
        var name = ""
        var drops: [Drop] = []
        /// The index in `drops` of the drop that began the current segment.
        var currentDrop: Int?
        var latencies: [Double] = []
        var batteryReadings: [(Double, Int)] = []

        func close(at t: Double) {
            if var s = current { s.end = max(s.start, t); segments.append(s) }
            current = nil
            currentDrop = nil
        }
        for r in records {
            defer { lastLine = max(lastLine ?? r.at, r.at) }
            switch r.kind {
            case .start: close(at: lastLine ?? r.at)
            case .stop: close(at: r.at)
            // Records were lost from here: unknown until the device's next line (paird writes
            // each one's condition again after the span, `HistoryRecorder.resync`).
            case .notRecorded: close(at: r.at)
            case .alive, .clock: break
            case .up, .down, .change, .reason, .battery:
                guard r.device == device else { continue }
                if let n = r.name, !n.isEmpty { name = n }
                switch r.kind {
                case .battery:
                    if let l = r.level { batteryReadings.append((r.at, l)) }
                case .reason:
                    current?.reason = r.reason
                    if let i = currentDrop, let reason = r.reason { drops[i].reason = reason }
                case .up, .down, .change:
                    // A change with the drop's own reason is that drop going on in another
                    // condition (a link loss found to be its adapter's: away, then down): a
                    // reason that comes later is still that drop's.
                    let sameDrop = r.kind == .change ? currentDrop.flatMap { drops[$0].reason == r.reason ? $0 : nil } : nil
                    close(at: r.at)
                    currentDrop = sameDrop
                    if r.reason == HistoryRecord.Reason.unpaired {
                        // Unpaired: nothing more to know of it (a new pairing starts it again).
                        if r.kind == .down { drops.append(Drop(at: r.at, reason: HistoryRecord.Reason.unpaired, detail: r.detail)) }
                        continue
                    }
                    let condition: HistoryRecord.Condition = r.kind == .up ? .connected : (r.condition ?? .down)
                    current = Segment(start: r.at, end: r.at, condition: condition, reason: r.reason)
                    if r.kind == .down {
                        drops.append(Drop(at: r.at, reason: r.reason ?? HistoryRecord.Reason.linkLoss, detail: r.detail))
                        currentDrop = drops.count - 1
                    }
                    if r.kind == .up, let l = r.latency, r.at >= since, r.at <= until { latencies.append(l) }
                default: break
                }
            }
        }
        close(at: until)

        // Clip to the window.
        let clipped = segments.compactMap { s -> Segment? in
            let a = max(s.start, since), b = min(s.end, until)
            return b > a ? Segment(start: a, end: b, condition: s.condition, reason: s.reason) : nil
        }
        var total: [HistoryRecord.Condition: Double] = [:]
        for s in clipped { total[s.condition, default: 0] += s.end - s.start }
        let connected = total[.connected] ?? 0, away = total[.away] ?? 0, down = total[.down] ?? 0
        let notWanted = total[.unwanted] ?? 0
        let asleep = clipped.filter { $0.condition == .unwanted && $0.reason == HistoryRecord.Reason.hostAsleep }
            .reduce(0) { $0 + $1.end - $1.start }
        let wanted = connected + away + down
        let known = wanted + notWanted
        let unknown = max(0, (until - since) - known)

        // Gaps: consecutive away/down segments with no time between them.
        var longest: Gap?
        var gap: Gap?
        var gapEnd = 0.0
        for s in clipped {
            if s.condition == .away || s.condition == .down {
                if var g = gap, abs(s.start - gapEnd) < 1e-9 {
                    g.seconds += s.end - s.start
                    gap = g
                } else {
                    if let g = gap, g.seconds > (longest?.seconds ?? -1) { longest = g }
                    gap = Gap(start: s.start, seconds: s.end - s.start, reason: s.reason)
                }
                gapEnd = s.end
            } else {
                if let g = gap, g.seconds > (longest?.seconds ?? -1) { longest = g }
                gap = nil
            }
        }
        if let g = gap, g.seconds > (longest?.seconds ?? -1) { longest = g }

        let windowDrops = drops.filter { $0.at >= since && $0.at <= until }
        var byReason: [String: Int] = [:]
        for d in windowDrops { byReason[d.reason, default: 0] += 1 }

        let inWindow = batteryReadings.filter { $0.0 >= since && $0.0 <= until }
        let battery = inWindow.first.map { f in
            Battery(first: f.1, firstAt: f.0, last: inWindow.last!.1, lastAt: inWindow.last!.0, readings: inWindow.count)
        }

        var result = HistoryAnalysis(
            device: device, name: name, since: since, until: until,
            availabilityPercent: wanted > 0 ? connected / wanted * 100 : nil,
            wantedSeconds: wanted, connectedSeconds: connected, awaySeconds: away, downSeconds: down,
            notWantedSeconds: notWanted, unknownSeconds: unknown,
            drops: windowDrops, dropsByReason: byReason, longestGap: longest,
            reconnectLatency: latencySummary(latencies), battery: battery,
            timeline: timeline(clipped, since: since, until: until))
        result.asleepSeconds = asleep
        return result
    }

    /// Nearest-rank percentiles.
    static func latencySummary(_ values: [Double]) -> Latency? {
        guard !values.isEmpty else { return nil }
        let v = values.sorted()
        func rank(_ p: Double) -> Double { v[max(0, min(v.count - 1, Int((p * Double(v.count)).rounded(.up)) - 1))] }
        return Latency(count: v.count, p50: rank(0.5), p95: rank(0.95), max: v.last!)
    }

    static func timeline(_ segments: [Segment], since: Double, until: Double) -> Timeline {
        let span = until - since
        let bucket: Double = span <= 48 * 3600 ? 3600 : 86400
        let count = max(1, Int((span / bucket).rounded(.up)))
        var strip = ""
        for i in 0..<count {
            let a = since + Double(i) * bucket, b = min(until, a + bucket)
            var t: [HistoryRecord.Condition: Double] = [:]
            for s in segments where s.end > a && s.start < b {
                t[s.condition, default: 0] += min(s.end, b) - max(s.start, a)
            }
            let away = t[.away] ?? 0, down = t[.down] ?? 0, connected = t[.connected] ?? 0
            if away == 0 && down == 0 {
                strip.append(connected > 0 ? "#" : " ")
            } else {
                strip.append(down > away ? "x" : ".")
            }
        }
        return Timeline(bucketSeconds: bucket, strip: strip)
    }
}
