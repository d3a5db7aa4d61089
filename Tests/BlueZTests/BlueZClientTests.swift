import Foundation
import Testing
@testable import BlueZ
import DBus
import EventLoop
import TestSupport
import PairingCore

let devA = "AA:BB:CC:DD:EE:01"
let addrA = DeviceAddress(devA)!
let pathA = "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_01"
private let hci0Address = "00:01:02:03:04:05"   // what the bluez5 template gives hci0
private let hci1Address = "01:02:03:04:05:06"

@Suite("BlueZClient against python-dbusmock bluez5", .serialized)
struct BlueZClientTests {
    @Test func cacheFromGetManagedObjectsAndAdapterSelection() throws {
        let mock = try MockBlueZ()
        try mock.addAdapter("hci0")
        try mock.addAdapter("hci1")
        try mock.addDevice("hci0", devA)
        try mock.addDevice("hci1", "AA:BB:CC:DD:EE:02")
        try mock.call("/", "org.bluez.Mock", "PairDevice", [.string("hci0"), .string(devA), .int32(0)])

        let (client, recorder, _) = try mock.startClient("")
        #expect(client.adapter == AdapterInfo(path: "/org/bluez/hci0", name: "hci0", address: hci0Address, powered: true))
        #expect(recorder.events.first { if case .autoConnectArmed = $0 { false } else { true } } == .adapterReady(client.adapter!))
        let info = try #require(client.device(addrA))
        #expect(info.path == pathA && info.name == "Pulse-1" && info.paired && info.bonded == nil && !info.connected)
        #expect(info.rssi == -79)
        #expect(client.device(DeviceAddress("AA:BB:CC:DD:EE:02")!) == nil, "devices of other adapters are not ours")
        let views = client.views(for: [addrA, DeviceAddress("AA:BB:CC:DD:EE:02")!])
        #expect(views[addrA] == BlueZDeviceView(exists: true, bonded: true, connected: false, servicesResolved: false))
        #expect(views[DeviceAddress("AA:BB:CC:DD:EE:02")!] == .absent)

        let (byName, _, _) = try mock.startClient("hci1", adapterForRegistrar: "/org/bluez/hci1")
        #expect(byName.adapter?.path == "/org/bluez/hci1")
        #expect(byName.device(DeviceAddress("AA:BB:CC:DD:EE:02")!) != nil)
        let (byAddress, _, _) = try mock.startClient(hci1Address.lowercased(), adapterForRegistrar: "/org/bluez/hci1")
        #expect(byAddress.adapter?.name == "hci1")
        #expect(byAddress.stats.cacheRebuilds == 1)
    }

