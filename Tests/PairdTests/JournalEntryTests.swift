import Foundation
import Testing
@testable import Paird
import PairingCore

@Suite("Journal wording")
struct JournalEntryTests {
    let watch = DeviceAddress("00:AA:01:01:00:01")!

    @Test("a lost bond is a warning that names the device and the command that fixes it")
    func needsRepairHints() {
        let e = JournalEntry(Report(kind: .needsRepair, device: watch, name: "Watch", from: .state(.connected), to: .state(.needsRepair),
                                    reason: .repair(.authentication)))
        #expect(e.message == "Watch (00:AA:01:01:00:01) needs re-pairing (authentication): run pairctl pair 00:AA:01:01:00:01")
        #expect(e.priority == .warning)
        #expect(e.fields.map(\.key) == ["PAIRD_DEVICE", "PAIRD_STATE", "PAIRD_PREVIOUS_STATE", "PAIRD_REASON", "PAIRD_ATTEMPT", "PAIRD_EVENT"])
        #expect(e.fields.map(\.value) == ["00:AA:01:01:00:01", "needsRepair", "connected", "authentication", "", "needsRepair"])
    }

    @Test("a wearable that takes bluetoothd down as its link comes up (issue 49): the token stays the field, the words name the likely reset, this kernel's crash and the fix")
    func diedOnLinkSaysWhy() {
        let e = JournalEntry(Report(kind: .needsRepair, device: watch, name: "Watch", from: .state(.waitingForDevice), to: .state(.needsRepair),
                                    reason: .repair(.bluetoothdDiedOnLink)))
        #expect(e.message == "Watch (00:AA:01:01:00:01) needs re-pairing (bluetoothd-died-on-link): bluetoothd died twice as its link came up: "
            + "it was probably reset (it lost its bond, the host still has the old key) and this kernel crashes on the failed encryption: "
            + "run pairctl pair 00:AA:01:01:00:01 (it removes the old bond, then pairs)")
        #expect(e.fields.first { $0.key == "PAIRD_REASON" }?.value == "bluetoothd-died-on-link")
        #expect(e.priority == .warning)
    }

    @Test("a reconnect says who made it: the kernel's auto-connect, or paird's Connect attempts")
    func reconnectSaysWho() {
        #expect(JournalEntry(Report(kind: .reconnected, device: watch, to: .state(.connected), attempt: 0)).message
            == "00:AA:01:01:00:01 reconnected (the kernel's auto-connect)")
        #expect(JournalEntry(Report(kind: .reconnected, device: watch, to: .state(.connected), attempt: 3)).message
            == "00:AA:01:01:00:01 reconnected after 3 Connect attempt(s)")
    }

    @Test("every report kind has a priority: losses and successes are notices, state steps info, failures warnings")
    func priorities() {
        for kind in Report.Kind.allCases {
            let p = JournalEntry(Report(kind: kind, device: nil)).priority
            switch kind {
            case .needsRepair, .pairingFailed, .pairingRefused, .characteristicMissing: #expect(p == .warning)
            case .stateChanged, .hostAsleep: #expect(p == .info)
            case .paired, .connected, .reconnected, .linkLost, .unpaired, .userDisconnected, .adapterLost: #expect(p == .notice)
            case .resumeEscalation: #expect(p == .notice)
            case .adapterWedged: #expect(p == .warning)
            }
        }
    }

    @Test("the steps after a resume: each its own words; the power cycle a warning")
    func resumeSteps() {
        let w = DeviceAddress("00:AA:01:01:00:01")!
        func entry(_ reason: ResumeEscalation, _ d: DeviceAddress? = w) -> JournalEntry {
            JournalEntry(Report(kind: .resumeEscalation, device: d, name: "Watch", reason: .resume(reason)))
        }
        #expect(entry(.init(step: .autoConnect), nil).message
            == "after the resume: the auto-connect registered again; paird's Connect() follows the head start")
        let cycle = entry(.init(step: .powerCycle, powerCycles: 1, powerCycleCap: 2, after: .seconds(60), deadline: .seconds(60)))
        #expect(cycle.message == "Watch (00:AA:01:01:00:01) not back after the resume, nor any other wearable: power-cycling the adapter (1/2 after 60.0 s (deadline 60.0 s))")
        #expect(cycle.priority == .warning)
        #expect(cycle.fields.contains { $0.key == "PAIRD_REASON" && $0.value.hasPrefix("power-cycle ") })
        #expect(entry(.init(step: .away, after: .seconds(12), deadline: .seconds(10))).message
            == "Watch (00:AA:01:01:00:01) not back after the resume after 12.0 s (deadline 10.0 s), while another one is (or the adapter was power-cycled): away, waiting for it")
        #expect(entry(.init(step: .capReached, powerCycles: 2, powerCycleCap: 2, after: .seconds(60), deadline: .seconds(60))).priority == .notice)
    }

    @Test("every report kind has its own MESSAGE_ID, and the catalog explains it")
    func catalogCoversReports() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let text = try String(contentsOf: root.appendingPathComponent("systemd/paird.catalog"), encoding: .utf8)
        let ids = Report.Kind.allCases.map(Log.MessageID.forReport)
        #expect(Set(ids).count == ids.count)
        for (kind, id) in zip(Report.Kind.allCases, ids) {
            #expect(text.contains("-- \(id)\n"), "\(kind): \(id) not in systemd/paird.catalog")
        }
    }

    @Test("a wedged adapter: the power cycle and its count, then the cap with what a person can do")
    func wedged() {
        let cycle = JournalEntry(Report(kind: .adapterWedged, device: nil, reason: .wedge(.powerCycle(attempt: 1, of: 2, adapter: DeviceAddress("00:AA:01:00:00:00")!))))
        #expect(cycle.message == "adapter 00:AA:01:00:00:00 refuses every wearable's connection at once (taken for wedged, not for lost bonds): "
            + "power-cycling it (1/2); its wearables wait for it")
        let cap = JournalEntry(Report(kind: .adapterWedged, device: nil, reason: .wedge(.capReached(done: 2, of: 2, adapter: DeviceAddress("00:AA:01:00:00:00")!)))).message
        #expect(cap.hasPrefix("adapter 00:AA:01:00:00:00 still refuses every wearable's connection after 2 power cycle(s) in a row ([Connection] WedgePowerCycles = 2): no more"), "\(cap)")
        #expect(cap.contains("CAP_NET_ADMIN") && cap.contains("btmgmt"))
    }

    @Test("a missing characteristic names it and the way out, once")
    func characteristicMissing() {
        let e = JournalEntry(Report(kind: .characteristicMissing, device: watch, name: "Watch", to: .state(.connected),
                                    reason: .missingCharacteristics(["00002a37-0000-1000-8000-00805f9b34fb"])))
        #expect(e.message.hasPrefix("Watch (00:AA:01:01:00:01): no characteristic 00002a37-0000-1000-8000-00805f9b34fb on its link"))
        #expect(e.message.contains("`pairctl unpair` and `pairctl pair`"))
        #expect(e.fields.first { $0.key == "PAIRD_EVENT" }?.value == "characteristicMissing")
    }
}
