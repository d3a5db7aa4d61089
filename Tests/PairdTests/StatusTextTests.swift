import Foundation
import Testing
import PairingCore
@testable import PairCtlCommands

@Suite("pairctl status text: 100 columns, relative times")
struct StatusTextTests {
    let now = Date(timeIntervalSince1970: 1_800_000_000)

    /// A wearable with everything to say at once (the longest text status has).
    func worstCase() -> StatusDocument.Device {
        var d = StatusDocument.Device(
            address: "F3:5A:B1:00:00:02", name: "Polar H10 8C3B4A2D with a long name", state: "needsRepair", wanted: "disconnected",
            since: now.addingTimeInterval(-180), lastDisconnect: .init(reason: "connection-timeout", at: now.addingTimeInterval(-7200)),
            reconnectAttempts: 12, battery: 55, services: ["0000180d-0000-1000-8000-00805f9b34fb"], autoConnect: true,
            nextDeadline: now.addingTimeInterval(40), repairReason: "authentication")
        d.addressType = "random"
        d.missingCharacteristics = ["00002a37-0000-1000-8000-00805f9b34fb", "00002a19-0000-1000-8000-00805f9b34fb"]
        d.lastData = now.addingTimeInterval(-0.4)
        d.health = .init(check: "silence", characteristic: "00002a37-0000-1000-8000-00805f9b34fb", deadline: now.addingTimeInterval(4.6))
        return d
    }

    func document(_ devices: [StatusDocument.Device]) -> StatusDocument {
        StatusDocument(
            daemon: .init(running: true, stateFileError: "/var/lib/paird/state.json: No space left on device (errno 28) while writing the new state"),
            adapter: .init(name: "hci0", address: "00:01:02:03:04:05", powered: false, present: false),
            pairing: .init(phase: "removing-old-bond", deadline: now.addingTimeInterval(8), device: "F3:5A:B1:00:00:02"),
            devices: devices,
            bluetoothd: .init(state: "gave-up", nextStartAt: now.addingTimeInterval(16), lastCrash: .init(
                at: now.addingTimeInterval(-125), cause: "SIGSEGV", result: "core-dump", action: "restarting",
                backAfter: 1.23, wearables: 3, wearablesBack: 1, allBackAfter: nil,
                disarmed: ["F3:5A:B1:00:00:02", "F3:5A:B1:00:00:03", "F3:5A:B1:00:00:04"])))
    }

    @Test("a wearable whose bond is on another adapter than the one in use: the text names both and the way out")
    func bondOnAnotherAdapter() {
        var d = StatusDocument.Device(address: "F3:5A:B1:00:00:02", name: "Strap", state: "adapterUnavailable", wanted: "connected",
                                      since: now.addingTimeInterval(-60), lastDisconnect: nil, reconnectAttempts: 0, battery: nil, services: [])
        d.bondAdapter = "00:AA:01:00:00:00"
        let inUse = StatusDocument.Adapter(name: "hci1", address: "00:AA:01:09:00:00", powered: true, present: true)
        let text = StatusText.device(d, now: now, adapter: inUse).joined(separator: "\n")
        #expect(text.contains("waiting for adapter 00:AA:01:00:00:00, which holds its bond (00:AA:01:09:00:00 is in use)"), "\(text)")
        #expect(text.contains("`pairctl pair F3:5A:B1:00:00:02`"), "\(text)")
        // Its own adapter in use, or none present: Bluetooth is what is unavailable.
        for a in [StatusDocument.Adapter(name: "hci0", address: "00:aa:01:00:00:00", powered: false, present: true),
                  StatusDocument.Adapter(name: nil, address: "00:AA:01:09:00:00", powered: false, present: false)] {
            let plain = StatusText.device(d, now: now, adapter: a).joined(separator: "\n")
            #expect(plain.contains("Bluetooth unavailable") && !plain.contains("holds its bond"), "\(plain)")
        }
    }

    @Test("several adapters: a line each (present or not, how many bonds, the default), each wearable named with its own; one waiting for an unplugged one says so")
    func severalAdapters() {
        var strap = StatusDocument.Device(address: "F3:5A:B1:00:00:01", name: "Strap", state: "adapterUnavailable", wanted: "connected",
                                          since: now.addingTimeInterval(-60), lastDisconnect: nil, reconnectAttempts: 0, battery: nil, services: [])
        strap.bondAdapter = "00:AA:01:00:00:00"
        var ring = StatusDocument.Device(address: "F3:5A:B1:00:00:03", name: "Ring", state: "connected", wanted: "connected",
                                         since: now.addingTimeInterval(-60), lastDisconnect: nil, reconnectAttempts: 0, battery: nil, services: [])
        ring.bondAdapter = "00:aa:01:02:00:02"
        var doc = StatusDocument(daemon: .init(running: true), adapter: .init(name: "hci2", address: "00:AA:01:02:00:02", powered: true, present: true),
                                 pairing: nil, devices: [strap, ring])
        doc.adapters = [.init(name: "hci0", address: "00:AA:01:00:00:00", powered: false, present: false, ready: false, configured: "hci0"),
                        .init(name: "hci2", address: "00:AA:01:02:00:02", powered: true, present: true, ready: true, configured: "hci2")]
        let lines = StatusText.render(doc, now: now).split(separator: "\n").map(String.init)
        #expect(lines[0] == "adapter: hci0 (00:AA:01:00:00:00), not present (unplugged?), 1 wearable(s) bonded on it, the default", "\(lines)")
        #expect(lines[1] == "adapter: hci2 (00:AA:01:02:00:02), powered, 1 wearable(s) bonded on it", "\(lines)")
        let text = lines.joined(separator: "\n")
        #expect(text.contains("Strap F3:5A:B1:00:00:01: waiting for adapter hci0 (00:AA:01:00:00:00), which holds its bond"), "\(text)")
        #expect(text.contains("Ring F3:5A:B1:00:00:03: connected, on hci2"), "\(text)")
        #expect(doc.json().contains("\"adapters\""), "listed in --json")
        var one = doc
        one.adapters = nil
        #expect(!one.json().contains("\"adapters\""), "one adapter configured: no list")
    }

