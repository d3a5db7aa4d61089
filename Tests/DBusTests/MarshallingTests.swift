import Testing
import DBus
import EventLoop
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// Every type BlueZ uses, through libdbus's marshaller, a real bus and back.
@Suite(.serialized) struct MarshallingTests {
    @Test func everyBasicTypeRoundTrips() throws {
        let f = try Fixture()
        let values: [DBusValue] = [
            .byte(0), .byte(255), .bool(true), .bool(false),
            .int16(.min), .int16(.max), .uint16(.max), .int32(.min), .int32(-1), .uint32(.max),
            .int64(.min), .int64(.max), .uint64(.max), .double(-0.5), .double(.infinity), .double(1e300),
            .string(""), .string("Grüße, 世界 ⌚️"), .objectPath("/"), .objectPath("/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF"),
            .signature(""), .signature("a{oa{sa{sv}}}"),
        ]
        #expect(try f.echo(values) == values)
    }

    @Test func nestedVariantsRoundTrip() throws {
        let f = try Fixture()
        let inner = DBusValue.vardict(["Connected": .bool(true), "RSSI": .int16(-60), "UUIDs": .stringArray(["180d"])])
        let values: [DBusValue] = [.variant(.variant(inner)), .variant(.variant(.variant(.uint32(7))))]
        let echoed = try f.echo(values)
        #expect(echoed == values)
        #expect(echoed[0].unwrapped.dictionary?["RSSI"]?.int16 == -60)
        #expect(echoed[0].variantInner?.variantInner?.dictionary?["Connected"]?.bool == true)
    }

    @Test(arguments: ["y", "b", "n", "q", "i", "u", "x", "t", "d", "s", "o", "g", "h", "v",
                      "as", "ay", "a(is)", "a{sv}", "aa{sv}", "(ii)", "a{oa{sa{sv}}}"])
    func emptyArraysKeepTheirElementType(_ element: String) throws {
        let f = try Fixture()
        let values: [DBusValue] = [.array(elementSignature: element, [])]
        let echoed = try f.echo(values)
        #expect(echoed == values)
        #expect(echoed.signature == "a" + element)
    }

    @Test(arguments: [("s", "v"), ("y", "s"), ("o", "a{sa{sv}}"), ("i", "a(ii)"), ("s", "as"), ("t", "h"), ("g", "v")])
    func emptyDictsKeepTheirTypes(_ key: String, _ value: String) throws {
        let f = try Fixture()
        let values: [DBusValue] = [.dict(keySignature: key, valueSignature: value, [])]
        let echoed = try f.echo(values)
        #expect(echoed == values)
        #expect(echoed.signature == "a{\(key)\(value)}")
    }

    @Test func structsInArraysAndNestedStructsRoundTrip() throws {
        let f = try Fixture()
        let values: [DBusValue] = [
            .array(elementSignature: "(yyay)", [
                .structure([.byte(0), .byte(0x16), .bytes([0x0d, 0x18])]),
                .structure([.byte(1), .byte(0xff), .bytes([])]),
            ]),
            .structure([.structure([.int32(1)]), .structure([.string("x"), .variant(.objectPath("/a"))])]),
            .bytes(Array(0...255)),
        ]
        let echoed = try f.echo(values)
        #expect(echoed == values)
        #expect(echoed[2].bytes == Array(0...255))
    }

    @Test func managedObjectsShapeRoundTripsAndDecodes() throws {
        let f = try Fixture()
        let objects = DBusValue.dict(keySignature: "o", valueSignature: "a{sa{sv}}", [
            DBusDictEntry(key: .objectPath("/org/bluez/hci0"), value: .dict(keySignature: "s", valueSignature: "a{sv}", [
                DBusDictEntry(key: .string("org.bluez.Adapter1"), value: .vardict(["Powered": .bool(true), "Address": .string("00:11:22:33:44:55")])),
                DBusDictEntry(key: .string("org.freedesktop.DBus.Introspectable"), value: .vardict([:])),
            ])),
            DBusDictEntry(key: .objectPath("/org/bluez/hci0/dev_AA"), value: .dict(keySignature: "s", valueSignature: "a{sv}", [
                DBusDictEntry(key: .string("org.bluez.Device1"), value: .vardict([
                    "ServicesResolved": .bool(false), "ManufacturerData": .dict(keySignature: "q", valueSignature: "v", [
                        DBusDictEntry(key: .uint16(76), value: .variant(.bytes([1, 2]))),
                    ]),
                ])),
            ])),
        ])
        let echoed = try f.echo([objects])
        #expect(echoed == [objects])
        let decoded = try #require(try echoed.expect("a{oa{sa{sv}}}")[0].managedObjects)
        #expect(decoded["/org/bluez/hci0"]?["org.bluez.Adapter1"]?["Powered"]?.bool == true)
        #expect(decoded["/org/bluez/hci0/dev_AA"]?["org.bluez.Device1"]?["ServicesResolved"]?.bool == false)
        #expect(decoded["/org/bluez/hci0/dev_AA"]?["org.bluez.Device1"]?["ManufacturerData"]?.dictEntries?.first?.value.variantInner?.bytes == [1, 2])
    }

