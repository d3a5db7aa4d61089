// The availability record (`pairctl history`): a benchmark program, not a test.
//
//   HistoryBench generate --out FILE [--days 30] [--end UNIX] [--drop-every 1200] [--fill LINES]
//                         [--device ADDR] [--name NAME] [--seed 1]
//   HistoryBench query FILE [--since-days 30] [--reps 20]
//
// `generate` writes the record of one BUSY wearable (below) with paird's own lines
// (`HistoryRecord.line`), ending at --end (default: now), and prints one JSON line: records by
// kind, bytes, days spanned. --fill N: the wearable flaps faster (every time scaled down until the
// simulation makes at least N lines), and the newest N lines are kept, as paird's compaction
// keeps the newest: the record at its cap.
//
// `query` times, in this process, the parts of `pairctl history` after paird's D-Bus answer:
// read the file, parse its lines, analyse, and render the JSON (`--json`) and the text, each
// --reps times; prints median and max (ms) of each part, side by side, and one JSON line.
//
// The busy wearable (what `generate` simulates, 30 days by default; see BENCHMARKS.md):
// - connected most of the time, a link drop every 20 min on average (exponential), each an
//   `down` (link-loss; detail timeout 60 %, none 25 %, no-data 10 % = a data silence,
//   probe-timeout 5 %) and an `up` with the time away and the reconnect latency; away 2–30 s
//   mostly (90 %), 1–10 min (8 %), 10–60 min (2 %: walked off); latency 0.15 s + lognormal
//   (median ~0.5 s, long tail to seconds), never more than the time away;
// - battery read every 5 min while connected (recorded on change only, as paird does): −1 % per
//   15 min worn, charged +5 % per 5 min from 25 % to 100 % (a cycle of ~21 h);
// - the host sleeps every night (6–7 h, from ~01:00) and takes a 20–40 min nap on 1 day in 3:
//   `down` (unwanted, host-asleep), `change` (away, host-asleep) at the resume, `up` seconds later;
// - paird restarted once a week (stop, start, `change` down paird-start, `up`), and an `alive`
//   line after any hour with nothing written.
import PairCtlCommands
import PairingCore
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

func clockSeconds() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}

func fixed(_ x: Double, _ digits: Int) -> String { HistoryText.fixed(x, digits) }

/// SplitMix64: the same record for the same seed.
struct Random {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    /// (0, 1)
    mutating func unit() -> Double { (Double(next() >> 11) + 0.5) / 9_007_199_254_740_992 }
    mutating func exponential(mean: Double) -> Double { -mean * log(unit()) }
    mutating func uniform(_ a: Double, _ b: Double) -> Double { a + (b - a) * unit() }
    mutating func normal() -> Double { sqrt(-2 * log(unit())) * cos(2 * Double.pi * unit()) }
}

struct Options {
    var args: [String]
    func value(_ name: String) -> String? {
        guard let i = args.firstIndex(of: name), i + 1 < args.count else { return nil }
        return args[i + 1]
    }
    func double(_ name: String, _ d: Double) -> Double { value(name).flatMap(Double.init) ?? d }
    func int(_ name: String, _ d: Int) -> Int { value(name).flatMap(Int.init) ?? d }
}

