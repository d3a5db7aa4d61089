import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import PairingCore
#if canImport(Glibc)
import Glibc
#endif

/// `pairctl history`: the availability record, per wearable (`HistoryAnalysis`).
struct History: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show how available each wearable was: availability, drops by reason, gaps, reconnect latency, battery, a timeline.",
        discussion: """
        Availability is measured over the time the wearable was wanted connected: the time it was \
        disconnected by the user and the time paird was not running are left out, and the output \
        says how much. An unpaired wearable's record ends at the unpairing.

        Timeline: one character per hour (up to 48 h shown) or per day (longer), oldest first: \
        '#' connected, '.' away (link lost, out of range), 'x' down for another reason \
        (bluetoothd, the adapter, a lost bond, paird starting), ' ' not wanted or not known. \
        A bucket is '#' only if it was connected for all its wanted time.

        Below the wearables: the spans paird could not write its record (not-recorded: a full \
        disk), the jumps of the wall clock it noticed, and lines stamped after now (kept, not \
        trusted: the clock was set back).

        --json: one object, {"schemaVersion": 1, "since", "until", "skippedLines", "devices": [...], \
        "notRecorded": [...], "clockJumps": [...], "futureLines"}.
        """)

    @Argument(help: ArgumentHelp("The wearable's address or name (as status shows it); all wearables in the record when left out.", valueName: "address|name"))
    var wearable: String?

    @Option(name: .long, help: ArgumentHelp("How far back: a duration (90m, 24h, 7d) or a date or time (2026-11-20, 2026-11-20T08:00:00+01:00; a date is local midnight).", valueName: "when"))
    var since: String = "24h"

    @Flag(name: .long, help: "Print JSON (one object) instead of text.")
    var json = false

    func validate() throws {
        if HistorySince.parse(since, now: 0) == nil {
            throw ValidationError("--since takes a duration (90m, 24h, 7d) or a date (2026-11-20, RFC 3339), got \"\(since)\"")
        }
    }

    func run() throws {
        let client = try PairdClient()
        let reply = try client.call("GetHistory")
        guard case .unixFD(let file)? = reply.first else { throw PairctlError(.failure, "GetHistory answered \(reply.signature), expected h") }
        let bytes = try readAll(file.fd)
        let (records, skipped) = HistoryRecord.parse(lines: bytes[...])
        let now = Date().timeIntervalSince1970
        let from = HistorySince.parse(since, now: now)!
        var analyses = HistoryAnalysis.analyse(records, since: from, until: now)
        if let w = wearable {
            analyses = analyses.filter { DeviceAddress($0.device) == DeviceAddress(w) || $0.name.lowercased() == w.lowercased() }
            if analyses.isEmpty { throw PairctlError(.unknownDevice, "the availability record has nothing about \"\(w)\" since \(timestamp(Date(timeIntervalSince1970: from)))") }
        }
        let notes = HistoryNotes.of(records, since: from, until: now)
        if json {
            say(HistoryDocument(since: from, until: now, skippedLines: skipped, analyses: analyses, notes: notes).json())
            return
        }
        if analyses.isEmpty {
            say("the availability record holds nothing since \(timestamp(Date(timeIntervalSince1970: from)))")
        } else {
            say(analyses.map(HistoryText.render).joined(separator: "\n\n"))
        }
        for line in HistoryText.render(notes) { say(line) }
        if skipped > 0 { say("(\(skipped) line(s) of the record are no record and were skipped: a write cut short by a crash?)") }
    }

    /// The whole file behind `fd` (paird's read-only descriptor of the record), from its start.
    func readAll(_ fd: Int32) throws(PairctlError) -> [UInt8] {
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 256 * 1024)
        var offset: off_t = 0
        while true {
            let n = chunk.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, offset) }
            if n < 0 {
                if errno == EINTR { continue }
                throw PairctlError(.failure, "cannot read the availability record paird handed over: \(String(cString: strerror(errno)))")
            }
            if n == 0 { return out }
            out += chunk[0..<n]
            offset += off_t(n)
        }
    }
}

/// `--since`: `90m`, `24h`, `7d`, `30s`, a date (`2026-11-20`, local midnight) or RFC 3339.
public enum HistorySince {
    public static func parse(_ text: String, now: Double) -> Double? {
        let s = trimmed(text)
        if let unit = s.last, let n = Double(s.dropLast()), n.isFinite, n >= 0 {
            let scale: Double? = switch unit {
            case "s": 1
            case "m": 60
            case "h": 3600
            case "d": 86400
            case "w": 7 * 86400
            default: nil
            }
            if let scale { return now - n * scale }
        }
        if let t = HistoryRecord.parseTime(s) { return t }
        let parts = s.split(separator: "-")
        if parts.count == 3, parts[0].count == 4, let y = Int32(parts[0]), let m = Int32(parts[1]), let d = Int32(parts[2]),
           (1...12).contains(m), (1...31).contains(d) {
            var tm = Glibc.tm()
            tm.tm_year = y - 1900
            tm.tm_mon = m - 1
            tm.tm_mday = d
            tm.tm_isdst = -1
            let t = mktime(&tm)
            if t != -1 { return Double(t) }
        }
        return nil
    }
}