    @Test func unixFDsArriveAsNewDescriptorsOfTheSamePipe() throws {
        let f = try Fixture()
        #expect(f.client.canPassUnixFDs)
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        defer { close(fds[0]); close(fds[1]) }
        let sent = try UnixFD(duplicating: fds[1])
        let echoed = try f.echo([.unixFD(sent), .string("after")])
        let received = try #require(echoed.first?.unixFD)
        #expect(received.fd != fds[1])
        #expect(received.fd != sent.fd)
        var a = stat(), b = stat()
        #expect(fstat(received.fd, &a) == 0 && fstat(fds[1], &b) == 0)
        #expect(a.st_ino == b.st_ino && a.st_dev == b.st_dev)
        var byte: UInt8 = 0x5a
        #expect(write(received.fd, &byte, 1) == 1)
        var got: UInt8 = 0
        #expect(read(fds[0], &got, 1) == 1)
        #expect(got == 0x5a)
        #expect(echoed[1] == "after")
    }

    @Test func valuesOfTheWrongShapeGiveTypedErrors() throws {
        let args: [DBusValue] = [.int32(1), .string("x")]
        #expect(throws: DBusError.unexpectedSignature(expected: "oa{sa{sv}}", got: "is")) {
            try args.expect("oa{sa{sv}}")
        }
        #expect(try args.expect("is").count == 2)
        #expect(args[0].string == nil)
        #expect(args[1].dictionary == nil)
        #expect(DBusValue.vardict(["a": .bool(true)]).managedObjects == nil)
    }

    @Test func invalidValuesAreRefusedBeforeTheyReachLibdbus() throws {
        // libdbus aborts the process on these; the layer must throw instead.
        let f = try Fixture()
        let bad: [[DBusValue]] = [
            [.objectPath("not/a/path")], [.objectPath("/trailing/")], [.objectPath("/a//b")],
            [.string("nul\0inside")], [.signature("a{vs}")], [.signature("(")],
            [.array(elementSignature: "s", [.int32(1)])],
            [.array(elementSignature: "", [])], [.array(elementSignature: "ss", [])],
            [.dict(keySignature: "v", valueSignature: "s", [])],
            [.dict(keySignature: "s", valueSignature: "v", [DBusDictEntry(key: .string("k"), value: .string("not a variant"))])],
            [.structure([])],
        ]
        for values in bad {
            let result = try f.client.callAndWait(f.loop, destination: f.serverName, path: "/x", interface: "org.paird.Test",
                                                  method: "Anything", args: values)
            #expect(throws: DBusError.self) { try result.get() }
            if case .failure(let e) = result {
                #expect(e.name == DBusError.Name.invalidArgs || e.name == DBusError.Name.invalidSignature, "\(values): \(e)")
            }
        }
        #expect(throws: DBusError.self) { try f.server.emitSignal(path: "bad", interface: "org.paird.Test", member: "S") }
        #expect(throws: DBusError.self) { try f.server.emitSignal(path: "/ok", interface: "nodots", member: "S") }
        #expect(throws: DBusError.self) { try f.server.emitSignal(path: "/ok", interface: "org.paird.Test", member: "1bad") }
        let badCall = try f.client.callAndWait(f.loop, destination: "not a name", path: "/", interface: nil, method: "M")
        #expect(throws: DBusError.self) { try badCall.get() }
        // Still usable afterwards.
        #expect(try f.echo([.string("alive")]) == [.string("alive")])
    }

    @Test func deepNestingIsRefused() throws {
        var v = DBusValue.int32(1)
        for _ in 0..<70 { v = .variant(v) }
        let f = try Fixture()
        let result = try f.client.callAndWait(f.loop, destination: f.serverName, path: "/x", interface: nil, method: "M", args: [v])
        #expect(throws: DBusError.self) { try result.get() }
        var a = DBusValue.int32(1)
        for _ in 0..<33 { a = .array(elementSignature: a.signature, [a]) }
        let result2 = try f.client.callAndWait(f.loop, destination: f.serverName, path: "/x", interface: nil, method: "M", args: [a])
        #expect(throws: DBusError.self) { try result2.get() }
    }
}
