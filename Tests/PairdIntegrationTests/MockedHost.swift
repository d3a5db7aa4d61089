import Foundation
import Testing
import PairingCore
import TestSupport

// The integration tier's host: a private system-type dbus-daemon, python-dbusmock's `bluez5`
// template as BlueZ, and the REAL paird and pairctl binaries (built next to this test bundle).
//
// What this double does NOT reproduce of real BlueZ 5.66 (bluez-notes §8): no radio, no
// discovery creating devices or reporting RSSI (devices are added by the test; one is "heard" by
// paird's scan only when the test says it advertises: `advertise`, an RSSI during the scan), no
// GATT objects unless a test adds them (paird then subscribes to nothing and reads no battery),
// ServicesResolved only when the test sets it, Device1.Connect emits Connected=true but a later
// Get("Connected") stays false, no auto-connect, no Agent calls, AddressType always "public", and
// no 40 s Connect blocking. End-to-end behaviour is judged on the real-BlueZ test bed (make e2e).
final class MockedHost {
    let dir: URL
    let address: String
    /// Released after `deinit` has killed the processes on it.
    private let bus: PrivateDBusDaemon
    private var processes: [Process] = []
    private(set) var paird: Process?
    static let binDir = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
    static let pairdBin = ProcessInfo.processInfo.environment["PAIRD_BIN"] ?? binDir.appendingPathComponent("paird").path
    static let pairctlBin = ProcessInfo.processInfo.environment["PAIRCTL_BIN"] ?? binDir.appendingPathComponent("pairctl").path
    static let watch = "00:AA:01:01:00:01"

    /// Where paird's state file is (set before `startPaird` to move it, e.g. into a directory a
    /// test removes to make writes fail).
    lazy var statePath: String = dir.appendingPathComponent("state.json").path
    var pairdLog: String { dir.appendingPathComponent("paird.log").path }

