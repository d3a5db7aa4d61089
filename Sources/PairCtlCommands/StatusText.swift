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
        switch DeviceState.Kind(token: state) {
        case .restoring?: "starting up"
        case .connecting?: "connecting"
        case .discovering?: "setting up the link"
        case .connected?: "connected"
        case .waitingForDevice?: "out of range"
        case .disconnected?: "disconnected (as you asked)"
        case .needsRepair?: "needs pairing again"
        case .adapterUnavailable?: "Bluetooth unavailable"
        case nil: state // a state this pairctl does not know (a newer paird's): as it came
        }
    }

    /// The state in words, with the next step where there is one.
    static func describe(_ d: StatusDocument.Device) -> String {
        switch DeviceState.Kind(token: d.state) {
        case .needsRepair?:
            "needs pairing again\(d.repairReason.map { " (\(RepairReason(rawValue: $0)?.explanation ?? $0.terminalSafe))" } ?? ""): run `pairctl pair \(d.address)`"
        case .disconnected?: "disconnected (as you asked): `pairctl connect \(d.address)` to bring it back"
        case .waitingForDevice?: "out of range: paird reconnects it when it comes back"
        case .adapterUnavailable?: "Bluetooth unavailable: paird reconnects it when the adapter is back"
        case nil, .restoring?, .connecting?, .discovering?, .connected?: human(d.state)
        }
    }

    /// "1.2 s", "3 min", "2 h", "3 d": how long ago `t` was (0 when it is ahead of `now`).
    static func ago(_ t: Date, _ now: Date) -> String {
        let s = max(0, now.timeIntervalSince(t))
        if s < 90 { return BluetoothdText.seconds(s) }
        if s < 5400 { return "\(Int((s / 60).rounded())) min" }
        if s < 172_800 { return "\(Int((s / 3600).rounded())) h" }
        return "\(Int((s / 86400).rounded())) d"
    }

    /// The one form of a time in text: relative to `now`, "3 min ago" or "in 4.0 s" (`--json`
    /// has the absolute time).
    static func relative(_ t: Date, _ now: Date) -> String {
        t <= now ? "\(ago(t, now)) ago" : "in \(ago(now, t))"
    }

    /// Text lines fit this many columns.
    static let width = 100

    /// `first`, then `items` joined by `separator`, in lines of at most `width` columns: broken
    /// between items where it can (continuation lines indented by two spaces), and inside an item
    /// (at spaces) only when the item alone is too long for a line.
    static func fit(_ first: String, _ items: [String], separator: String = ", ", width: Int = StatusText.width) -> [String] {
        let indent = "  "
        let mark = separator.trimmingSuffixSpaces   // ends a line broken after an item: ","
        var lines: [String] = []
        var current = first
        var fresh = true   // no item on `current` yet
        for (k, item) in items.enumerated() {
            let joiner = fresh ? "" : separator
            // room kept for the mark, should the line be broken after this item
            let room = k == items.count - 1 ? width : width - mark.count
            if current.count + joiner.count + item.count <= room {
                current += joiner + item
                fresh = false
                continue
            }
            let atStart = current.isEmpty   // a line with nothing before its first item (first == "")
            if !atStart { lines.append(fresh ? current.trimmingSuffixSpaces : current + mark) }
            current = atStart ? "" : indent
            if current.count + item.count <= room {
                current += item
            } else {
                // an item too long for a line of its own: broken at spaces, indented further
                var wordsOnLine = 0
                for word in item.split(separator: " ") {
                    if wordsOnLine > 0 && current.count + 1 + word.count > room {
                        lines.append(current)
                        current = atStart ? indent : indent + indent
                        wordsOnLine = 0
                    }
                    current += (wordsOnLine > 0 ? " " : "") + word
                    wordsOnLine += 1
                }
            }
            fresh = false
        }
        if !current.trimmingSuffixSpaces.isEmpty { lines.append(current) }
        return lines
    }

    /// `2a37` for a Bluetooth base UUID, else the UUID.
    static func shortUUID(_ u: String) -> String {
        u.hasPrefix("0000") && u.hasSuffix("-0000-1000-8000-00805f9b34fb") ? String(u.dropFirst(4).prefix(4)) : u
    }

    static func render(_ s: StatusDocument, now: Date = Date()) -> String {
        var lines: [String] = []
        if let why = s.daemon.stateFileError {
            lines += fit("", ["state file: NOT WRITABLE (\(why.terminalSafe)): changes since then are lost when paird restarts"])
        }
        if let list = s.adapters {
            // Several adapters configured: one line each; the first is the default for `pairctl pair`.
            for (k, a) in list.enumerated() {
                let held = s.devices.filter { d in d.bondAdapter.map { b in a.address.map { $0.uppercased() == b.uppercased() } ?? false } ?? false }.count
                lines += fit("adapter: ", [adapterName(a),
                                           a.present ? (a.powered ? (a.ready == false ? "powered, not ready yet" : "powered") : "powered off (bluetoothctl power on)")
                                                     : "not present (unplugged?)",
                                           "\(held) wearable(s) bonded on it"] + (k == 0 ? ["the default"] : []))
            }
        } else if let a = s.adapter {
            lines += fit("adapter: ", [adapterName(a),
                                       a.present ? (a.powered ? "powered" : "powered off (bluetoothctl power on)") : "not present (is bluetoothd running? systemctl status bluetooth)"])
        }
        if let b = s.bluetoothd, b.state != "running" || b.lastCrash != nil {
            lines += BluetoothdText.lines(b, now: now)
        }
        if let h = s.host, h.asleep || h.lastSleep != nil {
            lines += HostText.lines(h, names: Dictionary(s.devices.map { ($0.address, $0.name) }, uniquingKeysWith: { a, _ in a }), now: now)
        }
        if let m = s.daemon.mqtt { lines += fit("mqtt: ", mqtt(m, now: now)) }
        if let p = s.pairing {
            lines += fit("", ["pairing: \(p.phase.terminalSafe)\(p.device.map { " \($0.terminalSafe)" } ?? "")", "ends \(relative(p.deadline, now))"])
        }
        if s.devices.isEmpty { lines.append("no wearables paired (pairctl pair --service 180d)") }
        for d in s.devices { lines += device(d, now: now, adapter: s.adapter, adapters: s.adapters) }
        return lines.joined(separator: "\n")
    }

    /// `[MQTT]`'s link: `connected to 127.0.0.1:1883, since 3 min ago`; `away from … (why), since
    /// …, trying again up to every 60 s`; `connecting to …`; `off (why)`.
    static func mqtt(_ m: StatusDocument.MQTTLink, now: Date) -> [String] {
        let broker = m.broker.terminalSafe
        let since = m.since.map { ["since \(relative($0, now))"] } ?? []
        let why = m.error.map { " (\($0.terminalSafe))" } ?? ""
        switch m.state {
        case "connected": return ["connected to \(broker)"] + since
        case "connecting": return ["connecting to \(broker)"] + since
        case "away": return ["AWAY from \(broker)\(why)"] + since + ["trying again up to every 60 s"]
        default: return ["\(m.state.terminalSafe)\(why)"]
        }
    }

    static func adapterName(_ a: StatusDocument.Adapter) -> String {
        let name = [a.name, a.address.map { "(\($0))" }].compactMap { $0?.terminalSafe }.joined(separator: " ")
        return name.isEmpty ? "none" : name
    }

    /// One wearable: its name, address and state, then what else there is to say, in lines that
    /// fit 100 columns (`pairctl status` lists every wearable so; `pairctl status WEARABLE` one).
    /// `adapter`: the adapter in use (status's), to say when the wearable's bond is on another one.
    /// `adapters`: every adapter configured, when several are (the wearable's own is named).
    static func device(_ d: StatusDocument.Device, now: Date, adapter: StatusDocument.Adapter? = nil, adapters: [StatusDocument.Adapter]? = nil) -> [String] {
        let own = d.bondAdapter.flatMap { b in adapters?.first { $0.address?.uppercased() == b.uppercased() } }
        let type = d.addressType == "random" ? " (random address)" : ""
        let head = "\(d.name.isEmpty ? "(no name)" : d.name.terminalSafe) \(d.address.terminalSafe)\(type): "
        var items: [String] = []
        switch DeviceState.Kind(token: d.state) {
        case .needsRepair?:
            items.append("needs pairing again\(d.repairReason.map { " (\(RepairReason(rawValue: $0)?.explanation ?? $0.terminalSafe))" } ?? "")")
            items.append("run `pairctl pair \(d.address)`")
        case .disconnected?: items += ["disconnected (as you asked)", "`pairctl connect \(d.address)` brings it back"]
        case .waitingForDevice?: items += ["out of range", "paird reconnects it when it comes back"]
        case .adapterUnavailable?:
            if let own {
                items += ["waiting for adapter \(adapterName(own)), which holds its bond", "paird reconnects it when that adapter is back"]
            } else if let bond = d.bondAdapter, let inUse = adapter?.address, adapter?.present == true, bond.uppercased() != inUse.uppercased() {
                items += ["waiting for adapter \(bond), which holds its bond (\(inUse) is in use)",
                          "to use it on \(inUse) instead: `pairctl pair \(d.address)`"]
            } else {
                items += ["Bluetooth unavailable", "paird reconnects it when the adapter is back"]
            }
        case nil, .restoring?, .connecting?, .discovering?, .connected?: items.append(human(d.state))
        }
        if let own, d.state != "adapterUnavailable", let name = own.name { items.append("on \(name.terminalSafe)") }
        items.append("since \(relative(d.since, now))")
        if let b = d.battery { items.append("battery \(b)%") }
        if d.wanted == "disconnected" && d.state != "disconnected" { items.append("kept disconnected") }
        if let l = d.lastDisconnect { items.append("last disconnect \(l.reason.terminalSafe) \(relative(l.at, now))") }
        if d.reconnectAttempts > 0 { items.append("\(d.reconnectAttempts) connect attempt(s)") }
        if !d.missingCharacteristics.isEmpty {
            items.append("MISSING on its link: \(d.missingCharacteristics.joined(separator: " ")) (dropped by a firmware update, or lost by BlueZ: `pairctl unpair` + `pairctl pair` make BlueZ read the services anew)")
        }
        if let t = d.lastData { items.append("data \(ago(t, now)) ago") }
        if let h = d.health {
            let what = h.characteristic.map(shortUUID) ?? ""
            let left = max(0, h.deadline.timeIntervalSince(now))
            switch h.check {
            case "firstData": items.append("awaiting the first notification (\(BluetoothdText.seconds(left)) left, then the link is made again)")
            case "silence": items.append("watching \(what) for silence (probed in \(BluetoothdText.seconds(left)) unless it notifies)")
            case "probe": items.append("probing: \(what) silent (\(BluetoothdText.seconds(left)) left for the answer)")
            default: items.append("\(h.check) ends \(relative(h.deadline, now))")
            }
        }
        if d.state == "waitingForDevice" {
            if let n = d.nextDeadline { items.append("next connect attempt \(relative(n, now))") }
            else if d.autoConnect { items.append("waiting on BlueZ's auto-connect (no timer)") }
        }
        return fit(head, items)
    }
}

