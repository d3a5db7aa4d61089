import Foundation
import Testing
import PairingCore
@testable import PairCtlCommands

/// `pairctl doctor`'s verdict from the facts it collected (`Doctor.evaluate`): one verdict, the
/// first problem in the order the data flows, and the exit code the reference documents for it.
@Suite("pairctl doctor: facts → the first problem's verdict, its fix and its exit code")
struct DoctorVerdictTests {
    let now = Date(timeIntervalSince1970: 1_800_000_000)
    static let strap = "F3:5A:B1:00:00:01"

    func device(_ state: String, wanted: String = "connected", repair: String? = nil) -> StatusDocument.Device {
        StatusDocument.Device(address: Self.strap, name: "Pulse-1", state: state, wanted: wanted, since: now.addingTimeInterval(-120),
                              lastDisconnect: StatusDocument.LastDisconnect(reason: "link-loss", at: now.addingTimeInterval(-120)),
                              reconnectAttempts: 0, battery: 87, services: [], autoConnect: state != "needsRepair",
                              repairReason: repair, addressType: "random")
    }

    func status(_ devices: [StatusDocument.Device]) -> StatusDocument {
        StatusDocument(daemon: .init(running: true, version: "0.1.0"), adapter: .init(name: "hci0", address: "00:AA:01:00:00:00", powered: true, present: true),
                       pairing: nil, devices: devices)
    }

    static let bonded = Doctor.WearableFacts.BlueZDevice(paired: true, bonded: true, trusted: true, connected: false)
    static let linked = Doctor.WearableFacts.BlueZDevice(paired: true, bonded: true, trusted: true, connected: true)
    static let adapter = Doctor.AdapterFacts(name: "hci0", address: "00:AA:01:00:00:00", powered: true, powerState: "on")
    static let root = Doctor.CallerFacts(user: "root", root: true, inBluetoothGroup: false, probe: .allowed)

    /// Everything fine up to the wearables; `wearables` as given.
    func facts(_ wearables: [Doctor.WearableFacts]) -> Doctor.Facts {
        Doctor.Facts(bluetoothdUnit: nil, bluezOnBus: true, rfkill: [.init(name: "hci0", soft: false, hard: false)],
                     adapter: .found(Self.adapter), paird: .running(status(wearables.map(\.device))), caller: Self.root,
                     wearables: .checked(wearables, listenSeconds: 4))
    }

    func verdict(_ f: Doctor.Facts) -> Doctor.Verdict.Kind? { Doctor.evaluate(f, now: now).verdict?.kind }

    @Test("all well: every check ok, in order, exit 0")
    func allWell() throws {
        let r = Doctor.evaluate(facts([.init(device: device("connected"), bluez: Self.linked)]), now: now)
        #expect(r.verdict?.kind == .allWell)
        #expect(r.verdict?.exit == .success)
        #expect(r.checks.map(\.check) == ["bluetoothd", "rfkill", "adapter", "paird", "rights", "wearable"])
        #expect(r.checks.allSatisfy { $0.ok })
    }

    @Test("bluetoothd: crashed (SIGSEGV), stopped by an administrator, failed otherwise, gone without systemd: exit 9, nothing checked after")
    func bluetoothd() {
        var f = facts([.init(device: device("connected"), bluez: Self.linked)])
        f.bluezOnBus = false
        f.bluetoothdUnit = BluetoothdUnitState(activeState: "failed", result: "core-dump", execMainCode: 3, execMainStatus: 11)
        let crashed = Doctor.evaluate(f, now: now)
        #expect(crashed.verdict?.kind == .bluetoothdCrashed)
        #expect(crashed.verdict?.text.contains("SIGSEGV") == true)
        #expect(crashed.verdict?.exit == .adapterUnavailable)
        #expect(crashed.checks.map(\.check) == ["bluetoothd"], "stops at the first problem")
        f.bluetoothdUnit = BluetoothdUnitState(activeState: "inactive", result: "success")
        #expect(verdict(f) == .bluetoothdStopped)
        f.bluetoothdUnit = BluetoothdUnitState(activeState: "failed", result: "start-limit-hit")
        #expect(verdict(f) == .bluetoothdFailed)
        f.bluetoothdUnit = nil
        #expect(verdict(f) == .bluetoothdNotRunning)
        // on the bus is running, whatever systemd's unit says (a bluetoothd started by hand)
        f.bluezOnBus = true
        f.bluetoothdUnit = BluetoothdUnitState(activeState: "inactive", result: "success")
        #expect(verdict(f) == .allWell)
    }

    @Test("rfkill: a hard block before a soft one; the adapter's own switch or a platform's; another controller's is not ours")
    func rfkill() {
        var f = facts([.init(device: device("connected"), bluez: Self.linked)])
        f.rfkill = [.init(name: "hci1", soft: true, hard: true)]
        #expect(verdict(f) == .allWell, "hci1's switch does not block hci0")
        f.rfkill = [.init(name: "hci0", soft: true, hard: false), .init(name: "tpacpi_bluetooth_sw", soft: false, hard: true)]
        #expect(verdict(f) == .rfkillHardBlock)
        f.rfkill = [.init(name: "hci0", soft: true, hard: false)]
        let r = Doctor.evaluate(f, now: now)
        #expect(r.verdict?.kind == .rfkillSoftBlock)
        #expect(r.verdict?.fix == "rfkill unblock bluetooth")
        #expect(r.verdict?.exit == .adapterUnavailable)
        #expect(r.checks.map(\.ok) == [true, false])
    }

