import DBus
import PairingCore
import Testing
@testable import BlueZ

/// The object cache alone: no bus, no mock, no loop.
@Suite("BlueZ object cache")
struct ObjectCacheTests {
    let adapter = "/org/bluez/hci0"
    let identity = DeviceAddress("F3:5A:B1:00:00:02")!
    /// A device BlueZ first saw under a resolvable private address: the path keeps that
    /// address, `Address` becomes the identity once the IRK is known.
    var rpaPath: String { adapter + "/dev_4A_11_22_33_44_55" }

    func device(_ address: String, paired: Bool = true, extra: [String: DBusValue] = [:]) -> [String: DBusValue] {
        ["Address": .string(address), "AddressType": .string("random"), "Alias": .string("Watch-1"),
         "Paired": .bool(paired), "Connected": .bool(false), "ServicesResolved": .bool(false)]
            .merging(extra) { $1 }
    }

    func filled() -> ObjectCache {
        var c = ObjectCache()
        c.replace(with: [
            adapter: ["org.bluez.Adapter1": ["Address": .string("00:AA:01:00:00:00"), "Powered": .bool(true)]],
            rpaPath: ["org.bluez.Device1": device(identity.description)],
            rpaPath + "/service0010/char0011": ["org.bluez.GattCharacteristic1": ["UUID": .string("00002A37-0000-1000-8000-00805F9B34FB")]],
            rpaPath + "/service0010/char0011/desc0013": ["org.bluez.GattDescriptor1": [:]],
            "/org/freedesktop/Other": ["x.Y": [:]],
        ])
        return c
    }

    @Test("a snapshot keeps only BlueZ's objects")
    func snapshot() {
        let c = filled()
        #expect(c.count == 4)
        #expect(c["/org/freedesktop/Other"] == nil)
        #expect(c.adapterPaths == [adapter])
    }

    @Test("a device is found by its Address, not by its object path")
    func privateAddress() throws {
        let c = filled()
        #expect(c.devicePath(identity, under: adapter) == rpaPath)
        #expect(c.address(ofDevicePath: rpaPath) == identity)
        #expect(c.deviceAddressForChild(rpaPath + "/service0010/char0011") == identity)
        let info = try #require(c.deviceInfo(rpaPath))
        #expect(info.address == identity)
        #expect(info.addressType == .random)
        #expect(info.name == "Watch-1")
        #expect(c.devices(under: adapter).map(\.path) == [rpaPath])
        #expect(c.devicePath(identity, under: "/org/bluez/hci1") == nil)
    }

    @Test("characteristics under a device, with normalised UUIDs")
    func characteristics() {
        let c = filled()
        #expect(c.characteristics(under: rpaPath) == [
            .init(path: rpaPath + "/service0010/char0011", uuid: "00002a37-0000-1000-8000-00805f9b34fb"),
        ])
    }

    @Test("a changed value of another type is rejected and the old one stays")
    func junkRejected() throws {
        var c = filled()
        let rejected = c.apply(rpaPath, "org.bluez.Device1",
                               ["Connected": .string("yes"), "ServicesResolved": .bool(true)], ["Alias"])
        #expect(rejected == [.init(name: "Connected", got: "s", had: "b")])
        let info = try #require(c.deviceInfo(rpaPath))
        #expect(info.connected == false)
        #expect(info.servicesResolved == true)
        #expect(info.name == "")   // Alias invalidated, no Name
        // An interface the cache does not hold is not created by a change.
        #expect(c.apply(rpaPath, "org.bluez.Battery1", ["Percentage": .byte(5)], []).isEmpty)
        #expect(c[rpaPath]?["org.bluez.Battery1"] == nil)
    }

    @Test("removing Device1 takes the GATT objects and the read battery level with it")
    func removal() throws {
        var c = filled()
        c.recordBattery(rpaPath, 42)
        #expect(c.deviceInfo(rpaPath)?.battery == 42)
        c.add(rpaPath, ["org.bluez.Battery1": ["Percentage": .byte(80)]])
        #expect(c.deviceInfo(rpaPath)?.battery == 80)   // BlueZ's Battery1 wins over a read
        c.remove(rpaPath, ["org.bluez.Battery1"])
        #expect(c.deviceInfo(rpaPath)?.battery == 42)
        c.remove(rpaPath, ["org.bluez.Device1"])
        #expect(c[rpaPath] == nil)
        #expect(c.characteristics(under: rpaPath).isEmpty)
        #expect(c.count == 1)
        c.add(rpaPath, ["org.bluez.Device1": device(identity.description)])
        #expect(c.deviceInfo(rpaPath)?.battery == nil)
    }

    @Test("object paths")
    func paths() {
        #expect(ObjectCache.parent(of: "/org/bluez/hci0/dev_X") == "/org/bluez/hci0")
        #expect(ObjectCache.parent(of: "/org") == "/")
        #expect(ObjectCache.devicePathPrefix(of: "/org/bluez/hci0/dev_X/service1/char2") == "/org/bluez/hci0/dev_X")
        #expect(ObjectCache.devicePathPrefix(of: "/org/bluez/hci0") == nil)
    }
}