/// `pairctl history --json`: times RFC 3339 UTC with milliseconds, durations in seconds. Public for
/// HistoryBench (the query path timed in-process).
public struct HistoryDocument: Encodable {
    public init(since: Double, until: Double, skippedLines: Int, analyses: [HistoryAnalysis], notes: HistoryNotes = HistoryNotes()) {
        self.since = since; self.until = until; self.skippedLines = skippedLines; self.analyses = analyses; self.notes = notes
    }
    var notes: HistoryNotes
    var since: Double
    var until: Double
    /// Lines of the file that are no record (a torn last line after a crash).
    var skippedLines: Int
    var analyses: [HistoryAnalysis]

    struct Device: Encodable {
        var address: String
        var name: String
        var availabilityPercent: Double?
        var wantedSeconds, connectedSeconds, awaySeconds, downSeconds: Double
        /// Left out of availability.
        var leftOut: LeftOut
        var drops: [Drop]
        var dropsByReason: [String: Int]
        var longestGap: Gap?
        var reconnectLatency: Latency?
        var battery: Battery?
        var timeline: HistoryAnalysis.Timeline
    }
    struct Latency: Encodable { var count: Int; var p50, p95, max: Double }
    struct LeftOut: Encodable { var notWantedSeconds, asleepSeconds, unknownSeconds: Double }
    struct Drop: Encodable { var at: String; var reason: String; var detail: String? }
    struct Gap: Encodable { var start: String; var seconds: Double; var reason: String? }
    struct NotRecorded: Encodable { var from: String; var seconds: Double; var lost: Int }
    struct ClockJump: Encodable { var at: String; var seconds: Double }
    struct Battery: Encodable { var first: Int; var firstAt: String; var last: Int; var lastAt: String; var readings: Int }

    public func encode(to encoder: any Encoder) throws {
        enum K: String, CodingKey { case schemaVersion, since, until, skippedLines, devices, notRecorded, clockJumps, futureLines }
        var c = encoder.container(keyedBy: K.self)
        try c.encode(HistoryRecord.schemaVersion, forKey: .schemaVersion)
        try c.encode(HistoryRecord.formatTime(since), forKey: .since)
        try c.encode(HistoryRecord.formatTime(until), forKey: .until)
        try c.encode(skippedLines, forKey: .skippedLines)
        try c.encode(analyses.map { a in
            Device(address: a.device, name: a.name, availabilityPercent: a.availabilityPercent.map(Self.round),
                   wantedSeconds: Self.round(a.wantedSeconds), connectedSeconds: Self.round(a.connectedSeconds),
                   awaySeconds: Self.round(a.awaySeconds), downSeconds: Self.round(a.downSeconds),
                   leftOut: LeftOut(notWantedSeconds: Self.round(a.notWantedSeconds), asleepSeconds: Self.round(a.asleepSeconds), unknownSeconds: Self.round(a.unknownSeconds)),
                   drops: a.drops.map { Drop(at: HistoryRecord.formatTime($0.at), reason: $0.reason, detail: $0.detail) },
                   dropsByReason: a.dropsByReason,
                   longestGap: a.longestGap.map { Gap(start: HistoryRecord.formatTime($0.start), seconds: Self.round($0.seconds), reason: $0.reason) },
                   reconnectLatency: a.reconnectLatency.map { Latency(count: $0.count, p50: Self.round($0.p50), p95: Self.round($0.p95), max: Self.round($0.max)) },
                   battery: a.battery.map { Battery(first: $0.first, firstAt: HistoryRecord.formatTime($0.firstAt), last: $0.last,
                                                    lastAt: HistoryRecord.formatTime($0.lastAt), readings: $0.readings) },
                   timeline: a.timeline)
        }, forKey: .devices)
        try c.encode(notes.notRecorded.map { NotRecorded(from: HistoryRecord.formatTime($0.at), seconds: Self.round($0.seconds), lost: $0.lost) },
                     forKey: .notRecorded)
        try c.encode(notes.clockJumps.map { ClockJump(at: HistoryRecord.formatTime($0.at), seconds: Self.round($0.seconds)) }, forKey: .clockJumps)
        try c.encode(notes.futureLines, forKey: .futureLines)
    }

    static func round(_ v: Double) -> Double { (v * 1000).rounded() / 1000 }