    @Test("several adapters at once: each ready with its own registration; a device is heard and acted on only under the adapter it belongs to; one adapter going leaves the other ready")
    func severalAdapters() throws {
        let mock = try MockBlueZ()
        try mock.addAdapter("hci0")
        try mock.addAdapter("hci1")
        let devB = "AA:BB:CC:DD:EE:02", addrB = DeviceAddress(devB)!
        let onA = try mock.addDevice("hci0", devB)   // heard by both adapters: one object under each
        let onB = try mock.addDevice("hci1", devB)
        try mock.call("/", "org.bluez.Mock", "PairDevice", [.string("hci1"), .string(devB), .int32(0)])
        let conn = try mock.connection()
        try mock.setRegistrar("/org/bluez/hci0", conn.uniqueName)
        try mock.setRegistrar("/org/bluez/hci1", conn.uniqueName)
        let client = BlueZClient(connection: conn, adapter: "hci0 hci1", removalGrace: .milliseconds(100))
        client.adapterOfDevice = { $0 == addrB ? DeviceAddress(hci1Address) : nil }   // its bond is hci1's
        let rec = Recorder()
        rec.attach(client)
        client.setAutoConnectUUIDs([ServiceUUID.heartRate])
        client.start()
        try runUntil(mock.loop, "both adapters ready") { rec.readyCount == 2 }
        let infoB = try #require(client.readyAdapter(named: "hci1"))
        #expect(rec.has(.adapterReady(infoB, selector: "hci1")))
        #expect(client.adapter?.name == "hci0", "the first selector's adapter is the default")
        #expect(try !mock.applications("/org/bluez/hci0").isEmpty && !mock.applications("/org/bluez/hci1").isEmpty)
        #expect(client.device(addrB)?.path == onB)
        #expect(client.views(for: [addrB], on: infoB)[addrB]?.bonded == true)
        #expect(client.views(for: [addrB], on: try #require(client.readyAdapter(named: "hci0")))[addrB]?.bonded == false)

        var answered = false
        client.connect(addrB, timeout: .seconds(5)) { _ in answered = true }
        try runUntil(mock.loop, "Connect answered") { answered }
        #expect(try mock.calls(onB, "Connect").count == 1 && mock.calls(onA, "Connect").isEmpty, "Connect() goes to its adapter's object")

        // The mock's Connect() brings the link up on that object: reported as the device's.
        try runUntil(mock.loop, "linkUp on hci1") { rec.has(.linkUp(addrB)) }
        // The other adapter's object for the same address is not its link.
        let downs = { rec.count { if case .linkDown = $0 { true } else { false } } }
        let handled = client.stats.signalsHandled
        try mock.updateProperties(onA, "org.bluez.Device1", ["Connected": .bool(true)])
        try mock.updateProperties(onA, "org.bluez.Device1", ["Connected": .bool(false)])
        try runUntil(mock.loop, "handled") { client.stats.signalsHandled >= handled + 2 }
        #expect(downs() == 0 && rec.count { $0 == .linkUp(addrB) } == 1, "\(rec.events)")
        try mock.updateProperties(onB, "org.bluez.Device1", ["Connected": .bool(false)])
        try runUntil(mock.loop, "linkDown on hci1") { downs() == 1 }
        try mock.updateProperties(onB, "org.bluez.Device1", ["Connected": .bool(true)])
        try runUntil(mock.loop, "linkUp again on hci1") { rec.count { $0 == .linkUp(addrB) } == 2 }

        try mock.call("/", "org.bluez.Mock", "RemoveAdapterWithDevices", [.string("hci0")])
        try runUntil(mock.loop, "hci0 gone") { rec.has(.adapterGone(reason: .removed, address: DeviceAddress(hci0Address)!)) }
        #expect(client.isReady && client.readyAdapter(named: "hci0") == nil && client.readyAdapter(named: "hci1") != nil)
        #expect(client.adapter?.name == "hci1", "the default is now the one left")
        #expect(client.device(addrB)?.path == onB)
        #expect(downs() == 1, "hci1's link untouched: \(rec.events)")
    }

    @Test func noAdapterMeansNoReadyUntilOneAppears() throws {
        let mock = try MockBlueZ()
        let (client, recorder, conn) = try mock.startClient("hci0", waitReady: false, adapterForRegistrar: nil)
        try runUntil(mock.loop, "snapshot") { client.stats.cacheRebuilds == 1 }
        // The first settled view without the adapter is announced once (paird then sends READY=1).
        try runUntil(mock.loop, "absence announced") { !recorder.events.isEmpty }
        #expect(client.adapter == nil && recorder.events == [.adapterLost(reason: .removed)])
        try mock.addAdapter("hci0")
        try mock.setRegistrar("/org/bluez/hci0", conn.uniqueName)
        try runUntil(mock.loop, "adapterReady") { recorder.readyCount == 1 }
        #expect(client.isReady)
    }

    @Test("no adapter configured: hci0 appearing after hci1 (bluetoothd starting) replaces it before ready")
    func firstAdapterSeenIsReplacedByOneThatSortsFirst() throws {
        let mock = try MockBlueZ()
        let hci1 = try mock.addAdapter("hci1")
        try mock.updateProperties(hci1, "org.bluez.Adapter1", ["Powered": .bool(false)])
        let (client, recorder, conn) = try mock.startClient("", waitReady: false, adapterForRegistrar: nil)
        try runUntil(mock.loop, "absence announced") { !recorder.events.isEmpty }
        #expect(recorder.events == [.adapterLost(reason: .poweredOff)], "hci1 seen first, not powered")
        try mock.addAdapter("hci0")
        try mock.addDevice("hci0", devA)
        try mock.setRegistrar("/org/bluez/hci0", conn.uniqueName)
        try runUntil(mock.loop, "adapterReady") { recorder.readyCount == 1 }
        #expect(client.adapter?.name == "hci0")
        #expect(client.device(addrA) != nil)
    }

