#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// One line of the availability record (`history.jsonl`, beside the state file): what a wearable's
/// link did, as `HistoryRecorder` makes it from what the daemon already sees. One JSON object per
/// line, keys sorted; `at` is RFC 3339 UTC with milliseconds, so `grep 2026-11-26 history.jsonl`
/// finds a day. Fields a kind does not use are left out.
public struct HistoryRecord: Sendable, Hashable, Codable {
    /// Of `pairctl history --json`.
    public static let schemaVersion = 1

    public enum Kind: String, Sendable, Hashable, Codable {
        /// The wearable reached `connected`: a connected interval starts.
        case up
        /// A connected interval ended: a drop, with its `reason` and `lasted` (the interval's length).
        case down
        /// A wearable not connected changed how it is not (away → bond lost, user connect, unpaired…).
        case change
        /// The reason of the current drop became known later (bluetoothd's crash is told by
        /// systemd after it left the bus): replaces the reason of the device's current condition.
        case reason
        /// A battery reading that differs from the last one recorded.
        case battery
        /// paird started; every device's condition is unknown until its next record.
        case start
        /// paird stopped cleanly: nothing is known until the next `start`.
        case stop
        /// paird was running at `at` (written when nothing else was for an hour): after a crash
        /// of paird, the time since the last line is unknown, not counted either way.
        case alive
        /// The wall clock jumped against the monotonic one (`ClockWatch`): `jump` seconds (a
        /// step forward is positive). Lines before it and after it are on different clocks.
        case clock
        /// Records that could not be written (a full disk): from `at` for `lasted` seconds, `lost`
        /// records at least (`NotRecordedSpan`). What happened then is unknown.
        case notRecorded = "not-recorded"
    }

    /// What a wanted-or-not wearable was doing from this record on.
    public enum Condition: String, Sendable, Hashable, Codable, CaseIterable {
        /// Connected and set up: `#` in the timeline.
        case connected
        /// Wanted, and out of range or its link lost (waited for): `.`.
        case away
        /// Wanted, and down for another reason (bluetoothd, the adapter, a lost bond, paird
        /// starting): `x`.
        case down
        /// Not wanted connected (the user disconnected it; unpaired: the record of it ends): ` `, left out of
        /// availability.
        case unwanted
    }

    /// Why a wearable went down; `detail` keeps paird's own finer word (`timeout`,
    /// `suspected-bond-loss`, …).
    public enum Reason {
        public static let linkLoss = "link-loss"
        public static let user = "user"
        public static let unpaired = "unpaired"
        public static let bluetoothdCrash = "bluetoothd-crash"
        /// bluetoothd left the bus and systemd did not (yet) call it a crash (a stop, no systemd).
        public static let bluetoothdGone = "bluetoothd-gone"
        public static let adapterGone = "adapter-gone"
        public static let bondLost = "bond-lost"
        /// paird (re)started and has not connected it yet.
        public static let starting = "paird-start"
        /// paird's start found it not connected, and it is waited for (out of range).
        public static let awayAtStart = "away-at-start"
        /// Just paired, or the user asked for it again (`pairctl connect`), and not connected yet.
        public static let connecting = "connecting"
        /// The host slept (logind's PrepareForSleep): left out of availability until the resume.
        public static let hostAsleep = "host-asleep"
    }

    public var kind: Kind
    /// Wall-clock seconds since 1970 (milliseconds kept).
    public var at: Double
    public var device: String?
    public var name: String?
    /// `down`, `change`: the condition from now on.
    public var condition: Condition?
    public var reason: String?
    public var detail: String?
    /// `up`: seconds from the start of the attempt that made the link (link up or paird's
    /// connect) to `connected`; only for a reconnect after a drop seen by this paird.
    public var latency: Double?
    /// `up`: seconds since the drop (the time away); only for a drop seen by this paird.
    public var away: Double?
    /// `down`: seconds the connected interval lasted.
    public var lasted: Double?
    /// `battery`: percent.
    public var level: Int?
    /// `clock`: seconds the wall clock moved beyond the monotonic clock.
    public var jump: Double?
    /// `not-recorded`: how many records were lost (at least).
    public var lost: Int?

