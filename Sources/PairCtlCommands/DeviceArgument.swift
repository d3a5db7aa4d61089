import ArgumentParser
import PairingCore

/// The address argument shared by unpair/connect/disconnect: optional when exactly one device is paired.
struct DeviceArgument: ParsableArguments {
    @Argument(help: ArgumentHelp("The wearable's address (its identity address, AA:BB:CC:DD:EE:FF) or its name as status shows it. May be left out when only one is paired.",
                                 valueName: "address|name"))
    var address: String?

    /// Text made of hex digits and separators is meant as an address: a malformed one is an
    /// argument error, not a name that matches nothing.
    static func looksLikeAddress(_ s: String) -> Bool {
        s.unicodeScalars.filter { $0 == ":" || $0 == "-" }.count >= 4 && !s.contains(" ")
    }

    func validate() throws {
        if let a = address, DeviceAddress(a) == nil, Self.looksLikeAddress(a) || trimmed(a).isEmpty {
            throw ValidationError("\"\(a)\" is not a Bluetooth address (expected AA:BB:CC:DD:EE:FF) or a name")
        }
    }

    func resolve(_ client: PairdClient) throws -> DeviceAddress {
        if let text = address, let a = DeviceAddress(text) { return a }
        if let name = address { return DeviceAddress(try Self.find(name, in: client.status().devices).address)! }
        let devices = try client.status().devices
        switch devices.count {
        case 1: return DeviceAddress(devices[0].address)!
        case 0: throw PairctlError(.unknownDevice, "no wearable is paired")
        default: throw PairctlError(.usage, "\(devices.count) wearables are paired: name one (\(devices.map(\.address).joined(separator: ", ")))")
        }
    }
}

extension DeviceArgument {
    /// The paired wearable `text` names: its address (any case) or its name as status shows it
    /// (any case). None: exit 7 (unknown device); several of that name: exit 64 (give the address).
    static func find(_ text: String, in devices: [StatusDocument.Device]) throws(PairctlError) -> StatusDocument.Device {
        if let a = DeviceAddress(text) {
            guard let d = devices.first(where: { DeviceAddress($0.address) == a }) else {
                throw PairctlError(.unknownDevice, "no paired wearable has the address \(a) (pairctl list)")
            }
            return d
        }
        let named = devices.filter { $0.name.lowercased() == text.lowercased() }
        switch named.count {
        case 1: return named[0]
        case 0: throw PairctlError(.unknownDevice, "no paired wearable is named \"\(text)\" (pairctl list)")
        default: throw PairctlError(.usage, "\(named.count) wearables are named \"\(text)\": give the address (\(named.map(\.address).joined(separator: ", ")))")
        }
    }
}