    @Test("the adapter: none, paird's configured one missing, powered off: exit 9")
    func adapter() {
        var f = facts([.init(device: device("connected"), bluez: Self.linked)])
        f.adapter = Doctor.AdapterLook.none
        #expect(verdict(f) == .noAdapter)
        f.adapter = .missing(wanted: "hci3", others: ["hci0"])
        #expect(Doctor.evaluate(f, now: now).verdict?.text.contains("hci3") == true)
        f.adapter = .found(Doctor.AdapterFacts(name: "hci0", address: "00:AA:01:00:00:00", powered: false, powerState: "off"))
        let r = Doctor.evaluate(f, now: now)
        #expect(r.verdict?.kind == .adapterOff)
        #expect(r.verdict?.fix == "bluetoothctl power on")
    }

    @Test("paird: stopped is exit 3, stalled exit 8")
    func paird() {
        var f = facts([])
        f.paird = .notRunning("paird is not running (ServiceUnknown)")
        #expect(verdict(f) == .pairdStopped)
        #expect(Doctor.Verdict.Kind.pairdStopped.exit == .daemonNotRunning)
        f.paird = .notAnswering("NoReply")
        #expect(verdict(f) == .pairdNotAnswering)
        #expect(Doctor.Verdict.Kind.pairdNotAnswering.exit == .timeout)
    }

    @Test("rights: paird's policy refusing the caller is exit 4 with the usermod fix; a member, or root, passes")
    func rights() {
        var f = facts([.init(device: device("connected"), bluez: Self.linked)])
        f.caller = Doctor.CallerFacts(user: "alice", root: false, inBluetoothGroup: false, probe: .denied)
        let r = Doctor.evaluate(f, now: now)
        #expect(r.verdict?.kind == .accessDenied)
        #expect(r.verdict?.exit == .accessDenied)
        #expect(r.verdict?.fix?.contains("sudo usermod -aG bluetooth alice") == true)
        f.caller = Doctor.CallerFacts(user: "alice", root: false, inBluetoothGroup: true, probe: .allowed)
        #expect(verdict(f) == .allWell)
        // the probe did not answer either way: the group decides
        f.caller = Doctor.CallerFacts(user: "alice", root: false, inBluetoothGroup: false, probe: .unknown)
        #expect(verdict(f) == .accessDenied)
    }

    @Test("facts missing for a later stage: no verdict yet (the collector goes on)")
    func incomplete() {
        let f = Doctor.Facts(bluetoothdUnit: nil, bluezOnBus: true)
        let r = Doctor.evaluate(f, now: now)
        #expect(r.verdict == nil)
        #expect(r.checks.map(\.check) == ["bluetoothd"])
    }

    @Test("the wearable: nothing paired, unknown name: exit 7")
    func unknown() {
        #expect(verdict(facts([])) == .nothingPaired)
        var f = facts([])
        f.wearables = .unknown("Polar")
        #expect(verdict(f) == .unknownWearable)
        #expect(Doctor.Verdict.Kind.unknownWearable.exit == .unknownDevice)
    }

    @Test("away: not heard while not connected here is exit 5, and says a phone's link looks the same")
    func notHeard() throws {
        let r = Doctor.evaluate(facts([.init(device: device("waitingForDevice"), bluez: Self.bonded, heardRSSI: nil, listened: true)]), now: now)
        let v = try #require(r.verdict)
        #expect(v.kind == .notHeard)
        #expect(v.exit == .noDeviceFound)
        #expect(v.text.contains("connected to another device"))
        #expect(v.text.contains("look the same"))
        #expect(r.checks.last?.detail.contains("not heard advertising in 4 s") == true)
    }

