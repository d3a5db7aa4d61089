import Foundation
import Testing
import PairingCore
@testable import Paird
@testable import PairCtlCommands

/// Names come from the air (anything in range picks its own) and BlueZ passes control characters
/// on: every text output of pairctl, and paird's readable stderr lines, show them `terminalSafe`
/// (one line, no control byte), while JSON keeps the exact name.
@Suite("a hostile name: no raw control character in any text output, one line per wearable, exact in JSON")
struct HostileNameTests {
    let now = Date(timeIntervalSince1970: 1_800_000_000)
    /// A name that would hide text, retitle the terminal, ring, add a line, go back over the
    /// line, reverse the text and hide a character.
    static let hostile = "Evil\u{1b}[8m hidden\u{1b}]0;owned\u{07}\nFAKE 00:00:00:00:00:00\r\u{9b}2J\u{202E}gnp\u{200B}\u{7f}"
    static let address = "F3:5A:B1:00:00:02"

    /// No C0 (new line included), DEL, C1, bidi control or format character is left raw.
    static func clean(_ text: String, sourceLocation: SourceLocation = #_sourceLocation) {
        let raw = text.unicodeScalars.filter { s in
            (s.value < 0x20 && s != "\n") || (0x7f...0x9f).contains(s.value) || s.properties.generalCategory == .format
        }
        #expect(raw.isEmpty, "raw \(raw.map { String($0.value, radix: 16) }) in: \(text.debugDescription)", sourceLocation: sourceLocation)
        #expect(!text.contains("Evil\u{1b}"), sourceLocation: sourceLocation)
    }