    @Test func signalsBecomeTypedEvents() throws {
        let mock = try MockBlueZ()
        try mock.addAdapter()
        let (client, rec, _) = try mock.startClient()
        try mock.addDevice("hci0", devA)
        try runUntil(mock.loop, "deviceFound") { rec.count { if case .deviceFound(let d) = $0 { d.address == addrA } else { false } } == 1 }

        try mock.updateProperties(pathA, "org.bluez.Device1", ["Connected": .bool(true)])
        try runUntil(mock.loop, "connected") { rec.has(.linkUp(addrA)) }
        try mock.updateProperties(pathA, "org.bluez.Device1", ["ServicesResolved": .bool(true)])
        try runUntil(mock.loop, "resolved") { rec.has(.servicesResolved(addrA)) }
        try mock.updateProperties(pathA, "org.bluez.Device1", ["Paired": .bool(true)])
        try runUntil(mock.loop, "bonded") { rec.has(.bondChanged(addrA, bonded: true)) }
        // Bonded (5.65+): Paired && !Bonded is not a bond.
        try mock.addProperties(pathA, "org.bluez.Device1", ["Bonded": .bool(true)])
        try mock.updateProperties(pathA, "org.bluez.Device1", ["Bonded": .bool(false)])
        try runUntil(mock.loop, "bond lost") { rec.has(.bondChanged(addrA, bonded: false)) }
        // The link stays up while its services go (the wearable's GATT restarting): servicesLost.
        try mock.updateProperties(pathA, "org.bluez.Device1", ["ServicesResolved": .bool(false)])
        try runUntil(mock.loop, "services lost") { rec.has(.servicesLost(addrA)) }
        try mock.updateProperties(pathA, "org.bluez.Device1", ["ServicesResolved": .bool(true)])
        try runUntil(mock.loop, "resolved again") { rec.count { $0 == .servicesResolved(addrA) } == 2 }
        #expect(client.views(for: [addrA])[addrA] == BlueZDeviceView(exists: true, bonded: false, connected: true, servicesResolved: true))

        // A repeated value is not a change.
        let before = rec.events.count
        let handled = client.stats.signalsHandled
        try mock.updateProperties(pathA, "org.bluez.Device1", ["Connected": .bool(true), "Alias": .string("Strap")])
        // Device1.Disconnected (≥ 5.83) is no event of its own: its reason goes into the linkDown after it.
        try mock.emit(pathA, "org.bluez.Device1", "Disconnected", "ss", [.string("org.bluez.Reason.Timeout"), .string("Connection timeout")])
        try runUntil(mock.loop, "PropertiesChanged and Disconnected handled") { client.stats.signalsHandled >= handled + 2 }
        #expect(rec.events.count == before)
        #expect(client.device(addrA)?.name == "Strap")

        try mock.updateProperties(pathA, "org.bluez.Device1", ["Connected": .bool(false), "ServicesResolved": .bool(false)])
        let timeout = DisconnectClassifier.Evidence(reason: DisconnectClassifier.Reason(name: "org.bluez.Reason.Timeout"),
                                                    stillBonded: false, deviceExists: true, adapterUp: true)
        try runUntil(mock.loop, "link down") { rec.has(.linkDown(addrA, timeout)) }
        // Its services went with the link: no servicesLost for a link that is down (the one
        // counted is from the services going while the link stayed, above).
        #expect(rec.count { if case .servicesLost = $0 { true } else { false } } == 1)

        // Battery1 appears with the link and reports its percentage.
        try mock.addProperties(pathA, "org.bluez.Battery1", ["Percentage": .byte(77)])
        try mock.interfacesAdded(pathA, ["org.bluez.Battery1": ["Percentage": .byte(77)]])
        try runUntil(mock.loop, "battery") { rec.has(.battery(addrA, 77)) }
        #expect(client.device(addrA)?.battery == 77)

        var removed: BlueZFailure?? = .none
        client.removeDevice(addrA) { removed = .some($0) }
        try runUntil(mock.loop, "RemoveDevice") { removed != nil }
        #expect(removed == .some(nil))
        try runUntil(mock.loop, "deviceRemoved") { rec.has(.deviceRemoved(addrA)) }
        #expect(client.device(addrA) == nil)
        #expect(client.views(for: [addrA])[addrA] == .absent)
    }

