import Foundation
import Testing
import BlueZ
import DBus
import EventLoop
import PairingCore
import TestSupport

// Test doubles for BlueZ: a private system-type dbus-daemon and python-dbusmock's `bluez5`
// template (Debian 12: python3-dbusmock 0.28.7), extended over `org.freedesktop.DBus.Mock`.
//
// What the template + these extensions do NOT reproduce of real BlueZ 5.66 (bluez-notes §8):
// - no radio: Connect/Pair succeed or fail only as scripted; no 40 s Connect blocking, no
//   auto-connect, no discovery creating devices, no temporary-device expiry, no RSSI changes;
// - ServicesResolved, Paired, Bonded, Connected changes happen only when a test drives them
//   (the template's Device1.Connect emits Connected=true but `Get("Connected")` stays false);
// - GATT objects are static objects the test adds (no handle moves unless the test moves them),
//   StartNotify only logs the call, Value changes only when the test updates it;
// - GattManager1 is bookkeeping plus one read of our application's UUIDs (as bluetoothd does at
//   registration); AgentManager1 is the template's bookkeeping, and the agent is called only when
//   a test makes the mock call it (bluetoothd would call it during pairing);
// - AddressType is always "public"; no Disconnected signal unless emitted by a test; bluetoothd
//   "restart" is the mock process dying (like SIGKILL: no removals, no Powered=false first).

/// The BlueZ tests' bus: a private system-type `dbus-daemon` (TestSupport).
typealias PrivateSystemBus = PrivateDBusDaemon

extension PrivateDBusDaemon {
    convenience init() throws { try self.init(kind: .system, prefix: "paird-bluez") }
}

/// Checks `condition` (which may call the mock, so it runs outside the loop) until it holds,
/// running the loop in 20 ms slices in between; `limit` turns a hang into a failure.
func eventually(_ loop: EventLoop, _ what: String, limit: Duration = .seconds(10), _ condition: () throws -> Bool) throws {
    let deadline = ContinuousClock.now + limit
    while true {
        if (try? condition()) == true { return }
        if ContinuousClock.now > deadline { throw TimedOut(what: what) }
        var slice = false
        let t = loop.schedule(after: .milliseconds(20)) { slice = true }
        try loop.run(until: { slice })
        t.cancel()
    }
}

/// One test's world: a bus, the bluez5 mock on it, a control connection, and helpers.
final class MockBlueZ {
    static let python = "/usr/bin/python3"
    let loop: EventLoop
    let bus: PrivateSystemBus
    let control: DBusConnection
    private var mock: Process?
    private var owner: String?
    private var ownerWatch: SignalSubscription?
    private var mockCount = 0
    /// Clients started by `startClient`, kept alive for the test's duration (a client that goes
    /// away stops handling anything: its handlers hold it weakly).
    var clients: [BlueZClient] = []

    init() throws {
        loop = try EventLoop()
        bus = try PrivateSystemBus()
        control = try DBusConnection(address: bus.address, on: loop)
        var ready: DBusError?? = .none
        ownerWatch = control.subscribe(MatchRule(sender: "org.freedesktop.DBus", interface: "org.freedesktop.DBus",
                                                 member: "NameOwnerChanged", arg0: "org.bluez"),
                                       ready: { ready = .some($0) }) { [weak self] message in
            guard let args = try? message.arguments(), args.count == 3, let new = args[2].string else { return }
            self?.owner = new.isEmpty ? nil : new
        }
        try runUntil(loop, "AddMatch") { ready != nil }
        try startMock()
    }

    deinit {
        stopMock()
        control.close()
    }

    func connection() throws -> DBusConnection { try DBusConnection(address: bus.address, on: loop) }

    /// Starts `python3 -m dbusmock --system --template bluez5` on our bus and waits for org.bluez.
    func startMock() throws {
        mockCount += 1
        let p = Process()
        p.executableURL = URL(fileURLWithPath: Self.python)
        p.arguments = ["-m", "dbusmock", "--system", "--template", "bluez5",
                       "-l", bus.directory.appendingPathComponent("mock\(mockCount).log").path]
        var env = ProcessInfo.processInfo.environment
        env["DBUS_SYSTEM_BUS_ADDRESS"] = bus.address
        env.removeValue(forKey: "PYTHONPATH")
        p.environment = env
        p.standardOutput = FileHandle.nullDevice
        try p.run()
        mock = p
        try runUntil(loop, "org.bluez on the bus", limit: .seconds(20)) { owner != nil }
    }

