#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import PairingCore

/// What `pairctl scan` learnt about one of BlueZ's device objects during its scan.
public struct ScanObservation: Equatable, Sendable {
    public var address: String
    /// `public` or `random` (Device1.AddressType).
    public var addressType: String
    /// Device1.Name (nil when the device has not told one; BlueZ's Alias is then made of the address).
    public var name: String?
    /// Device1.UUIDs: the services it advertised (and, for a bonded one, those BlueZ resolved).
    public var uuids: [String]
    /// Bonded in BlueZ (Device1.Bonded, as in 5.66; Device1.Paired where a BlueZ has no Bonded).
    public var bonded: Bool
    /// The object was there before the scan started: BlueZ remembers it.
    public var knownBefore: Bool
    /// The last RSSI BlueZ reported for it during this scan (InterfacesAdded or PropertiesChanged);
    /// nil when it was not heard: a device BlueZ merely remembers is not advertising nearby.
    public var heardRSSI: Int?

    public init(address: String, addressType: String = "public", name: String? = nil, uuids: [String] = [],
                bonded: Bool = false, knownBefore: Bool = false, heardRSSI: Int? = nil) {
        self.address = address
        self.addressType = addressType
        self.name = name
        self.uuids = uuids
        self.bonded = bonded
        self.knownBefore = knownBefore
        self.heardRSSI = heardRSSI
    }
}

/// `pairctl scan`'s result, made from what was heard and what paird has paired. Pure: no I/O.
public enum ScanReport {
    /// Who knows the device already, strongest first.
    public enum Known: String, Sendable {
        case paird, bonded, bluez, new

        /// The words of the text output's KNOWN column.
        public var words: String {
            switch self {
            case .paird: "paired in paird"
            case .bonded: "bonded in BlueZ"
            case .bluez: "known to BlueZ"
            case .new: "new"
            }
        }
    }

    /// One device heard advertising.
    public struct Entry: Encodable, Equatable, Sendable {
        public var address: String
        public var addressType: String
        public var name: String?
        public var rssi: Int
        /// 128-bit, lower case, sorted.
        public var services: [String]
        public var known: Known
        /// paird's state for it when paird has it paired (`connected`, `waitingForDevice`, ...).
        public var pairdState: String?

        enum CodingKeys: String, CodingKey { case address, addressType, name, rssi, services, known, pairdState }
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(address, forKey: .address)
            try c.encode(addressType, forKey: .addressType)
            try c.encode(name, forKey: .name)               // null: no name heard
            try c.encode(rssi, forKey: .rssi)
            try c.encode(services, forKey: .services)
            try c.encode(known.rawValue, forKey: .known)
            try c.encode(pairdState, forKey: .pairdState)   // null: not paired in paird
        }
    }

    /// `scan --json`: one compact object.
    public struct Document: Encodable, Equatable, Sendable {
        public var schemaVersion = StatusDocument.schemaVersion
        /// The scan's length asked for, in seconds.
        public var timeout: Int
        /// Ended early by SIGINT/SIGTERM.
        public var interrupted: Bool
        /// The --service filter (128-bit); empty: every device.
        public var services: [String]
        /// Whether paird answered (GetStatus): false means `known` cannot be `paird`.
        public var pairdRunning: Bool
        /// Why paird did not answer (null when it did).
        public var pairdError: String?
        public var devices: [Entry]

        enum CodingKeys: String, CodingKey { case schemaVersion, timeout, interrupted, services, pairdRunning, pairdError, devices }
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(schemaVersion, forKey: .schemaVersion)
            try c.encode(timeout, forKey: .timeout)
            try c.encode(interrupted, forKey: .interrupted)
            try c.encode(services, forKey: .services)
            try c.encode(pairdRunning, forKey: .pairdRunning)
            try c.encode(pairdError, forKey: .pairdError)
            try c.encode(devices, forKey: .devices)
        }
    }

    /// The devices heard during the scan (an RSSI reported in it), with `services` (128-bit; empty:
    /// all) advertised, marked with who knows them, strongest RSSI first (ties by address).
    /// `paird`: paird's wearables, nil when paird did not answer.
    public static func entries(_ observed: [ScanObservation], paird: [StatusDocument.Device]?, services: [String] = []) -> [Entry] {
        let wanted = Set(services.compactMap(ServiceUUID.normalize))
        var byAddress: [String: Entry] = [:]
        for o in observed {
            guard let rssi = o.heardRSSI, let address = DeviceAddress(o.address) else { continue }
            let uuids = Array(Set(o.uuids.compactMap(ServiceUUID.normalize))).sorted()
            if !wanted.isEmpty && wanted.isDisjoint(with: uuids) { continue }
            let mine = paird?.first { DeviceAddress($0.address) == address }
            let known: Known = mine != nil ? .paird : o.bonded ? .bonded : o.knownBefore ? .bluez : .new
            let name = o.name.flatMap { $0.isEmpty ? nil : $0 }
            byAddress[address.description] = Entry(address: address.description, addressType: o.addressType, name: name, rssi: rssi,
                                                   services: uuids, known: known, pairdState: mine?.state)
        }
        return byAddress.values.sorted { $0.rssi != $1.rssi ? $0.rssi > $1.rssi : $0.address < $1.address }
    }

    public static let header = "\(padded("ADDRESS", 17))  \(padded("TYPE", 6))  RSSI  \(padded("KNOWN", 15))  \(padded("NAME", nameWidth))  SERVICES"
    static let nameWidth = 20

    /// The text output: notes, then a header and one line per device (a long list of services
    /// goes on on indented lines); every line at most 100 columns.
    public static func text(_ d: Document, legend: Bool = true) -> [String] {
        var lines: [String] = []
        if !d.pairdRunning {
            // a stalled paird owns its name but does not answer (PairctlError's timeout message)
            let who = d.pairdError?.hasPrefix("paird did not answer") == true ? "paird did not answer" : "paird not running"
            lines.append("\(who): none can be marked \"paired in paird\"")
        }
        if d.interrupted { lines.append("interrupted before the \(d.timeout) s were up: what was heard until then") }
        let filter = d.services.isEmpty ? "" : " with service \(d.services.map(StatusText.shortUUID).joined(separator: " or "))"
        if d.devices.isEmpty {
            lines += StatusText.fit("", ["nothing heard advertising\(filter) in \(d.timeout) s"])
            return lines
        }
        if legend { lines.append(header) }
        for e in d.devices {
            let name = e.name.map(\.terminalSafe) ?? "(no name)"
            let shown = name.count > nameWidth ? String(name.prefix(nameWidth - 3)) + "..." : name
            let rssi = String(e.rssi)
            let head = "\(padded(e.address, 17))  \(padded(e.addressType.terminalSafe, 6))  \(String(repeating: " ", count: max(0, 4 - rssi.count)))\(rssi)  "
                + "\(padded(e.known.words, 15))  \(padded(shown, nameWidth))  "
            let items = e.services.map(StatusText.shortUUID)
            if items.isEmpty { lines.append(trimRight(head)) } else { lines += StatusText.fit(head, items, separator: " ") }
        }
        return lines
    }

    public static func json(_ d: Document) -> String { compactJSON(d) }

    static func trimRight(_ s: String) -> String {
        var s = s
        while s.hasSuffix(" ") { s.removeLast() }
        return s
    }
}