    /// One adapter, the client started, device A linked (`linkUp` seen).
    func linkedDeviceA() throws -> (MockBlueZ, BlueZClient, Recorder) {
        let mock = try MockBlueZ()
        try mock.addAdapter()
        let (client, rec, _) = try mock.startClient()
        try mock.addDevice("hci0", devA)
        try mock.updateProperties(pathA, "org.bluez.Device1", ["Connected": .bool(true)])
        try runUntil(mock.loop, "connected") { rec.has(.linkUp(addrA)) }
        return (mock, client, rec)
    }

    /// paird's Disconnect() of device A, answered.
    func askDrop(_ client: BlueZClient, _ mock: MockBlueZ) throws {
        var done = false
        client.disconnect(addrA) { _ in done = true }
        try runUntil(mock.loop, "Disconnect answered") { done }
    }

    @Test("a link paird asked to drop that goes down unseen: BlueZ's next Connected=true is a new link (BlueZ 5.66 after a restart)")
    func droppedLinkGoneUnseen() throws {
        let (mock, client, rec) = try linkedDeviceA()
        // Repeated without paird's Disconnect: no change (as before).
        var handled = client.stats.signalsHandled
        try mock.updateProperties(pathA, "org.bluez.Device1", ["Connected": .bool(true)])
        try runUntil(mock.loop, "handled") { client.stats.signalsHandled > handled }
        #expect(rec.count { $0 == .linkUp(addrA) } == 1)
        // paird drops it; BlueZ says nothing of it going, then Connected=true: the next link.
        try askDrop(client, mock)
        try mock.updateProperties(pathA, "org.bluez.Device1", ["Connected": .bool(true)])
        try runUntil(mock.loop, "the next link") { rec.count { $0 == .linkUp(addrA) } == 2 }
        // Only once: the request is spent.
        handled = client.stats.signalsHandled
        try mock.updateProperties(pathA, "org.bluez.Device1", ["Connected": .bool(true)])
        try runUntil(mock.loop, "handled") { client.stats.signalsHandled > handled }
        #expect(rec.count { $0 == .linkUp(addrA) } == 2)
    }

    @Test("a drop paird asked for survives the address resolving to its identity; the device's link facts are one entry, gone once empty")
    func droppedLinkAcrossAddressResolution() throws {
        let (mock, client, rec) = try linkedDeviceA()
        try askDrop(client, mock)
        #expect(client.links == [addrA: DeviceLink(dropRequested: true)])
        let identity = DeviceAddress("F3:5A:B1:00:00:02")!
        try mock.updateProperties(pathA, "org.bluez.Device1", ["Address": .string(identity.description), "AddressType": .string("random")])
        try runUntil(mock.loop, "addressChanged") { rec.has(.addressChanged(addrA, to: identity, .random)) }
        #expect(client.links == [identity: DeviceLink(dropRequested: true)])
        // BlueZ says nothing of the old link going; its Connected=true is the next link's.
        try mock.updateProperties(pathA, "org.bluez.Device1", ["Connected": .bool(true)])
        try runUntil(mock.loop, "the next link, by identity") { rec.has(.linkUp(identity)) }
        #expect(client.links.isEmpty)
    }

    @Test func powerOffAndOn() throws {
        let mock = try MockBlueZ()
        try mock.addAdapter()
        let (client, rec, _) = try mock.startClient()
        try mock.updateProperties("/org/bluez/hci0", "org.bluez.Adapter1", ["Powered": .bool(false)])
        try runUntil(mock.loop, "adapterGone") { rec.has(.adapterLost(reason: .poweredOff, address: DeviceAddress(hci0Address))) }
        #expect(!client.isReady && client.adapter?.powered == false)
        try mock.updateProperties("/org/bluez/hci0", "org.bluez.Adapter1", ["Powered": .bool(true)])
        try runUntil(mock.loop, "adapterReady again") { rec.readyCount == 2 }
        #expect(rec.goneCount == 1)
        #expect(client.stats.applicationRegistrations == 1, "a power cycle keeps the registration")
    }