/// `pairctl status`'s bluetoothd line: "bluetoothd: running; crashed at 12:03:04 (SIGSEGV); started
/// again; back after 1.2 s; 2 of 2 wearables back after 3.1 s".
enum BluetoothdText {
    /// The bluetoothd line(s), fitted to 100 columns; times relative to `now`.
    static func lines(_ b: StatusDocument.Bluetoothd, now: Date = Date()) -> [String] {
        var items = ["bluetoothd: \(b.state)"]
        if let n = b.nextStartAt { items[0] += ", next start \(StatusText.relative(n, now))" }
        if b.state == "stopped" { items[0] += " (by an administrator: paird does not start it)" }
        if b.state == "unknown" { items[0] += " (paird has not yet seen whether org.bluez is on the bus)" }
        if let c = b.lastCrash {
            items.append("crashed \(StatusText.relative(c.at, now)) (\(c.cause.terminalSafe))")
            items.append(c.action)
            if let s = c.backAfter { items.append("back after \(seconds(s))") }
            if c.wearables > 0 {
                items.append("\(c.wearablesBack) of \(c.wearables) wearable(s) back\(c.allBackAfter.map { " after \(seconds($0))" } ?? "")")
            }
            if !c.disarmed.isEmpty { items.append("disarmed \(c.disarmed.joined(separator: ", ")) (crashed bluetoothd twice: pair it again)") }
        }
        return StatusText.fit("", items, separator: "; ")
    }