    public init(kind: Kind, at: Double, device: String? = nil, name: String? = nil, condition: Condition? = nil,
                reason: String? = nil, detail: String? = nil, latency: Double? = nil, away: Double? = nil,
                lasted: Double? = nil, level: Int? = nil, jump: Double? = nil, lost: Int? = nil) {
        self.kind = kind
        self.at = at
        self.device = device
        self.name = name
        self.condition = condition
        self.reason = reason
        self.detail = detail
        self.latency = latency
        self.away = away
        self.lasted = lasted
        self.level = level
        self.jump = jump
        self.lost = lost
    }

    enum CodingKeys: String, CodingKey {
        case kind = "type", at, device, name, condition, reason, detail, latency, away, lasted, level, jump, lost
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        kind = try c.decode(Kind.self, forKey: .kind)
        let text = try c.decode(String.self, forKey: .at)
        guard let t = Self.parseTime(text) else {
            throw DecodingError.dataCorruptedError(forKey: .at, in: c, debugDescription: "not an RFC 3339 time: \(text)")
        }
        at = t
        device = try c.decodeIfPresent(String.self, forKey: .device)
        name = try c.decodeIfPresent(String.self, forKey: .name)
        condition = try c.decodeIfPresent(Condition.self, forKey: .condition)
        reason = try c.decodeIfPresent(String.self, forKey: .reason)
        detail = try c.decodeIfPresent(String.self, forKey: .detail)
        latency = try c.decodeIfPresent(Double.self, forKey: .latency)
        away = try c.decodeIfPresent(Double.self, forKey: .away)
        lasted = try c.decodeIfPresent(Double.self, forKey: .lasted)
        level = try c.decodeIfPresent(Int.self, forKey: .level)
        jump = try c.decodeIfPresent(Double.self, forKey: .jump)
        lost = try c.decodeIfPresent(Int.self, forKey: .lost)
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(kind, forKey: .kind)
        try c.encode(Self.formatTime(at), forKey: .at)
        try c.encodeIfPresent(device, forKey: .device)
        try c.encodeIfPresent(name, forKey: .name)
        try c.encodeIfPresent(condition, forKey: .condition)
        try c.encodeIfPresent(reason, forKey: .reason)
        try c.encodeIfPresent(detail, forKey: .detail)
        try c.encodeIfPresent(latency.map(Self.millis), forKey: .latency)
        try c.encodeIfPresent(away.map(Self.millis), forKey: .away)
        try c.encodeIfPresent(lasted.map(Self.millis), forKey: .lasted)
        try c.encodeIfPresent(level, forKey: .level)
        try c.encodeIfPresent(jump.map(Self.millis), forKey: .jump)
        try c.encodeIfPresent(lost, forKey: .lost)
    }

    static func millis(_ s: Double) -> Double { (s * 1000).rounded() / 1000 }

    /// The record as one line of JSON (no newline).
    public var line: String {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return (try? e.encode(self)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
    }

    /// One line back into a record; nil for anything that is not one (a torn or garbled line).
    public static func parse<S: Collection<UInt8>>(line bytes: S) -> HistoryRecord? {
        guard !bytes.isEmpty else { return nil }
        if let r = fastParse(ArraySlice(bytes)) { return r }
        return try? JSONDecoder().decode(HistoryRecord.self, from: Data(bytes))
    }

    /// Every line of `bytes` that is a record, in order, and how many lines were none (torn,
    /// garbled). Empty lines are not counted.
    public static func parse(lines bytes: ArraySlice<UInt8>) -> (records: [HistoryRecord], skipped: Int) {
        let decoder = JSONDecoder()
        let cache = StringCache()
        var records: [HistoryRecord] = []
        var skipped = 0
        for line in bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: true) {
            if let r = fastParse(line, cache: cache) ?? (try? decoder.decode(HistoryRecord.self, from: Data(line))) { records.append(r) } else { skipped += 1 }
        }
        return (records, skipped)
    }

    /// `2026-11-26T16:05:29.123Z`.
    public static func formatTime(_ t: Double) -> String {
        Date(timeIntervalSince1970: t).formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true))
    }

    /// RFC 3339 with or without fractional seconds.
    public static func parseTime(_ s: String) -> Double? {
        if let d = try? Date.ISO8601FormatStyle(includingFractionalSeconds: true).parse(s) { return d.timeIntervalSince1970 }
        if let d = try? Date.ISO8601FormatStyle().parse(s) { return d.timeIntervalSince1970 }
        return nil
    }
}