    @Test func adapterRemovedWithDevicesReportsNoRemovals() throws {
        let mock = try MockBlueZ()
        try mock.addAdapter()
        try mock.addDevice("hci0", devA)
        let (client, rec, conn) = try mock.startClient()
        try mock.call("/", "org.bluez.Mock", "RemoveAdapterWithDevices", [.string("hci0")])
        try runUntil(mock.loop, "adapterGone") { rec.has(.adapterLost(reason: .removed, address: DeviceAddress(hci0Address))) }
        // Let the removal grace pass: the device removal must not surface.
        var graceOver = false
        _ = mock.loop.schedule(after: .milliseconds(300)) { graceOver = true }
        try runUntil(mock.loop, "grace") { graceOver }
        #expect(!rec.events.contains { if case .deviceRemoved = $0 { true } else { false } })
        #expect(client.adapter == nil)

        try mock.addAdapter("hci0")
        try mock.setRegistrar("/org/bluez/hci0", conn.uniqueName)
        try runUntil(mock.loop, "adapterReady again") { rec.readyCount == 2 }
        // The first attempt may race the test adding GattManager1 to the new adapter: retried.
        try runUntil(mock.loop, "application registered") { client.registeredAutoConnectUUIDs != nil }
        #expect(client.stats.applicationRegistrations == 2, "a new adapter object needs the application again")
        #expect(try mock.applications("/org/bluez/hci0")["/org/paird/app"] == [ServiceUUID.heartRate])
    }

    @Test func adapterUnpluggedSlowlyReportsNoRemovals() throws {
        // A controller unplugged under BlueZ 5.66 (the bed's paird_replug): Connected=false, the
        // device's objects removed, and only then Powered=false and the adapter's removal, here
        // 0.6 s after the device's (0.19 s / 0.44 s as BlueZ sent them on the bed; paird reads
        // them later under load). The default grace outlasts it: the removal is not a lost bond.
        let mock = try MockBlueZ()
        try mock.addAdapter()
        try mock.addDevice("hci0", devA)
        let (_, rec, _) = try mock.startClient(removalGrace: BlueZClient.defaultRemovalGrace)
        try mock.updateProperties(pathA, "org.bluez.Device1", ["Connected": .bool(true)])
        try runUntil(mock.loop, "connected") { rec.has(.linkUp(addrA)) }
        try mock.updateProperties(pathA, "org.bluez.Device1", ["Connected": .bool(false)])
        try mock.interfacesRemoved(pathA, ["org.bluez.Device1", "org.bluez.Battery1"])
        var later = false
        _ = mock.loop.schedule(after: .milliseconds(600)) { later = true }
        try runUntil(mock.loop, "0.6 s after the device's removal") { later }
        try mock.updateProperties("/org/bluez/hci0", "org.bluez.Adapter1", ["Powered": .bool(false)])
        try mock.call("/", "org.bluez.Mock", "RemoveAdapterWithDevices", [.string("hci0")])
        try runUntil(mock.loop, "adapterGone") { rec.goneCount == 1 }
        var graceOver = false
        _ = mock.loop.schedule(after: BlueZClient.defaultRemovalGrace + .milliseconds(200)) { graceOver = true }
        try runUntil(mock.loop, "grace", limit: .seconds(10)) { graceOver }
        #expect(!rec.events.contains { if case .deviceRemoved = $0 { true } else { false } }, "\(rec.events)")
    }

