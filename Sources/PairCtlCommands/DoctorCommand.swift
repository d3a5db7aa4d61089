import ArgumentParser
import DBus
import EventLoop
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import BlueZ
import PairingCore
#if canImport(Glibc)
import Glibc
#endif

/// `pairctl doctor [WEARABLE]`: collects the facts stage by stage (`Doctor.Facts`) and stops at the
/// first stage `Doctor.evaluate` finds a problem in. Everything it asks is readable by any user:
/// the bus driver's `NameHasOwner`, systemd's `LoadUnit` and unit properties, sysfs, BlueZ's
/// objects and a discovery session (BlueZ's policy: Debian 12 lets every local user), paird's
/// `GetStatus`; the rights check is a `Connect()` without its argument, which paird's policy
/// refuses to anyone but root and the bluetooth group and paird itself refuses for the missing
/// argument (the connection checks the signature before any handler runs): it changes nothing.
struct DoctorCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "doctor",
        abstract: "Find what stands between you and a wearable's data, and say how to fix it.",
        discussion: """
        Checks in order, and stops at the first problem with one verdict and its fix: bluetoothd \
        (running, crashed, stopped by an administrator: systemd's bluetooth.service, else whether \
        org.bluez is on the system bus); rfkill (soft and hard blocks of Bluetooth); the adapter \
        (present, powered); paird (running, answering); your rights (root or the bluetooth group, \
        as paird's D-Bus policy answers); then the WEARABLE named, or each one paird manages: \
        bonded and trusted in BlueZ, paird's state and why, the last drop, the last data, and, for \
        one that is not connected, whether it is heard advertising during a short listen \
        (--listen seconds, a discovery session of pairctl's own, as pairctl scan). \
        A wearable not connected and not heard is out of range, off, or connected to another \
        device (a phone): from this host these look the same, and doctor says so. One that is \
        heard advertising but needs pairing again has forgotten the bond. Exit status: 0 when \
        all is well, else the code of the first problem (see pairctl --help; \
        9 for bluetoothd, rfkill and the adapter; 3 paird stopped; 4 your rights; 7 not paired; \
        10 the bond; 5 not heard; 8 still connecting; 1 disconnected as you asked).

        --json: one compact object: schemaVersion, checks [{check, ok, detail, address}], \
        verdict (a token: all-well, bluetoothd-stopped, bluetoothd-crashed, rfkill-soft-block, \
        adapter-off, paird-stopped, access-denied, not-heard, bond-lost, ...; docs/reference.md lists them all), text, fix, address, \
        exit (a number), listenSeconds (null when nothing was listened for).
        """)

    @Argument(help: ArgumentHelp("Check only this wearable: its address or its name as status shows it (any case). Default: every paired one.",
                                 valueName: "wearable"))
    var wearable: String?

    @Option(name: .customLong("listen"), parsing: .unconditional,
            help: ArgumentHelp("Seconds to listen for a wearable that is not connected (1-30).", valueName: "seconds"))
    var listen: Int = 4

    @Flag(help: "Print one JSON object instead of lines.")
    var json = false

    func validate() throws {
        if let w = wearable, DeviceAddress(w) == nil, DeviceArgument.looksLikeAddress(w) || trimmed(w).isEmpty {
            throw ValidationError("\"\(w)\" is not a Bluetooth address (expected AA:BB:CC:DD:EE:FF) or a name")
        }
        if !(1...30).contains(listen) { throw ValidationError("--listen must be 1-30 seconds") }
    }

    func run() throws {
        let client: PairdClient
        do { client = try PairdClient() } catch let e {
            // no system bus: nothing between the user and the data can be asked
            let r = Doctor.Result(checks: [Doctor.Check("system bus", false, e.message)],
                                  verdict: Doctor.Verdict(.noSystemBus, "the system bus (dbus-daemon) is unreachable",
                                                          fix: "systemctl status dbus; BlueZ, paird and pairctl all need it"))
            say(json ? Doctor.json(r, listenSeconds: nil) : Doctor.text(r).joined(separator: "\n"))
            throw ExitCode(e.exit.rawValue)
        }
        var listened: Int?
        let result: Doctor.Result
        do {
            result = try collect(client, listened: &listened)
        } catch let e as PairctlError {
            // BlueZ refused or failed a call doctor needed: no verdict, the error (stderr) and its code
            if json {
                say(compactJSON(Doctor.Document(checks: [], verdict: "error", text: e.message, fix: nil, address: nil,
                                                exit: e.exit.rawValue, listenSeconds: nil)))
            }
            throw e
        }
        if json {
            say(Doctor.json(result, listenSeconds: listened))
        } else {
            say(Doctor.text(result).joined(separator: "\n"))
        }
        let code = result.verdict?.exit ?? .success
        if code != .success { throw ExitCode(code.rawValue) }
    }

    /// The facts, stage by stage, until a verdict.
    func collect(_ client: PairdClient, listened: inout Int?) throws -> Doctor.Result {
        let bus = client.bus
        var f = Doctor.Facts(bluetoothdUnit: nil, bluezOnBus: Self.hasOwner(bus, "org.bluez"))
        // Only when it has no owner: a running bluetoothd is running, however it was started.
        if !f.bluezOnBus { f.bluetoothdUnit = Self.bluetoothUnit(bus) }
        func decided() -> Doctor.Result? {
            let r = Doctor.evaluate(f, now: Date())
            return r.verdict == nil ? nil : r
        }
        if let r = decided() { return r }

        // paird's status first (harmless, public): it names the adapter paird uses.
        let paird = Self.pairdLook(client)
        var pairdAdapter: String?
        if case .running(let s) = paird, let name = s.adapter?.name, !name.isEmpty { pairdAdapter = name }

        f.rfkill = Self.rfkill()
        // org.bluez has an owner (above): calls to it do not start it by bus activation.
        let objects: [String: [String: [String: DBusValue]]]
        do {
            let reply = try bus.callSync(destination: "org.bluez", path: "/", interface: "org.freedesktop.DBus.ObjectManager",
                                         method: "GetManagedObjects", timeout: .seconds(10))
            objects = reply.first?.managedObjects ?? [:]
        } catch {
            throw Scan.failure(error, "GetManagedObjects")
        }
        let adapters = objects.keys.filter { objects[$0]?["org.bluez.Adapter1"] != nil }.sorted()
        let adapterPath: String?
        if let wanted = pairdAdapter {
            adapterPath = adapters.first { $0.hasSuffix("/" + wanted) || objects[$0]?["org.bluez.Adapter1"]?["Address"]?.string == wanted }
            if adapterPath == nil { f.adapter = .missing(wanted: wanted, others: adapters.map(Self.leaf)) }
        } else {
            adapterPath = adapters.first
            if adapterPath == nil { f.adapter = Doctor.AdapterLook.none }
        }
        if let path = adapterPath, let props = objects[path]?["org.bluez.Adapter1"] {
            f.adapter = .found(Doctor.AdapterFacts(name: Self.leaf(path), address: props["Address"]?.string ?? "",
                                                   powered: props["Powered"]?.bool ?? false, powerState: props["PowerState"]?.string))
        }
        if let r = decided() { return r }

        f.paird = paird
        if let r = decided() { return r }

        f.caller = Self.caller(bus)
        if let r = decided() { return r }

        // The wearables: the one named, or every one paird manages.
        guard case .running(let status) = paird, let adapterPath else { return Doctor.evaluate(f, now: Date()) }
        var devices = status.devices
        if let w = wearable {
            let found: Result<StatusDocument.Device, PairctlError>
            do throws(PairctlError) { found = .success(try DeviceArgument.find(w, in: status.devices)) } catch { found = .failure(error) }
            switch found {
            case .success(let d): devices = [d]
            case .failure(let e) where e.exit == .unknownDevice:
                f.wearables = .unknown(w)
                return Doctor.evaluate(f, now: Date())
            case .failure(let e): throw e   // several of that name: exit 64
            }
        }
        func bluezDevice(_ address: String, under adapter: String, in objects: [String: [String: [String: DBusValue]]]) -> [String: DBusValue]? {
            objects.first { $0.key.hasPrefix(adapter + "/") && Self.address($0.value["org.bluez.Device1"]) == DeviceAddress(address) }?
                .value["org.bluez.Device1"]
        }
        // Listened for only when one is not connected (a connected wearable does not advertise).
        var heard: [String: Int] = [:]
        var now = objects
        if devices.contains(where: { $0.state != "connected" }) {
            let l = try Scan.listen(client, seconds: listen, adapterPath: adapterPath)
            listened = listen
            for (path, t) in l.devices where path.hasPrefix(l.adapterPath + "/") {   // heard by paird's adapter
                guard let rssi = t.rssi, let a = Self.address(t.props) else { continue }
                heard[a.description] = max(heard[a.description] ?? Int.min, rssi)
            }
            // BlueZ's view after the listen (a link made or lost meanwhile)
            if let reply = try? bus.callSync(destination: "org.bluez", path: "/", interface: "org.freedesktop.DBus.ObjectManager",
                                             method: "GetManagedObjects", timeout: .seconds(10)),
               let o = reply.first?.managedObjects { now = o }
        }
        let facts = devices.map { d -> Doctor.WearableFacts in
            let b = bluezDevice(d.address, under: adapterPath, in: now).map {
                Doctor.WearableFacts.BlueZDevice(paired: $0["Paired"]?.bool ?? false, bonded: $0["Bonded"]?.bool ?? $0["Paired"]?.bool ?? false,
                                                 trusted: $0["Trusted"]?.bool ?? false, connected: $0["Connected"]?.bool ?? false)
            }
            // another adapter of this host linked to it
            let other = now.keys.filter { $0.hasPrefix("/org/bluez/") && !$0.hasPrefix(adapterPath + "/") }
                .first { path in
                    guard let dev = now[path]?["org.bluez.Device1"], dev["Connected"]?.bool == true else { return false }
                    return Self.address(dev) == DeviceAddress(d.address)
                }
                .map { String($0.split(separator: "/").dropLast().last ?? "") }
            return Doctor.WearableFacts(device: d, bluez: b, connectedThrough: other,
                                        heardRSSI: heard[DeviceAddress(d.address)?.description ?? d.address],
                                        listened: listened != nil && d.state != "connected")
        }
        f.wearables = .checked(facts, listenSeconds: listen)
        return Doctor.evaluate(f, now: Date())
    }

    /// Device1.Address of these properties.
    static func address(_ props: [String: DBusValue]?) -> DeviceAddress? {
        guard let text = props?["Address"]?.string else { return nil }
        return DeviceAddress(text)
    }

    static func leaf(_ path: String) -> String { path.split(separator: "/").last.map(String.init) ?? path }

    static func hasOwner(_ bus: DBusConnection, _ name: String) -> Bool {
        let reply = try? bus.callSync(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                                      method: "NameHasOwner", args: [.string(name)], timeout: .seconds(5))
        return reply?.first?.bool ?? false
    }

    /// systemd's view of bluetooth.service (`LoadUnit`, then the unit's and the service's
    /// properties), as paird asks it (Daemon+Bluetoothd); nil: no systemd, no such unit, or denied.
    static func bluetoothUnit(_ bus: DBusConnection) -> BluetoothdUnitState? {
        let s = (name: "org.freedesktop.systemd1", path: "/org/freedesktop/systemd1")
        guard hasOwner(bus, s.name),
              let path = (try? bus.callSync(destination: s.name, path: s.path, interface: "org.freedesktop.systemd1.Manager",
                                            method: "LoadUnit", args: [.string("bluetooth.service")], timeout: .seconds(10)))?.first?.objectPath
        else { return nil }
        func all(_ interface: String) -> [String: DBusValue]? {
            (try? bus.callSync(destination: s.name, path: path, interface: "org.freedesktop.DBus.Properties", method: "GetAll",
                               args: [.string(interface)], timeout: .seconds(10)))?.first?.dictionary
        }
        guard let unit = all("org.freedesktop.systemd1.Unit"), let service = all("org.freedesktop.systemd1.Service"),
              let active = unit["ActiveState"]?.string, let result = service["Result"]?.string,
              unit["LoadState"]?.string != "not-found" else { return nil }
        return BluetoothdUnitState(activeState: active, result: result, execMainCode: service["ExecMainCode"]?.int32 ?? 0,
                                   execMainStatus: service["ExecMainStatus"]?.int32 ?? 0)
    }

    /// The rfkill switches of type bluetooth (`/sys/class/rfkill`; `PAIRCTL_RFKILL_DIR` replaces
    /// it, for tests).
    static func rfkill() -> [Doctor.RfkillSwitch] {
        RfkillSwitch.read(dir: ProcessInfo.processInfo.environment["PAIRCTL_RFKILL_DIR"] ?? "/sys/class/rfkill")
    }

    static func pairdLook(_ client: PairdClient) -> Doctor.PairdLook {
        do throws(PairctlError) {
            return .running(try client.status())
        } catch {
            switch error.exit {
            case .daemonNotRunning: return .notRunning(error.message)
            case .timeout: return .notAnswering(error.message)
            default: return .failed(error.message)
            }
        }
    }

    static func caller(_ bus: DBusConnection) -> Doctor.CallerFacts {
        let uid = getuid()
        let user = getpwuid(uid).flatMap { String(validatingCString: $0.pointee.pw_name) } ?? "uid \(uid)"
        var probe = Doctor.CallerFacts.Probe.unknown
        do {
            _ = try bus.callSync(destination: PairdAPI.busName, path: PairdAPI.objectPath, interface: PairdAPI.interface,
                                 method: "Connect", timeout: .seconds(5))
            probe = .allowed   // (paird always refuses it without an address)
        } catch {
            switch error.name {
            case "org.freedesktop.DBus.Error.AccessDenied": probe = .denied
            case "org.freedesktop.DBus.Error.InvalidArgs", PairdAPI.Error.invalidArguments: probe = .allowed
            default: probe = .unknown
            }
        }
        return Doctor.CallerFacts(user: user, root: uid == 0, inBluetoothGroup: Watch.mayReceiveData() && uid != 0, probe: probe)
    }
}