    @Test("every line of the longest status fits 100 columns, and nothing of it is lost")
    func fitsAHundredColumns() {
        var other = worstCase()
        other.state = "waitingForDevice"
        other.repairReason = nil
        let text = StatusText.render(document([worstCase(), other]), now: now)
        for line in text.split(separator: "\n") { #expect(line.count <= 100, "\(line.count): \(line)") }
        #expect(text.split(separator: "\n").count > 6, "it was long: broken into lines\n\(text)")
        let joined = text.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.joined(separator: " ")
        for phrase in ["battery 55%", "MISSING on its link", "run `pairctl pair F3:5A:B1:00:00:02`", "12 connect attempt(s)",
                       "watching 2a37 for silence (probed in 4.6 s unless it notifies)", "(random address)", "kept disconnected",
                       "bluetoothd: gave-up, next start in 16.0 s", "crashed 2 min ago (SIGSEGV)", "1 of 3 wearable(s) back",
                       "state file: NOT WRITABLE", "pairing: removing-old-bond F3:5A:B1:00:00:02, ends in 8.0 s"] {
            #expect(joined.contains(phrase), "\(phrase)\n\(text)")
        }
    }

    @Test("times in text are relative (the absolute time is in --json only)")
    func relativeTimes() {
        let text = StatusText.render(document([worstCase()]), now: now)
        #expect(text.contains("since 3 min ago"), "\(text)")
        #expect(text.contains("last disconnect connection-timeout 2 h ago"), "\(text)")
        #expect(text.contains("data 0.4 s ago"), "\(text)")
        #expect(text.wholeMatch(of: /(?s).*\d{4}-\d{2}-\d{2}T\d{2}:\d{2}.*/) == nil, "no absolute time: \(text)")
        var away = worstCase()
        away.state = "waitingForDevice"
        #expect(StatusText.device(away, now: now).joined().contains("next connect attempt in 40.0 s"))
        #expect(StatusText.relative(now.addingTimeInterval(-3 * 86400), now) == "3 d ago")
        #expect(StatusText.relative(now.addingTimeInterval(-90 * 60), now) == "2 h ago")
        #expect(StatusText.relative(now.addingTimeInterval(5), now) == "in 5.0 s")
    }

    @Test("fit: breaks between items, a line broken after an item ends with the separator, a too-long item is word-wrapped")
    func fit() {
        let items = (1...30).map { "item \($0)" }
        let lines = StatusText.fit("head: ", items, width: 40)
        #expect(lines.allSatisfy { $0.count <= 40 }, "\(lines)")
        #expect(lines.first?.hasPrefix("head: item 1, item 2") == true)
        #expect(lines.dropLast().allSatisfy { $0.hasSuffix(",") }, "\(lines)")
        #expect(lines.dropFirst().allSatisfy { $0.hasPrefix("  item ") })
        #expect(lines.map { $0.trimmingCharacters(in: .whitespaces) }.joined(separator: " ") == "head: " + items.joined(separator: ", "))
        let long = StatusText.fit("x: ", ["short", String(repeating: "word ", count: 30).trimmingCharacters(in: .whitespaces)], width: 40)
        #expect(long.allSatisfy { $0.count <= 40 }, "\(long)")
        #expect(long.count >= 4)
        #expect(StatusText.fit("x: ", ["a"], width: 40) == ["x: a"])
        // a bare line (no head) broken: its first line not indented, the rest by two
        let bare = StatusText.fit("", [String(repeating: "word ", count: 12).trimmingCharacters(in: .whitespaces)], width: 40)
        #expect(bare.first?.hasPrefix("word") == true && bare.dropFirst().allSatisfy { $0.hasPrefix("  word") }, "\(bare)")
    }

    @Test("[MQTT]'s link: a line only when it is set, connected or away (why, since when), off (why); its JSON round-trips")
    func mqttLink() throws {
        var doc = StatusDocument(daemon: .init(running: true), adapter: .init(name: "hci0", address: "00:01:02:03:04:05", powered: true, present: true),
                                 pairing: nil, devices: [])
        #expect(!StatusText.render(doc, now: now).contains("mqtt"), "no line without [MQTT]")
        doc.daemon.mqtt = .init(state: "connected", broker: "127.0.0.1:1883", since: now.addingTimeInterval(-180), error: nil)
        #expect(StatusText.render(doc, now: now).contains("mqtt: connected to 127.0.0.1:1883, since 3 min ago"), "\(StatusText.render(doc, now: now))")
        doc.daemon.mqtt = .init(state: "away", broker: "127.0.0.1:1883", since: now.addingTimeInterval(-120), error: "Connection refused")
        #expect(StatusText.render(doc, now: now).contains("mqtt: AWAY from 127.0.0.1:1883 (Connection refused), since 2 min ago, trying again up to every 60 s"))
        doc.daemon.mqtt = .init(state: "off", broker: "127.0.0.1:1883", since: nil, error: "libmosquitto cannot be loaded")
        #expect(StatusText.render(doc, now: now).contains("mqtt: off (libmosquitto cannot be loaded)"))
        let json = try JSONEncoder().encode(doc)
        #expect(try JSONDecoder().decode(StatusDocument.self, from: json).daemon.mqtt == doc.daemon.mqtt)
    }
}
