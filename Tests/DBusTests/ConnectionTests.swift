import Foundation
import Testing
import DBus
import EventLoop
import TestSupport

@Suite(.serialized) struct ConnectionTests {
    @Test func connectionsHaveUniqueNamesAndCanOwnNames() throws {
        let f = try Fixture()
        #expect(f.client.uniqueName.hasPrefix(":"))
        #expect(f.client.uniqueName != f.server.uniqueName)
        #expect(try f.server.requestName("org.paird.Test1") == .primaryOwner)
        #expect(try f.server.requestName("org.paird.Test1") == .alreadyOwner)
        #expect(try f.client.requestName("org.paird.Test1", flags: [.doNotQueue]) == .exists)
        #expect(try f.client.requestName("org.paird.Test1", flags: []) == .inQueue)
        #expect(throws: DBusError.self) { try f.client.requestName("not-a-name") }
    }

    @Test func wronglyTypedCallsGetInvalidArgs() throws {
        let f = try Fixture()
        var called = false
        try f.server.export(path: "/t", object: DBusObject([
            DBusInterface("org.paird.Test").method("Pair", in: "os", out: "") { _, call in called = true; call.reply() },
        ]))
        let result = try f.client.callAndWait(f.loop, destination: f.serverName, path: "/t", interface: "org.paird.Test",
                                              method: "Pair", args: [.string("/not/a/path/type"), .int32(3)])
        #expect(throws: DBusError.self) { try result.get() }
        if case .failure(let e) = result { #expect(e.name == DBusError.Name.invalidArgs) }
        #expect(!called)
    }

    @Test func unknownObjectsInterfacesAndMethodsGetTheirErrors() throws {
        let f = try Fixture()
        try f.server.export(path: "/t", object: DBusObject([
            DBusInterface("org.paird.Test").method("Known") { _, call in call.reply() },
        ]))
        func errorName(_ path: String, _ interface: String?, _ method: String) throws -> String? {
            let r = try f.client.callAndWait(f.loop, destination: f.serverName, path: path, interface: interface, method: method)
            if case .failure(let e) = r { return e.name }
            return nil
        }
        #expect(try errorName("/t", "org.paird.Test", "Unknown") == DBusError.Name.unknownMethod)
        #expect(try errorName("/t", "org.paird.Other", "Known") == DBusError.Name.unknownInterface)
        #expect(try errorName("/nothing", "org.paird.Test", "Known") == DBusError.Name.unknownObject)
        #expect(try errorName("/t", nil, "Known") == nil)
        #expect(try errorName("/t", "org.paird.Test", "Known") == nil)
        // libdbus answers Peer itself.
        #expect(try errorName("/anything", "org.freedesktop.DBus.Peer", "Ping") == nil)
    }

    @Test func remoteErrorNamesAndMessagesArriveVerbatim() throws {
        let f = try Fixture()
        try f.server.export(path: "/org/bluez/hci0/dev_AA", object: DBusObject([
            DBusInterface("org.bluez.Device1")
                .method("Connect") { _, _ in
                    throw DBusError(name: "org.bluez.Error.Failed", message: "le-connection-abort-by-local")
                }
                .method("Pair") { _, call in
                    call.fail(DBusError(name: "org.bluez.Error.AuthenticationRejected", message: "Authentication Rejected"))
                }
                .method("Odd") { _, _ in
                    struct Oops: Error {}
                    throw Oops()
                },
        ]))
        let connect = try f.client.callAndWait(f.loop, destination: f.serverName, path: "/org/bluez/hci0/dev_AA",
                                               interface: "org.bluez.Device1", method: "Connect", timeout: .seconds(45))
        #expect(throws: DBusError(name: "org.bluez.Error.Failed", message: "le-connection-abort-by-local")) { try connect.get() }
        let pair = try f.client.callAndWait(f.loop, destination: f.serverName, path: "/org/bluez/hci0/dev_AA",
                                            interface: "org.bluez.Device1", method: "Pair")
        #expect(throws: DBusError(name: "org.bluez.Error.AuthenticationRejected", message: "Authentication Rejected")) { try pair.get() }
        let odd = try f.client.callAndWait(f.loop, destination: f.serverName, path: "/org/bluez/hci0/dev_AA",
                                           interface: "org.bluez.Device1", method: "Odd")
        if case .failure(let e) = odd { #expect(e.name == DBusError.Name.failed) } else { Issue.record("expected failure") }
    }

    @Test func aCallWithoutAReplyTimesOutAfterItsExplicitTimeout() throws {
        let f = try Fixture()
        var parked: [MethodContext] = []
        try f.server.export(path: "/t", object: DBusObject([
            DBusInterface("org.paird.Test").method("Never", out: "s") { _, call in parked.append(call) },
        ]))
        let start = ContinuousClock.now
        let result = try f.client.callAndWait(f.loop, destination: f.serverName, path: "/t", interface: "org.paird.Test",
                                              method: "Never", timeout: .milliseconds(200))
        let elapsed = ContinuousClock.now - start
        guard case .failure(let error) = result else {
            Issue.record("expected a timeout, got \(result)")
            return
        }
        #expect(error.name == DBusError.Name.noReply)
        #expect(error.isTimeout)
        // Lower bound only: it must not give up early. No upper bound (not a timing test).
        #expect(elapsed >= .milliseconds(150))
        #expect(parked.count == 1)
        // A late answer is harmless.
        parked[0].reply([.string("late")])
        try f.sync(f.server)
    }

    @Test func aCancelledCallNeverCallsBack() throws {
        let f = try Fixture()
        var parked: [MethodContext] = []
        try f.server.export(path: "/t", object: DBusObject([
            DBusInterface("org.paird.Test").method("Later") { _, call in parked.append(call) },
        ]))
        var answered = false
        let pending = f.client.call(destination: f.serverName, path: "/t", interface: "org.paird.Test", method: "Later",
                                    timeout: .seconds(5)) { _ in answered = true }
        #expect(pending.isPending)
        try runUntil(f.loop, "the call to arrive") { parked.count == 1 }
        pending.cancel()
        #expect(!pending.isPending)
        parked[0].reply()
        try f.sync(f.server)
        try f.sync(f.client)
        #expect(!answered)
    }

    @Test func aDroppedMethodContextRepliesFailed() throws {
        let f = try Fixture()
        try f.server.export(path: "/t", object: DBusObject([
            DBusInterface("org.paird.Test").method("Forget") { _, _ in },
            DBusInterface("org.paird.Test2").method("WrongOut", out: "s") { _, call in call.reply([.int32(1)]) },
        ]))
        let r = try f.client.callAndWait(f.loop, destination: f.serverName, path: "/t", interface: "org.paird.Test", method: "Forget")
        if case .failure(let e) = r { #expect(e.name == DBusError.Name.failed) } else { Issue.record("expected failure") }
        let w = try f.client.callAndWait(f.loop, destination: f.serverName, path: "/t", interface: "org.paird.Test2", method: "WrongOut")
        if case .failure(let e) = w { #expect(e.name == DBusError.Name.failed) } else { Issue.record("expected failure") }
    }

    @Test func closingAnswersOutstandingCallsWithDisconnected() throws {
        let f = try Fixture()
        var parked: [MethodContext] = []
        try f.server.export(path: "/t", object: DBusObject([
            DBusInterface("org.paird.Test").method("Later") { _, call in parked.append(call) },
        ]))
        var result: Result<[DBusValue], DBusError>?
        f.client.call(destination: f.serverName, path: "/t", interface: "org.paird.Test", method: "Later",
                      timeout: .seconds(5)) { result = $0 }
        try runUntil(f.loop, "the call to arrive") { parked.count == 1 }
        f.client.close()
        #expect(!f.client.isConnected)
        try runUntil(f.loop, "the Disconnected answer") { result != nil }
        if case .failure(let e) = result { #expect(e.name == DBusError.Name.disconnected) } else { Issue.record("expected failure") }
        // Calls on a closed connection fail the same way, asynchronously.
        let late = try f.client.callAndWait(f.loop, destination: f.serverName, path: "/t", interface: nil, method: "Later")
        if case .failure(let e) = late { #expect(e.name == DBusError.Name.disconnected) } else { Issue.record("expected failure") }
    }

    @Test func theBusGoingAwayIsReported() throws {
        let loop = try EventLoop()
        var bus: PrivateBus? = try PrivateBus()
        let connection = try bus!.connect(loop)
        var lost = false
        connection.onDisconnect = { lost = true }
        bus = nil // terminates dbus-daemon
        try runUntil(loop, "the disconnect") { lost }
        #expect(!connection.isConnected)
        connection.close()
    }

    @Test func signalsReachMatchingSubscriptionsOnly() throws {
        let f = try Fixture()
        var got: [String] = []
        let subscription = try f.subscribe(f.client, MatchRule(interface: "org.paird.Test", member: "Ping", path: "/sig")) { msg in
            got.append((try? msg.arguments().expect("s")[0].string) ?? "?")
        }
        var namespaced: [String] = []
        try f.subscribe(f.client, MatchRule(interface: "org.paird.Test", member: "Ping", pathNamespace: "/ns")) { msg in
            namespaced.append(msg.path ?? "")
        }
        try f.server.emitSignal(path: "/sig", interface: "org.paird.Test", member: "Ping", args: ["one"])
        try f.server.emitSignal(path: "/sig", interface: "org.paird.Test", member: "Pong", args: ["wrong member"])
        try f.server.emitSignal(path: "/other", interface: "org.paird.Test", member: "Ping", args: ["wrong path"])
        try f.server.emitSignal(path: "/ns/a/b", interface: "org.paird.Test", member: "Ping", args: ["ns"])
        try f.server.emitSignal(path: "/nsx", interface: "org.paird.Test", member: "Ping", args: ["not ns"])
        try f.server.emitSignal(path: "/sig", interface: "org.paird.Test", member: "Ping", args: ["two"])
        try runUntil(f.loop, "two pings") { got.count >= 2 }
        try f.sync(f.server)
        try f.sync(f.client)
        #expect(got == ["one", "two"])
        #expect(namespaced == ["/ns/a/b"])

        subscription.cancel()
        try f.server.emitSignal(path: "/sig", interface: "org.paird.Test", member: "Ping", args: ["after cancel"])
        try f.server.emitSignal(path: "/ns", interface: "org.paird.Test", member: "Ping", args: ["ns itself"])
        try runUntil(f.loop, "the namespace signal") { namespaced.count == 2 }
        #expect(got == ["one", "two"])
    }

    @Test func signalsFromAnotherSenderAreFilteredByUniqueName() throws {
        let f = try Fixture()
        let third = try f.bus.connect(f.loop)
        defer { third.close() }
        var senders: [String] = []
        try f.subscribe(f.client, MatchRule(sender: f.serverName, interface: "org.paird.Test")) { msg in
            senders.append(msg.sender ?? "")
        }
        try third.emitSignal(path: "/s", interface: "org.paird.Test", member: "S")
        try f.server.emitSignal(path: "/s", interface: "org.paird.Test", member: "S")
        try runUntil(f.loop, "the server's signal") { !senders.isEmpty }
        try f.sync(third)
        try f.sync(f.client)
        #expect(senders == [f.serverName])
    }

    @Test func anIdleConnectionCostsNoWakeups() throws {
        let f = try Fixture()
        try f.sync(f.client)
        try f.subscribe(f.client, MatchRule(interface: "org.paird.Test")) { _ in }
        // Let anything in flight settle, then count wake-ups over an idle stretch bounded by a timer.
        f.loop.schedule(after: .milliseconds(50)) { f.loop.stop() }
        try f.loop.run()
        let before = f.loop.wakeups
        f.loop.schedule(after: .milliseconds(300)) { f.loop.stop() }
        try f.loop.run()
        #expect(f.loop.wakeups - before <= 1)
    }

    @Test func callSyncFromAnotherProcessStyleClient() throws {
        // The server runs on its own thread and loop, as the daemon would; the client blocks in
        // callSync as pairctl would.
        let bus = try PrivateBus()
        let server = ServerThread(address: bus.address)
        try server.start()
        defer { server.stop() }
        let loop = try EventLoop()
        let client = try bus.connect(loop)
        defer { client.close() }
        let reply = try client.callSync(destination: "org.paird.SyncTest", path: "/t", interface: "org.paird.Test",
                                        method: "Echo", args: ["hello"], timeout: .seconds(5))
        #expect(reply == ["hello"])
        #expect(throws: DBusError(name: "org.bluez.Error.Failed", message: "le-connection-abort-by-local")) {
            try client.callSync(destination: "org.paird.SyncTest", path: "/t", interface: "org.paird.Test",
                                method: "Fail", timeout: .seconds(5))
        }
        #expect(throws: DBusError.self) {
            try client.callSync(destination: "org.paird.Nobody", path: "/t", interface: "org.paird.Test",
                                method: "Echo", timeout: .seconds(5))
        }
        do {
            _ = try client.callSync(destination: "org.paird.Nobody", path: "/", interface: nil, method: "X", timeout: .seconds(5))
        } catch {
            #expect(error.name == DBusError.Name.serviceUnknown)
        }
    }

    @Test func introspectionDescribesObjectsAndChildren() throws {
        let f = try Fixture()
        try f.server.export(path: "/org/paird/dev1", object: DBusObject([
            DBusInterface("org.paird.Device1")
                .method("Connect", in: "a{sv}", out: "o") { _, call in call.reply([.objectPath("/")]) }
                .property("Name", signature: "s", get: { "ring" })
                .signal("Changed", signature: "sv"),
        ]))
        let root = try f.client.callAndWait(f.loop, destination: f.serverName, path: "/", interface: "org.freedesktop.DBus.Introspectable",
                                            method: "Introspect").get()
        #expect(root.first?.string?.contains("<node name=\"org\"/>") == true)
        let leaf = try #require(try f.client.callAndWait(f.loop, destination: f.serverName, path: "/org/paird/dev1",
                                                         interface: "org.freedesktop.DBus.Introspectable", method: "Introspect").get().first?.string)
        #expect(leaf.contains("<interface name=\"org.paird.Device1\">"))
        #expect(leaf.contains("<arg name=\"arg0\" type=\"a{sv}\" direction=\"in\"/>"))
        #expect(leaf.contains("<property name=\"Name\" type=\"s\" access=\"read\"/>"))
        #expect(leaf.contains("<signal name=\"Changed\">"))
        let none = try f.client.callAndWait(f.loop, destination: f.serverName, path: "/elsewhere",
                                            interface: "org.freedesktop.DBus.Introspectable", method: "Introspect")
        if case .failure(let e) = none { #expect(e.name == DBusError.Name.unknownObject) } else { Issue.record("expected failure") }
    }
}

/// A server with its own loop on its own thread (for blocking-client tests).
final class ServerThread: @unchecked Sendable {
    // Set before start, read on the server thread; stop() only writes to the pipe.
    private let address: String
    private let ready = DispatchSemaphore(value: 0)
    private let done = DispatchSemaphore(value: 0)
    private var stopPipe: [Int32] = [-1, -1]
    private var startError: (any Error)?

    init(address: String) {
        self.address = address
    }

    func start() throws {
        guard pipe(&stopPipe) == 0 else { throw DBusError.failed("pipe") }
        let thread = Thread { [self] in self.run() }
        thread.start()
        ready.wait()
        if let startError { throw startError }
    }

    func stop() {
        var b: UInt8 = 1
        _ = write(stopPipe[1], &b, 1)
        done.wait()
        close(stopPipe[0])
        close(stopPipe[1])
    }

    private func run() {
        defer { done.signal() }
        do {
            let loop = try EventLoop()
            let connection = try DBusConnection(address: address, on: loop)
            try connection.export(path: "/t", object: DBusObject([
                DBusInterface("org.paird.Test")
                    .method("Echo", in: "s", out: "s") { args, call in call.reply(args) }
                    .method("Fail") { _, _ in throw DBusError(name: "org.bluez.Error.Failed", message: "le-connection-abort-by-local") },
            ]))
            _ = try connection.requestName("org.paird.SyncTest")
            let fd = stopPipe[0]
            loop.watch(fd: fd, events: .read) { _ in loop.stop() }
            ready.signal()
            try loop.run()
            connection.close()
            loop.shutdown()
        } catch {
            startError = error
            ready.signal()
        }
    }
}

/// `autoStart: false` (NO_AUTO_START): a call to a name nobody owns fails at once instead of having
/// the bus start its service. BlueZClient sends every call to bluetoothd so (BlueZClient+Requests.swift).
@Suite struct AutoStartTests {
    @Test func aCallWithoutAutoStartDoesNotStartTheService() throws {
        let marker = NSTemporaryDirectory() + "paird-autostart-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: marker) }
        let loop = try EventLoop()
        defer { loop.shutdown() }
        let bus = try PrivateBus(kind: .session, prefix: "paird-autostart",
                                 services: ["org.paird.Activatable": "/usr/bin/touch \(marker)"])
        let client = try bus.connect(loop)
        defer { client.close() }
        func call(autoStart: Bool) throws -> Result<[DBusValue], DBusError> {
            try waitFor(loop, "reply with autoStart \(autoStart)") { done in
                client.call(destination: "org.paird.Activatable", path: "/", interface: "org.paird.Test", method: "Ping",
                            timeout: .seconds(2), autoStart: autoStart, reply: done)
            }
        }
        let without = try call(autoStart: false)
        if case .failure(let e) = without { #expect(e.name == DBusError.Name.nameHasNoOwner) } else { Issue.record("no error: \(without)") }
        #expect(!FileManager.default.fileExists(atPath: marker), "the service was started")
        // Positive control: the same call with auto-start has the bus run the service (which
        // exits without taking the name: the call gets no answer, but the marker is there).
        let with = try call(autoStart: true)
        #expect(throws: DBusError.self) { try with.get() }
        try runUntil(loop, "the service started by the bus", limit: .seconds(10)) { FileManager.default.fileExists(atPath: marker) }
    }
}