    static func lines(_ text: String) -> [String] { text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) }

    func device(_ state: String = "waitingForDevice", name: String = hostile) -> StatusDocument.Device {
        var d = StatusDocument.Device(address: Self.address, name: name, state: state, wanted: "connected", since: now.addingTimeInterval(-60),
                                      lastDisconnect: .init(reason: "org.bluez.Reason.\u{1b}[2JTimeout", at: now.addingTimeInterval(-60)),
                                      reconnectAttempts: 0, battery: 80, services: [], repairReason: "bond\nlost")
        d.bondAdapter = "00:AA:01:00:00:00"
        return d
    }

    func document(_ devices: [StatusDocument.Device]) -> StatusDocument {
        var s = StatusDocument(daemon: .init(running: true, stateFileError: "/var/lib/paird/state.json: \u{1b}[31mI/O error"),
                       adapter: .init(name: "hci0\u{1b}]0;x\u{07}", address: "00:AA:01:00:00:00", powered: true, present: true),
                       pairing: .init(phase: "scanning", deadline: now.addingTimeInterval(5), device: "\u{202E}x"),
                       devices: devices,
                       bluetoothd: .init(state: "running", nextStartAt: nil, lastCrash: .init(
                        at: now.addingTimeInterval(-5), cause: "SIG\u{1b}SEGV", result: "core-dump", action: "restarting",
                        backAfter: 1, wearables: 1, wearablesBack: 0, allBackAfter: nil, disarmed: [])))
        s.adapters = [s.adapter!]
        return s
    }

    @Test("status, status WEARABLE (every state), status --watch: escaped, the wearable on its own line(s)")
    func status() {
        for state in ["connected", "waitingForDevice", "needsRepair", "disconnected", "adapterUnavailable"] {
            let d = device(state)
            let all = StatusText.render(document([d]), now: now)
            Self.clean(all)
            #expect(all.contains("Evil\\x1b[8m hidden\\x1b]0;owned\\x07\\nFAKE 00:00:00:00:00:00\\r\\x9b2J\\u{202e}gnp\\u{200b}\\x7f F3:5A:B1:00:00:02"), "\(all)")
            #expect(!Self.lines(all).contains { $0.hasPrefix("FAKE") }, "no line of the name's own")
            let one = StatusText.device(d, now: now, adapters: document([d]).adapters).joined(separator: "\n")
            Self.clean(one)
            #expect(one.hasPrefix("Evil\\x1b[8m"), "\(one)")
            let watch = Status.watchLine(d)
            Self.clean(watch)
            #expect(!watch.contains("\n"))
        }
        var noName = device(name: "")
        noName.address = "F3:5A:B1:00:00:0\u{1b}"
        Self.clean(Status.watchLine(noName))
    }

    @Test("status --json keeps the exact name, and it round-trips")
    func json() throws {
        let s = document([device()])
        let line = s.json(pretty: false)
        #expect(!line.contains("\n") && !line.contains("\u{1b}"), "JSON escapes by itself")
        let back = try StatusDocument.decode(line)
        #expect(back.devices.first?.name == Self.hostile)
        #expect(ListDocument(devices: [device()]).json().contains("\\u001b[8m"))
    }

    @Test("list and list --no-legend: one line per wearable, whatever its name holds")
    func list() {
        let devices = [device(), device(name: "two\nlines"), device(name: "Pulse‑Ü 心")]
        let bare = List.lines(devices, legend: false)
        #expect(bare.count == 3)
        for l in bare { Self.clean(l); #expect(!l.contains("\n") && !l.contains("\r")) }
        #expect(bare[1].hasSuffix("  two\\nlines"))
        #expect(bare[2].hasSuffix("  Pulse‑Ü 心"), "plain UTF-8 as it is")
        let said = bare.map { $0 + "\n" }.joined()
        #expect(said.split(separator: "\n").count == 3, "list --no-legend printed two lines for one wearable named with a new line")
        #expect(List.lines(devices).count == 4)
        #expect(List.lines(devices).first == List.header)
    }

    @Test("history: the name, the address and the reasons")
    func history() throws {
        let j = """
        {"device":"F3:5A:B1:00:00:02","name":\(jsonString(Self.hostile)),"since":1800000000,"until":1800003600,"availabilityPercent":50,
         "wantedSeconds":3600,"connectedSeconds":1800,"awaySeconds":1800,"downSeconds":0,"notWantedSeconds":0,"asleepSeconds":0,
         "unknownSeconds":0,"drops":[{"at":1800001800,"reason":"x\\u001b[2J","detail":null}],"dropsByReason":{"x\\u001b[2J":1},
         "longestGap":{"start":1800001800,"seconds":1800,"reason":"link\\nloss"},"timeline":{"bucketSeconds":3600,"strip":"."}}
        """
        let a = try JSONDecoder().decode(HistoryAnalysis.self, from: Data(j.utf8))
        let text = HistoryText.render(a)
        Self.clean(text)
        #expect(Self.lines(text).first?.hasPrefix("Evil\\x1b[8m") == true, "\(text)")
        #expect(text.contains("(x\\x1b[2J 1)") && text.contains("(link\\nloss)"), "\(text)")
    }

    @Test("doctor: checks, verdict and fix")
    func doctor() {
        let status = StatusDocument(daemon: .init(running: true, version: "0.1.0"),
                                    adapter: .init(name: "hci0", address: "00:AA:01:00:00:00", powered: true, present: true),
                                    pairing: nil, devices: [device("waitingForDevice")])
        let facts = Doctor.Facts(bluetoothdUnit: nil, bluezOnBus: true, rfkill: [.init(name: "hci0\u{1b}[2J", soft: false, hard: false)],
                                 adapter: .found(.init(name: "hci0", address: "00:AA:01:00:00:00", powered: true, powerState: "on")),
                                 paird: .running(status), caller: .init(user: "root", root: true, inBluetoothGroup: false, probe: .allowed),
                                 wearables: .checked([.init(device: device("waitingForDevice"), bluez: nil)], listenSeconds: 4))
        let r = Doctor.evaluate(facts, now: now)
        #expect(r.verdict?.kind == .bondMissing)
        let text = Doctor.text(r).joined(separator: "\n")
        Self.clean(text)
        #expect(text.contains("Evil\\x1b[8m"), "\(text)")
        #expect(Doctor.json(r, listenSeconds: 4).contains("Evil\\u001b[8m"), "--json keeps it exact (JSON's own escape)")
    }

    @Test("scan: the shared rule (no `?` of its own any more)")
    func scan() {
        let e = ScanReport.entries([ScanObservation(address: Self.address, name: Self.hostile, heardRSSI: -50)], paird: [])
        let d = ScanReport.Document(timeout: 5, interrupted: false, services: [], pairdRunning: true, pairdError: nil, devices: e)
        let lines = ScanReport.text(d)
        #expect(lines.count == 2)
        for l in lines { Self.clean(l) }
        #expect(lines[1].contains("Evil\\x1b[8m hidde..."), "\(lines)")
        #expect(ScanReport.json(d).contains("Evil\\u001b[8m"))
    }

    @Test("pair's prompts and progress, watch's lines")
    func pairAndWatch() {
        let (number, who) = Pair.numberAndName("123456 " + Self.hostile, Self.address)
        #expect(number == "123456")
        Self.clean(who)
        #expect(!who.contains("\n"))
        Self.clean(Watch.stateText(Self.address, "waitingForDevice", "org.bluez.Reason.\u{1b}[2J\nTimeout"))
        Self.clean(Watch.notifyText(Self.address, "00002a37-0000-1000-8000-00805f9b34fb\u{1b}", [0, 72]))
    }

    @Test("paird's readable stderr line: the message and the fields escaped, one line")
    func pairdStderr() {
        let line = Log.plainLine("found \(Self.hostile) (\(Self.address))", [(key: "PAIRD_NAME", value: Self.hostile), (key: "EMPTY", value: "")])
        Self.clean(line)
        #expect(!line.contains("\n"))
        #expect(line.hasPrefix("found Evil\\x1b[8m") && line.contains("PAIRD_NAME=Evil\\x1b[8m"), "\(line)")
        #expect(Log.plainLine("paird 0.1.0 started", []) == "paird 0.1.0 started", "paird's own text as it is")
    }

    func jsonString(_ s: String) -> String {
        String(decoding: try! JSONEncoder().encode(s), as: UTF8.self)
    }
}
