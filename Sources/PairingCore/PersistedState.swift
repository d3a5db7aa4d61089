#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The state file's document: identity and intent of every managed wearable, never transient
/// link state. Versioned; `decode` rejects anything it cannot trust with a typed error so the
/// runtime can move the file aside and run on.
public struct PersistedState: Sendable, Hashable, Codable {
    public static let currentVersion = 1
    /// Anything larger is not a file we wrote (a few hundred bytes per device).
    public static let maximumSize = 1 << 20

    public var version: Int
    public var devices: [PersistedDevice]
    /// The adapter paird.conf names (`[General] Adapter`: a name like hci0, or "" for the first),
    /// resolved to its address at first sight: paird knows its adapter by its address from then
    /// on, so a dongle plugged back in under another index is found again. Optional and written
    /// only when known: older files read as unknown, an older paird ignores the key (version 1).
    public var adapters: [PersistedAdapter]?

    public init(version: Int = PersistedState.currentVersion, devices: [PersistedDevice] = [], adapters: [PersistedAdapter]? = nil) {
        self.version = version
        self.devices = devices
        self.adapters = adapters
    }

    /// Pretty, key-sorted JSON with ISO 8601 timestamps, ending in a newline.
    public func encoded() -> Data {
        let e = JSONEncoder()
        e.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        e.dateEncodingStrategy = .iso8601
        // Encoding plain strings, numbers and dates cannot fail.
        var data = (try? e.encode(self)) ?? Data()
        data.append(0x0A)
        return data
    }

    public static func decode(_ data: Data) throws(StateFileError) -> PersistedState {
        if data.isEmpty { throw .empty }
        if data.count > maximumSize { throw .tooLarge(bytes: data.count) }
        let d = JSONDecoder()
        d.dateDecodingStrategy = .iso8601
        struct Header: Decodable { var version: Int }
        let header: Header
        do { header = try d.decode(Header.self, from: data) } catch { throw .notJSON(Self.describe(error)) }
        if header.version > currentVersion { throw .futureVersion(header.version) }
        if header.version < 1 { throw .unsupportedVersion(header.version) }
        let state: PersistedState
        do { state = try d.decode(PersistedState.self, from: data) } catch { throw .invalid(Self.describe(error)) }
        var seen = Set<DeviceAddress>()
        for dev in state.devices where !seen.insert(dev.address).inserted {
            throw .invalid("device \(dev.address) listed twice")
        }
        return state
    }

    private static func describe(_ error: any Error) -> String {
        guard let e = error as? DecodingError else { return "\(error)" }
        if case .dataCorrupted(let c) = e { return path(c.codingPath) + c.debugDescription }
        if case .keyNotFound(let k, let c) = e { return path(c.codingPath) + "missing key \"\(k.stringValue)\"" }
        if case .typeMismatch(_, let c) = e { return path(c.codingPath) + c.debugDescription }
        if case .valueNotFound(_, let c) = e { return path(c.codingPath) + c.debugDescription }
        return "\(e)" // DecodingError is not frozen: a future case is still described
    }

    private static func path(_ keys: [any CodingKey]) -> String {
        keys.isEmpty ? "" : keys.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }.joined(separator: ".") + ": "
    }
}

/// An adapter as paird.conf names it, and the address it had at first sight.
public struct PersistedAdapter: Sendable, Hashable, Codable {
    /// `[General] Adapter` as written: `hci0`, or "" for the first adapter.
    public var configured: String
    public var address: DeviceAddress
    public var name: String
    public var firstSeen: Date

    public init(configured: String, address: DeviceAddress, name: String, firstSeen: Double) {
        self.configured = configured
        self.address = address
        self.name = name
        self.firstSeen = Date(timeIntervalSince1970: firstSeen.rounded())
    }
}

/// One wearable in the state file.
public struct PersistedDevice: Sendable, Hashable, Codable {
    public var address: DeviceAddress
    public var addressType: AddressType
    public var name: String
    public var adapter: String
    public var serviceUUIDs: [String]
    public var wanted: Wanted
    public var pairedAt: Date
    public var updatedAt: Date
    /// bluetoothd died while its link was being set up (`ManagedDevice.bluetoothdCrashedOnLink`).
    /// Optional and written only when true: files without it (older paird) read as false, and an
    /// older paird reading a file with it ignores the key, so the version stays 1.
    public var bluetoothdCrashedOnLink: Bool?
    /// `DeviceIdentity.adapterAddress`. Optional: files without it (older paird) read as not
    /// known yet, an older paird ignores it; the version stays 1.
    public var adapterAddress: DeviceAddress?

    public init(identity: DeviceIdentity, wanted: Wanted, pairedAt: Double, updatedAt: Double,
                bluetoothdCrashedOnLink: Bool? = nil) {
        self.bluetoothdCrashedOnLink = bluetoothdCrashedOnLink
        address = identity.address
        addressType = identity.addressType
        name = identity.name
        adapter = identity.adapter
        serviceUUIDs = identity.serviceUUIDs
        adapterAddress = identity.adapterAddress
        self.wanted = wanted
        self.pairedAt = Date(timeIntervalSince1970: pairedAt.rounded())
        self.updatedAt = Date(timeIntervalSince1970: updatedAt.rounded())
    }

    public var identity: DeviceIdentity {
        DeviceIdentity(address: address, addressType: addressType, name: name, adapter: adapter, serviceUUIDs: serviceUUIDs,
                       adapterAddress: adapterAddress)
    }
}

/// Why a state file could not be used. The runtime quarantines the file and reports this.
public enum StateFileError: Error, Sendable, Hashable, CustomStringConvertible {
    case empty
    case tooLarge(bytes: Int)
    case notJSON(String)
    case futureVersion(Int)
    case unsupportedVersion(Int)
    case invalid(String)

    public var description: String {
        switch self {
        case .empty: "the file is empty (truncated?)"
        case .tooLarge(let n): "the file is \(n) bytes, more than the \(PersistedState.maximumSize) a state file can be"
        case .notJSON(let why): "not a paird state document: \(why)"
        case .futureVersion(let v): "written by a newer paird (version \(v), this one reads up to \(PersistedState.currentVersion))"
        case .unsupportedVersion(let v): "unsupported version \(v)"
        case .invalid(let why): "invalid content: \(why)"
        }
    }
}
