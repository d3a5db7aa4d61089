import DBus
import PairingCore

/// bluetoothd's object tree as last seen (path → interface → properties), and the questions the
/// client asks of it. A plain value: no bus, no loop; `BlueZClient` fills it from
/// `GetManagedObjects` and the ObjectManager/Properties signals (unit-tested on its own).
struct ObjectCache {
    typealias Props = [String: DBusValue]

    private(set) var objects: [String: [String: Props]] = [:]
    /// Battery levels read with `ReadValue` (devices without BlueZ's Battery1), by device path.
    private(set) var batteryLevels: [String: UInt8] = [:]

    var count: Int { objects.count }

    subscript(path: String) -> [String: Props]? { objects[path] }

    func props(_ path: String, _ iface: String) -> Props? { objects[path]?[iface] }

    // MARK: Updates

    /// A fresh snapshot (`GetManagedObjects`): only BlueZ's own objects are kept.
    mutating func replace(with tree: [String: [String: Props]]) {
        objects = tree.filter { $0.key.hasPrefix("/org/bluez") }
    }

    mutating func clear() {
        objects = [:]
        batteryLevels = [:]
    }

    /// `InterfacesAdded`: each interface's properties replace what was there.
    mutating func add(_ path: String, _ interfaces: [String: Props]) {
        var entry = objects[path] ?? [:]
        for (iface, props) in interfaces { entry[iface] = props }
        objects[path] = entry
    }

    /// `InterfacesRemoved`: a removed device or adapter takes its children (GATT objects,
    /// devices) with it.
    mutating func remove(_ path: String, _ interfaces: [String]) {
        guard var entry = objects[path] else { return }
        for name in interfaces { entry[name] = nil }
        objects[path] = entry.isEmpty ? nil : entry
        if interfaces.contains(Iface.device) {
            removeChildren(of: path)
            batteryLevels[path] = nil
        }
    }

    mutating func removeChildren(of path: String) {
        let prefix = path + "/"
        for child in objects.keys where child.hasPrefix(prefix) { objects[child] = nil }
    }

    /// A property value `apply` kept out: its type differs from the one BlueZ gave before.
    struct Rejection: Equatable { let name: String; let got: String; let had: String }

    /// `PropertiesChanged` of an interface the cache holds. A value whose type differs from the
    /// one BlueZ gave before is junk: the old one stays, and it is returned.
    @discardableResult
    mutating func apply(_ path: String, _ iface: String, _ changed: Props, _ invalidated: [String]) -> [Rejection] {
        guard let current = objects[path]?[iface] else { return [] }
        var rejected: [Rejection] = []
        for (k, v) in changed {
            if let old = current[k], old.signature != v.signature {
                rejected.append(Rejection(name: k, got: v.signature, had: old.signature))
                continue
            }
            objects[path]?[iface]?[k] = v
        }
        for k in invalidated { objects[path]?[iface]?[k] = nil }
        return rejected.sorted { $0.name < $1.name }
    }

    /// Sets one property of an interface the cache already holds (a value read with `Get`).
    mutating func set(_ path: String, _ iface: String, _ name: String, _ value: DBusValue) {
        guard objects[path]?[iface] != nil else { return }
        objects[path]?[iface]?[name] = value
    }

    mutating func recordBattery(_ devicePath: String, _ level: UInt8) {
        batteryLevels[devicePath] = level
    }

    // MARK: Questions

    func deviceInfo(_ path: String) -> DeviceInfo? {
        guard let props = objects[path]?[Iface.device],
              let address = props["Address"]?.string.flatMap(Self.parseAddress) ?? DeviceAddress(objectPath: path) else { return nil }
        let alias = props["Alias"]?.string ?? ""
        let uuids = props["UUIDs"]?.stringArray?.map { ServiceUUID.normalize($0) ?? $0.lowercased() } ?? []
        return DeviceInfo(
            path: path, address: address,
            addressType: props["AddressType"]?.string == "random" ? .random : .public,
            name: alias.isEmpty ? props["Name"]?.string ?? "" : alias,
            paired: props["Paired"]?.bool ?? false,
            bonded: props["Bonded"]?.bool,
            trusted: props["Trusted"]?.bool ?? false,
            connected: props["Connected"]?.bool ?? false,
            servicesResolved: props["ServicesResolved"]?.bool ?? false,
            uuids: uuids,
            rssi: props["RSSI"]?.int16.map(Int.init),
            battery: objects[path]?[Iface.battery]?["Percentage"]?.uint8 ?? batteryLevels[path])
    }

    /// Every device directly under `adapterPath`, sorted by path.
    func devices(under adapterPath: String) -> [DeviceInfo] {
        objects.keys.filter { Self.parent(of: $0) == adapterPath }.sorted().compactMap(deviceInfo)
    }

    /// The path of the device with this address under `adapterPath`, matched on the `Address`
    /// property: with private addresses the path may not follow the address.
    func devicePath(_ address: DeviceAddress, under adapterPath: String) -> String? {
        let direct = adapterPath + "/" + address.pathComponent
        if let props = objects[direct]?[Iface.device],
           props["Address"]?.string.flatMap(Self.parseAddress) ?? address == address {
            return direct
        }
        for (path, ifaces) in objects where Self.parent(of: path) == adapterPath {
            if ifaces[Iface.device]?["Address"]?.string.flatMap(Self.parseAddress) == address { return path }
        }
        return nil
    }

    /// The address a device object stands for: its `Address` property, else its path's.
    func address(ofDevicePath path: String) -> DeviceAddress? {
        if let a = objects[path]?[Iface.device]?["Address"]?.string.flatMap(Self.parseAddress) { return a }
        return DeviceAddress(objectPath: path)
    }

    func deviceAddressForChild(_ path: String) -> DeviceAddress? {
        Self.devicePathPrefix(of: path).flatMap { address(ofDevicePath: $0) }
    }

    struct Characteristic: Equatable { let path: String; let uuid: String }

    /// The GATT characteristics under a device (any depth), by path.
    func characteristics(under devPath: String) -> [Characteristic] {
        let prefix = devPath + "/"
        return objects.compactMap { path, ifaces in
            guard path.hasPrefix(prefix), let raw = ifaces[Iface.characteristic]?["UUID"]?.string,
                  let uuid = ServiceUUID.normalize(raw) else { return nil }
            return Characteristic(path: path, uuid: uuid)
        }.sorted { $0.path < $1.path }
    }

    /// Adapter object paths, sorted.
    var adapterPaths: [String] {
        objects.compactMap { path, ifaces in ifaces[Iface.adapter] != nil ? path : nil }.sorted()
    }

    // MARK: Paths

    static func parseAddress(_ text: String) -> DeviceAddress? { DeviceAddress(text) }

    static func parent(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/"), slash != path.startIndex else { return "/" }
        return String(path[..<slash])
    }

    /// `/org/bluez/hciN/dev_X` for any path at or below a device.
    static func devicePathPrefix(of path: String) -> String? {
        let parts = path.split(separator: "/", omittingEmptySubsequences: false)
        // "", "org", "bluez", "hciN", "dev_…"
        guard parts.count >= 5, parts[4].hasPrefix("dev_") else { return nil }
        return parts[0..<5].joined(separator: "/")
    }
}