    init() throws {
        dir = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("paird-it-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        bus = try PrivateDBusDaemon(kind: .system, prefix: "paird-it-bus")
        address = bus.address

        try startMock(template: "bluez5", name: "org.bluez")
        try must(python("b.get_object('org.bluez', '/').AddAdapter('hci0', 'host', dbus_interface='org.bluez.Mock')"))
    }

    /// Pairs the mock's watch with the real pairctl (`pair ADDRESS`): the scan hears it advertise,
    /// paird pairs and connects, and the mock plays BlueZ's part (ServicesResolved). Returns
    /// pairctl's result; `added`: the device is already on the mock. `gattServices`: the UUIDs
    /// BlueZ lists once services resolve (the template's Pair swaps them for classic profiles),
    /// sent with ServicesResolved in one signal as bluetoothd may.
    @discardableResult
    func pairWatch(added: Bool = false, gattServices: [String]? = nil) throws -> Ran {
        if !added { try addDevice(Self.watch) }
        let scans = adapterCalls("StartDiscovery")
        let pairing = start(Self.pairctlBin, ["pair", Self.watch, "--timeout", "5"])
        try advertise(Self.watch, afterDiscoveries: scans)
        try waitFor("paird to call Connect after pairing", deadline: 20) { self.calls("Connect") >= 1 }
        let uuids = gattServices.map { ", 'UUIDs': dbus.Array([\($0.map { "'\($0)'" }.joined(separator: ", "))], signature='s')" } ?? ""
        try setDevice(Self.watch, "'ServicesResolved': True\(uuids)")
        return pairing.finish()
    }

    /// `pairWatch()`, failing unless pairctl exits 0.
    func pairWatchOK() throws {
        try must(pairWatch(), "pairctl pair")
    }

    /// python-dbusmock's `logind` template as org.freedesktop.login1 (Inhibit hands out a pipe
    /// and lists the inhibitor until its end is closed; PrepareForSleep is sent by `EmitSignal`).
    /// It does not reproduce logind's own waiting on delay inhibitors, nor a real sleep.
    func startLogind() throws {
        try startMock(template: "logind", name: "org.freedesktop.login1")
    }

    /// A python-dbusmock `template` on the private bus, once it owns `name`.
    private func startMock(template: String, name: String) throws {
        let mock = Process()
        mock.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        mock.arguments = ["-m", "dbusmock", "--system", "--template", template]
        mock.environment = env
        mock.standardOutput = FileHandle(forWritingAtPath: "/dev/null")
        try mock.run()
        processes.append(mock)
        try waitFor("\(name) on the private bus", deadline: 15) {
            self.python("import dbus; dbus.SystemBus().get_name_owner('\(name)')").status == 0
        }
    }

    /// logind's inhibitors now, as "what who mode" lines.
    func inhibitors() -> [String] {
        let r = python("""
            for i in b.get_object('org.freedesktop.login1', '/org/freedesktop/login1').ListInhibitors(dbus_interface='org.freedesktop.login1.Manager'):
                print(i[0], i[1], i[3])
            """)
        return r.out.split(separator: "\n").map(String.init)
    }

    /// logind's PrepareForSleep(going).
    func prepareForSleep(_ going: Bool) throws {
        try must(python("b.get_object('org.freedesktop.login1', '/org/freedesktop/login1').EmitSignal('org.freedesktop.login1.Manager', 'PrepareForSleep', 'b', [\(going ? "True" : "False")], dbus_interface='org.freedesktop.DBus.Mock')"), "EmitSignal PrepareForSleep")
    }

    deinit {
        // SIGKILL: children of Swift Testing's worker threads may inherit a mask blocking SIGTERM.
        for p in processes.reversed() where p.isRunning { kill(p.processIdentifier, SIGKILL); p.waitUntilExit() }
        try? FileManager.default.removeItem(at: dir)
    }

    /// More environment for the processes started from now on (e.g. `PAIRCTL_RFKILL_DIR`).
    var extraEnv: [String: String] = [:]

    var env: [String: String] {
        var e = ProcessInfo.processInfo.environment
        e["DBUS_SYSTEM_BUS_ADDRESS"] = address
        return e.merging(extraEnv) { $1 }
    }

    struct Ran { var status: Int32; var out: String; var err: String }

    /// A started child; `finish()` waits for it (killing it after `timeout` seconds).
    struct Running {
        let process: Process
        let out: Pipe
        let err: Pipe
        let timeout: Double

        func finish() -> Ran {
            let p = process
            let killer = DispatchWorkItem { if p.isRunning { kill(p.processIdentifier, SIGKILL) } }
            DispatchQueue.global().asyncAfter(deadline: .now() + timeout, execute: killer)
            let o = out.fileHandleForReading.readDataToEndOfFile()
            let e = err.fileHandleForReading.readDataToEndOfFile()
            p.waitUntilExit()
            killer.cancel()
            return Ran(status: p.terminationStatus, out: String(decoding: o, as: UTF8.self), err: String(decoding: e, as: UTF8.self))
        }
    }

    func start(_ path: String, _ args: [String], timeout: Double = 60) -> Running {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: path)
        p.arguments = args
        p.environment = env
        let out = Pipe(), err = Pipe()
        p.standardOutput = out
        p.standardError = err
        do { try p.run() } catch { err.fileHandleForWriting.write(Data("\(error)".utf8)) }
        return Running(process: p, out: out, err: err, timeout: timeout)
    }

    @discardableResult
    func run(_ path: String, _ args: [String], timeout: Double = 60) -> Ran {
        let r = start(path, args, timeout: timeout)
        guard r.process.processIdentifier != 0 else {
            return Ran(status: -1, out: "", err: "could not start \(path)")
        }
        return r.finish()
    }

    /// Runs Python with `b` = the private system bus (for driving the mock).
    @discardableResult
    func python(_ code: String) -> Ran {
        run("/usr/bin/python3", ["-c", "import dbus\nb = dbus.SystemBus()\n" + code], timeout: 20)
    }

    func must(_ r: Ran, _ what: String = "") throws {
        if r.status != 0 { throw Failure("\(what) failed (\(r.status)): \(r.err)") }
    }

    func pairctl(_ args: String...) -> Ran { run(Self.pairctlBin, args) }

    func addDevice(_ address: String = MockedHost.watch, name: String = "Watch") throws {
        try must(python("b.get_object('org.bluez', '/').AddDevice('hci0', '\(address)', '\(name)', dbus_interface='org.bluez.Mock')"), "AddDevice")
    }

