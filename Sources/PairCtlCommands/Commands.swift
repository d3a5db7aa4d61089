import ArgumentParser
import DBus
import EventLoop
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import PairingCore
#if canImport(Glibc)
import Glibc
#endif

/// `pairctl`: the command-line client of paird.
public struct Pairctl: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "pairctl",
        abstract: "Control paird, the daemon that keeps Bluetooth LE wearables connected.",
        discussion: """
        Everyone may read the status; pair, unpair, connect and disconnect need root or
        membership of the bluetooth group (paird's D-Bus policy).

        Exit status:
        \(PairctlExit.allCases.map { "  \(padded(String($0.rawValue), 3)) \($0.meaning)" }.joined(separator: "\n"))
        """,
        version: PairdAPI.version,
        subcommands: [Pair.self, Unpair.self, Connect.self, Disconnect.self, List.self, Status.self, Watch.self, History.self],
        defaultSubcommand: Status.self)

    public init() {}

    /// Runs pairctl with `arguments` and returns its exit code (the @main calls exit with it).
    public static func run(_ arguments: [String]) -> Int32 {
        do {
            var command = try parseAsRoot(arguments)
            try command.run()
            return 0
        } catch let e as PairctlError {
            writeAll(2, "pairctl: \(e.message)\n")
            return e.exit.rawValue
        } catch {
            let code = exitCode(for: error)
            if code == .success {
                print(fullMessage(for: error))   // --help, --version
            } else if code.rawValue == PairctlExit.usage.rawValue {
                // One line, like every other pairctl error; the usage is one --help away.
                let why = message(for: error).split(whereSeparator: \.isNewline).first.map(String.init) ?? "bad arguments"
                let sub = arguments.first { !$0.hasPrefix("-") }.flatMap { a in
                    configuration.subcommands.first { $0._commandName == a }.map { _ in a + " " } } ?? ""
                writeAll(2, "pairctl: \(why.hasPrefix("Error: ") ? String(why.dropFirst(7)) : why) (see 'pairctl \(sub)--help')\n")
            } else {
                writeAll(2, fullMessage(for: error) + "\n")
            }
            return code.rawValue
        }
    }
}

/// The address argument shared by unpair/connect/disconnect: optional when exactly one device is paired.
struct DeviceArgument: ParsableArguments {
    @Argument(help: ArgumentHelp("The wearable's address (its identity address, AA:BB:CC:DD:EE:FF) or its name as status shows it. May be left out when only one is paired.",
                                 valueName: "address|name"))
    var address: String?

    /// Text made of hex digits and separators is meant as an address: a malformed one is an
    /// argument error, not a name that matches nothing.
    static func looksLikeAddress(_ s: String) -> Bool {
        s.unicodeScalars.filter { $0 == ":" || $0 == "-" }.count >= 4 && !s.contains(" ")
    }

    func validate() throws {
        if let a = address, DeviceAddress(a) == nil, Self.looksLikeAddress(a) || trimmed(a).isEmpty {
            throw ValidationError("\"\(a)\" is not a Bluetooth address (expected AA:BB:CC:DD:EE:FF) or a name")
        }
    }

    func resolve(_ client: PairdClient) throws -> DeviceAddress {
        if let text = address, let a = DeviceAddress(text) { return a }
        if let name = address {
            let named = try client.status().devices.filter { $0.name.lowercased() == name.lowercased() }
            switch named.count {
            case 1: return DeviceAddress(named[0].address)!
            case 0: throw PairctlError(.unknownDevice, "no paired wearable is named \"\(name)\" (pairctl list)")
            default: throw PairctlError(.usage, "\(named.count) wearables are named \"\(name)\": give the address (\(named.map(\.address).joined(separator: ", ")))")
            }
        }
        let devices = try client.status().devices
        switch devices.count {
        case 1: return DeviceAddress(devices[0].address)!
        case 0: throw PairctlError(.unknownDevice, "no wearable is paired")
        default: throw PairctlError(.usage, "\(devices.count) wearables are paired: name one (\(devices.map(\.address).joined(separator: ", ")))")
        }
    }
}

struct Unpair: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Forget a wearable: remove its bond in BlueZ and in paird's state.")
    @OptionGroup var device: DeviceArgument
    func run() throws {
        let client = try PairdClient()
        let a = try device.resolve(client)
        _ = try client.call("Unpair", [.string(a.description)])
        say("unpaired \(a)")
    }
}

struct Connect: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Want a wearable connected again (after pairctl disconnect).")
    @OptionGroup var device: DeviceArgument
    func run() throws {
        let client = try PairdClient()
        let a = try device.resolve(client)
        _ = try client.call("Connect", [.string(a.description)])
        say("connecting \(a); paird keeps it connected from now on")
    }
}

struct Disconnect: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Disconnect a wearable and keep it down (also across restarts) until pairctl connect.")
    @OptionGroup var device: DeviceArgument
    func run() throws {
        let client = try PairdClient()
        let a = try device.resolve(client)
        _ = try client.call("Disconnect", [.string(a.description)])
        say("disconnected \(a); it stays down until pairctl connect")
    }
}

struct List: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List paired wearables, one per line: address, state, name.",
        discussion: "--json: one object, {\"schemaVersion\": 1, \"devices\": [...]} with the devices as in status --json.")

    @Flag(help: "Print one JSON object instead of lines.")
    var json = false

    func run() throws {
        let client = try PairdClient()
        let devices = try client.status().devices
        if json {
            say(ListDocument(devices: devices).json())
            return
        }
        for d in devices {
            say("\(d.address)  \(padded(StatusText.human(d.state), 20))  \(d.name)")
        }
    }
}

struct ListDocument: Encodable {
    var schemaVersion = StatusDocument.schemaVersion
    var devices: [StatusDocument.Device]
    func json() -> String { compactJSON(self) }

