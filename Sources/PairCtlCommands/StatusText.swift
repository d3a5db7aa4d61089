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
        case "needsRepair":
            "needs pairing again\(d.repairReason.map { " (\(RepairReason(rawValue: $0)?.explanation ?? $0))" } ?? ""): run `pairctl pair \(d.address)`"
        case "disconnected": "disconnected (as you asked): `pairctl connect \(d.address)` to bring it back"
        case "waitingForDevice": "out of range: paird reconnects it when it comes back"
        case "adapterUnavailable": "Bluetooth unavailable: paird reconnects it when the adapter is back"
        default: human(d.state)
        }
    }

    /// "1.2 s", "3 min", "2 h": how long ago `t` was.
    static func ago(_ t: Date, _ now: Date) -> String {
        let s = max(0, now.timeIntervalSince(t))
        if s < 90 { return BluetoothdText.seconds(s) }
        if s < 5400 { return "\(Int((s / 60).rounded())) min" }
        return "\(Int((s / 3600).rounded())) h"
    }

    /// `2a37` for a Bluetooth base UUID, else the UUID.
    static func shortUUID(_ u: String) -> String {
        u.hasPrefix("0000") && u.hasSuffix("-0000-1000-8000-00805f9b34fb") ? String(u.dropFirst(4).prefix(4)) : u
    }

    static func render(_ s: StatusDocument, now: Date = Date()) -> String {
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
            let type = d.addressType == "random" ? " (random address)" : ""
            var line = "\(d.name.isEmpty ? "(no name)" : d.name) \(d.address)\(type): \(describe(d)), since \(timestamp(d.since))"
            if let b = d.battery { line += ", battery \(b)%" }
            if d.wanted == "disconnected" && d.state != "disconnected" { line += ", kept disconnected" }
            if let l = d.lastDisconnect { line += ", last disconnect \(l.reason) at \(timestamp(l.at))" }
            if d.reconnectAttempts > 0 { line += ", \(d.reconnectAttempts) connect attempt(s)" }
            if !d.missingCharacteristics.isEmpty {
                line += ", MISSING on its link: \(d.missingCharacteristics.joined(separator: ", ")) (dropped by a firmware update, or lost by BlueZ: `pairctl unpair` + `pairctl pair` make BlueZ read the services anew)"
            }
            if let t = d.lastData { line += ", data \(ago(t, now)) ago" }
            if let h = d.health {
                let what = h.characteristic.map(shortUUID) ?? ""
                let left = max(0, h.deadline.timeIntervalSince(now))
                switch h.check {
                case "firstData": line += ", awaiting the first notification (\(BluetoothdText.seconds(left)) left, then the link is made again)"
                case "silence": line += ", watching \(what) for silence (probed in \(BluetoothdText.seconds(left)) unless it notifies)"
                case "probe": line += ", probing: \(what) silent (\(BluetoothdText.seconds(left)) left for the answer)"
                default: line += ", \(h.check) until \(timestamp(h.deadline))"
                }
            }
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
        if b.state == "unknown" { line += " (paird has not yet seen whether org.bluez is on the bus)" }
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