    func devicePath(_ address: String) -> String { "/org/bluez/hci0/dev_" + address.replacingOccurrences(of: ":", with: "_") }

    /// Sets Device1 properties on the mock, which emits PropertiesChanged as bluetoothd would.
    func setDevice(_ address: String = MockedHost.watch, _ props: String) throws {
        try must(python("b.get_object('org.bluez', '\(devicePath(address))').UpdateProperties('org.bluez.Device1', {\(props)}, dbus_interface='org.freedesktop.DBus.Mock')"), "UpdateProperties")
    }

    /// GATT objects under the wearable, announced as bluetoothd does (InterfacesAdded from `/`):
    /// a service and, for each `(uuid, object)` of `characteristics`, a notifying characteristic
    /// `<device>/service0010/<object>` whose StartNotify and StopNotify do nothing. Add them
    /// before services resolve (`pairWatch(added: true)`), so that paird subscribes. Not
    /// reproduced: `Notifying` turning true on StartNotify, reads, the ATT layer.
    func addGatt(_ address: String = MockedHost.watch, characteristics: [(uuid: String, object: String)]) throws {
        let service = devicePath(address) + "/service0010"
        var code = """
            m = dbus.Interface(b.get_object('org.bluez', '/'), 'org.freedesktop.DBus.Mock')
            def add(path, iface, props, methods):
                m.AddObject(path, iface, props, methods)
                m.EmitSignal('org.freedesktop.DBus.ObjectManager', 'InterfacesAdded', 'oa{sa{sv}}', [dbus.ObjectPath(path), dbus.Dictionary({iface: dbus.Dictionary(props, signature='sv')}, signature='sa{sv}')])
            add('\(service)', 'org.bluez.GattService1', {'UUID': '\(ServiceUUID.heartRate)', 'Primary': True, 'Device': dbus.ObjectPath('\(devicePath(address))')}, [])

            """
        for c in characteristics {
            code += """
                add('\(service)/\(c.object)', 'org.bluez.GattCharacteristic1', {'UUID': '\(c.uuid)', 'Service': dbus.ObjectPath('\(service)'), 'Value': dbus.Array([], signature='y'), 'Notifying': False, 'Flags': dbus.Array(['notify'], signature='s')}, [('StartNotify', '', '', ''), ('StopNotify', '', '', '')])

                """
        }
        try must(python(code), "AddObject GATT")
    }

    /// The characteristic `object` (of `addGatt`) notifies `value`: its `Value` in a
    /// PropertiesChanged, as bluetoothd sends each notification.
    func notifyValue(_ object: String, _ value: [UInt8], of address: String = MockedHost.watch) throws {
        let bytes = value.map { "dbus.Byte(\($0))" }.joined(separator: ", ")
        try must(python("""
            b.get_object('org.bluez', '\(devicePath(address))/service0010/\(object)').EmitSignal('org.freedesktop.DBus.Properties', 'PropertiesChanged', 'sa{sv}as', ['org.bluez.GattCharacteristic1', {'Value': dbus.Array([\(bytes)], signature='y', variant_level=1)}, dbus.Array([], signature='s')], dbus_interface='org.freedesktop.DBus.Mock')
            """), "EmitSignal PropertiesChanged Value")
    }

