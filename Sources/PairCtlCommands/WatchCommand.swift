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