    public func json() -> String { compactJSON(self) }
}

/// The text form of one wearable's analysis.
public enum HistoryText {
    public static func render(_ a: HistoryAnalysis) -> String {
        let since = Date(timeIntervalSince1970: a.since)
        // the record's name, address and reasons are the air's and BlueZ's: terminalSafe
        let device = a.device.terminalSafe
        var lines = ["\(a.name.isEmpty ? device : "\(a.name.terminalSafe) (\(device))") since \(timestamp(since)) (\(duration(a.until - a.since)))"]
        if let p = a.availabilityPercent {
            lines.append("  availability: \(fixed(p, 2)) % of \(duration(a.wantedSeconds)) wanted connected"
                         + " (connected \(duration(a.connectedSeconds)), away \(duration(a.awaySeconds)), down \(duration(a.downSeconds)))")
        } else {
            lines.append("  availability: not measured (never wanted connected in this window, as far as the record knows)")
        }
        let user = a.notWantedSeconds - a.asleepSeconds
        lines.append("  left out: \(duration(user)) disconnected by the user, \(duration(a.asleepSeconds)) host asleep, \(duration(a.unknownSeconds)) unknown (paird not running, or not knowing it then)")
        if a.drops.isEmpty {
            lines.append("  drops: none")
        } else {
            let parts = a.dropsByReason.sorted { $0.value != $1.value ? $0.value > $1.value : $0.key < $1.key }.map { "\($0.key.terminalSafe) \($0.value)" }
            lines.append("  drops: \(a.drops.count) (\(parts.joined(separator: ", ")))")
        }
        if let g = a.longestGap {
            lines.append("  longest gap: \(duration(g.seconds)) from \(timestamp(Date(timeIntervalSince1970: g.start)))\(g.reason.map { " (\($0.terminalSafe))" } ?? "")")
        } else {
            lines.append("  longest gap: none")
        }
        if let l = a.reconnectLatency {
            lines.append("  reconnect latency: p50 \(duration(l.p50)), p95 \(duration(l.p95)), max \(duration(l.max)) (\(l.count) reconnect\(l.count == 1 ? "" : "s"))")
        } else {
            lines.append("  reconnect latency: no reconnect")
        }
        if let b = a.battery {
            lines.append("  battery: \(b.first) % → \(b.last) % (\(b.readings) reading\(b.readings == 1 ? "" : "s"))")
        } else {
            lines.append("  battery: no reading")
        }
        lines.append("  timeline (1 char = 1 \(a.timeline.bucketSeconds == 3600 ? "hour" : "day"), oldest first): |\(a.timeline.strip)|")
        return lines.joined(separator: "\n")
    }

    /// What the record says of itself (`HistoryNotes`): one line each, none when all is well.
    public static func render(_ n: HistoryNotes) -> [String] {
        var lines: [String] = []
        for s in n.notRecorded {
            lines.append("not-recorded: \(duration(s.seconds)) from \(timestamp(Date(timeIntervalSince1970: s.at))), \(s.lost) record(s) lost "
                         + "(paird could not write its record: a full disk?); what happened then is unknown")
        }
        for j in n.clockJumps {
            lines.append("clock: the wall clock jumped \(j.seconds < 0 ? "back" : "forward") \(duration(abs(j.seconds))) at \(timestamp(Date(timeIntervalSince1970: j.at)))")
        }
        if n.futureLines > 0 {
            lines.append("(\(n.futureLines) line(s) of the record are stamped after now: written while the clock was ahead; kept, left out here)")
        }
        return lines
    }

    /// `v` with `digits` decimals (rounded half away from zero).
    public static func fixed(_ v: Double, _ digits: Int) -> String {
        var scale = 1.0
        for _ in 0..<digits { scale *= 10 }
        let n = Int64((abs(v) * scale).rounded())
        let whole = n / Int64(scale), frac = n % Int64(scale)
        var f = String(frac)
        while f.count < digits { f = "0" + f }
        return (v < 0 && n != 0 ? "-" : "") + "\(whole)" + (digits > 0 ? "." + f : "")
    }

    /// `0.8 s`, `12 s`, `4 min 3 s`, `2 h 5 min`, `3 d 4 h`.
    static func duration(_ s: Double) -> String {
        if s < 10 { return "\(fixed(s, 1)) s" }
        let t = Int(s.rounded())
        if t < 60 { return "\(t) s" }
        if t < 3600 { return "\(t / 60) min\(t % 60 == 0 ? "" : " \(t % 60) s")" }
        if t < 86400 { return "\(t / 3600) h\(t % 3600 / 60 == 0 ? "" : " \(t % 3600 / 60) min")" }
        return "\(t / 86400) d\(t % 86400 / 3600 == 0 ? "" : " \(t % 86400 / 3600) h")"
    }
}
