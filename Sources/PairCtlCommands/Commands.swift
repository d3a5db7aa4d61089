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
        subcommands: [Pair.self, Unpair.self, Connect.self, Disconnect.self, List.self, Status.self, Watch.self],
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

struct Pair: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Scan for a wearable, pair (bond) it and keep it connected.",
        discussion: """
        Without filters the first connectable LE device seen is paired: give --service, --name or an address.

        A wearable that shows a passkey or a number to compare is asked about on the terminal:
          Enter the 6-digit passkey shown on Watch-1:
          Does Watch-1 show 123456? [y/N]
        Without a terminal (scripts, ssh without -t), answer in advance with --passkey or --confirm;
        with neither, such a pairing fails at once (exit 12) instead of waiting. Ctrl-C cancels the
        pairing; a wrong passkey is "authentication failed" (exit 6) and leaves no bond behind.
        """)

    @Argument(help: ArgumentHelp("Pair only this address.", valueName: "address"))
    var address: String?

    @Option(name: .customLong("service"), help: ArgumentHelp("Match a device advertising this service UUID (e.g. 180d); repeatable.", valueName: "uuid"))
    var services: [String] = []

    @Option(help: ArgumentHelp("Match a device whose name contains this text.", valueName: "text"))
    var name: String?

    // .unconditional: "--timeout -1" is a bad value, not a missing one
    @Option(parsing: .unconditional, help: ArgumentHelp("Seconds to scan before giving up (1–600, default: the daemon's ScanTimeout, 10).", valueName: "seconds"))
    var timeout: UInt32?

    @Flag(help: "With no address, --service or --name: pair the first wearable that answers (asked on a terminal; required without one).")
    var any = false

    @Option(help: ArgumentHelp("The 6-digit passkey the wearable shows, if it asks for one (answered without a prompt).", valueName: "NNNNNN"))
    var passkey: String?

    @Flag(help: "Accept a numeric comparison without a prompt (when you see the same number on the wearable).")
    var confirm = false

    @Flag(help: "One JSON object per line for each step and the result, instead of text (prompts still need --passkey/--confirm).")
    var json = false

    func validate() throws {
        if let a = address, DeviceAddress(a) == nil { throw ValidationError("\"\(a)\" is not a Bluetooth address (expected AA:BB:CC:DD:EE:FF)") }
        for s in services where ServiceUUID.normalize(s) == nil { throw ValidationError("--service \"\(s)\" is not a UUID (e.g. 180d or 0000180d-0000-1000-8000-00805f9b34fb)") }
        if let t = timeout, !(1...600).contains(t) { throw ValidationError("--timeout must be 1…600 seconds") }
        if let p = passkey, Self.parsePasskey(p) == nil { throw ValidationError("--passkey must be 6 digits (000000–999999)") }
        if let n = name, trimmed(n).isEmpty { throw ValidationError("--name needs some text to match (it would match every device)") }
    }

    var hasFilter: Bool { address != nil || !services.isEmpty || name != nil }

    static func parsePasskey(_ text: String) -> UInt32? {
        let t = trimmed(text)
        guard t.count == 6, t.unicodeScalars.allSatisfy({ ("0"..."9").contains($0) }) else { return nil }
        return UInt32(t)
    }

    func run() throws {
        let client = try PairdClient()
        // Prompts need someone to answer: a terminal on stdin (and --json is for programs).
        let interactive = !json && isatty(0) == 1
        if !hasFilter && !any {
            guard interactive else {
                throw PairctlError(.usage, "no address, --service or --name: give one, or --any to pair the first wearable that answers")
            }
            writeAll(1, "No address, --service or --name given: pair the first wearable that answers? [y/N] ")
            var line = [UInt8]()
            var c: UInt8 = 0
            while read(0, &c, 1) == 1, c != UInt8(ascii: "\n") { line.append(c) }
            guard ["y", "yes"].contains(trimmed(String(decoding: line, as: UTF8.self)).lowercased()) else {
                throw PairctlError(.usage, "not paired: give an address, --service or --name")
            }
        }
        var options: [String: DBusValue] = [:]
        if let a = address { options["Address"] = .string(a.uppercased()) }
        if !services.isEmpty { options["Services"] = .stringArray(services.compactMap(ServiceUUID.normalize)) }
        if let n = name { options["Name"] = .string(n) }
        if let t = timeout { options["Timeout"] = .uint32(t) }
        if let p = passkey.flatMap(Self.parsePasskey) { options["Passkey"] = .uint32(p) }
        if confirm { options["Confirm"] = .bool(true) }
        options["Interactive"] = .bool(interactive)
        let prompt = Prompt(client: client)
        let json = self.json
        client.on("PairingProgress") { args in
            guard args.count == 3, let kind = args[0].string, let address = args[1].string, let text = args[2].string else { return }
            if json {
                say(Self.jsonLine(["event": kind, "address": address, "text": text]))
                return
            }
            switch kind {
            case "enter-passkey":
                prompt.ask("Enter the 6-digit passkey shown on \(text.isEmpty ? address : text): ") { line in
                    guard let k = Self.parsePasskey(line) else { return "a passkey is 6 digits; try again: " }
                    prompt.answer("AnswerPasskey", .uint32(k))
                    return nil
                }
            case "confirm-passkey":
                let (number, who) = Self.numberAndName(text, address)
                prompt.ask("Does \(who) show \(number)? [y/N] ") { line in
                    let yes = ["y", "yes"].contains(trimmed(line).lowercased())
                    prompt.answer("AnswerConfirmation", .bool(yes))
                    return nil
                }
            case "display-passkey":
                let (number, who) = Self.numberAndName(text, address)
                say("Type \(number) on \(who) (and confirm it there)")
            case "question-canceled":
                prompt.cancel()
                say(text)
            default:
                say(text)
            }
        }
        var result: Result<[DBusValue], DBusError>?
        // Scan, pair, connect and resolve: generous, the daemon's own countdowns end it first.
        let budget = Duration.seconds(Int64(timeout ?? 60) + 180)
        client.bus.call(destination: PairdAPI.busName, path: PairdAPI.objectPath, interface: PairdAPI.interface,
                        method: "Pair", args: [.vardict(options)], timeout: budget) { result = $0 }
        try client.runUntil { result != nil || prompt.closed }
        prompt.cancel()
        switch result {
        case .success(let values)?:
            let addr = values.first?.string ?? "?"
            let name = values.count > 1 ? values[1].string ?? "" : ""
            if json { say(Self.jsonLine(["event": "connected", "address": addr, "name": name])) }
            else { say("connected, services resolved: \(name) (\(addr))") }
        case .failure(let e)?:
            let error = PairctlError(e)
            if json { say(Self.jsonLine(["event": "failed", "exit": String(error.exit.rawValue), "error": error.message])) }
            throw error
        case nil:
            _ = try? client.call("CancelPairing")
            throw PairctlError(.failure, prompt.closed ? "no answer (end of input); pairing canceled" : "interrupted; pairing canceled")
        }
    }

    /// `text` of confirm-passkey / display-passkey: the six digits, a space, the wearable's name.
    static func numberAndName(_ text: String, _ address: String) -> (String, String) {
        let parts = text.split(separator: " ", maxSplits: 1).map(String.init)
        let name = parts.count > 1 && !parts[1].isEmpty ? parts[1] : address
        return (parts.first ?? text, name)
    }

    static func jsonLine(_ fields: [String: String]) -> String {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return (try? String(decoding: e.encode(fields), as: UTF8.self)) ?? "{}"
    }
}