    /// A follow mode's line for something that is not a status document (paird gone / back).
    static func event(_ name: String) -> String {
        "{\"event\":\"\(name)\",\"schemaVersion\":\(StatusDocument.schemaVersion),\"time\":\"\(Date().formatted(.iso8601))\"}"
    }
}

/// Follow modes (status --watch, watch) say when paird leaves the bus and comes back.
func onPairdPresence(_ client: PairdClient, _ handler: @escaping (_ up: Bool) -> Void) {
    client.bus.onSignal(interface: "org.freedesktop.DBus", member: "NameOwnerChanged", path: "/org/freedesktop/DBus",
                        sender: "org.freedesktop.DBus") { message in
        guard let args = try? message.arguments(), args.count == 3, args[0].string == PairdAPI.busName,
              let new = args[2].string else { return }
        handler(!new.isEmpty)
    }
}

struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Show the adapter, any pairing in progress, and every wearable's state.")

    @Flag(help: "Print one JSON object (with --watch: one per line, on every change).")
    var json = false

    @Flag(help: "Keep printing the status on every change until interrupted.")
    var watch = false

    func run() throws {
        let client: PairdClient
        do { client = try PairdClient() } catch let e {
            if json { say(StatusDocument(daemon: StatusDocument.Daemon(running: false, error: e.message), adapter: nil, pairing: nil, devices: []).json(pretty: false)) }
            throw e
        }
        func show() throws {
            do {
                let s = try client.status()
                say(json ? s.json(pretty: !watch) : StatusText.render(s))
            } catch let e {
                if json { say(StatusDocument(daemon: StatusDocument.Daemon(running: false, error: e.message), adapter: nil, pairing: nil, devices: []).json(pretty: !watch)) }
                throw e
            }
        }
        guard watch else { return try show() }
        // Subscribed before the first fetch: a change between the two is never missed.
        var up = true
        var known: [String: String] = [:]
        var lastJSON = ""
        func changed() {
            guard up, let s = try? client.status() else { return }
            if json {
                // One change can come as two signals (StateChanged and PropertiesChanged): said once.
                let line = s.json(pretty: false)
                guard line != lastJSON else { return }
                lastJSON = line
                return say(line)
            }
            for d in s.devices where known[d.address] != d.state {
                known[d.address] = d.state
                say("\(timestamp(Date())) \(d.name.isEmpty ? d.address : "\(d.name) \(d.address)"): \(StatusText.describe(d))")
            }
            for gone in Set(known.keys).subtracting(s.devices.map(\.address)) {
                known[gone] = nil
                say("\(timestamp(Date())) \(gone): unpaired")
            }
        }
        // StateChanged and the status properties' PropertiesChanged (the pairing's phase) are
        // public; Battery only reaches root and the bluetooth group (the D-Bus policy).
        for member in ["StateChanged", "Battery"] { client.on(member) { _ in changed() } }
        client.bus.onSignal(interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged", path: PairdAPI.objectPath) { _ in changed() }
        onPairdPresence(client) { isUp in
            up = isUp
            if json {
                say(ListDocument.event(isUp ? "paird-back" : "paird-gone"))
            } else {
                say("\(timestamp(Date())) paird \(isUp ? "is back" : "stopped (waiting for it to come back)")")
            }
            if isUp { known = [:]; changed() }
        }
        try show()
        if !json, let s = try? client.status() { for d in s.devices { known[d.address] = d.state } }
        try client.runUntil { false }
    }
}

struct Watch: ParsableCommand {
    /// Root, or a member of the `bluetooth` group (primary or supplementary): whom the policy lets
    /// receive `Notification` and `Battery`.
    static func mayReceiveData() -> Bool {
        if getuid() == 0 { return true }
        guard let g = getgrnam("bluetooth") else { return false }
        let gid = g.pointee.gr_gid
        if getgid() == gid || getegid() == gid { return true }
        let n = getgroups(0, nil)
        guard n > 0 else { return false }
        var groups = [gid_t](repeating: 0, count: Int(n))
        return getgroups(n, &groups) == n && groups.contains(gid)
    }

    static let configuration = CommandConfiguration(
        abstract: "Print forwarded notifications and state changes as lines until interrupted.",
        discussion: "Lines: `<time> <address> notify <characteristic-uuid> <hex value>`, `<time> <address> state <state> [reason]`, `<time> <address> battery <percent>`. Notifications and battery levels reach only root and members of the bluetooth group (paird's D-Bus policy); anyone else sees the state lines only.")

    func run() throws {
        let client = try PairdClient()
        _ = try client.status() // fail fast, with the right exit code, when paird is not running
        func stamp() -> String { timestamp(Date()) }
        if !Self.mayReceiveData() {
            writeAll(2, "pairctl: notifications and battery levels reach only root and the bluetooth group (paird's D-Bus policy): showing state changes only\n")
        }
        onPairdPresence(client) { up in say("\(stamp()) paird \(up ? "is back" : "stopped (waiting for it to come back)")") }
        client.on("Notification") { args in
            guard args.count == 3, let a = args[0].string, let c = args[1].string, let v = args[2].bytes else { return }
            say("\(stamp()) \(a) notify \(c) \(hex(v))")
        }
        client.on("StateChanged") { args in
            guard args.count == 3, let a = args[0].string, let s = args[1].string else { return }
            say("\(stamp()) \(a) state \(s)\((args[2].string ?? "").isEmpty ? "" : " " + args[2].string!)")
        }
        client.on("Battery") { args in
            guard args.count == 2, let a = args[0].string, let p = args[1].uint8 else { return }
            say("\(stamp()) \(a) battery \(p)")
        }
        try client.runUntil { false }
    }
}