/// The busy wearable's record from `start` to `end`; `scale` < 1 shortens the time between drops
/// and the times away (a flapping wearable).
func simulate(start: Double, end: Double, dropEvery: Double, scale: Double, device: String, name: String, seed: UInt64) -> [HistoryRecord] {
    var rng = Random(state: seed)
    var out: [HistoryRecord] = []
    var lastWrite = start
    func emit(_ r: HistoryRecord, asleep: Bool = false) {
        // paird's hourly `alive` when nothing was written for an hour (not while the host sleeps)
        if !asleep {
            while r.at - lastWrite >= 3600 {
                lastWrite += 3600
                out.append(HistoryRecord(kind: .alive, at: lastWrite))
            }
        }
        out.append(r)
        lastWrite = r.at
    }
    func ms(_ x: Double) -> Double { (x * 1000).rounded() / 1000 }

    var t = start
    emit(HistoryRecord(kind: .start, at: t))
    emit(HistoryRecord(kind: .change, at: t + 0.05, device: device, name: name, condition: .down, reason: HistoryRecord.Reason.starting))
    t += 1.2
    emit(HistoryRecord(kind: .up, at: t, device: device, name: name))
    var upAt = t
    var level = 80
    var charging = false
    var nextBattery = t + 300
    var nextDrop = t + rng.exponential(mean: dropEvery * scale)
    // the host's sleeps: every night ~01:00 for 6–7 h, a 20–40 min nap ~14:00 on 1 day in 3
    let day0 = (start / 86400).rounded(.down) * 86400
    var sleeps: [(at: Double, length: Double)] = []
    for d in 0...Int(((end - start) / 86400).rounded(.up)) {
        let dayStart = day0 + Double(d) * 86400
        if rng.unit() < 1.0 / 3 { sleeps.append((dayStart + 14 * 3600 + rng.uniform(0, 3600), rng.uniform(1200, 2400))) }
        sleeps.append((dayStart + 3600 + rng.uniform(-1800, 1800), rng.uniform(6 * 3600, 7 * 3600)))
    }
    sleeps = sleeps.filter { $0.at > t + 60 }.sorted { $0.at < $1.at }
    var sleepIndex = 0
    var nextSleep: Double { sleepIndex < sleeps.count ? sleeps[sleepIndex].at : .infinity }
    var nextRestart = day0 + 2 * 86400 + 10 * 3600 // then weekly
    while true {
        let next = min(nextDrop, nextBattery, nextSleep, nextRestart)
        if next >= end { break }
        t = next
        if t == nextBattery {
            nextBattery += 300
            var changed = false
            if charging {
                level = min(100, level + 5); changed = true
                if level == 100 { charging = false }
            } else if rng.unit() < 1.0 / 3 {
                level -= 1; changed = true
                if level <= 25 { charging = true }
            }
            if changed { emit(HistoryRecord(kind: .battery, at: t + rng.uniform(0, 0.5), device: device, name: name, level: level)) }
        } else if t == nextDrop {
            let u = rng.unit()
            let detail: String? = u < 0.60 ? "timeout" : u < 0.85 ? nil : u < 0.95 ? "no-data" : "probe-timeout"
            emit(HistoryRecord(kind: .down, at: t, device: device, name: name, condition: .away, reason: HistoryRecord.Reason.linkLoss,
                               detail: detail, lasted: ms(t - upAt)))
            let v = rng.unit()
            let away = scale * (v < 0.90 ? 2 + rng.exponential(mean: 6) : v < 0.98 ? rng.uniform(60, 600) : rng.uniform(600, 3600))
            let latency = min(away, 0.15 + exp(log(0.35) + 0.9 * rng.normal()))
            let back = t + away
            emit(HistoryRecord(kind: .up, at: back, device: device, name: name, latency: ms(latency), away: ms(away)))
            upAt = back
            // the battery is read again once connected; the next drop comes while connected
            if nextBattery < back { nextBattery = back + rng.uniform(0, 300) }
            nextDrop = back + rng.exponential(mean: dropEvery * scale)
            while nextSleep <= back { sleepIndex += 1 } // a sleep while it was away: not simulated
            if nextRestart <= back { nextRestart = back + 60 }
        } else if t == nextSleep {
            let length = sleeps[sleepIndex].length
            sleepIndex += 1
            emit(HistoryRecord(kind: .down, at: t, device: device, name: name, condition: .unwanted,
                               reason: HistoryRecord.Reason.hostAsleep, lasted: ms(t - upAt)))
            let resume = t + length
            emit(HistoryRecord(kind: .change, at: resume, device: device, name: name, condition: .away,
                               reason: HistoryRecord.Reason.hostAsleep), asleep: true)
            let away = rng.uniform(1.5, 8)
            emit(HistoryRecord(kind: .up, at: resume + away, device: device, name: name,
                               latency: ms(min(away, rng.uniform(0.3, 2))), away: ms(away)))
            upAt = resume + away
            nextBattery = upAt + rng.uniform(0, 300)
            nextDrop = upAt + rng.exponential(mean: dropEvery * scale)
            while nextSleep <= upAt { sleepIndex += 1 }
            if nextRestart <= upAt { nextRestart += 7 * 86400 }
        } else {
            // paird restarted (a package upgrade): its link stays up, adopted at the start
            emit(HistoryRecord(kind: .stop, at: t))
            emit(HistoryRecord(kind: .start, at: t + 1.8))
            emit(HistoryRecord(kind: .change, at: t + 1.85, device: device, name: name, condition: .down, reason: HistoryRecord.Reason.starting))
            emit(HistoryRecord(kind: .up, at: t + 2.3, device: device, name: name))
            upAt = t + 2.3
            nextRestart += 7 * 86400
            if nextDrop < upAt { nextDrop = upAt + rng.exponential(mean: dropEvery * scale) }
            if nextBattery < upAt { nextBattery = upAt + 300 }
        }
    }
    return out
}