    static func render(_ b: StatusDocument.Bluetoothd, now: Date = Date()) -> String {
        lines(b, now: now).joined(separator: "\n")
    }

    static func seconds(_ s: Double) -> String { "\((s * 10).rounded() / 10) s" }
}

/// `pairctl status`'s host line: "host: slept 2 h ago for 7.1 min; Pulse-1 back after 3.2 s,
/// Ring-1 not back yet".
enum HostText {
    static func lines(_ h: StatusDocument.Host, names: [String: String], now: Date = Date()) -> [String] {
        var items: [String] = []
        if h.asleep { items.append("host: going to sleep") }
        if let s = h.lastSleep, !h.asleep {
            let lasted = s.resumedAt.map { " for \(duration($0.timeIntervalSince(s.at)))" } ?? ""
            items.append("host: slept \(StatusText.relative(s.at, now))\(lasted)")
            for b in s.back {
                let who = (names[b.address].flatMap { $0.isEmpty ? nil : $0 } ?? b.address).terminalSafe
                items.append(b.after.map { "\(who) back after \(BluetoothdText.seconds($0))" } ?? "\(who) not back yet")
            }
        }
        return StatusText.fit("", items, separator: "; ")
    }

    static func duration(_ s: Double) -> String {
        s < 90 ? BluetoothdText.seconds(s) : s < 5400 ? "\(Int((s / 60).rounded())) min" : "\(((s / 360).rounded()) / 10) h"
    }
}

private extension String {
    var trimmingSuffixSpaces: String {
        var s = self
        while s.hasSuffix(" ") { s.removeLast() }
        return s
    }
}