    @Test func bluetoothdRestartRebuildsAndReregisters() throws {
        let mock = try MockBlueZ()
        try mock.addAdapter()
        try mock.addDevice("hci0", devA)
        let (client, rec, conn) = try mock.startClient()
        #expect(try mock.calls("/org/bluez", "RegisterAgent").first == [.objectPath("/org/paird/agent"), .string("KeyboardDisplay")])
        #expect(try mock.calls("/org/bluez", "RequestDefaultAgent").isEmpty, "a desktop's own agent stays the default")

        mock.stopMock()
        try runUntil(mock.loop, "adapterGone") { rec.has(.adapterLost(reason: .bluetoothdGone, address: DeviceAddress(hci0Address))) }
        #expect(client.adapter == nil && client.device(addrA) == nil)
        #expect(client.views(for: [addrA])[addrA] == .absent)
        var failure: BlueZFailure?? = .none
        client.connect(addrA, timeout: .seconds(45)) { failure = .some($0) }
        try runUntil(mock.loop, "connect while gone") { failure != nil }
        #expect(failure == .some(.adapterUnavailable))

        try mock.startMock()
        try mock.addAdapter()
        try mock.setRegistrar("/org/bluez/hci0", conn.uniqueName)
        try mock.addDevice("hci0", devA)
        try runUntil(mock.loop, "adapterReady again", limit: .seconds(15)) { rec.readyCount == 2 }
        try runUntil(mock.loop, "application registered") { client.registeredAutoConnectUUIDs != nil }
        #expect(client.stats.agentRegistrations == 2)
        #expect(client.stats.applicationRegistrations == 2)
        #expect(try mock.calls("/org/bluez", "RegisterAgent").count == 1, "registered with the new bluetoothd")
        #expect(try mock.applications("/org/bluez/hci0")["/org/paird/app"] == [ServiceUUID.heartRate])
        try runUntil(mock.loop, "device back in cache") { client.device(addrA) != nil }
        // Order: ready, gone, ready.
        let lifecycle = rec.events.filter { if case .adapterReady = $0 { true } else if case .adapterGone = $0 { true } else if case .adapterLost = $0 { true } else { false } }
        #expect(lifecycle.count == 3)
    }

    @Test func bluetoothdStoppingInOrderReportsGoneBeforeAnyRemoval() throws {
        // What a SIGTERM'd bluetoothd sends (testbed.md): Connected=false, Powered=false,
        // InterfacesRemoved for every object, then NameOwnerChanged.
        let mock = try MockBlueZ()
        try mock.addAdapter()
        try mock.addDevice("hci0", devA)
        let (_, rec, _) = try mock.startClient()
        try mock.updateProperties(pathA, "org.bluez.Device1", ["Connected": .bool(true)])
        try runUntil(mock.loop, "connected") { rec.has(.linkUp(addrA)) }
        try mock.updateProperties(pathA, "org.bluez.Device1", ["Connected": .bool(false)])
        try mock.updateProperties("/org/bluez/hci0", "org.bluez.Adapter1", ["Powered": .bool(false)])
        try mock.interfacesRemoved(pathA, ["org.bluez.Device1"])
        try mock.interfacesRemoved("/org/bluez/hci0", ["org.bluez.Adapter1"])
        mock.stopMock()
        try mock.waitForMockGone()
        try runUntil(mock.loop, "gone") { rec.goneCount == 1 }
        var graceOver = false
        _ = mock.loop.schedule(after: .milliseconds(300)) { graceOver = true }
        try runUntil(mock.loop, "grace") { graceOver }
        let tail = rec.events.filter { if case .autoConnectArmed = $0 { false } else { true } }.suffix(2)
        // The reason of the earlier Disconnected was used up by that link's linkDown: none here.
        let lost = DisconnectClassifier.Evidence(reason: nil, stillBonded: false, deviceExists: true, adapterUp: true)
        #expect(Array(tail) == [.linkDown(addrA, lost), .adapterLost(reason: .poweredOff, address: DeviceAddress(hci0Address))])
        #expect(rec.goneCount == 1)
    }

    @Test func discoveryFilterIsSent() throws {
        let mock = try MockBlueZ()
        try mock.addAdapter()
        let (client, rec, _) = try mock.startClient()
        var done: BlueZFailure?? = .none
        client.startDiscovery(address: addrA) { done = .some($0) }
        try runUntil(mock.loop, "discovery") { done != nil }
        #expect(done == .some(nil))
        let filter = try #require(mock.calls("/org/bluez/hci0", "SetDiscoveryFilter").last?.first?.dictionary)
        #expect(filter["UUIDs"] == nil, "no UUIDs: BlueZ 5.87 segfaults on them (bluez/bluez#2282); paird matches them itself")
        #expect(filter["Transport"]?.unwrapped.string == "le")
        #expect(filter["DuplicateData"]?.unwrapped.bool == false)
        #expect(filter["Pattern"]?.unwrapped.string == devA)
        #expect(try mock.calls("/org/bluez/hci0", "StartDiscovery").count == 1)
        // While discovering, new advertisement data is a deviceFound.
        try mock.addDevice("hci0", devA)
        try mock.updateProperties(pathA, "org.bluez.Device1", ["RSSI": .int16(-50)])
        try runUntil(mock.loop, "rssi update") {
            rec.count { if case .deviceFound(let d) = $0 { d.rssi == -50 } else { false } } == 1
        }
        client.stopDiscovery()
        try eventually(mock.loop, "StopDiscovery") { try mock.calls("/org/bluez/hci0", "StopDiscovery").count == 1 }
    }

