import Foundation
import Testing
@testable import Paird
@testable import PairCtlCommands
import PairingCore

@Suite("Saying what happened to bluetoothd")
struct BluetoothdReportTests {
    let watch = DeviceAddress("00:AA:01:01:00:01")!
    let ring = DeviceAddress("C0:FF:EE:00:00:02")!
    let segv = BluetoothdUnitState(activeState: "failed", result: "core-dump", execMainCode: 3, execMainStatus: 11)

    @Test("a crash: one warning with its own MESSAGE_ID, the unit's result and signal, what paird did, who it disarmed")
    func crashEntry() {
        let crash = BluetoothdCrash(at: .at(0), unit: segv, action: "started again", attempt: 1, awaited: [ring], disarmed: [watch])
        let e = BluetoothdJournal(.crashed(crash))
        #expect(e.messageID == Log.MessageID.bluetoothdCrashed)
        #expect(e.priority == .warning)
        #expect(e.message == "bluetoothd crashed (SIGSEGV, systemd result core-dump); started again; 1 wearable(s) to bring back; "
            + "disarmed 00:AA:01:01:00:01: bluetoothd crashed twice connecting to it, pair it again")
        #expect(e.fields.map(\.key) == ["PAIRD_EVENT", "PAIRD_BLUETOOTHD_RESULT", "PAIRD_BLUETOOTHD_EXIT", "PAIRD_BLUETOOTHD_ACTION",
                                       "PAIRD_ATTEMPT", "PAIRD_WEARABLES", "PAIRD_DISARMED"])
        #expect(e.fields.map(\.value) == ["bluetoothdCrashed", "core-dump", "SIGSEGV", "started again", "1", "C0:FF:EE:00:00:02",
                                         "00:AA:01:01:00:01"])
    }

    @Test("a stop: a notice under the other MESSAGE_ID saying paird does not start it")
    func stopEntry() {
        let e = BluetoothdJournal(.stopped)
        #expect(e.messageID == Log.MessageID.bluetoothdDown && e.messageID != Log.MessageID.bluetoothdCrashed)
        #expect(e.message.contains("does not start it"))
    }

    @Test("the catalog explains both MESSAGE_IDs")
    func catalog() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let text = try String(contentsOf: root.appendingPathComponent("systemd/paird.catalog"), encoding: .utf8)
        #expect(text.contains("-- \(Log.MessageID.bluetoothdCrashed)\n"))
        #expect(text.contains("-- \(Log.MessageID.bluetoothdDown)\n"))
    }

    @Test("pairctl status: the last crash, how long bluetoothd and the wearables took to come back")
    func statusLine() throws {
        let b = StatusDocument.Bluetoothd(state: "running", nextStartAt: nil, lastCrash: .init(
            at: Date(timeIntervalSince1970: 0), cause: "SIGSEGV", result: "core-dump", action: "started again",
            backAfter: 1.23, wearables: 2, wearablesBack: 2, allBackAfter: 3.14, disarmed: []))
        let line = BluetoothdText.render(b, now: Date(timeIntervalSince1970: 180))
        // relative times; over 100 columns: broken after an item, the rest indented
        #expect(line == "bluetoothd: running; crashed 3 min ago (SIGSEGV); started again; back after 1.2 s;\n  2 of 2 wearable(s) back after 3.1 s")
        let doc = StatusDocument(daemon: .init(running: true), adapter: nil, pairing: nil, devices: [], bluetoothd: b)
        #expect(try StatusDocument.decode(doc.json()).bluetoothd == b, "round trip")
        #expect(try StatusDocument.decode(#"{"daemon":{"running":true},"devices":[]}"#).bluetoothd == nil, "an older paird's status reads")
    }

    @Test("status from paird's first moment: bluetoothd unknown (not running) until its owner is seen or known absent; the text says so")
    func unknownAtFirst() {
        var m = PairingMachine(now: .at(0))
        var doc = StatusDocument(machine: m, adapter: nil, configuredAdapter: "", now: .at(0))
        #expect(doc.bluetoothd == StatusDocument.Bluetoothd(state: "unknown", nextStartAt: nil, lastCrash: nil))
        #expect(BluetoothdText.render(doc.bluetoothd!) == "bluetoothd: unknown (paird has not yet seen whether org.bluez is on the bus)")
        #expect(StatusText.render(doc).contains("bluetoothd: unknown"))
        _ = m.handle(.bluetoothdAbsent, now: .at(0.1))
        doc = StatusDocument(machine: m, adapter: nil, configuredAdapter: "", now: .at(0.1))
        #expect(doc.bluetoothd?.state == "gone")
        #expect(StatusText.render(doc).contains("bluetoothd: gone"))
        _ = m.handle(.bluetoothdBack, now: .at(5))
        doc = StatusDocument(machine: m, adapter: nil, configuredAdapter: "", now: .at(5))
        #expect(doc.bluetoothd?.state == "running")
        #expect(!StatusText.render(doc).contains("bluetoothd:"), "running with no crash: no line")
    }

    @Test("status --json says when paird's next start of bluetoothd is")
    func nextStart() {
        var m = PairingMachine(now: .at(0))
        let exitAtStart = BluetoothdUnitState(activeState: "failed", result: "exit-code", execMainCode: 1, execMainStatus: 1, execMainStart: 7)
        _ = m.handle(.bluetoothdLeft, now: .at(0))
        _ = m.handle(.bluetoothdUnit(segv), now: .at(0))       // started at once
        _ = m.handle(.bluetoothdStartFailed, now: .at(1))
        _ = m.handle(.bluetoothdUnit(exitAtStart), now: .at(1)) // the next one after the backoff
        let doc = StatusDocument(machine: m, adapter: nil, configuredAdapter: "", now: .at(1))
        #expect(doc.bluetoothd?.state == "restarting")
        #expect(doc.bluetoothd?.nextStartAt == Date(timeIntervalSince1970: Moment.at(3).unixTime))
        #expect(doc.bluetoothd?.lastCrash?.action == "start 2 in 2.0 s")
    }
}
