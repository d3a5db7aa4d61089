import PairingCore

/// The adapter the client works on, as BlueZ describes it now.
public struct AdapterInfo: Sendable, Hashable {
    /// `/org/bluez/hci0`
    public var path: String
    /// `hci0` (the last path component)
    public var name: String
    /// `Adapter1.Address` (`00:AA:01:00:00:00`), "" when BlueZ did not say.
    public var address: String
    public var powered: Bool
    /// rfkill blocks it: `Adapter1.PowerState` is `off-blocked` (5.66 `src/rfkill.c` sets it when
    /// the block comes, `src/adapter.c` when a power-on meets one; experimental, so only with
    /// bluetoothd -E), or, unpowered, its own or a platform switch is blocked in sysfs.
    public var rfkillBlocked: Bool

    public init(path: String, name: String, address: String, powered: Bool, rfkillBlocked: Bool = false) {
        self.path = path
        self.name = name
        self.address = address
        self.powered = powered
        self.rfkillBlocked = rfkillBlocked
    }
}

/// One `Device1` under the selected adapter, from the client's cache.
public struct DeviceInfo: Sendable, Hashable {
    public var path: String
    public var address: DeviceAddress
    public var addressType: AddressType
    /// `Alias`, else `Name`, else "".
    public var name: String
    public var paired: Bool
    /// `Bonded` (BlueZ ≥ 5.65); nil when BlueZ does not export it.
    public var bonded: Bool?
    public var trusted: Bool
    public var connected: Bool
    public var servicesResolved: Bool
    /// Advertised/resolved service UUIDs, 128-bit lower case.
    public var uuids: [String]
    /// From the cache: BlueZ's last value while discovering (it drops RSSI when discovery ends).
    /// In `.deviceFound`, only a value heard during paird's own scan (`DeviceLink.scanRSSI`).
    public var rssi: Int?
    /// `Battery1.Percentage`, else the last Battery Level (0x2A19) value read or notified.
    public var battery: UInt8?

    public init(path: String, address: DeviceAddress, addressType: AddressType = .public, name: String = "",
                paired: Bool = false, bonded: Bool? = nil, trusted: Bool = false, connected: Bool = false,
                servicesResolved: Bool = false, uuids: [String] = [], rssi: Int? = nil, battery: UInt8? = nil) {
        self.path = path
        self.address = address
        self.addressType = addressType
        self.name = name
        self.paired = paired
        self.bonded = bonded
        self.trusted = trusted
        self.connected = connected
        self.servicesResolved = servicesResolved
        self.uuids = uuids
        self.rssi = rssi
        self.battery = battery
    }

    /// What the state machine calls bonded: `Paired && (Bonded ?? true)`.
    public var isBonded: Bool { paired && (bonded ?? true) }

    /// The state machine's view of this device.
    public var view: BlueZDeviceView {
        BlueZDeviceView(exists: true, bonded: isBonded, connected: connected, servicesResolved: servicesResolved)
    }

    /// The pairing candidate this device makes. Without an RSSI (not heard in this scan) it is a
    /// device BlueZ merely remembers: the machine takes one only as a bond made elsewhere whose
    /// address the user named. 127 (HCI's "not available") is an advertisement heard all the same.
    public var candidate: Candidate {
        Candidate(address: address, addressType: addressType, name: name, rssi: rssi,
                  serviceUUIDs: uuids, bonded: paired)
    }
}