/// `s` without leading and trailing spaces, tabs and carriage returns.
func trimmed(_ s: String) -> String {
    let blank: (Character) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\r" }
    return String(s.drop(while: blank).reversed().drop(while: blank).reversed())
}

/// A question at the terminal, read without blocking the loop: paird's answer to `Pair` (a
/// timeout, a cancel) still ends pairctl while the user has not typed anything.
final class Prompt {
    let client: PairdClient
    private var watch: IOWatch?
    private var buffer: [UInt8] = []
    private var handle: ((String) -> String?)?
    /// stdin reached its end with a question open: nobody will answer.
    private(set) var closed = false

    init(client: PairdClient) { self.client = client }

    /// Prints `question` and calls `handle` with each line typed until it returns nil (or a new
    /// text to ask again with).
    func ask(_ question: String, _ handle: @escaping (String) -> String?) {
        writeAll(1, question)
        self.handle = handle
        buffer = []
        guard watch == nil else { return }
        watch = client.loop.watch(fd: 0, events: .read) { [weak self] _ in self?.readable() }
    }

    private func readable() {
        var chunk = [UInt8](repeating: 0, count: 256)
        let n = read(0, &chunk, chunk.count)
        if n <= 0 {
            writeAll(1, "\n")
            closed = handle != nil
            cancel()
            return
        }
        buffer += chunk.prefix(n)
        while let nl = buffer.firstIndex(of: UInt8(ascii: "\n")) {
            let line = String(decoding: buffer[..<nl], as: UTF8.self)
            buffer.removeSubrange(...nl)
            guard let handle else { continue }
            if let again = handle(line) { writeAll(1, again) } else { self.handle = nil }
        }
    }

