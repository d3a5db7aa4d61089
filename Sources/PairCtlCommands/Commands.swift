import ArgumentParser
import BuildInfo
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
        membership of the bluetooth group (paird's D-Bus policy). scan asks BlueZ directly:
        its D-Bus policy decides.

        Exit status:
        \(PairctlExit.allCases.map { "  \(padded(String($0.rawValue), 3)) \($0.meaning)" }.joined(separator: "\n"))
        """,
        version: "pairctl \(BuildInfo.version)",
        subcommands: [Pair.self, Unpair.self, Connect.self, Disconnect.self, List.self, Status.self, Watch.self, History.self, Scan.self, DoctorCommand.self],
        defaultSubcommand: Status.self)

    public init() {}

    /// Runs pairctl with `arguments` and returns its exit code (the @main calls exit with it).
    public static func run(_ arguments: [String]) -> Int32 {
        // `pairctl help VERB`: the parser's help verb shows the top-level help, exit 0, for a verb
        // that does not exist; that is a bad argument here.
        if arguments.first == "help", let verb = arguments.dropFirst().first(where: { !$0.hasPrefix("-") }),
           !configuration.subcommands.contains(where: { $0._commandName == verb }) {
            writeAll(2, "pairctl: help: no such command \"\(verb)\" (see 'pairctl --help')\n")
            return PairctlExit.usage.rawValue
        }
        // `pairctl` alone is `pairctl status`, but a first word that is no verb is a mistyped verb,
        // not a wearable to look up: `pairctl status WEARABLE` names one. (Only the first
        // argument: `--generate-completion-script bash` has a value.)
        if let verb = arguments.first, !verb.hasPrefix("-"), verb != "help",
           !configuration.subcommands.contains(where: { $0._commandName == verb }) {
            writeAll(2, "pairctl: unknown command \"\(verb)\" (to show one wearable: pairctl status \(verb)) (see 'pairctl --help')\n")
            return PairctlExit.usage.rawValue
        }
        do {
            var command = try parseAsRoot(arguments)
            try command.run()
            return 0
        } catch let e as PairctlError {
            // its message may carry a name or a BlueZ message: one line, no control characters
            writeAll(2, "pairctl: \(e.message.terminalSafe)\n")
            return e.exit.rawValue
        } catch let e as ExitCode {
            return e.rawValue   // doctor: its verdict is on stdout already
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
        if let name = address { return DeviceAddress(try Self.find(name, in: client.status().devices).address)! }
        let devices = try client.status().devices
        switch devices.count {
        case 1: return DeviceAddress(devices[0].address)!
        case 0: throw PairctlError(.unknownDevice, "no wearable is paired")
        default: throw PairctlError(.usage, "\(devices.count) wearables are paired: name one (\(devices.map(\.address).joined(separator: ", ")))")
        }
    }
}

extension DeviceArgument {
    /// The paired wearable `text` names: its address (any case) or its name as status shows it
    /// (any case). None: exit 7 (unknown device); several of that name: exit 64 (give the address).
    static func find(_ text: String, in devices: [StatusDocument.Device]) throws(PairctlError) -> StatusDocument.Device {
        if let a = DeviceAddress(text) {
            guard let d = devices.first(where: { DeviceAddress($0.address) == a }) else {
                throw PairctlError(.unknownDevice, "no paired wearable has the address \(a) (pairctl list)")
            }
            return d
        }
        let named = devices.filter { $0.name.lowercased() == text.lowercased() }
        switch named.count {
        case 1: return named[0]
        case 0: throw PairctlError(.unknownDevice, "no paired wearable is named \"\(text)\" (pairctl list)")
        default: throw PairctlError(.usage, "\(named.count) wearables are named \"\(text)\": give the address (\(named.map(\.address).joined(separator: ", ")))")
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
        abstract: "List paired wearables, one per line under a header: address, state, name.",
        discussion: "--json: one object, {\"schemaVersion\": 1, \"devices\": [...]} with the devices as in status --json.")

    @Flag(help: "Print one JSON object instead of lines.")
    var json = false

    @Flag(name: .customLong("no-legend"), help: "Leave out the header line (for scripts).")
    var noLegend = false

    static let header = "\(padded("ADDRESS", 17))  \(padded("STATE", 20))  NAME"

    func run() throws {
        let devices: [StatusDocument.Device]
        do {
            devices = try PairdClient().status().devices
        } catch let e {
            // JSON readers get an object on stdout too (and the exit code): never nothing.
            if json { say(ListDocument.failure(e)) }
            throw e
        }
        if json {
            say(ListDocument(devices: devices).json())
            return
        }
        for line in Self.lines(devices, legend: !noLegend) { say(line) }
    }

    /// The text output: the header (`legend`), then one line per wearable, whatever its name
    /// holds (a name is `terminalSafe`: a new line in it is `\n`, not a second line).
    static func lines(_ devices: [StatusDocument.Device], legend: Bool = true) -> [String] {
        (legend ? [header] : []) + devices.map {
            "\(padded($0.address.terminalSafe, 17))  \(padded(StatusText.human($0.state).terminalSafe, 20))  \($0.name.terminalSafe)"
        }
    }
}

struct ListDocument: Encodable {
    var schemaVersion = StatusDocument.schemaVersion
    var devices: [StatusDocument.Device]
    func json() -> String { compactJSON(self) }

    /// `list --json` when it cannot list: `{"devices":[],"error":"…","exit":3,"schemaVersion":1}`.
    static func failure(_ e: PairctlError) -> String {
        struct Failed: Encodable { var schemaVersion = StatusDocument.schemaVersion; var devices: [String] = []; var error: String; var exit: Int32 }
        return compactJSON(Failed(error: e.message, exit: e.exit.rawValue))
    }

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
    static let configuration = CommandConfiguration(
        abstract: "Show the adapter, any pairing in progress, and every wearable's state (or one wearable's).",
        discussion: """
        Text lines fit 100 columns; times are relative ("since 3 min ago", "in 4.0 s"). --json has the \
        absolute times (RFC 3339, UTC) and, with a WEARABLE, the one device in `devices`. A WEARABLE \
        that is not paired is exit 7.
        """)

    @Argument(help: ArgumentHelp("Show only this wearable: its address (any case) or its name as status shows it (any case).",
                                 valueName: "wearable"))
    var wearable: String?

    @Flag(help: "Print one JSON object (with --watch: one per line, on every change).")
    var json = false

    @Flag(help: "Keep printing the status on every change until interrupted.")
    var watch = false

    func validate() throws {
        if let w = wearable, DeviceAddress(w) == nil, DeviceArgument.looksLikeAddress(w) || trimmed(w).isEmpty {
            throw ValidationError("\"\(w)\" is not a Bluetooth address (expected AA:BB:CC:DD:EE:FF) or a name")
        }
    }

    /// `s` with only the wearable asked for (all of them without one); unknown: exit 7.
    func selected(_ s: StatusDocument) throws(PairctlError) -> StatusDocument {
        guard let w = wearable else { return s }
        var one = s
        one.devices = [try DeviceArgument.find(w, in: s.devices)]
        return one
    }

    /// `status --watch`'s text line for a wearable's change, after the time.
    static func watchLine(_ d: StatusDocument.Device) -> String {
        "\(d.name.isEmpty ? d.address.terminalSafe : "\(d.name.terminalSafe) \(d.address.terminalSafe)"): \(StatusText.describe(d))"
    }

    func run() throws {
        let client: PairdClient
        do { client = try PairdClient() } catch let e {
            if json { say(StatusDocument(daemon: StatusDocument.Daemon(running: false, error: e.message), adapter: nil, pairing: nil, devices: []).json(pretty: false)) }
            throw e
        }
        // pairctl's one JSON style: compact, one object per line (also without --watch).
        func show() throws {
            let all: StatusDocument
            do throws(PairctlError) {
                all = try client.status()
            } catch let e {
                if json { say(StatusDocument(daemon: StatusDocument.Daemon(running: false, error: e.message), adapter: nil, pairing: nil, devices: []).json(pretty: false)) }
                throw e
            }
            let s: StatusDocument
            do throws(PairctlError) { s = try selected(all) } catch let e {
                // not paired (7): --json still prints the status, with no device in it
                if json { var none = all; none.devices = []; say(none.json(pretty: false)) }
                throw e
            }
            say(json ? s.json(pretty: false) : wearable == nil ? StatusText.render(s) : StatusText.device(s.devices[0], now: Date(), adapter: s.adapter).joined(separator: "\n"))
        }
        guard watch else { return try show() }
        // Subscribed before the first fetch: a change between the two is never missed.
        var up = true
        var known: [String: String] = [:]
        var lastJSON = ""
        func changed() {
            guard up, let all = try? client.status() else { return }
            var s = all
            if let w = wearable {
                let a = DeviceAddress(w)
                s.devices = s.devices.filter { a != nil ? DeviceAddress($0.address) == a : $0.name.lowercased() == w.lowercased() }
            }
            if json {
                // One change can come as two signals (StateChanged and PropertiesChanged): said once.
                let line = s.json(pretty: false)
                guard line != lastJSON else { return }
                lastJSON = line
                return say(line)
            }
            for d in s.devices where known[d.address] != d.state {
                known[d.address] = d.state
                say("\(timestamp(Date())) \(Self.watchLine(d))")
            }
            for gone in Set(known.keys).subtracting(s.devices.map(\.address)) {
                known[gone] = nil
                say("\(timestamp(Date())) \(gone.terminalSafe): unpaired")
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
        if !json, let s = try? selected(client.status()) { for d in s.devices { known[d.address] = d.state } }
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
        discussion: """
        Lines: `<time> <address> notify <characteristic-uuid> [(decoded)] <hex value>`, `<time> <address> state <state> [reason]`, `<time> <address> battery <percent>`. \
        The standard characteristics pairctl knows are decoded before the hex (which stays the last field): Heart Rate Measurement (2a37) as \
        `(heart rate: 72 bpm, contact, energy 12 kJ, RR 812.5 ms)`, Battery Level (2a19) as `(battery level: 87%)`; a malformed value, \
        or any other characteristic, is hex only. \
        --json: one object per line, `{"event":"notify","address","characteristic","hex","time"}` plus `heartRate` \
        ({"bpm","sensorContact","energyExpended","rrIntervals"} in ms; null when not reported) or `batteryLevel` when decoded; \
        `{"event":"state","address","state","reason"}`, `{"event":"battery","address","percent"}`, `{"event":"paird-gone"|"paird-back"}`. \
        Notifications and battery levels reach only root and members of the bluetooth group (paird's D-Bus policy); anyone else sees the state lines only.
        """)

    @Flag(help: "One JSON object per line instead of text.")
    var json = false

    /// One `watch --json` line (absent keys left out; `heartRate` or `batteryLevel` only when decoded).
    struct Line: Encodable {
        var event: String
        var time = Date()
        var address: String
        var characteristic: String?
        var hex: String?
        var heartRate: Characteristic.HeartRate?
        var batteryLevel: Int?
        var state: String?
        var reason: String?
        var percent: Int?
    }

    /// The text of a notification line after the time: `<address> notify <uuid> [(decoded) ]<hex>`.
    /// The hex stays the last field, as scripts read it (`line.split()[-1]`).
    static func notifyText(_ address: String, _ uuid: String, _ value: [UInt8]) -> String {
        let decoded = Characteristic.decode(uuid, value).map { d -> String in
            switch d {
            case .heartRate: "(heart rate: \(Characteristic.text(d))) "
            case .battery(let p): "(battery level: \(p)%) "
            }
        } ?? ""
        return "\(address.terminalSafe) notify \(uuid.terminalSafe) \(decoded)\(hex(value))"
    }

    /// The text of a state line after the time: `<address> state <state>[ <reason>]`; the reason
    /// may be BlueZ's (`terminalSafe`, as every field of a text line).
    static func stateText(_ address: String, _ state: String, _ reason: String) -> String {
        "\(address.terminalSafe) state \(state.terminalSafe)\(reason.isEmpty ? "" : " " + reason.terminalSafe)"
    }

    static func notifyJSON(_ address: String, _ uuid: String, _ value: [UInt8], time: Date = Date()) -> String {
        var line = Line(event: "notify", time: time, address: address, characteristic: uuid, hex: hex(value))
        switch Characteristic.decode(uuid, value) {
        case .heartRate(let hr)?: line.heartRate = hr
        case .battery(let p)?: line.batteryLevel = p
        case nil: break
        }
        return compactJSON(line)
    }

    func run() throws {
        let json = self.json
        let client: PairdClient
        do {
            client = try PairdClient()
            _ = try client.status() // fail fast, with the right exit code, when paird is not running
        } catch let e {
            if json { say(Pair.failedLine(e)) }   // {"event":"failed","exit":3,"error":...}
            throw e
        }
        func stamp() -> String { timestamp(Date()) }
        if !Self.mayReceiveData() {
            writeAll(2, "pairctl: notifications and battery levels reach only root and the bluetooth group (paird's D-Bus policy): showing state changes only (\(PairctlError.joinBluetoothGroup))\n")
        }
        onPairdPresence(client) { up in
            say(json ? ListDocument.event(up ? "paird-back" : "paird-gone") : "\(stamp()) paird \(up ? "is back" : "stopped (waiting for it to come back)")")
        }
        client.on("Notification") { args in
            guard args.count == 3, let a = args[0].string, let c = args[1].string, let v = args[2].bytes else { return }
            say(json ? Self.notifyJSON(a, c, v) : "\(stamp()) \(Self.notifyText(a, c, v))")
        }
        client.on("StateChanged") { args in
            guard args.count == 3, let a = args[0].string, let s = args[1].string else { return }
            let reason = args[2].string ?? ""
            say(json ? compactJSON(Line(event: "state", address: a, state: s, reason: reason.isEmpty ? nil : reason))
                : "\(stamp()) \(Self.stateText(a, s, reason))")
        }
        client.on("Battery") { args in
            guard args.count == 2, let a = args[0].string, let p = args[1].uint8 else { return }
            say(json ? compactJSON(Line(event: "battery", address: a, percent: Int(p))) : "\(stamp()) \(a.terminalSafe) battery \(p)")
        }
        try client.runUntil { false }
    }
}
