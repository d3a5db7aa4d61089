import Foundation
import Testing
@testable import BlueZ
import DBus
import EventLoop
import TestSupport
import PairingCore

/// The second half of `BlueZClientTests` (the same serialized suite): a link's set-up by UUID,
/// subscriptions ending and coming back, the agent, address resolution, callers the client must
/// not obey, and signals it must survive.
extension BlueZClientTests {
    @Test func setUpLinkFindsCharacteristicsByUUID() throws {
        let mock = try MockBlueZ()
        try mock.addAdapter()
        try mock.addDevice("hci0", devA)
        try mock.addGatt(device: pathA)
        let (client, rec, _) = try mock.startClient()
        let hrm = pathA + "/service000a/char000b"
        let bat = pathA + "/service000e/char000f"

        var done: BlueZFailure?? = .none
        client.setUpLink(addrA, subscribe: ["2a37", "0000ffff-0000-1000-8000-00805f9b34fb"], battery: true) { done = .some($0) }
        try runUntil(mock.loop, "setUpLink") { done != nil }
        #expect(done == .some(nil), "a missing characteristic is not a failure")
        #expect(rec.has(.characteristicsMissing(addrA, ["0000ffff-0000-1000-8000-00805f9b34fb"])), "but it is said")
        #expect(try mock.calls(hrm, "StartNotify").count == 1)
        #expect(try mock.calls(bat, "StartNotify").count == 1)
        #expect(try mock.calls(bat, "ReadValue").count == 1)
        #expect(rec.has(.battery(addrA, 85)))
        #expect(client.device(addrA)?.battery == 85)

        try mock.updateProperties(hrm, MockBlueZ.gattChar, ["Value": .bytes([0x06, 72])])
        try runUntil(mock.loop, "notification") {
            rec.has(.notification(addrA, characteristic: ServiceUUID.heartRateMeasurement, value: [0x06, 72]))
        }
        try mock.updateProperties(bat, MockBlueZ.gattChar, ["Value": .bytes([84])])
        try runUntil(mock.loop, "battery notification") { rec.has(.battery(addrA, 84)) }
        #expect(rec.count { $0 == .linkProven(addrA) } == 1, "the battery read proved the link; once per link")

        // Handles move (firmware update): objects vanish and come back elsewhere.
        for path in [hrm, pathA + "/service000a", bat, pathA + "/service000e"] {
            try mock.call("/", MockBlueZ.mockIface, "RemoveObject", [.objectPath(path)])
        }
        try mock.interfacesRemoved(hrm, [MockBlueZ.gattChar])
        try mock.interfacesRemoved(bat, [MockBlueZ.gattChar])
        try mock.addGatt(device: pathA, hrService: "service0010", hrChar: "char0011", batService: "service0020", batChar: "char0021", batteryLevel: 60)
        let moved = pathA + "/service0010/char0011"
        try runUntil(mock.loop, "moved characteristics in cache") {
            client.characteristics(of: addrA).map(\.path) == [moved, pathA + "/service0020/char0021"]
        }
        // The link is still set up: the moved characteristics are subscribed to (and the battery
        // read) without a new setUpLink, or notifications would silently stop.
        try eventually(mock.loop, "late StartNotify on the moved characteristics") {
            try mock.calls(moved, "StartNotify").count == 1
                && mock.calls(pathA + "/service0020/char0021", "StartNotify").count == 1
        }
        try runUntil(mock.loop, "battery re-read after the move") { rec.has(.battery(addrA, 60)) }
        #expect(client.stats.lateSubscriptions == 2)
        try runUntil(mock.loop, "the machine told it appeared") { rec.has(.characteristicAppeared(addrA, ServiceUUID.heartRateMeasurement)) }
        try mock.updateProperties(moved, MockBlueZ.gattChar, ["Value": .bytes([0x06, 75])])
        try runUntil(mock.loop, "notification from the moved characteristic") {
            rec.has(.notification(addrA, characteristic: ServiceUUID.heartRateMeasurement, value: [0x06, 75]))
        }
        done = .none
        client.setUpLink(addrA, subscribe: [ServiceUUID.heartRateMeasurement], battery: true) { done = .some($0) }
        try runUntil(mock.loop, "setUpLink after move") { done != nil }
        #expect(done == .some(nil))
        #expect(try mock.calls(moved, "StartNotify").count == 2)

        // Once the link is down, characteristics appearing (BlueZ restoring its cache on the
        // next connection) wait for the next setUpLink.
        try mock.updateProperties(pathA, "org.bluez.Device1", ["ServicesResolved": .bool(true)])
        try mock.updateProperties(pathA, "org.bluez.Device1", ["ServicesResolved": .bool(false), "Connected": .bool(false)])
        try runUntil(mock.loop, "link down seen") { rec.count { if case .linkDown(addrA, _) = $0 { true } else { false } } > 0 }
        try mock.addObject(pathA + "/service0030", MockBlueZ.gattService, ["UUID": .string(ServiceUUID.heartRate), "Primary": .bool(true), "Device": .objectPath(pathA)])
        let later = pathA + "/service0030/char0031"
        try mock.addObject(later, MockBlueZ.gattChar, [
            "UUID": .string(ServiceUUID.heartRateMeasurement), "Service": .objectPath(pathA + "/service0030"), "Value": .bytes([]),
            "Notifying": .bool(false), "Flags": .stringArray(["notify"]),
        ], methods: [("StartNotify", "", "", ""), ("StopNotify", "", "", "")])
        try runUntil(mock.loop, "new characteristic in cache") { client.characteristics(of: addrA).map(\.path).contains(later) }
        #expect(try mock.calls(later, "StartNotify").isEmpty)
        #expect(client.stats.lateSubscriptions == 2)
        #expect(rec.count { $0 == .linkProven(addrA) } == 1, "notifications on the same link prove nothing new")
        try mock.updateProperties(later, MockBlueZ.gattChar, ["Value": .bytes([0x06, 73])])
        try runUntil(mock.loop, "the next link proven by its first notification") { rec.count { $0 == .linkProven(addrA) } == 2 }

        // A characteristic that fails StartNotify fails the set-up.
        try mock.addMethod(moved, MockBlueZ.gattChar, "StartNotify", in: "", out: "", code:
            "raise dbus.exceptions.DBusException('Not paired', name='org.bluez.Error.NotPermitted')")
        done = .none
        client.setUpLink(addrA, subscribe: ["2a37"], battery: false) { done = .some($0) }
        try runUntil(mock.loop, "setUpLink failing") { done != nil }
        #expect(done == .some(.authentication))

        let ghost = DeviceAddress("AA:BB:CC:DD:EE:99")!
        done = .none
        client.setUpLink(ghost, subscribe: ["2a37"], battery: true) { done = .some($0) }
        try runUntil(mock.loop, "setUpLink ghost") { done != nil }
        #expect(done == .some(.deviceGone))
    }