    /// The mock dies (bluetoothd killed): only NameOwnerChanged tells.
    func stopMock() {
        guard let mock else { return }
        // SIGKILL (SIGTERM may be blocked in the child, see PrivateSystemBus.deinit).
        kill(mock.processIdentifier, SIGKILL)
        mock.waitUntilExit()
        self.mock = nil
    }

    func waitForMockGone() throws {
        try runUntil(loop, "org.bluez to leave") { owner == nil }
    }

    var mockOwner: String? { owner }

    /// The mock's own log (every call it served), for diagnosing a failing test.
    func mockLog() -> String {
        (try? String(contentsOf: bus.directory.appendingPathComponent("mock\(mockCount).log"), encoding: .utf8)) ?? ""
    }

    // MARK: Calls

    @discardableResult
    func call(_ path: String, _ interface: String, _ method: String, _ args: [DBusValue] = [],
              destination: String = "org.bluez") throws -> [DBusValue] {
        var result: Result<[DBusValue], DBusError>?
        control.call(destination: destination, path: path, interface: interface, method: method, args: args,
                     timeout: .seconds(10)) { result = $0 }
        try runUntil(loop, "reply to \(method)") { result != nil }
        return try result!.get()
    }

    func tryCall(_ path: String, _ interface: String, _ method: String, _ args: [DBusValue] = []) throws -> Result<[DBusValue], DBusError> {
        var result: Result<[DBusValue], DBusError>?
        control.call(destination: "org.bluez", path: path, interface: interface, method: method, args: args,
                     timeout: .seconds(10)) { result = $0 }
        try runUntil(loop, "reply to \(method)") { result != nil }
        return result!
    }

    static let mockIface = "org.freedesktop.DBus.Mock"

    @discardableResult
    func addAdapter(_ name: String = "hci0", alias: String = "host") throws -> String {
        let path = try call("/", "org.bluez.Mock", "AddAdapter", [.string(name), .string(alias)])[0].string ?? ""
        try addGattManager(adapter: path)
        return path
    }

    @discardableResult
    func addDevice(_ adapter: String = "hci0", _ address: String, name: String = "Pulse-1") throws -> String {
        try call("/", "org.bluez.Mock", "AddDevice", [.string(adapter), .string(address), .string(name)])[0].string ?? ""
    }

    func updateProperties(_ path: String, _ interface: String, _ props: [String: DBusValue]) throws {
        try call(path, Self.mockIface, "UpdateProperties", [.string(interface), .vardict(props)])
    }

    func addProperties(_ path: String, _ interface: String, _ props: [String: DBusValue]) throws {
        try call(path, Self.mockIface, "AddProperties", [.string(interface), .vardict(props)])
    }

    func addMethod(_ path: String, _ interface: String, _ name: String, in inSig: String, out outSig: String, code: String) throws {
        try call(path, Self.mockIface, "AddMethod", [.string(interface), .string(name), .string(inSig), .string(outSig), .string(code)])
    }

    /// `EmitSignal(interface, name, signature, av)` from `path`.
    func emit(_ path: String, _ interface: String, _ name: String, _ signature: String, _ args: [DBusValue]) throws {
        try call(path, Self.mockIface, "EmitSignal", [.string(interface), .string(name), .string(signature),
                                                     .array(elementSignature: "v", args.map { .variant($0) })])
    }

    /// Adds an object with one interface and announces it (AddObject emits nothing by itself).
    func addObject(_ path: String, _ interface: String, _ props: [String: DBusValue],
                   methods: [(String, String, String, String)] = []) throws {
        let m = DBusValue.array(elementSignature: "(ssss)", methods.map {
            .structure([.string($0.0), .string($0.1), .string($0.2), .string($0.3)])
        })
        try call("/", Self.mockIface, "AddObject", [.string(path), .string(interface), .vardict(props), m])
        try interfacesAdded(path, [interface: props])
    }

    func interfacesAdded(_ path: String, _ interfaces: [String: [String: DBusValue]]) throws {
        let value = DBusValue.dict(keySignature: "s", valueSignature: "a{sv}", interfaces.sorted { $0.key < $1.key }.map {
            DBusDictEntry(key: .string($0.key), value: .vardict($0.value))
        })
        try emit("/", "org.freedesktop.DBus.ObjectManager", "InterfacesAdded", "oa{sa{sv}}", [.objectPath(path), value])
    }

    func interfacesRemoved(_ path: String, _ interfaces: [String]) throws {
        try emit("/", "org.freedesktop.DBus.ObjectManager", "InterfacesRemoved", "oas", [.objectPath(path), .stringArray(interfaces)])
    }

