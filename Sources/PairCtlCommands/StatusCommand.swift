import ArgumentParser
import DBus
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import PairingCore

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