    /// Issue 18: BlueZ ending a wanted subscription while the link stays up is reported (and only
    /// then); `resubscribe` makes it again (StopNotify first where BlueZ still shows it notifying);
    /// `probe` reads Battery Level. The mock's Notifying changes only as the test sets it (real
    /// BlueZ flips it on StartNotify/StopNotify and when a notify session ends).
    @Test func subscriptionEndedResubscribeAndProbe() throws {
        let mock = try MockBlueZ()
        try mock.addAdapter()
        try mock.addDevice("hci0", devA)
        try mock.addGatt(device: pathA)
        let (client, rec, _) = try mock.startClient()
        let hrm = pathA + "/service000a/char000b"
        let bat = pathA + "/service000e/char000f"
        try mock.updateProperties(pathA, "org.bluez.Device1", ["Connected": .bool(true), "ServicesResolved": .bool(true)])
        try runUntil(mock.loop, "link up") { rec.has(.servicesResolved(addrA)) }

        var done: BlueZFailure?? = .none
        client.setUpLink(addrA, subscribe: ["2a37"], battery: true) { done = .some($0) }
        try runUntil(mock.loop, "setUpLink") { done != nil }
        try mock.updateProperties(hrm, MockBlueZ.gattChar, ["Notifying": .bool(true)])
        try mock.updateProperties(hrm, MockBlueZ.gattChar, ["Notifying": .bool(false)])
        try runUntil(mock.loop, "subscriptionEnded") {
            rec.has(.subscriptionEnded(addrA, characteristic: ServiceUUID.heartRateMeasurement))
        }
        #expect(client.stats.subscriptionsEnded == 1)

        // Made again: Notifying is false, so StartNotify alone.
        done = .none
        client.resubscribe(addrA, characteristic: ServiceUUID.heartRateMeasurement) { done = .some($0) }
        try runUntil(mock.loop, "resubscribe") { done != nil }
        #expect(done == .some(nil))
        #expect(try mock.calls(hrm, "StartNotify").count == 2)
        #expect(try mock.calls(hrm, "StopNotify").isEmpty)
        // BlueZ still shows it notifying (a session lost inside BlueZ): StopNotify, then StartNotify.
        try mock.updateProperties(hrm, MockBlueZ.gattChar, ["Notifying": .bool(true)])
        var barrier: Bool?? = .none   // a call's reply comes after the signal the mock sent before it
        client.readServicesResolved(addrA) { barrier = .some($0) }
        try runUntil(mock.loop, "Notifying true in cache") { barrier != nil }
        done = .none
        client.resubscribe(addrA, characteristic: ServiceUUID.heartRateMeasurement) { done = .some($0) }
        try runUntil(mock.loop, "resubscribe 2") { done != nil }
        #expect(try mock.calls(hrm, "StopNotify").count == 1)
        #expect(try mock.calls(hrm, "StartNotify").count == 3)
        // Refused: the failure is answered (the daemon feeds it back as another end).
        try mock.addMethod(hrm, MockBlueZ.gattChar, "StartNotify", in: "", out: "", code:
            "raise dbus.exceptions.DBusException('Failed', name='org.bluez.Error.Failed')")
        try mock.updateProperties(hrm, MockBlueZ.gattChar, ["Notifying": .bool(false)])
        done = .none
        client.resubscribe(addrA, characteristic: ServiceUUID.heartRateMeasurement) { done = .some($0) }
        try runUntil(mock.loop, "resubscribe refused") { done != nil }
        #expect(done != .some(nil))

        // Probe: reads Battery Level.
        var probed: ProbeResult?
        client.probe(addrA, characteristic: ServiceUUID.heartRateMeasurement, timeout: .seconds(5)) { probed = $0 }
        try runUntil(mock.loop, "probe") { probed != nil }
        #expect(probed == .answered)
        #expect(try mock.calls(bat, "ReadValue").count == 2, "the set-up's read and the probe's")
        try mock.addMethod(bat, MockBlueZ.gattChar, "ReadValue", in: "a{sv}", out: "ay", code:
            "raise dbus.exceptions.DBusException('Not connected', name='org.bluez.Error.Failed')")
        probed = nil
        client.probe(addrA, characteristic: ServiceUUID.heartRateMeasurement, timeout: .seconds(5)) { probed = $0 }
        try runUntil(mock.loop, "probe failing") { probed != nil }
        if case .failed? = probed {} else { Issue.record("expected a failed probe, got \(String(describing: probed))") }

        // The link goes down: its subscriptions ending is no event.
        let ended = client.stats.subscriptionsEnded
        #expect(ended == 2, "the end before the refused resubscribe was one too")
        try mock.updateProperties(hrm, MockBlueZ.gattChar, ["Notifying": .bool(true)])
        try mock.updateProperties(pathA, "org.bluez.Device1", ["ServicesResolved": .bool(false), "Connected": .bool(false)])
        try runUntil(mock.loop, "link down") { rec.count { if case .linkDown(addrA, _) = $0 { true } else { false } } > 0 }
        try mock.updateProperties(hrm, MockBlueZ.gattChar, ["Notifying": .bool(false)])
        try mock.updateProperties(bat, MockBlueZ.gattChar, ["Value": .bytes([50])])
        try runUntil(mock.loop, "a later signal") { rec.has(.battery(addrA, 50)) || client.stats.subscriptionsEnded > ended }
        #expect(client.stats.subscriptionsEnded == ended)
    }