    @Test("deviceFound carries only an RSSI heard during our own scan: a value BlueZ kept from before is none")
    func rssiOnlyFromThisScan() throws {
        let mock = try MockBlueZ()
        try mock.addAdapter()
        try mock.addDevice("hci0", devA) // known before the scan, with the template's RSSI -79
        let (client, rec, _) = try mock.startClient()
        #expect(client.device(addrA)?.rssi == -79, "the cache keeps what BlueZ says")
        func found() -> [Int?] { rec.events.compactMap { if case .deviceFound(let d) = $0, d.address == addrA { d.rssi } else { nil } } }
        var done: BlueZFailure?? = .none
        client.startDiscovery(address: nil) { done = .some($0) }
        try runUntil(mock.loop, "discovery") { done != nil }
        // New advertising data of a device not heard in this scan: found, without an RSSI.
        try mock.updateProperties(pathA, "org.bluez.Device1", ["Name": .string("Pulse-2")])
        try runUntil(mock.loop, "name update") { found().count == 1 }
        #expect(found() == [nil])
        // Heard: RSSI from this scan, kept for its later updates.
        try mock.updateProperties(pathA, "org.bluez.Device1", ["RSSI": .int16(-50)])
        try mock.updateProperties(pathA, "org.bluez.Device1", ["Alias": .string("Pulse-3")])
        try runUntil(mock.loop, "rssi, alias") { found().count == 3 }
        #expect(found() == [nil, -50, -50])
        // 127 is HCI's "not available" (the bed's btvirt sends it for every advertisement): heard.
        try mock.updateProperties(pathA, "org.bluez.Device1", ["RSSI": .int16(127)])
        try runUntil(mock.loop, "rssi 127") { found().count == 4 }
        #expect(found().last == .some(127))
        // A new scan starts from nothing.
        client.stopDiscovery()
        done = .none
        client.startDiscovery(address: nil) { done = .some($0) }
        try runUntil(mock.loop, "discovery again") { done != nil }
        try mock.updateProperties(pathA, "org.bluez.Device1", ["Name": .string("Pulse-4")])
        try runUntil(mock.loop, "name update") { found().count == 5 }
        #expect(found().last == .some(nil))
        // A device object that appears while we scan was made by an advertisement: its RSSI counts.
        let devB = "AA:BB:CC:DD:EE:0B"
        try mock.addDevice("hci0", devB)
        try runUntil(mock.loop, "new object") { rec.events.contains { if case .deviceFound(let d) = $0 { d.address.description == devB } else { false } } }
        #expect(rec.events.contains { if case .deviceFound(let d) = $0 { d.address.description == devB && d.rssi == -79 } else { false } })
        // One that appears outside a scan (paired with another tool, bluetoothd loading its store): none.
        client.stopDiscovery()
        let devC = "AA:BB:CC:DD:EE:0C"
        try mock.addDevice("hci0", devC)
        try runUntil(mock.loop, "object outside a scan") { rec.events.contains { if case .deviceFound(let d) = $0 { d.address.description == devC } else { false } } }
        #expect(rec.events.contains { if case .deviceFound(let d) = $0 { d.address.description == devC && d.rssi == nil } else { false } })
    }