    /// Calls the mock's own log of `method` calls on `path`: the argument lists, oldest first.
    func calls(_ path: String, _ method: String) throws -> [[DBusValue]] {
        let reply = try call(path, Self.mockIface, "GetMethodCalls", [.string(method)])
        return (reply.first?.array ?? []).compactMap { $0.structure?[1].array?.map(\.unwrapped) }
    }

    /// GattManager1 bookkeeping on an adapter. Like bluetoothd, RegisterApplication reads the
    /// application's objects (GetManagedObjects on the caller's root) and refuses an application
    /// without profiles or services. Not reproduced: proxies, Release calls, auto-connect.
    func addGattManager(adapter: String) throws {
        try addMethod(adapter, "org.bluez.GattManager1", "RegisterApplication", in: "oa{sv}", out: "", code: """
        import dbus
        self.apps = getattr(self, 'apps', {})
        if str(args[0]) in self.apps:
            raise dbus.exceptions.DBusException('Already Exists', name='org.bluez.Error.AlreadyExists')
        sender = self.registrar
        obj = self.connection.get_object(sender, args[0], introspect=False)
        tree = obj.GetManagedObjects(dbus_interface='org.freedesktop.DBus.ObjectManager')
        uuids = [str(u) for ifaces in tree.values() for name, props in ifaces.items() if name == 'org.bluez.GattProfile1' for u in props.get('UUIDs', [])]
        if not uuids:
            raise dbus.exceptions.DBusException('No valid service object found', name='org.bluez.Error.Failed')
        self.apps[str(args[0])] = uuids
        """)
        try addMethod(adapter, "org.bluez.GattManager1", "UnregisterApplication", in: "o", out: "", code: """
        import dbus
        self.apps = getattr(self, 'apps', {})
        if str(args[0]) not in self.apps:
            raise dbus.exceptions.DBusException('Does Not Exist', name='org.bluez.Error.DoesNotExist')
        del self.apps[str(args[0])]
        """)
        try addMethod(adapter, "org.paird.Test", "Applications", in: "", out: "a{sas}", code: """
        ret = getattr(self, 'apps', {})
        """)
        // The mock cannot learn the caller's name inside a method; the test tells it.
        try addMethod(adapter, "org.paird.Test", "SetRegistrar", in: "s", out: "", code: "self.registrar = args[0]")
    }

    func setRegistrar(_ adapter: String, _ name: String) throws {
        try call(adapter, "org.paird.Test", "SetRegistrar", [.string(name)])
    }

    func applications(_ adapter: String) throws -> [String: [String]] {
        let reply = try call(adapter, "org.paird.Test", "Applications")
        var out: [String: [String]] = [:]
        for e in reply.first?.dictEntries ?? [] {
            if let k = e.key.string, let v = e.value.stringArray { out[k] = v }
        }
        return out
    }

    /// Makes the mock (as bluetoothd) call our agent; returns "ok" or the error name.
    /// Starts an `Agent1` call from "bluetoothd" without waiting for its reply (the agent answers
    /// when the machine decides); `agentReply(token)` reads the reply once it came: "ok", "ok N"
    /// (a passkey) or the error name.
    func startAgentCall(of client: String, _ method: String, device: String, number: UInt32 = 123_456) throws -> Int {
        try addMethod("/org/bluez", "org.paird.Test", "StartAgentCall", in: "ssu", out: "i", code: """
        import dbus
        if not hasattr(self, 'agent_replies'):
            self.agent_replies = {}
        token = len(self.agent_replies) + 1
        self.agent_replies[token] = None
        o = self.connection.get_object(args[0], '/org/paird/agent', introspect=False)
        i = dbus.Interface(o, 'org.bluez.Agent1')
        dev = dbus.ObjectPath('\(device)')
        store = self.agent_replies
        def ok(*r, store=store, token=token):
            store[token] = 'ok' if not r else 'ok %d' % r[0]
        def err(e, store=store, token=token):
            store[token] = e.get_dbus_name()
        kw = dict(reply_handler=ok, error_handler=err, timeout=30)
        m = args[1]
        if m == 'RequestConfirmation':
            i.RequestConfirmation(dev, dbus.UInt32(args[2]), **kw)
        elif m == 'DisplayPasskey':
            i.DisplayPasskey(dev, dbus.UInt32(args[2]), dbus.UInt16(0), **kw)
        elif m == 'AuthorizeService':
            i.AuthorizeService(dev, '0000180d-0000-1000-8000-00805f9b34fb', **kw)
        elif m == 'Cancel':
            i.Cancel(**kw)
        else:
            getattr(i, m)(dev, **kw)
        ret = token
        """)
        try addMethod("/org/bluez", "org.paird.Test", "AgentReply", in: "i", out: "s", code: """
        r = getattr(self, 'agent_replies', {}).get(args[0])
        ret = '' if r is None else r
        """)
        var result: Result<[DBusValue], DBusError>?
        control.call(destination: "org.bluez", path: "/org/bluez", interface: "org.paird.Test", method: "StartAgentCall",
                     args: [.string(client), .string(method), .uint32(number)], timeout: .seconds(10)) { result = $0 }
        try runUntil(loop, "StartAgentCall \(method)") { result != nil }
        return Int(try result!.get().first?.int32 ?? -1)
    }