    /// The agent decides nothing: each question becomes an event, and its reply is what the
    /// machine answers (`answerAgent`), however late; BlueZ's Cancel voids what is pending.
    @Test func agentHandsEachQuestionOnAndRepliesWithTheAnswer() throws {
        let mock = try MockBlueZ()
        try mock.addAdapter()
        try mock.addDevice("hci0", devA)
        let (client, rec, conn) = try mock.startClient()
        func ask(_ method: String, _ expected: AgentQuestion, number: UInt32 = 123_456) throws -> (token: Int, request: UInt64) {
            let before = rec.events.count
            let token = try mock.startAgentCall(of: conn.uniqueName, method, device: pathA, number: number)
            var request: UInt64?
            try runUntil(mock.loop, "\(method) handed on") {
                for case .agentAsked(let a, let r, let q) in rec.events.dropFirst(before) where a == addrA && q == expected { request = r }
                return request != nil
            }
            #expect(try mock.agentReply(token) == nil, "\(method) waits for the machine's answer")
            return (token, request!)
        }
        func reply(_ token: Int) throws -> String {
            for _ in 0..<200 { // polled between turns of the loop (the reply travels through the mock)
                if let r = try mock.agentReply(token) { return r }
                var tick = false
                let timer = mock.loop.schedule(after: .milliseconds(50)) { tick = true }
                try runUntil(mock.loop, "tick") { tick }
                timer.cancel()
            }
            throw TimedOut(what: "agent reply \(token)")
        }

        var (token, request) = try ask("RequestPasskey", .enterPasskey)
        client.answerAgent(request, .passkey(654_321))
        #expect(try reply(token) == "ok 654321")

        (token, request) = try ask("RequestConfirmation", .confirmPasskey(42), number: 42)
        client.answerAgent(request, .reject("the numbers differ"))
        #expect(try reply(token) == "org.bluez.Error.Rejected")

        (token, request) = try ask("RequestAuthorization", .authorizePairing)
        client.answerAgent(request, .accept)
        #expect(try reply(token) == "ok")
        client.answerAgent(request, .reject("twice")) // a second answer to the same call: nothing

        (token, request) = try ask("DisplayPasskey", .displayPasskey(7, entered: 0), number: 7)
        client.answerAgent(request, .accept)
        #expect(try reply(token) == "ok")

        // BlueZ's Cancel: the pending question is dropped (Canceled) and the machine told.
        (token, request) = try ask("AuthorizeService", .authorizeService("0000180d-0000-1000-8000-00805f9b34fb"))
        let cancel = try mock.startAgentCall(of: conn.uniqueName, "Cancel", device: pathA)
        #expect(try reply(cancel) == "ok")
        #expect(try reply(token) == "org.bluez.Error.Canceled")
        #expect(rec.has(.agentCanceled))
        client.answerAgent(request, .accept) // too late: nothing

        // A path that names no device at all: refused at once, nothing handed on.
        let before = rec.events.count
        let junk = try mock.startAgentCall(of: conn.uniqueName, "RequestPasskey", device: "/org/bluez/hci0")
        #expect(try reply(junk) == "org.bluez.Error.Rejected")
        #expect(rec.events.dropFirst(before).allSatisfy { if case .agentAsked = $0 { false } else { true } })
    }