    /// How many times paird called a method of the adapter (hci0).
    func adapterCalls(_ method: String) -> Int {
        let r = python("print(len(b.get_object('org.bluez', '/org/bluez/hci0').GetMethodCalls('\(method)', dbus_interface='org.freedesktop.DBus.Mock')))")
        return Int(r.out.trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
    }

    /// The wearable advertising during paird's scan, as bluetoothd shows it: an `RSSI` while
    /// discovering, once paird's StartDiscovery number `discoveries + 1` reached the mock (count
    /// them with `adapterCalls("StartDiscovery")` before starting pairctl). paird takes only
    /// what it hears during its own scan; a device the mock merely lists is not advertising.
    func advertise(_ address: String = MockedHost.watch, afterDiscoveries discoveries: Int) throws {
        try waitFor("paird's scan", deadline: 20) { adapterCalls("StartDiscovery") > discoveries }
        try setDevice(address, "'RSSI': dbus.Int16(-55)")
    }

    /// How many times a method was called on the mock device.
    func calls(_ method: String, _ address: String = MockedHost.watch) -> Int {
        let r = python("print(len(b.get_object('org.bluez', '\(devicePath(address))').GetMethodCalls('\(method)', dbus_interface='org.freedesktop.DBus.Mock')))")
        return Int(r.out.trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
    }

    /// `shell`: a sh prefix run before paird is exec'd in its place (`trap '' XFSZ;`).
    func startPaird(_ extra: [String] = [], env extraEnv: [String: String] = [:], waitReady: Bool = true, shell: String? = nil) throws {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: Self.pairdBin)
        let conf = dir.appendingPathComponent("paird.conf").path
        // an explicit --config must exist; an empty one is all defaults
        if !FileManager.default.fileExists(atPath: conf) { _ = FileManager.default.createFile(atPath: conf, contents: Data()) }
        p.arguments = ["--state-file", statePath, "--config", conf] + extra
        if let shell {
            p.executableURL = URL(fileURLWithPath: "/bin/sh")
            p.arguments = ["-c", shell + " exec \"$0\" \"$@\"", Self.pairdBin] + p.arguments!
        }
        p.environment = env.merging(extraEnv) { $1 }
        _ = FileManager.default.createFile(atPath: pairdLog, contents: nil)
        let log = FileHandle(forWritingAtPath: pairdLog)!
        log.seekToEndOfFile()
        p.standardOutput = log
        p.standardError = log
        try p.run()
        processes.append(p)
        paird = p
        if waitReady { try waitFor("paird answering GetStatus", deadline: 15) { self.pairctl("status").status == 0 } }
    }

    /// Kills the mocked bluetoothd (as SIGKILL would: no signals first).
    func killBlueZ() {
        python("import os, subprocess; pid = b.call_blocking('org.freedesktop.DBus', '/org/freedesktop/DBus', 'org.freedesktop.DBus', 'GetConnectionUnixProcessID', 's', ['org.bluez']); os.kill(pid, 9)")
    }

    func stopPaird() throws {
        guard let p = paird else { return }
        kill(p.processIdentifier, SIGTERM)
        try waitFor("paird exiting on SIGTERM", deadline: 10) { !p.isRunning }
        paird = nil
    }

    func status() throws -> StatusDocument {
        let r = pairctl("status", "--json")
        try must(r, "pairctl status --json")
        return try StatusDocument.decode(r.out)
    }

    func state(_ address: String = MockedHost.watch) -> String? {
        (try? status())?.devices.first { $0.address == address }?.state
    }

    func log() -> String { (try? String(contentsOfFile: pairdLog, encoding: .utf8)) ?? "" }
}

struct Failure: Error, CustomStringConvertible {
    var description: String
    init(_ d: String) { description = d }
}

/// Polls `condition` until it holds or `deadline` seconds pass (then throws, naming `what`).
func waitFor(_ what: String, deadline: Double, _ condition: () throws -> Bool) throws {
    let end = Date().addingTimeInterval(deadline)
    while Date() < end {
        if (try? condition()) == true { return }
        usleep(50_000)
    }
    throw Failure("timed out after \(deadline) s waiting for \(what)")
}

/// A NOTIFY_SOCKET for paird: an AF_UNIX datagram socket collecting sd_notify messages.
final class NotifySocket {
    let path: String
    private let fd: Int32
    private(set) var messages: [String] = []

    init(in dir: URL) throws {
        path = dir.appendingPathComponent("notify.sock").path
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &addr.sun_path) { buf in
            for (i, b) in path.utf8.enumerated() where i < buf.count - 1 { buf[i] = b }
        }
        let rc = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        if rc != 0 { throw Failure("bind \(path): errno \(errno)") }
        var tv = timeval(tv_sec: 0, tv_usec: 100_000)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit { close(fd) }

    /// Receives what has arrived (waits at most 100 ms).
    func drain() -> [String] {
        var buf = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = recv(fd, &buf, buf.count, 0)
            if n <= 0 { break }
            messages.append(String(decoding: buf[0..<n], as: UTF8.self))
        }
        return messages
    }

    func received(_ assignment: String) -> Bool {
        drain().contains { $0.split(separator: "\n").contains(Substring(assignment)) }
    }
}
