/// Reading the record fast: `pairctl history` reads up to `MaxRecords` lines (100,000 by
/// default). `JSONDecoder` with its ISO 8601 parser took 0.8–2.6 s for 100,000 lines, this
/// 0.09–0.23 s (release build, `swiftc -O`, this 2-core machine at load 5–7 from test VMs: not a
/// benchmark). paird writes every line itself, flat (`HistoryRecord.line`): this
/// reads exactly that shape — one object of string and number values, `at` as
/// `YYYY-MM-DDTHH:MM:SS[.mmm]Z` — and returns nil for anything else, which `parse(line:)` then
/// hands to `JSONDecoder` (so a line a person edited still reads, and a torn or garbled one is
/// still refused).
extension HistoryRecord {
    /// Reuses the strings of the last device and name read: one wearable's lines repeat them.
    final class StringCache {
        var entries: [(bytes: [UInt8], string: String)] = []
        func string(_ b: UnsafeBufferPointer<UInt8>) -> String {
            for e in entries where e.bytes.count == b.count && e.bytes.elementsEqual(b) { return e.string }
            let s = String(decoding: b, as: UTF8.self)
            if entries.count >= 16 { entries.removeFirst() }
            entries.append((Array(b), s))
            return s
        }
    }

    /// The record on a line in paird's own form; nil for anything else (`parse(line:)` then tries
    /// `JSONDecoder`).
    public static func fastParse(_ line: ArraySlice<UInt8>) -> HistoryRecord? { fastParse(line, cache: nil) }

    static func fastParse(_ line: ArraySlice<UInt8>, cache: StringCache?) -> HistoryRecord? {
        line.withUnsafeBufferPointer { fastParse($0, cache: cache ?? StringCache()) }
    }

    private static func fastParse(_ b: UnsafeBufferPointer<UInt8>, cache: StringCache) -> HistoryRecord? {
        var p = Scanner(b: b)
        guard p.expect(0x7B) else { return nil } // {
        var kind: Kind?
        var at: Double?
        var r = HistoryRecord(kind: .alive, at: 0)
        var first = true
        while true {
            p.skipSpace()
            if p.i < b.count, b[p.i] == 0x7D { p.i += 1; break } // }
            if !first { guard p.expect(0x2C) else { return nil } } // ,
            first = false
            guard let key = p.rawString(), p.expect(0x3A) else { return nil } // :
            switch Key(key) {
            case .type:
                guard let s = p.rawString(), let k = Kind(bytes: s) else { return nil }
                kind = k
            case .at:
                guard let s = p.rawString(), let t = fastTime(s) else { return nil }
                at = t
            case .device: guard let s = p.rawString() else { return nil }; r.device = cache.string(s)
            case .name: guard let s = p.rawString() else { return nil }; r.name = cache.string(s)
            case .condition:
                guard let s = p.rawString(), let c = Condition(rawValue: String(decoding: s, as: UTF8.self)) else { return nil }
                r.condition = c
            case .reason: guard let s = p.rawString() else { return nil }; r.reason = cache.string(s)
            case .detail: guard let s = p.rawString() else { return nil }; r.detail = cache.string(s)
            case .latency: guard let v = p.number() else { return nil }; r.latency = v
            case .away: guard let v = p.number() else { return nil }; r.away = v
            case .lasted: guard let v = p.number() else { return nil }; r.lasted = v
            case .level: guard let v = p.number(), let l = Int(exactly: v) else { return nil }; r.level = l
            case .jump: guard let v = p.number() else { return nil }; r.jump = v
            case .lost: guard let v = p.number(), let l = Int(exactly: v) else { return nil }; r.lost = l
            case nil: return nil
            }
        }
        p.skipSpace()
        guard p.i == b.count, let kind, let at else { return nil }
        r.kind = kind
        r.at = at
        return r
    }

    private enum Key {
        case type, at, device, name, condition, reason, detail, latency, away, lasted, level, jump, lost
        init?(_ s: UnsafeBufferPointer<UInt8>) {
            func eq(_ t: StaticString) -> Bool {
                t.utf8CodeUnitCount == s.count && t.withUTF8Buffer { $0.elementsEqual(s) }
            }
            if eq("type") { self = .type } else if eq("at") { self = .at } else if eq("device") { self = .device }
            else if eq("name") { self = .name } else if eq("condition") { self = .condition } else if eq("reason") { self = .reason }
            else if eq("detail") { self = .detail } else if eq("latency") { self = .latency } else if eq("away") { self = .away }
            else if eq("lasted") { self = .lasted } else if eq("level") { self = .level }
            else if eq("jump") { self = .jump } else if eq("lost") { self = .lost } else { return nil }
        }
    }