    /// Sends the answer (the reply only matters if it is refused: the question was withdrawn).
    func answer(_ method: String, _ value: DBusValue) {
        client.bus.call(destination: PairdAPI.busName, path: PairdAPI.objectPath, interface: PairdAPI.interface,
                        method: method, args: [value], timeout: .seconds(10)) { result in
            if case .failure(let e) = result { writeAll(2, "pairctl: answer not taken: \(e.message)\n") }
        }
    }

    func cancel() {
        handle = nil
        watch?.cancel()
        watch = nil
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
    func json() -> String {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        e.dateEncodingStrategy = .iso8601
        return (try? e.encode(self)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
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
        func changed() {
            guard up, let s = try? client.status() else { return }
            if json { return say(s.json(pretty: false)) }
            for d in s.devices where known[d.address] != d.state {
                known[d.address] = d.state
                say("\(timestamp(Date())) \(d.name.isEmpty ? d.address : "\(d.name) \(d.address)"): \(StatusText.describe(d))")
            }
            for gone in Set(known.keys).subtracting(s.devices.map(\.address)) {
                known[gone] = nil
                say("\(timestamp(Date())) \(gone): unpaired")
            }
        }
        for member in ["StateChanged", "Battery", "PairingProgress"] { client.on(member) { _ in changed() } }
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
    static let configuration = CommandConfiguration(
        abstract: "Print forwarded notifications and state changes as lines until interrupted.",
        discussion: "Lines: `<time> <address> notify <characteristic-uuid> <hex value>`, `<time> <address> state <state> [reason]`, `<time> <address> battery <percent>`.")

    func run() throws {
        let client = try PairdClient()
        _ = try client.status() // fail fast, with the right exit code, when paird is not running
        func stamp() -> String { timestamp(Date()) }
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

/// The human rendering of `pairctl status`.
enum StatusText {
    /// The words text output uses for a state (JSON and `watch` lines keep the machine's names).
    static func human(_ state: String) -> String {
        switch state {
        case "restoring": "starting up"
        case "connecting": "connecting"
        case "discovering": "setting up the link"
        case "connected": "connected"
        case "waitingForDevice": "out of range"
        case "disconnected": "disconnected (as you asked)"
        case "needsRepair": "needs pairing again"
        case "adapterUnavailable": "Bluetooth unavailable"
        default: state
        }
    }

    /// The state in words, with the next step where there is one.
    static func describe(_ d: StatusDocument.Device) -> String {
        switch d.state {
        case "needsRepair": "needs pairing again: run `pairctl pair \(d.address)`"
        case "disconnected": "disconnected (as you asked): `pairctl connect \(d.address)` to bring it back"
        case "waitingForDevice": "out of range: paird reconnects it when it comes back"
        case "adapterUnavailable": "Bluetooth unavailable: paird reconnects it when the adapter is back"
        default: human(d.state)
        }
    }

    static func render(_ s: StatusDocument) -> String {
        var lines: [String] = []
        if let why = s.daemon.stateFileError {
            lines.append("state file: NOT WRITABLE (\(why)): changes since then are lost when paird restarts")
        }
        if let a = s.adapter {
            let name = [a.name, a.address.map { "(\($0))" }].compactMap { $0 }.joined(separator: " ")
            lines.append("adapter: \(name.isEmpty ? "none" : name), \(a.present ? (a.powered ? "powered" : "powered off (bluetoothctl power on)") : "not present (is bluetoothd running? systemctl status bluetooth)")")
        }
        if let b = s.bluetoothd, b.state != "running" || b.lastCrash != nil {
            lines.append(BluetoothdText.render(b))
        }
        if let p = s.pairing {
            lines.append("pairing: \(p.phase)\(p.device.map { " \($0)" } ?? ""), until \(timestamp(p.deadline))")
        }
        if s.devices.isEmpty { lines.append("no wearables paired (pairctl pair --service 180d)") }
        for d in s.devices {
            var line = "\(d.name.isEmpty ? "(no name)" : d.name) \(d.address): \(describe(d)), since \(timestamp(d.since))"
            if let b = d.battery { line += ", battery \(b)%" }
            if d.wanted == "disconnected" && d.state != "disconnected" { line += ", kept disconnected" }
            if let l = d.lastDisconnect { line += ", last disconnect \(l.reason) at \(timestamp(l.at))" }
            if d.reconnectAttempts > 0 { line += ", \(d.reconnectAttempts) connect attempt(s)" }
            if d.state == "waitingForDevice" {
                line += d.nextDeadline.map { ", next connect attempt at \(timestamp($0))" }
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
        if let n = b.nextStartAt { line += ", next start at \(timestamp(n))" }
        if b.state == "stopped" { line += " (by an administrator: paird does not start it)" }
        if let c = b.lastCrash {
            line += "; crashed at \(timestamp(c.at)) (\(c.cause)); \(c.action)"
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
