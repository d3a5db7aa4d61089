/// A Bluetooth device address (`AA:BB:CC:DD:EE:FF`), stored as 48 bits so it hashes and
/// compares cheaply. Parsing accepts either case and prints upper case, as BlueZ does.
public struct DeviceAddress: Sendable, Hashable, Comparable, CustomStringConvertible, Codable {
    public let value: UInt64

    public init(value: UInt64) { self.value = value & 0xFFFF_FFFF_FFFF }

    /// A resolvable private address (a random address whose two top bits are 0b01, Core spec
    /// Vol 6 Part B §1.3.2.2): one that changes every few minutes until the peer's IRK is known.
    /// Only meaningful for an address of type `random`.
    public var isResolvablePrivate: Bool { value >> 46 == 0b01 }

    /// Parses `AA:BB:CC:DD:EE:FF` (colons required, hex digits in either case); nil otherwise.
    public init?(_ text: some StringProtocol) {
        let utf8 = Array(text.utf8)
        guard utf8.count == 17 else { return nil }
        var v: UInt64 = 0
        for (i, c) in utf8.enumerated() {
            if i % 3 == 2 {
                guard c == UInt8(ascii: ":") else { return nil }
                continue
            }
            let nibble: UInt8
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): nibble = c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): nibble = c - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): nibble = c - UInt8(ascii: "A") + 10
            default: return nil
            }
            v = v << 4 | UInt64(nibble)
        }
        self.value = v
    }

    /// Parses the tail of a BlueZ object path (`…/dev_AA_BB_CC_DD_EE_FF`); nil if it is not one.
    public init?(objectPath: some StringProtocol) {
        let utf8 = Array(objectPath.utf8)
        guard utf8.count >= 21 else { return nil }
        let prefix = Array(utf8[(utf8.count - 21)..<(utf8.count - 17)])
        guard prefix == Array("dev_".utf8) else { return nil }
        let tail = utf8[(utf8.count - 17)...].map { $0 == UInt8(ascii: "_") ? UInt8(ascii: ":") : $0 }
        self.init(String(decoding: tail, as: UTF8.self))
    }

    public var description: String {
        let hex = Array("0123456789ABCDEF".utf8)
        var out = [UInt8]()
        out.reserveCapacity(17)
        for byte in stride(from: 5, through: 0, by: -1) {
            let b = UInt8(truncatingIfNeeded: value >> (UInt64(byte) * 8))
            out.append(hex[Int(b >> 4)])
            out.append(hex[Int(b & 0xF)])
            if byte > 0 { out.append(UInt8(ascii: ":")) }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The `dev_AA_BB_…` path component BlueZ uses for this address.
    public var pathComponent: String { "dev_" + String(description.map { $0 == ":" ? "_" : $0 }) }

    public static func < (a: DeviceAddress, b: DeviceAddress) -> Bool { a.value < b.value }

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let parsed = DeviceAddress(text) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath,
                                                    debugDescription: "not a Bluetooth address: \(text)"))
        }
        self = parsed
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(description)
    }
}

/// LE address type, as BlueZ's `Device1.AddressType` reports it.
public enum AddressType: String, Sendable, Codable, CaseIterable {
    case `public`
    case random
}

/// What the user wants for a device. This, with identity, is all the state file remembers.
public enum Wanted: String, Sendable, Codable, CaseIterable {
    case connected
    case disconnected
}

/// Service UUIDs in the 128-bit lower-case form BlueZ uses; short forms (`180d`, `0x180D`,
/// `0000180d`) expand against the Bluetooth base UUID.
public enum ServiceUUID {
    public static let heartRate = "0000180d-0000-1000-8000-00805f9b34fb"
    public static let battery = "0000180f-0000-1000-8000-00805f9b34fb"
    public static let heartRateMeasurement = "00002a37-0000-1000-8000-00805f9b34fb"
    public static let batteryLevel = "00002a19-0000-1000-8000-00805f9b34fb"

    /// The canonical 128-bit form, or nil if `text` is not a UUID.
    public static func normalize(_ text: String) -> String? {
        var t = text.lowercased()
        if t.hasPrefix("0x") { t.removeFirst(2) }
        let isHex = { (s: Substring) in !s.isEmpty && s.allSatisfy { $0.isHexDigit } }
        switch t.count {
        case 4, 8:
            guard isHex(Substring(t)) else { return nil }
            return String(repeating: "0", count: 8 - t.count) + t + "-0000-1000-8000-00805f9b34fb"
        case 36:
            let parts = t.split(separator: "-", omittingEmptySubsequences: false)
            guard parts.map(\.count) == [8, 4, 4, 4, 12], parts.allSatisfy(isHex) else { return nil }
            return t
        default:
            return nil
        }
    }
}
