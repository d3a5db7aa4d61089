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

struct Pair: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Scan for a wearable, pair (bond) it and keep it connected.",
        discussion: """
        Without filters the first connectable LE device seen is paired: give --service, --name or an address.

        Only a wearable heard advertising during this scan is paired: a device BlueZ merely
        remembers is not. One already bonded in BlueZ by another tool is taken over only when you
        give its address (pairctl says so). A wearable that needs pairing again (a factory reset)
        gets its old bond removed only when you name it, by address or --name, and it is heard.

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
    @Option(parsing: .unconditional, help: ArgumentHelp("Seconds to scan before giving up (1-600, default: the daemon's ScanTimeout, 10).", valueName: "seconds"))
    var timeout: UInt32?

    @Flag(help: "With no address, --service or --name: pair the first wearable that answers (asked on a terminal; required without one).")
    var any = false

    @Option(help: ArgumentHelp("The 6-digit passkey the wearable shows, if it asks for one (answered without a prompt).", valueName: "NNNNNN"))
    var passkey: String?

    @Flag(help: "Accept a numeric comparison without a prompt (when you see the same number on the wearable).")
    var confirm = false

    @Option(help: ArgumentHelp("Pair on this adapter (a name like hci1, or its address): one of those [General] Adapter in paird.conf lists. Default: the first of them. The bond stays on it: the wearable is only ever connected through it.", valueName: "adapter"))
    var adapter: String?

    @Flag(help: "One JSON object per line for each step and the result, instead of text (prompts still need --passkey/--confirm).")
    var json = false

    func validate() throws {
        if let a = address, DeviceAddress(a) == nil { throw ValidationError("\"\(a)\" is not a Bluetooth address (expected AA:BB:CC:DD:EE:FF)") }
        for s in services where ServiceUUID.normalize(s) == nil { throw ValidationError("--service \"\(s)\" is not a UUID (e.g. 180d or 0000180d-0000-1000-8000-00805f9b34fb)") }
        if let t = timeout, !(1...600).contains(t) { throw ValidationError("--timeout must be 1-600 seconds") }
        if let p = passkey, Self.parsePasskey(p) == nil { throw ValidationError("--passkey must be 6 digits (000000-999999)") }
        if let n = name, trimmed(n).isEmpty { throw ValidationError("--name needs some text to match (it would match every device)") }
        if let a = adapter, !Self.isAdapter(a) { throw ValidationError("--adapter \"\(a)\" is not an adapter name like hci0 or an address") }
    }

    static func isAdapter(_ s: String) -> Bool {
        if DeviceAddress(s) != nil { return true }
        guard s.hasPrefix("hci"), s.count > 3 else { return false }
        return s.dropFirst(3).allSatisfy { ("0"..."9").contains($0) }
    }

    var hasFilter: Bool { address != nil || !services.isEmpty || name != nil }

    static func parsePasskey(_ text: String) -> UInt32? {
        let t = trimmed(text)
        guard t.count == 6, t.unicodeScalars.allSatisfy({ ("0"..."9").contains($0) }) else { return nil }
        return UInt32(t)
    }

    func run() throws {
        do {
            try pair()
        } catch let e as PairctlError {
            // --json: every failure ends with a `failed` line (a numeric exit), also one that comes
            // before paird is asked (paird not running, no filter without a terminal).
            if json { say(Self.failedLine(e)) }
            throw e
        }
    }

    static func failedLine(_ e: PairctlError) -> String {
        compactJSON(Event(event: "failed", exit: e.exit.rawValue, error: e.message))
    }

    /// One line of `pair --json`: `event` and what it has (absent keys are left out); `exit` is a number.
    struct Event: Encodable {
        var event: String
        var address: String?
        var name: String?
        var text: String?
        var exit: Int32?
        var error: String?
    }

    private func pair() throws {
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
        if let a = adapter { options["Adapter"] = .string(DeviceAddress(a) != nil ? a.uppercased() : a) }
        if let p = passkey.flatMap(Self.parsePasskey) { options["Passkey"] = .uint32(p) }
        if confirm { options["Confirm"] = .bool(true) }
        options["Interactive"] = .bool(interactive)
        let prompt = Prompt(client: client)
        let json = self.json
        client.on("PairingProgress") { args in
            guard args.count == 3, let kind = args[0].string, let address = args[1].string, let text = args[2].string else { return }
            if json {
                say(compactJSON(Event(event: kind, address: address, text: text)))
                return
            }
            switch kind {
            case "enter-passkey":
                prompt.ask("Enter the 6-digit passkey shown on \((text.isEmpty ? address : text).terminalSafe): ") { line in
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
                say(text.terminalSafe)
            default:
                // paird's line holds the wearable's name as the air gave it: shown terminalSafe
                say(text.terminalSafe)
            }
        }
        var result: Result<[DBusValue], DBusError>?
        // Scan, pair, connect and resolve: generous, the daemon's own countdowns end it first.
        let budget = Duration.seconds(Int64(timeout ?? 60) + 180)
        // Bluetooth away when the command starts (bluetoothd restarting, or dead after a kernel
        // crash and started again by D-Bus activation: issue 49): wait for it, within the pairing's
        // own timeout, asking again each second, instead of exiting 9 at once. Only the "no
        // adapter" answer that comes before any pairing began is waited out.
        let waitUntil = ContinuousClock.now + .seconds(Int64(timeout ?? 10))
        var waited = false
        while true {
            result = nil
            client.bus.call(destination: PairdAPI.busName, path: PairdAPI.objectPath, interface: PairdAPI.interface,
                            method: "Pair", args: [.vardict(options)], timeout: budget) { result = $0 }
            try client.runUntil { result != nil || prompt.closed }
            guard case .failure(let e)? = result, Self.bluetoothAway(e), ContinuousClock.now < waitUntil else { break }
            if !waited {
                waited = true
                let line = "Bluetooth is not available now (bluetoothd away, or no adapter powered): waiting for it…"
                if json { say(compactJSON(Event(event: "waiting-for-bluetooth", text: line))) } else { say(line) }
            }
            var tick = false
            _ = client.loop.schedule(after: .seconds(1)) { tick = true }
            try client.runUntil { tick || prompt.closed }
            if prompt.closed { break }
        }
        prompt.cancel()
        switch result {
        case .success(let values)?:
            let addr = values.first?.string ?? "?"
            let name = values.count > 1 ? values[1].string ?? "" : ""
            if json { say(compactJSON(Event(event: "connected", address: addr, name: name))) }
            else { say("connected, services resolved: \(name.terminalSafe) (\(addr.terminalSafe))") }
        case .failure(let e)?:
            let error = PairctlError(e)
            throw error   // run() prints the `failed` line with --json
        case nil:
            _ = try? client.call("CancelPairing")
            throw PairctlError(.failure, prompt.closed ? "no answer (end of input); pairing canceled" : "interrupted; pairing canceled")
        }
    }

    /// paird's answer when no adapter is usable as `Pair` arrives (nothing began): worth waiting
    /// out. A pairing that lost its adapter half-way says more, and is not retried.
    static func bluetoothAway(_ e: DBusError) -> Bool {
        e.name == PairdAPI.Error.adapterUnavailable && e.message == PairdAPI.Error.noUsableAdapter
    }

    /// `text` of confirm-passkey / display-passkey: the six digits, a space, the wearable's name
    /// (both `terminalSafe`: they are printed).
    static func numberAndName(_ text: String, _ address: String) -> (String, String) {
        let parts = text.split(separator: " ", maxSplits: 1).map(String.init)
        let name = parts.count > 1 && !parts[1].isEmpty ? parts[1] : address
        return ((parts.first ?? text).terminalSafe, name.terminalSafe)
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
            if case .failure(let e) = result { writeAll(2, "pairctl: answer not taken: \(e.message.terminalSafe)\n") }
        }
    }

    func cancel() {
        handle = nil
        watch?.cancel()
        watch = nil
    }
}
