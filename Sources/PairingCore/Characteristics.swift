/// What `pairctl watch` (and paird's MQTT `heart_rate` topic) makes of a notification's value: the standard characteristics it knows,
/// decoded; anything else (and a value too short or too long for its characteristic) is left
/// to its hex. Pure: no I/O, never traps on any input.
public enum Characteristic {
    public static let heartRateMeasurement = "00002a37-0000-1000-8000-00805f9b34fb"
    public static let batteryLevel = "00002a19-0000-1000-8000-00805f9b34fb"

    /// Heart Rate Measurement (0x2A37, Heart Rate Service 1.0, 3.1): a flags byte, then the rate
    /// (uint8, or uint16 when flags bit 0), Energy Expended (uint16 kJ, when bit 3) and RR
    /// intervals (uint16 in 1/1024 s each, when bit 4), little-endian.
    public struct HeartRate: Encodable, Equatable, Sendable {
        public var bpm: Int
        /// Flags bits 1-2: nil when the sensor does not report contact, else whether it has skin contact.
        public var sensorContact: Bool?
        /// Kilojoules since the counter was last reset (nil when not in this measurement).
        public var energyExpended: Int?
        /// RR intervals in milliseconds (1/1024 s units converted, rounded to 0.1 ms); empty when none.
        public var rrIntervals: [Double]

        public init(bpm: Int, sensorContact: Bool? = nil, energyExpended: Int? = nil, rrIntervals: [Double] = []) {
            self.bpm = bpm
            self.sensorContact = sensorContact
            self.energyExpended = energyExpended
            self.rrIntervals = rrIntervals
        }

        enum CodingKeys: String, CodingKey { case bpm, sensorContact, energyExpended, rrIntervals }
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(bpm, forKey: .bpm)
            try c.encode(sensorContact, forKey: .sensorContact)       // null: not reported
            try c.encode(energyExpended, forKey: .energyExpended)     // null: not in this one
            try c.encode(rrIntervals, forKey: .rrIntervals)
        }
    }

    public enum Decoded: Equatable, Sendable {
        case heartRate(HeartRate)
        /// Battery Level (0x2A19): percent, 0...100.
        case battery(Int)
    }

    /// `uuid` (128-bit, or 16-bit like `2a37`; any case) and its value: the decoded reading, or
    /// nil for an unknown characteristic or a malformed value (then only the hex is shown).
    public static func decode(_ uuid: String, _ value: [UInt8]) -> Decoded? {
        switch normalized(uuid) {
        case heartRateMeasurement: heartRate(value).map(Decoded.heartRate)
        case batteryLevel: value.count == 1 && value[0] <= 100 ? .battery(Int(value[0])) : nil
        default: nil
        }
    }

    static func normalized(_ uuid: String) -> String {
        let u = uuid.lowercased()
        return u.count == 4 ? "0000\(u)-0000-1000-8000-00805f9b34fb" : u
    }

    /// nil unless `v` is exactly as long as its flags say (RR intervals: whole pairs of bytes).
    public static func heartRate(_ v: [UInt8]) -> HeartRate? {
        guard let flags = v.first else { return nil }
        var i = 1
        func uint16() -> Int? {
            guard i + 1 < v.count else { return nil }
            defer { i += 2 }
            return Int(v[i]) | Int(v[i + 1]) << 8
        }
        let bpm: Int
        if flags & 0x01 != 0 {
            guard let b = uint16() else { return nil }
            bpm = b
        } else {
            guard i < v.count else { return nil }
            bpm = Int(v[i])
            i += 1
        }
        var hr = HeartRate(bpm: bpm)
        if flags & 0x04 != 0 { hr.sensorContact = flags & 0x02 != 0 }
        if flags & 0x08 != 0 {
            guard let e = uint16() else { return nil }
            hr.energyExpended = e
        }
        if flags & 0x10 != 0 {
            guard (v.count - i) % 2 == 0 else { return nil }
            while i < v.count, let rr = uint16() { hr.rrIntervals.append((Double(rr) * 1000 / 1024 * 10).rounded() / 10) }
        }
        return i == v.count ? hr : nil
    }

    /// The decoded reading in words for `watch`'s text lines: `72 bpm, contact, energy 12 kJ, RR 812.5 830.1 ms`.
    public static func text(_ d: Decoded) -> String {
        switch d {
        case .battery(let p): return "battery \(p)%"
        case .heartRate(let hr):
            var parts = ["\(hr.bpm) bpm"]
            if let c = hr.sensorContact { parts.append(c ? "contact" : "no contact") }
            if let e = hr.energyExpended { parts.append("energy \(e) kJ") }
            if !hr.rrIntervals.isEmpty { parts.append("RR \(hr.rrIntervals.map(ms).joined(separator: " ")) ms") }
            return parts.joined(separator: ", ")
        }
    }

    /// `812.5`, or `812` for a whole number.
    static func ms(_ x: Double) -> String {
        x == x.rounded() ? String(Int(x)) : String(x)
    }
}