    @Test func requestsAndErrorMapping() throws {
        let mock = try MockBlueZ()
        try mock.addAdapter()
        try mock.addDevice("hci0", devA)
        let (client, _, _) = try mock.startClient()

        func run(_ what: String, _ body: (@escaping (BlueZFailure?) -> Void) -> Void) throws -> BlueZFailure? {
            var out: BlueZFailure?? = .none
            body { out = .some($0) }
            try runUntil(mock.loop, what) { out != nil }
            return out!
        }
        func failing(_ method: String, _ name: String, _ message: String) throws {
            try mock.addMethod(pathA, "org.bluez.Device1", method, in: "", out: "", code:
                "raise dbus.exceptions.DBusException('\(message)', name='\(name)')")
        }

        #expect(try run("connect") { client.connect(addrA, timeout: .seconds(45), reply: $0) } == nil)
        #expect(try run("disconnect") { client.disconnect(addrA, reply: $0) } == nil)
        #expect(try run("disconnect again") { client.disconnect(addrA, reply: $0) } == .notConnected)
        var pairedAs: DeviceAddress?
        #expect(try run("pair") { done in client.pair(addrA, timeout: .seconds(30)) { f, a in pairedAs = a; done(f) } } == nil)
        #expect(pairedAs == addrA)
        #expect(try run("pair again") { done in client.pair(addrA, timeout: .seconds(30)) { f, _ in done(f) } } == .alreadyExists)

        let table: [(String, String, String, BlueZFailure)] = [
            ("Connect", "org.bluez.Error.Failed", "le-connection-abort-by-local", .abortedByLocal),
            ("Connect", "org.bluez.Error.Failed", "br-connection-canceled", .canceled),
            ("Connect", "org.bluez.Error.Failed", "Operation already in progress", .busy),
            ("Connect", "org.bluez.Error.Failed", "le-connection-adapter-not-powered", .adapterUnavailable),
            ("Connect", "org.bluez.Error.InProgress", "In Progress", .busy),
            ("Pair", "org.bluez.Error.AuthenticationFailed", "Authentication Failed", .authentication),
            ("Pair", "org.bluez.Error.AuthenticationCanceled", "Authentication Canceled", .authenticationAborted),
            ("Pair", "org.bluez.Error.ConnectionAttemptFailed", "Page Timeout", .connectTimeout),
            ("Pair", "org.bluez.Error.Failed", "Software caused connection abort", .abortedByLocal),
        ]
        for (method, name, message, expected) in table {
            try failing(method, name, message)
            let got = try run("\(method) \(name)") { done in
                if method == "Connect" { client.connect(addrA, timeout: .seconds(45), reply: done) }
                else { client.pair(addrA, timeout: .seconds(30)) { f, _ in done(f) } }
            }
            #expect(got == expected, "\(name) \"\(message)\"")
        }
        // Every issued call counts (1 + the table's 5 Connects; 2 + 4 Pairs).
        #expect(client.stats.connectCalls[addrA] == 6)
        #expect(client.stats.pairCalls[addrA] == 6)

        // A device BlueZ does not know: UnknownObject → deviceGone.
        let ghost = DeviceAddress("AA:BB:CC:DD:EE:99")!
        #expect(try run("connect ghost") { client.connect(ghost, timeout: .seconds(45), reply: $0) } == .deviceGone)
        #expect(try run("remove ghost") { client.removeDevice(ghost, reply: $0) } != nil)

        // Trusted goes through Properties.Set and comes back as a property change.
        #expect(try run("trust") { client.setTrusted(addrA, true, reply: $0) } == nil)
        try runUntil(mock.loop, "Trusted in cache") { client.device(addrA)?.trusted == true }

        // ServicesResolved read with Get (the mock keeps what UpdateProperties set).
        var resolved: Bool?? = .none
        client.readServicesResolved(addrA) { resolved = .some($0) }
        try runUntil(mock.loop, "Get") { resolved != nil }
        #expect(resolved == .some(false))
        try mock.updateProperties(pathA, "org.bluez.Device1", ["ServicesResolved": .bool(true)])
        resolved = .none
        client.readServicesResolved(addrA) { resolved = .some($0) }
        try runUntil(mock.loop, "Get") { resolved != nil }
        #expect(resolved == .some(true))

        client.cancelPairing(addrA)
        try eventually(mock.loop, "CancelPairing") { try mock.calls(pathA, "CancelPairing").count == 1 }
    }
}
