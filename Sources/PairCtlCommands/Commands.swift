import ArgumentParser
import DBus
import EventLoop
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import PairingCore

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
        subcommands: [Pair.self, Unpair.self, Connect.self, Disconnect.self, List.self, Status.self, Watch.self])

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
    @Argument(help: ArgumentHelp("The wearable's address, AA:BB:CC:DD:EE:FF. May be left out when only one is paired.",
                                 valueName: "address"))
    var address: String?

    func validate() throws {
        if let a = address, DeviceAddress(a) == nil {
            throw ValidationError("\"\(a)\" is not a Bluetooth address (expected AA:BB:CC:DD:EE:FF)")
        }
    }

    func resolve(_ client: PairdClient) throws -> DeviceAddress {
        if let text = address, let a = DeviceAddress(text) { return a }
        let devices = try client.status().devices
        switch devices.count {
        case 1: return DeviceAddress(devices[0].address)!
        case 0: throw PairctlError(.unknownDevice, "no wearable is paired")
        default: throw PairctlError(.usage, "\(devices.count) wearables are paired: name one (\(devices.map(\.address).joined(separator: ", ")))")
        }
    }
}

struct Pair: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Scan for a wearable, pair (bond) it and keep it connected.",
        discussion: "Without filters the first connectable LE device seen is paired: give --service, --name or an address.")

    @Argument(help: ArgumentHelp("Pair only this address.", valueName: "address"))
    var address: String?

    @Option(name: .customLong("service"), help: ArgumentHelp("Match a device advertising this service UUID (e.g. 180d); repeatable.", valueName: "uuid"))
    var services: [String] = []

    @Option(help: ArgumentHelp("Match a device whose name contains this text.", valueName: "text"))
    var name: String?

    @Option(help: ArgumentHelp("Seconds to scan before giving up (1–600, default: the daemon's ScanTimeout, 10).", valueName: "seconds"))
    var timeout: UInt32?

    func validate() throws {
        if let a = address, DeviceAddress(a) == nil { throw ValidationError("\"\(a)\" is not a Bluetooth address (expected AA:BB:CC:DD:EE:FF)") }
        for s in services where ServiceUUID.normalize(s) == nil { throw ValidationError("--service \"\(s)\" is not a UUID (e.g. 180d or 0000180d-0000-1000-8000-00805f9b34fb)") }
        if let t = timeout, !(1...600).contains(t) { throw ValidationError("--timeout must be 1…600 seconds") }
    }

    func run() throws {
        let client = try PairdClient()
        var options: [String: DBusValue] = [:]
        if let a = address { options["Address"] = .string(a.uppercased()) }
        if !services.isEmpty { options["Services"] = .stringArray(services.compactMap(ServiceUUID.normalize)) }
        if let n = name { options["Name"] = .string(n) }
        if let t = timeout { options["Timeout"] = .uint32(t) }
        client.on("PairingProgress") { args in
            if let text = args.count == 3 ? args[2].string : nil { say(text) }
        }
        var result: Result<[DBusValue], DBusError>?
        // Scan, pair, connect and resolve: generous, the daemon's own countdowns end it first.
        let budget = Duration.seconds(Int64(timeout ?? 60) + 180)
        client.bus.call(destination: PairdAPI.busName, path: PairdAPI.objectPath, interface: PairdAPI.interface,
                        method: "Pair", args: [.vardict(options)], timeout: budget) { result = $0 }
        try client.runUntil { result != nil }
        switch result {
        case .success(let values)?:
            let addr = values.first?.string ?? "?"
            say("connected, services resolved: \(values.count > 1 ? values[1].string ?? "" : "") (\(addr))")
        case .failure(let e)?:
            throw PairctlError(e)
        case nil:
            _ = try? client.call("CancelPairing")
            throw PairctlError(.failure, "interrupted; pairing canceled")
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
    static let configuration = CommandConfiguration(abstract: "List paired wearables, one per line: address, state, name.")
    func run() throws {
        let client = try PairdClient()
        for d in try client.status().devices {
            say("\(d.address)  \(padded(d.state, 18))  \(d.name)")
        }
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
        try show()
        guard watch else { return }
        var failure: Error?
        for member in ["StateChanged", "Battery", "PairingProgress"] {
            client.on(member) { _ in
                do { try show() } catch { failure = error }
            }
        }
        try client.runUntil { failure != nil }
        if let failure { throw failure }
    }
}

struct Watch: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print forwarded notifications and state changes as lines until interrupted.",
        discussion: "Lines: `<time> <address> notify <characteristic-uuid> <hex value>`, `<time> <address> state <state> [reason]`, `<time> <address> battery <percent>`.")

    func run() throws {
        let client = try PairdClient()
        _ = try client.status() // fail fast, with the right exit code, when paird is not running
        func stamp() -> String { Date().formatted(.iso8601) }
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

/// The human rendering of `pairctl status`.
enum StatusText {
    static func render(_ s: StatusDocument) -> String {
        var lines: [String] = []
        if let a = s.adapter {
            let name = [a.name, a.address.map { "(\($0))" }].compactMap { $0 }.joined(separator: " ")
            lines.append("adapter: \(name.isEmpty ? "none" : name), \(a.present ? (a.powered ? "powered" : "powered off") : "not present")")
        }
        if let b = s.bluetoothd, b.state != "running" || b.lastCrash != nil {
            lines.append(BluetoothdText.render(b))
        }
        if let p = s.pairing {
            lines.append("pairing: \(p.phase)\(p.device.map { " \($0)" } ?? ""), until \(localTimestamp(p.deadline))")
        }
        if s.devices.isEmpty { lines.append("no wearables paired (pairctl pair --service 180d)") }
        for d in s.devices {
            var line = "\(d.name.isEmpty ? "(no name)" : d.name) \(d.address): \(d.state) since \(localTimestamp(d.since))"
            if let b = d.battery { line += ", battery \(b)%" }
            if d.wanted == "disconnected" { line += ", kept disconnected" }
            if let l = d.lastDisconnect { line += ", last disconnect \(l.reason) at \(localTimestamp(l.at))" }
            if d.reconnectAttempts > 0 { line += ", \(d.reconnectAttempts) connect attempt(s)" }
            if d.state == "waitingForDevice" {
                line += d.nextDeadline.map { ", paird's own Connect() timer at \(localTimestamp($0))" }
                    ?? (d.autoConnect ? ", waiting on BlueZ's auto-connect (no timer)" : "")
            }
            lines.append(line)
        }
        return lines.joined(separator: "\n")
    }
}

/// `pairctl status`'s bluetoothd line: "bluetoothd: running; crashed at 12:03:04 (SIGSEGV); started
/// again; back after 1.2 s; 2 of 2 wearables back after 3.1 s".
enum BluetoothdText {
    static func render(_ b: StatusDocument.Bluetoothd) -> String {
        var line = "bluetoothd: \(b.state)"
        if let n = b.nextStartAt { line += ", next start at \(localTimestamp(n))" }
        if b.state == "stopped" { line += " (by an administrator: paird does not start it)" }
        if let c = b.lastCrash {
            line += "; crashed at \(localTimestamp(c.at)) (\(c.cause)); \(c.action)"
            if let s = c.backAfter { line += "; back after \(seconds(s))" }
            if c.wearables > 0 {
                line += "; \(c.wearablesBack) of \(c.wearables) wearable(s) back"
                if let s = c.allBackAfter { line += " after \(seconds(s))" }
            }
            if !c.disarmed.isEmpty { line += "; disarmed \(c.disarmed.joined(separator: ", ")) (crashed bluetoothd twice: pair it again)" }
        }
        return line
    }

    static func seconds(_ s: Double) -> String { "\((s * 10).rounded() / 10) s" }
}
