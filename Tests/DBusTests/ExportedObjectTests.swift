import Testing
import DBus
import EventLoop
import TestSupport

@Suite(.serialized) struct ExportedObjectTests {
    private let properties = "org.freedesktop.DBus.Properties"

    /// A wearable-like object: read-only Name, read-write Volume (q), Alias whose setter refuses.
    private func exportSpeaker(_ f: Fixture, volume: UnsafeMutablePointer<UInt16>) throws {
        try f.server.export(path: "/org/paird/speaker", object: DBusObject([
            DBusInterface("org.paird.Speaker1")
                .property("Name", signature: "s", get: { "kitchen" })
                .property("Volume", signature: "q", get: { .uint16(volume.pointee) }, set: { v in
                    guard let q = v.uint16, q <= 100 else { throw DBusError.invalidArgs("volume out of range") }
                    volume.pointee = q
                })
                .property("Alias", signature: "s", get: { "x" }, set: { _ in
                    throw DBusError(name: "org.bluez.Error.NotPermitted", message: "no")
                }),
        ]))
    }

    @Test func propertiesGetGetAllSetAndPropertiesChanged() throws {
        let f = try Fixture()
        let volume = UnsafeMutablePointer<UInt16>.allocate(capacity: 1)
        defer { volume.deallocate() }
        volume.pointee = 3
        try exportSpeaker(f, volume: volume)
        var changes: [[String: DBusValue]] = []
        try f.subscribe(f.client, MatchRule(sender: f.serverName, interface: properties, member: "PropertiesChanged",
                                            path: "/org/paird/speaker")) { msg in
            guard let args = try? msg.arguments().expect("sa{sv}as"), args[0].string == "org.paird.Speaker1",
                  let changed = args[1].dictionary else { return }
            changes.append(changed)
        }
        func call(_ method: String, _ args: [DBusValue]) throws -> Result<[DBusValue], DBusError> {
            try f.client.callAndWait(f.loop, destination: f.serverName, path: "/org/paird/speaker",
                                     interface: properties, method: method, args: args)
        }
        func errorName(_ r: Result<[DBusValue], DBusError>) -> String? {
            if case .failure(let e) = r { return e.name } else { return nil }
        }

        #expect(try call("Get", ["org.paird.Speaker1", "Name"]).get() == [.variant("kitchen")])
        let all = try call("GetAll", ["org.paird.Speaker1"]).get()
        #expect(all.first?.dictionary == ["Name": "kitchen", "Volume": .uint16(3), "Alias": "x"])

        #expect(try call("Set", ["org.paird.Speaker1", "Volume", .variant(.uint16(7))]).get() == [])
        #expect(volume.pointee == 7)
        try runUntil(f.loop, "PropertiesChanged") { !changes.isEmpty }
        #expect(changes == [["Volume": .uint16(7)]])

        #expect(errorName(try call("Set", ["org.paird.Speaker1", "Name", .variant("new")])) == DBusError.Name.propertyReadOnly)
        #expect(errorName(try call("Set", ["org.paird.Speaker1", "Volume", .variant(.int32(7))])) == DBusError.Name.invalidArgs)
        #expect(errorName(try call("Set", ["org.paird.Speaker1", "Volume", .variant(.uint16(101))])) == DBusError.Name.invalidArgs)
        #expect(errorName(try call("Set", ["org.paird.Speaker1", "Alias", .variant("y")])) == "org.bluez.Error.NotPermitted")
        #expect(errorName(try call("Get", ["org.paird.Speaker1", "Nope"])) == DBusError.Name.unknownProperty)
        #expect(errorName(try call("Get", ["org.paird.Nope", "Name"])) == DBusError.Name.unknownInterface)
        #expect(errorName(try call("Get", ["org.paird.Speaker1"])) == DBusError.Name.invalidArgs)
        #expect(volume.pointee == 7)

        // Changes made by the daemon itself.
        volume.pointee = 9
        try f.server.emitPropertiesChanged(path: "/org/paird/speaker", interface: "org.paird.Speaker1", names: ["Volume"])
        try runUntil(f.loop, "second PropertiesChanged") { changes.count == 2 }
        #expect(changes.last == ["Volume": .uint16(9)])
        #expect(throws: DBusError.self) {
            try f.server.emitPropertiesChanged(path: "/org/paird/speaker", interface: "org.paird.Speaker1", names: ["Nope"])
        }
    }

    @Test func objectManagerListsObjectsAndAnnouncesThem() throws {
        let f = try Fixture()
        try f.server.exportObjectManager(at: "/org/paird")
        func device(_ name: String) -> DBusObject {
            DBusObject([
                DBusInterface("org.paird.Device1")
                    .property("Name", signature: "s", get: { .string(name) })
                    .property("Connected", signature: "b", get: { false }),
                DBusInterface("org.paird.Battery1").property("Percentage", signature: "y", get: { .byte(80) }),
            ])
        }
        try f.server.export(path: "/org/paird/dev_A", object: device("ring"))
        // Its InterfacesAdded must reach the bus before the client subscribes.
        try f.sync(f.server)

        var added: [(String, [String: [String: DBusValue]])] = []
        var removed: [(String, [String])] = []
        try f.subscribe(f.client, MatchRule(sender: f.serverName, interface: "org.freedesktop.DBus.ObjectManager",
                                            path: "/org/paird")) { msg in
            guard let args = try? msg.arguments() else { return }
            switch msg.member {
            case "InterfacesAdded":
                if let a = try? args.expect("oa{sa{sv}}"), let path = a[0].objectPath, let ifaces = a[1].interfacesAndProperties {
                    added.append((path, ifaces))
                }
            case "InterfacesRemoved":
                if let a = try? args.expect("oas"), let path = a[0].objectPath, let names = a[1].stringArray {
                    removed.append((path, names))
                }
            default:
                break
            }
        }

        let reply = try f.client.callAndWait(f.loop, destination: f.serverName, path: "/org/paird",
                                             interface: "org.freedesktop.DBus.ObjectManager", method: "GetManagedObjects").get()
        let objects = try #require(try reply.expect("a{oa{sa{sv}}}")[0].managedObjects)
        #expect(objects.keys.sorted() == ["/org/paird/dev_A"])
        #expect(objects["/org/paird/dev_A"]?["org.paird.Device1"]?["Name"]?.string == "ring")
        #expect(objects["/org/paird/dev_A"]?["org.paird.Battery1"]?["Percentage"]?.uint8 == 80)

        try f.server.export(path: "/org/paird/dev_B", object: device("watch"))
        try runUntil(f.loop, "InterfacesAdded") { !added.isEmpty }
        #expect(added.first?.0 == "/org/paird/dev_B")
        #expect(added.first?.1["org.paird.Device1"]?["Name"]?.string == "watch")
        #expect(added.first?.1["org.paird.Device1"]?["Connected"]?.bool == false)

        f.server.unexport(path: "/org/paird/dev_A")
        try runUntil(f.loop, "InterfacesRemoved") { !removed.isEmpty }
        #expect(removed.first?.0 == "/org/paird/dev_A")
        #expect(removed.first?.1.sorted() == ["org.paird.Battery1", "org.paird.Device1"])

        let after = try f.client.callAndWait(f.loop, destination: f.serverName, path: "/org/paird",
                                             interface: "org.freedesktop.DBus.ObjectManager", method: "GetManagedObjects").get()
        #expect(after.first?.managedObjects?.keys.sorted() == ["/org/paird/dev_B"])
    }

    @Test func clientHelpersDecodeTheStandardInterfaces() throws {
        let f = try Fixture()
        let volume = UnsafeMutablePointer<UInt16>.allocate(capacity: 1)
        defer { volume.deallocate() }
        volume.pointee = 1
        try f.server.exportObjectManager(at: "/org/paird")
        try exportSpeaker(f, volume: volume)
        var events: [ObjectManagerEvent] = []
        var changes: [PropertiesChanged] = []
        try f.subscribe(f.client, MatchRule(interface: "org.freedesktop.DBus.ObjectManager")) { msg in
            if let e = try? ObjectManagerEvent(msg) { events.append(e) }
        }
        try f.subscribe(f.client, MatchRule(interface: properties, member: "PropertiesChanged")) { msg in
            if let c = try? PropertiesChanged(msg) { changes.append(c) }
        }

        let objects = try waitFor(f.loop, "GetManagedObjects") { done in
            f.client.getManagedObjects(destination: f.serverName, path: "/org/paird", timeout: .seconds(5), reply: done)
        }.get()
        #expect(objects["/org/paird/speaker"]?["org.paird.Speaker1"]?["Volume"] == .uint16(1))

        let name = try waitFor(f.loop, "Get") { done in
            f.client.getProperty(destination: f.serverName, path: "/org/paird/speaker", interface: "org.paird.Speaker1",
                                 name: "Name", timeout: .seconds(5), reply: done)
        }.get()
        #expect(name == "kitchen")

        try waitFor(f.loop, "Set") { done in
            f.client.setProperty(destination: f.serverName, path: "/org/paird/speaker", interface: "org.paird.Speaker1",
                                 name: "Volume", value: .uint16(42), timeout: .seconds(5), reply: done)
        }.get()
        try runUntil(f.loop, "PropertiesChanged") { !changes.isEmpty }
        #expect(changes.count == 1)
        #expect(changes.first?.path == "/org/paird/speaker")
        #expect(changes.first?.interface == "org.paird.Speaker1")
        #expect(changes.first?.changed == ["Volume": .uint16(42)])
        #expect(changes.first?.invalidated == [])

        try f.server.export(path: "/org/paird/other", object: DBusObject([DBusInterface("org.paird.Other1")]))
        f.server.unexport(path: "/org/paird/other")
        // Only this object's signals: the speaker's InterfacesAdded (sent at its export, before
        // the match existed) may still be in flight when the match is added, and then arrives too.
        func other() -> [ObjectManagerEvent] {
            events.filter {
                switch $0 {
                case .interfacesAdded(let path, _), .interfacesRemoved(let path, _): path == "/org/paird/other"
                }
            }
        }
        try runUntil(f.loop, "both ObjectManager signals") { other().count == 2 }
        #expect(other() == [.interfacesAdded(path: "/org/paird/other", interfaces: ["org.paird.Other1": [:]]),
                           .interfacesRemoved(path: "/org/paird/other", interfaces: ["org.paird.Other1"])])
    }

    @Test func exportRefusesBadDeclarationsAndDuplicates() throws {
        let f = try Fixture()
        #expect(throws: DBusError.self) { try f.server.export(path: "bad", object: DBusObject()) }
        #expect(throws: DBusError.self) {
            try f.server.export(path: "/a", object: DBusObject([DBusInterface("nodots")]))
        }
        #expect(throws: DBusError.self) {
            try f.server.export(path: "/a", object: DBusObject([DBusInterface("org.paird.X").method("M", in: "a{vs}") { _, c in c.reply() }]))
        }
        #expect(throws: DBusError.self) {
            try f.server.export(path: "/a", object: DBusObject([DBusInterface("org.freedesktop.DBus.Properties")]))
        }
        try f.server.export(path: "/a", object: DBusObject())
        #expect(throws: DBusError.self) { try f.server.export(path: "/a", object: DBusObject()) }
    }
}