    private struct Scanner {
        let b: UnsafeBufferPointer<UInt8>
        var i = 0

        mutating func skipSpace() { while i < b.count, b[i] == 0x20 || b[i] == 0x09 || b[i] == 0x0D { i += 1 } }

        mutating func expect(_ c: UInt8) -> Bool {
            skipSpace()
            guard i < b.count, b[i] == c else { return false }
            i += 1
            return true
        }

        /// A string's bytes, without its quotes; nil for one with an escape (the slow path reads
        /// those) or without its closing quote.
        mutating func rawString() -> UnsafeBufferPointer<UInt8>? {
            guard expect(0x22) else { return nil }
            let start = i
            while i < b.count {
                let c = b[i]
                if c == 0x22 {
                    i += 1
                    return UnsafeBufferPointer(rebasing: b[start..<(i - 1)])
                }
                if c == 0x5C || c < 0x20 { return nil }
                i += 1
            }
            return nil
        }

        /// `123`, `-1.5`, `86400.001`: digits, an optional fraction; anything else (an exponent) nil.
        mutating func number() -> Double? {
            skipSpace()
            var negative = false
            if i < b.count, b[i] == 0x2D { negative = true; i += 1 }
            var whole: Int64 = 0
            var digits = 0
            while i < b.count, b[i] >= 0x30, b[i] <= 0x39, digits < 15 {
                whole = whole * 10 + Int64(b[i] - 0x30)
                i += 1
                digits += 1
            }
            guard digits > 0 else { return nil }
            var fraction: Int64 = 0
            var scale: Int64 = 1
            if i < b.count, b[i] == 0x2E {
                i += 1
                var n = 0
                while i < b.count, b[i] >= 0x30, b[i] <= 0x39, n < 9, digits + n < 15 {
                    fraction = fraction * 10 + Int64(b[i] - 0x30)
                    scale *= 10
                    i += 1
                    n += 1
                }
                guard n > 0 else { return nil }
            }
            if i < b.count, (b[i] >= 0x30 && b[i] <= 0x39) || b[i] == 0x65 || b[i] == 0x45 || b[i] == 0x2E { return nil }
            // As Double("…") rounds it: at most 15 digits, so both are exact in 53 bits, and one
            // division rounds correctly.
            let v = Double(whole * scale + fraction) / Double(scale)
            return negative ? -v : v
        }
    }

    /// `YYYY-MM-DDTHH:MM:SS.mmmZ` or `YYYY-MM-DDTHH:MM:SSZ` (UTC, as paird writes it); nil for
    /// any other form.
    static func fastTime(_ u: UnsafeBufferPointer<UInt8>) -> Double? {
        guard u.count == 20 || u.count == 24, u[4] == 0x2D, u[7] == 0x2D, u[10] == 0x54, u[13] == 0x3A, u[16] == 0x3A,
              u[u.count - 1] == 0x5A else { return nil }
        func digits(_ from: Int, _ n: Int) -> Int? {
            var v = 0
            for k in from..<(from + n) {
                let d = Int(u[k]) - 0x30
                guard d >= 0, d <= 9 else { return nil }
                v = v * 10 + d
            }
            return v
        }
        guard let y = digits(0, 4), let mo = digits(5, 2), let d = digits(8, 2), let h = digits(11, 2), let mi = digits(14, 2),
              let sec = digits(17, 2), (1...12).contains(mo), (1...31).contains(d), h < 24, mi < 60, sec < 61 else { return nil }
        var millis = 0
        if u.count == 24 {
            guard u[19] == 0x2E, let ms = digits(20, 3) else { return nil }
            millis = ms
        }
        // Days from the civil date (Howard Hinnant's days_from_civil).
        let yy = mo <= 2 ? y - 1 : y
        let era = (yy >= 0 ? yy : yy - 399) / 400
        let yoe = yy - era * 400
        let doy = (153 * (mo + (mo > 2 ? -3 : 9)) + 2) / 5 + d - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        let days = era * 146097 + doe - 719468
        return Double(days * 86400 + h * 3600 + mi * 60 + sec) + Double(millis) / 1000
    }
}

extension HistoryRecord.Kind {
    init?(bytes s: UnsafeBufferPointer<UInt8>) {
        guard let k = HistoryRecord.Kind(rawValue: String(decoding: s, as: UTF8.self)) else { return nil }
        self = k
    }
}