    func agentReply(_ token: Int) throws -> String? {
        var result: Result<[DBusValue], DBusError>?
        control.call(destination: "org.bluez", path: "/org/bluez", interface: "org.paird.Test", method: "AgentReply",
                     args: [.int32(Int32(token))], timeout: .seconds(10)) { result = $0 }
        try runUntil(loop, "AgentReply") { result != nil }
        let s = try result!.get().first?.string ?? ""
        return s.isEmpty ? nil : s
    }

    // MARK: GATT

    static let gattService = "org.bluez.GattService1"
    static let gattChar = "org.bluez.GattCharacteristic1"

    /// Heart Rate service + Measurement (notify) and Battery service + Level (read, notify),
    /// at the handles given (tests move them to check lookup by UUID).
    func addGatt(device: String, hrService: String = "service000a", hrChar: String = "char000b",
                 batService: String = "service000e", batChar: String = "char000f", batteryLevel: UInt8 = 85) throws {
        let hrs = device + "/" + hrService
        try addObject(hrs, Self.gattService, ["UUID": .string(ServiceUUID.heartRate), "Primary": .bool(true), "Device": .objectPath(device)])
        try addObject(hrs + "/" + hrChar, Self.gattChar, [
            "UUID": .string(ServiceUUID.heartRateMeasurement), "Service": .objectPath(hrs), "Value": .bytes([]),
            "Notifying": .bool(false), "Flags": .stringArray(["notify"]),
        ], methods: [("StartNotify", "", "", ""), ("StopNotify", "", "", "")])
        let bs = device + "/" + batService
        try addObject(bs, Self.gattService, ["UUID": .string(ServiceUUID.battery), "Primary": .bool(true), "Device": .objectPath(device)])
        try addObject(bs + "/" + batChar, Self.gattChar, [
            "UUID": .string("00002A19-0000-1000-8000-00805F9B34FB"), "Service": .objectPath(bs), "Value": .bytes([batteryLevel]),
            "Notifying": .bool(false), "Flags": .stringArray(["read", "notify"]),
        ], methods: [("StartNotify", "", "", ""), ("StopNotify", "", "", ""),
                     ("ReadValue", "a{sv}", "ay", "ret = dbus.Array([dbus.Byte(\(batteryLevel))], signature='y')")])
    }
}

/// Records a client's events.
final class Recorder {
    var events: [BlueZEvent] = []
    func attach(_ client: BlueZClient) {
        client.onEvent = { self.events.append($0) }   // the client keeps its recorder alive
    }
    func count(where predicate: (BlueZEvent) -> Bool) -> Int { events.filter(predicate).count }
    func has(_ event: BlueZEvent) -> Bool { events.contains(event) }
    var readyCount: Int { count { if case .adapterReady = $0 { true } else { false } } }
    var goneCount: Int { count { switch $0 { case .adapterGone, .adapterLost: true; default: false } } }
}

extension MockBlueZ {
    /// A started client with a recorder, waited until `.adapterReady` (unless `waitReady` is false).
    func startClient(_ selector: String = "", uuids: [String] = [ServiceUUID.heartRate], waitReady: Bool = true,
                     adapterForRegistrar: String? = "/org/bluez/hci0",
                     removalGrace: Duration = .milliseconds(100)) throws -> (BlueZClient, Recorder, DBusConnection) {
        let conn = try connection()
        if let adapterForRegistrar { try? setRegistrar(adapterForRegistrar, conn.uniqueName) }
        let client = BlueZClient(connection: conn, adapter: selector, removalGrace: removalGrace)
        client.retryDelay = .milliseconds(200)
        if ProcessInfo.processInfo.environment["PAIRD_TEST_LOG"] != nil {
            client.log = { print("[bluez] \($0)") }
        }
        clients.append(client)
        let recorder = Recorder()
        recorder.attach(client)
        client.setAutoConnectUUIDs(uuids)
        client.start()
        if waitReady {
            try runUntil(loop, "adapterReady") { recorder.readyCount > 0 }
        }
        return (client, recorder, conn)
    }
}