    /// BlueZ resolves an RPA while pairing: Device1.Address becomes the identity, the path stays.
    @Test func privateAddressResolvingToItsIdentity() throws {
        let mock = try MockBlueZ()
        try mock.addAdapter()
        try mock.addDevice("hci0", devA)
        let (client, rec, _) = try mock.startClient()
        let identity = DeviceAddress("F3:5A:B1:00:00:02")!
        try mock.updateProperties(pathA, "org.bluez.Device1", ["Address": .string(identity.description), "AddressType": .string("random")])
        try runUntil(mock.loop, "addressChanged") { rec.has(.addressChanged(addrA, to: identity, .random)) }
        #expect(client.device(identity)?.path == pathA)
        try mock.updateProperties(pathA, "org.bluez.Device1", ["Connected": .bool(true)])
        try runUntil(mock.loop, "linkUp by identity") { rec.has(.linkUp(identity)) }
    }

    @Test func strangerCannotDriveAgent() throws {
        let mock = try MockBlueZ()
        try mock.addAdapter()
        let (_, _, conn) = try mock.startClient()
        var result: Result<[DBusValue], DBusError>?
        mock.control.call(destination: conn.uniqueName, path: BlueZClient.agentPath, interface: "org.bluez.Agent1",
                          method: "RequestAuthorization", args: [.objectPath(pathA)], timeout: .seconds(5)) { result = $0 }
        try runUntil(mock.loop, "reply") { result != nil }
        #expect(throws: DBusError.self) { try result!.get() }
        if case .failure(let e) = result { #expect(e.name == "org.bluez.Error.Rejected") }
    }

    @Test func autoConnectUUIDsReRegisterTheApplication() throws {
        let mock = try MockBlueZ()
        try mock.addAdapter()
        // Two bonded wearables (a strap offering Heart Rate, a ring offering only Battery) and an
        // unbonded strap: what the auto-connect is armed for follows the registered UUIDs.
        let strap = try mock.addDevice("hci0", devA)
        let ring = try mock.addDevice("hci0", "AA:BB:CC:DD:EE:02", name: "Ring")
        let stranger = try mock.addDevice("hci0", "AA:BB:CC:DD:EE:03", name: "Other strap")
        try mock.updateProperties(strap, "org.bluez.Device1", ["Paired": .bool(true), "UUIDs": .stringArray([ServiceUUID.heartRate])])
        try mock.updateProperties(ring, "org.bluez.Device1", ["Paired": .bool(true), "UUIDs": .stringArray([ServiceUUID.battery])])
        try mock.updateProperties(stranger, "org.bluez.Device1", ["UUIDs": .stringArray([ServiceUUID.heartRate])])
        let addrRing = DeviceAddress("AA:BB:CC:DD:EE:02")!
        let (client, rec, conn) = try mock.startClient()
        #expect(try mock.applications("/org/bluez/hci0") == ["/org/paird/app": [ServiceUUID.heartRate]])
        // Our application root answers GetManagedObjects with the profile, as BlueZ reads it.
        client.setAutoConnectUUIDs(["180d", "0x180F", "180d"])
        try runUntil(mock.loop, "re-registration") { client.registeredAutoConnectUUIDs == [ServiceUUID.heartRate, ServiceUUID.battery] }
        #expect(try mock.applications("/org/bluez/hci0") == ["/org/paird/app": [ServiceUUID.heartRate, ServiceUUID.battery]])
        #expect(try mock.calls("/org/bluez/hci0", "UnregisterApplication").count == 1)
        client.setAutoConnectUUIDs(["180D", "180f"])   // same set: nothing to do
        client.setAutoConnectUUIDs([])
        try runUntil(mock.loop, "unregistered") { client.registeredAutoConnectUUIDs == nil }
        #expect(try mock.applications("/org/bluez/hci0").isEmpty)
        #expect(client.stats.applicationRegistrations == 2)
        // Each change of what the auto-connect covers is reported, in order (the machine's "armed" view).
        var armed: [Set<DeviceAddress>] { rec.events.compactMap { if case .autoConnectArmed(let u) = $0 { u } else { nil } } }
        try runUntil(mock.loop, "armed reports") { armed.count == 4 }
        #expect(armed == [[addrA], [], [addrA, addrRing], []])

        var stopped = false
        client.stop { stopped = true }
        try runUntil(mock.loop, "stop") { stopped }
        #expect(try mock.calls("/org/bluez", "UnregisterAgent").count == 1)
        _ = conn
    }

    @Test func malformedSignalsAreIgnored() throws {
        let mock = try MockBlueZ()
        try mock.addAdapter()
        try mock.addDevice("hci0", devA)
        let (client, rec, _) = try mock.startClient()
        try mock.updateProperties(pathA, "org.bluez.Device1", ["Connected": .bool(true)])
        try runUntil(mock.loop, "connected") { rec.has(.linkUp(addrA)) }
        let ignoredBefore = client.stats.signalsIgnored
        let eventsBefore = rec.events.count

        let props = "org.freedesktop.DBus.Properties"
        try mock.emit(pathA, props, "PropertiesChanged", "sas", [.string("org.bluez.Device1"), .stringArray(["Connected"])])
        try mock.emit(pathA, props, "PropertiesChanged", "s", [.string("org.bluez.Device1")])
        try mock.emit(pathA, props, "PropertiesChanged", "sa{sv}as",
                      [.string("org.bluez.Device1"), .vardict(["Connected": .string("no"), "Paired": .int32(0)]), .stringArray([])])
        try mock.emit("/", "org.freedesktop.DBus.ObjectManager", "InterfacesAdded", "os", [.objectPath(pathA), .string("x")])
        try mock.emit("/", "org.freedesktop.DBus.ObjectManager", "InterfacesRemoved", "o", [.objectPath(pathA)])
        try mock.emit(pathA, "org.bluez.Device1", "Disconnected", "s", [.string("org.bluez.Reason.Timeout")])
        try mock.emit(pathA, props, "PropertiesChanged", "sa{sv}as",
                      [.string("org.bluez.Battery1"), .vardict(["Percentage": .string("junk")]), .stringArray([])])
        // A well-formed change after the junk still arrives.
        try mock.updateProperties(pathA, "org.bluez.Device1", ["ServicesResolved": .bool(true)])
        try runUntil(mock.loop, "valid event after junk") { rec.has(.servicesResolved(addrA)) }
        #expect(rec.events.count == eventsBefore + 1)
        #expect(client.stats.signalsIgnored >= ignoredBefore + 5)
        let info = try #require(client.device(addrA))
        #expect(info.connected && !info.paired, "values of the wrong type do not overwrite the cache")
    }

    @Test func signalStormUpdatesTheCacheInPlace() throws {
        let mock = try MockBlueZ()
        try mock.addAdapter()
        try mock.addDevice("hci0", devA)
        try mock.addGatt(device: pathA)
        let (client, rec, _) = try mock.startClient()
        var done: BlueZFailure?? = .none
        client.setUpLink(addrA, subscribe: ["2a37"], battery: false) { done = .some($0) }
        try runUntil(mock.loop, "setUpLink") { done != nil }
        let objectsBefore = client.cachedObjectCount
        let hrm = pathA + "/service000a/char000b"
        // One mock call emits many changes (the mock's loop runs them back to back).
        try mock.addMethod("/", "org.paird.Test", "Storm", in: "su", out: "", code: """
        o = objects[args[0]]
        for i in range(args[1]):
            o.EmitSignal('org.freedesktop.DBus.Properties', 'PropertiesChanged', 'sa{sv}as', ['org.bluez.GattCharacteristic1', {'Value': dbus.Array([dbus.Byte(6), dbus.Byte(i % 256)], signature='y', variant_level=1)}, dbus.Array([], signature='s')])
        """)
        try mock.call("/", "org.paird.Test", "Storm", [.string(hrm), .uint32(2000)])
        try runUntil(mock.loop, "2000 notifications", limit: .seconds(30)) {
            rec.count { if case .notification = $0 { true } else { false } } == 2000
        }
        #expect(client.cachedObjectCount == objectsBefore)
    }
}