func generate(_ o: Options) throws {
    guard let path = o.value("--out") else { fatalError("generate: --out FILE") }
    let days = o.double("--days", 30)
    let end = o.double("--end", Date().timeIntervalSince1970)
    let dropEvery = o.double("--drop-every", 1200)
    let fill = o.int("--fill", 0)
    let device = o.value("--device") ?? "00:BE:00:00:00:00"
    let name = o.value("--name") ?? "Band-0"
    let seed = UInt64(o.int("--seed", 1))
    var scale = 1.0
    var records = simulate(start: end - days * 86400, end: end, dropEvery: dropEvery, scale: scale, device: device, name: name, seed: seed)
    if fill > 0 {
        while records.count < fill {
            scale *= 0.85
            records = simulate(start: end - days * 86400, end: end, dropEvery: dropEvery, scale: scale, device: device, name: name, seed: seed)
        }
        records.removeFirst(records.count - fill)
    }
    var text = ""
    text.reserveCapacity(records.count * 160)
    for r in records { text += r.line; text += "\n" }
    let bytes = Array(text.utf8)
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
    precondition(fd >= 0, "cannot create \(path)")
    var off = 0
    while off < bytes.count {
        let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + off, $0.count - off) }
        precondition(n > 0, "write \(path)")
        off += n
    }
    close(fd)
    var byKind: [String: Int] = [:]
    for r in records { byKind[r.kind.rawValue, default: 0] += 1 }
    let drops = records.filter { $0.kind == .down && $0.reason == HistoryRecord.Reason.linkLoss }.count
    let spanDays = ((records.last?.at ?? 0) - (records.first?.at ?? 0)) / 86400
    let kinds = byKind.sorted { $0.key < $1.key }.map { "\"\($0.key)\": \($0.value)" }.joined(separator: ", ")
    print("{\"bench\": \"history-generate\", \"path\": \"\(path)\", \"records\": \(records.count), \"bytes\": \(bytes.count), "
          + "\"bytesPerRecord\": \(fixed(Double(bytes.count) / Double(max(1, records.count)), 1)), \"spanDays\": \(fixed(spanDays, 2)), "
          + "\"timeScale\": \(fixed(scale, 4)), \"linkDrops\": \(drops), \"dropsPerDay\": \(fixed(Double(drops) / max(spanDays, 1e-9), 1)), "
          + "\"byKind\": {\(kinds)}}")
}

func readWhole(_ path: String) -> [UInt8] {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    precondition(fd >= 0, "cannot open \(path)")
    defer { close(fd) }
    // as pairctl reads paird's descriptor (HistoryCommand.readAll)
    var out: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 256 * 1024)
    var offset: off_t = 0
    while true {
        let n = chunk.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, offset) }
        precondition(n >= 0, "read \(path)")
        if n == 0 { return out }
        out += chunk[0..<n]
        offset += off_t(n)
    }
}

func query(_ o: Options) {
    guard o.args.count > 1, !o.args[1].hasPrefix("--") else { fatalError("query FILE") }
    let path = o.args[1]
    let sinceDays = o.double("--since-days", 30)
    let reps = o.int("--reps", 20)
    var times: [String: [Double]] = [:]
    let parts = ["read", "parse", "analyse", "json", "text", "total-json", "json-times"]
    var info = ""
    for rep in 0..<reps {
        let now = Date().timeIntervalSince1970
        let t0 = clockSeconds()
        let bytes = readWhole(path)
        let t1 = clockSeconds()
        let (records, skipped) = HistoryRecord.parse(lines: bytes[...])
        let t2 = clockSeconds()
        let analyses = HistoryAnalysis.analyse(records, since: now - sinceDays * 86400, until: now)
        let t3 = clockSeconds()
        let json = HistoryDocument(since: now - sinceDays * 86400, until: now, skippedLines: skipped, analyses: analyses).json()
        let t4 = clockSeconds()
        let text = analyses.map(HistoryText.render).joined(separator: "\n\n")
        let t5 = clockSeconds()
        // of `json`: formatting the times alone (one a drop, as HistoryDocument does)
        var n = 0
        for a in analyses { for d in a.drops { n &+= HistoryRecord.formatTime(d.at).utf8.count } }
        let t6 = clockSeconds()
        if n == -1 { print(n) }
        for (k, v) in zip(parts, [t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t4 - t0, t6 - t5]) { times[k, default: []].append(v * 1000) }
        if rep == 0 {
            let drops = analyses.reduce(0) { $0 + $1.drops.count }
            info = "\"bytes\": \(bytes.count), \"records\": \(records.count), \"skipped\": \(skipped), \"devices\": \(analyses.count), "
                + "\"dropsInWindow\": \(drops), \"jsonBytes\": \(json.utf8.count), \"textBytes\": \(text.utf8.count)"
        }
    }
    func med(_ v: [Double]) -> Double { let s = v.sorted(); return s.count % 2 == 1 ? s[s.count / 2] : (s[s.count / 2 - 1] + s[s.count / 2]) / 2 }
    print("in-process query of \(path) (--since \(fixed(sinceDays, 0))d), \(reps) reps, ms median / max:")
    for k in parts {
        print("  \(k + String(repeating: " ", count: max(0, 11 - k.count))) \(fixed(med(times[k]!), 1)) / \(fixed(times[k]!.max()!, 1))")
    }
    let fields = parts.map { "\"\($0)\": [\(fixed(med(times[$0]!), 2)), \(fixed(times[$0]!.max()!, 2))]" }.joined(separator: ", ")
    print("{\"bench\": \"history-query-inprocess\", \"path\": \"\(path)\", \"sinceDays\": \(fixed(sinceDays, 0)), \"reps\": \(reps), \(info), \"ms_median_max\": {\(fields)}}")
}

let o = Options(args: Array(CommandLine.arguments.dropFirst()))
switch o.args.first {
case "generate": try generate(o)
case "query": query(o)
default:
    print("usage: HistoryBench generate --out FILE [--days 30] [--end UNIX] [--drop-every 1200] [--fill LINES] [--seed 1]\n"
          + "       HistoryBench query FILE [--since-days 30] [--reps 20]")
    exit(64)
}