    @Test("needsRepair heard advertising: it forgot the bond (exit 10, pairctl pair ADDR); not heard: needs pairing again")
    func bondLost() throws {
        let heard = Doctor.evaluate(facts([.init(device: device("needsRepair", repair: "suspected-bond-loss"), bluez: Self.bonded,
                                                 heardRSSI: -54, listened: true)]), now: now)
        let v = try #require(heard.verdict)
        #expect(v.kind == .bondLost)
        #expect(v.exit == .needsRepair)
        #expect(v.fix == "pairctl pair \(Self.strap)")
        #expect(v.text.contains("advertising") && v.text.contains("refusing"))
        #expect(verdict(facts([.init(device: device("needsRepair", repair: "authentication"), bluez: Self.bonded, listened: true)])) == .needsRepair)
        // the HCI's 127, "RSSI not available" (btvirt's), is not a signal strength
        let noRSSI = Doctor.evaluate(facts([.init(device: device("needsRepair", repair: "suspected-bond-loss"), bluez: Self.bonded,
                                                  heardRSSI: 127, listened: true)]), now: now)
        #expect(noRSSI.verdict?.kind == .bondLost)
        #expect(noRSSI.verdict?.text.contains("with no RSSI reported") == true && noRSSI.verdict?.text.contains("127") == false,
                "\(String(describing: noRSSI.verdict?.text))")
    }

    @Test("needsRepair because bluetoothd died on its link (issue 49): names the likely cause (a reset wearable, this kernel's crash) and the one command, heard or not")
    func diedOnLink() throws {
        for heard in [nil, -60] as [Int?] {
            let r = Doctor.evaluate(facts([.init(device: device("needsRepair", repair: "bluetoothd-died-on-link"), bluez: Self.bonded,
                                                 heardRSSI: heard, listened: true)]), now: now)
            let v = try #require(r.verdict)
            #expect(v.exit == .needsRepair)
            #expect(v.fix == "pairctl pair \(Self.strap)")
            #expect(v.text.contains("probably reset") && v.text.contains("kernel crashes"), "\(v.text)")
            #expect(!v.text.contains("bluetoothd-died-on-link"), "words, not the token: \(v.text)")
        }
    }

    @Test("BlueZ has no bond (or no object) for a wearable paird keeps: exit 10")
    func bondMissing() {
        let unpaired = Doctor.WearableFacts.BlueZDevice(paired: false, bonded: false, trusted: false, connected: false)
        #expect(verdict(facts([.init(device: device("waitingForDevice"), bluez: unpaired)])) == .bondMissing)
        #expect(verdict(facts([.init(device: device("waitingForDevice"), bluez: nil)])) == .bondMissing)
    }

    @Test("disconnected as asked (exit 1, pairctl connect); linked through another adapter of this host (exit 5); heard, still connecting (exit 8)")
    func otherStates() {
        let asked = Doctor.evaluate(facts([.init(device: device("disconnected", wanted: "disconnected"), bluez: Self.bonded)]), now: now)
        #expect(asked.verdict?.kind == .disconnectedByUser)
        #expect(asked.verdict?.fix == "pairctl connect \(Self.strap)")
        #expect(asked.verdict?.exit == .failure)
        let elsewhere = Doctor.evaluate(facts([.init(device: device("connecting"), bluez: Self.bonded, connectedThrough: "hci2", listened: true)]), now: now)
        #expect(elsewhere.verdict?.kind == .connectedElsewhere)
        #expect(elsewhere.verdict?.text.contains("hci2") == true)
        #expect(elsewhere.verdict?.exit == .noDeviceFound)
        let connecting = Doctor.evaluate(facts([.init(device: device("connecting"), bluez: Self.bonded, heardRSSI: -60, listened: true)]), now: now)
        #expect(connecting.verdict?.kind == .connecting)
        #expect(connecting.verdict?.exit == .timeout)
    }

    @Test("several wearables: each has its line; the verdict is the first one's problem")
    func several() {
        var ring = device("waitingForDevice")
        ring.address = "F3:5A:B1:00:00:03"
        ring.name = "Ring-1"
        let r = Doctor.evaluate(facts([.init(device: device("connected"), bluez: Self.linked),
                                       .init(device: ring, bluez: Self.bonded, listened: true)]), now: now)
        #expect(r.checks.filter { $0.check == "wearable" }.map(\.ok) == [true, false])
        #expect(r.verdict?.kind == .notHeard)
        #expect(r.verdict?.address == "F3:5A:B1:00:00:03")
    }

    @Test("text: ok/FAIL lines within 100 columns, then the verdict and the fix; JSON: compact, the token, a numeric exit")
    func output() throws {
        let r = Doctor.evaluate(facts([.init(device: device("needsRepair", repair: "suspected-bond-loss"), bluez: Self.bonded,
                                             heardRSSI: -54, listened: true)]), now: now)
        let lines = Doctor.text(r)
        #expect(lines.allSatisfy { $0.count <= 100 }, "\(lines)")
        #expect(lines.first?.hasPrefix("ok   bluetoothd") == true)
        #expect(lines.contains { $0.hasPrefix("FAIL wearable") })
        #expect(lines.contains { $0.hasPrefix("verdict: ") })
        #expect(lines.last?.hasPrefix("fix:     pairctl pair") == true)
        let json = Doctor.json(r, listenSeconds: 4)
        #expect(!json.contains("\n"))
        let o = try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])
        #expect(o["verdict"] as? String == "bond-lost")
        #expect(o["exit"] as? Int == 10)
        #expect(o["schemaVersion"] as? Int == 1)
        #expect(o["listenSeconds"] as? Int == 4)
        #expect((o["checks"] as? [[String: Any]])?.count == 6)
    }

    @Test("every verdict's exit code is one of pairctl's documented codes")
    func exitCodes() {
        for k in Doctor.Verdict.Kind.allCases {
            #expect(PairctlExit.allCases.contains(k.exit), "\(k)")
        }
        #expect(Doctor.Verdict.Kind.allCases.filter { $0.exit == .success } == [.allWell])
    }
}
