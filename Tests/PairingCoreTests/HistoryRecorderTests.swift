#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import PairingCore
import Testing

/// The availability record's recorder, fed as the daemon feeds it (`Observation.before(_:)`,
/// `Observation.after(_:)`) from the real machine's actions.
@Suite("HistoryRecorder: events → records")
struct HistoryRecorderTests {
    let watch = Harness.watch
    let epoch = 1_800_000_000.0

    /// The harness and a recorder fed from it.
    struct Recording {
        var h: Harness
        var recorder = HistoryRecorder()
        var records: [HistoryRecord] = []

        mutating func send(_ e: Event) {
            if let i = Observation.before(e) { records += recorder.handle(i, now: h.now, facts: h.machine) }
            for a in h.send(e) { if let i = Observation.after(a) { records += recorder.handle(i, now: h.now, facts: h.machine) } }
        }

        mutating func input(_ i: Observation) { records += recorder.handle(i, now: h.now, facts: h.machine) }

        mutating func linkComesUp(_ a: DeviceAddress) {
            send(.linkUp(a)); send(.servicesResolved(a)); send(.setUpLinkFinished(a, failure: nil))
        }
    }

    func connectedAt10() -> Recording {
        var r = Recording(h: Harness(state: PersistedState(devices: [
            PersistedDevice(identity: DeviceIdentity(address: watch, name: "Watch", adapter: "hci0", serviceUUIDs: [ServiceUUID.heartRate]),
                            wanted: .connected, pairedAt: 0, updatedAt: 0),
        ])))
        r.input(.pairdStarted)
        r.h.advance(.seconds(10))
        r.send(.adapterReady([watch: BlueZDeviceView(connected: true, servicesResolved: true)]))
        r.send(.linkProven(watch))
        r.send(.setUpLinkFinished(watch, failure: nil))
        return r
    }

    @Test("start, adoption, link loss, time away, reconnect with its latency: exact records")
    func linkLossAndReconnect() {
        var r = connectedAt10()
        r.h.advance(.seconds(100))                               // t = 110: connected 100 s
        r.send(.linkDown(watch, linkLoss))
        r.h.advance(.seconds(30))                                // t = 140: the link comes up
        r.send(.linkUp(watch))
        r.h.advance(.milliseconds(1500))                         // t = 141.5: set up
        r.send(.servicesResolved(watch))
        r.send(.setUpLinkFinished(watch, failure: nil))
        #expect(r.records == [
            HistoryRecord(kind: .start, at: epoch),
            HistoryRecord(kind: .change, at: epoch + 10, device: watch.description, name: "Watch", condition: .down, reason: "paird-start"),
            HistoryRecord(kind: .up, at: epoch + 10, device: watch.description, name: "Watch"),
            HistoryRecord(kind: .down, at: epoch + 110, device: watch.description, name: "Watch", condition: .away,
                          reason: "link-loss", lasted: 100),
            HistoryRecord(kind: .up, at: epoch + 141.5, device: watch.description, name: "Watch", latency: 1.5, away: 31.5),
        ])
    }

    @Test("a reason BlueZ gives (≥ 5.83) is the drop's detail; a health remake is a link loss too")
    func detail() {
        var r = connectedAt10()
        r.send(.linkDown(watch, DisconnectClassifier.Evidence(reason: .timeout)))
        #expect(r.records.last?.kind == .down)
        #expect(r.records.last?.reason == "link-loss")
        #expect(r.records.last?.detail == "timeout")
    }

    @Test("the user's disconnect and connect: unwanted, then wanted and connecting; no drop counted as a loss")
    func userDisconnect() {
        var r = connectedAt10()
        r.h.advance(.seconds(5))
        r.send(.userDisconnect(watch))
        #expect(r.records.last == HistoryRecord(kind: .down, at: epoch + 15, device: watch.description, name: "Watch",
                                                condition: .unwanted, reason: "user", lasted: 5))
        r.h.advance(.seconds(5))
        r.send(.userConnect(watch))
        #expect(r.records.last == HistoryRecord(kind: .change, at: epoch + 20, device: watch.description, name: "Watch",
                                                condition: .away, reason: "connecting"))
        r.h.advance(.seconds(2))
        r.linkComesUp(watch)
        #expect(r.records.last == HistoryRecord(kind: .up, at: epoch + 22, device: watch.description, name: "Watch"),
                "no latency: the last drop was the user's")
    }

    @Test("bluetoothd leaving takes the link: down as bluetoothd-gone, then the crash systemd reports names it")
    func bluetoothdCrash() {
        var r = connectedAt10()
        r.h.advance(.seconds(1))
        r.send(.bluetoothdLeft)
        r.send(.adapterLost)
        #expect(r.records.last?.kind == .down)
        #expect(r.records.last?.condition == .down)
        #expect(r.records.last?.reason == "bluetoothd-gone")
        r.h.advance(.milliseconds(250))
        r.send(.bluetoothdUnit(BluetoothdUnitState(activeState: "failed", result: "core-dump", execMainCode: 3, execMainStatus: 11, execMainStart: 100)))
        #expect(r.records.last == HistoryRecord(kind: .reason, at: epoch + 11.25, device: watch.description, name: "Watch", reason: "bluetoothd-crash"))
        let count = r.records.count
        r.send(.bluetoothdBack)
        r.h.advance(.seconds(2))
        r.send(.adapterReady([watch: BlueZDeviceView(connected: false)]))
        #expect(r.records.count == count, "waiting for the link again is the same outage")
        r.h.advance(.seconds(3))
        r.linkComesUp(watch)
        #expect(r.records.last?.kind == .up)
        #expect(r.records.last?.away == 5.25, "from the drop at 11 s to the link set up at 16.25 s")
        #expect(r.records.last?.latency == 0, "the link came up and was set up at once (no time passed in between)")
    }

    @Test("bluetoothd dying while the host is asleep: the whole sleep is still left out; from the resume it is down, bluetoothd's")
    func bluetoothdCrashAsleep() {
        // Seen on Debian 12's 6.1 kernel: the suspend ends a link being set up and the kernel
        // oopses bluetoothd (hci_chan_del) two seconds into the sleep.
        var r = connectedAt10()
        let start = r.records.first!.at
        r.h.advance(.seconds(6))
        r.send(.hostSleeping)
        #expect(r.records.last?.condition == .unwanted && r.records.last?.reason == "host-asleep")
        let count = r.records.count
        r.h.advance(.seconds(2))
        r.send(.bluetoothdLeft)
        r.send(.adapterLost)
        r.h.advance(.milliseconds(500))
        r.send(.bluetoothdUnit(BluetoothdUnitState(activeState: "failed", result: "core-dump", execMainCode: 3, execMainStatus: 11, execMainStart: 100)))
        r.send(.bluetoothdBack)
        r.h.advance(.seconds(2))
        r.send(.adapterReady([watch: BlueZDeviceView(connected: false)]))
        #expect(r.records.count == count, "nothing written while asleep: \(r.records.suffix(from: count))")
        r.h.advance(.seconds(4))
        r.send(.hostResumed)
        #expect(r.records.last == HistoryRecord(kind: .change, at: r.h.now.unixTime, device: watch.description, name: "Watch",
                                                condition: .down, reason: "bluetoothd-crash"))
        r.h.advance(.seconds(3))
        r.linkComesUp(watch)
        let a = HistoryAnalysis.analyse(r.records, device: watch.description, since: start, until: r.h.now.unixTime)
        #expect(a.asleepSeconds == 8.5, "the sleep from its start to the resume: \(a.asleepSeconds)")
        #expect(a.downSeconds == 3)
    }

    @Test("the adapter going without bluetoothd leaving is adapter-gone; a lost bond is bond-lost with paird's reason")
    func adapterAndBond() {
        var r = connectedAt10()
        r.send(.adapterLost)
        #expect(r.records.last?.reason == "adapter-gone")
        var b = connectedAt10()
        b.send(.linkDown(watch, DisconnectClassifier.Evidence(stillBonded: false)))
        #expect(b.records.last?.kind == .down)
        #expect(b.records.last?.reason == "bond-lost")
        #expect(b.records.last?.detail == "bond-removed")
    }

    @Test("paird starting while the wearable is away: down while restoring, then away (not down) until it returns")
    func awayAtStart() {
        var r = Recording(h: Harness(state: PersistedState(devices: [
            PersistedDevice(identity: DeviceIdentity(address: watch, name: "Watch", adapter: "hci0", serviceUUIDs: [ServiceUUID.heartRate]),
                            wanted: .connected, pairedAt: 0, updatedAt: 0),
        ])))
        r.input(.pairdStarted)
        r.h.advance(.seconds(1))
        r.send(.adapterReady([watch: BlueZDeviceView(connected: false)]))
        #expect(r.records.map(\.reason) == [nil, "away-at-start"], "\(r.records)")
        #expect(r.records.last?.condition == .away)
        r.h.advance(.seconds(60))
        r.linkComesUp(watch)
        #expect(r.records.last?.kind == .up)
        #expect(r.records.last?.away == nil, "no drop of this paird's: the time away is the analysis's gap")
    }

    @Test("battery: recorded only on change, and not again after a restart with the same level (no step, no interval)")
    func battery() {
        var rec = HistoryRecorder(batteryLimit: .init(step: 1, interval: .zero))
        let a = watch
        #expect(rec.handle(.battery(a, level: 80), now: .at(1), facts: AwakeHost()).map(\.level) == [80])
        #expect(rec.handle(.battery(a, level: 80), now: .at(2), facts: AwakeHost()).isEmpty)
        #expect(rec.handle(.battery(a, level: 79), now: .at(3), facts: AwakeHost()).map(\.level) == [79])
        var again = HistoryRecorder(earlier: [HistoryRecord(kind: .battery, at: 0, device: a.description, level: 79)])
        #expect(again.handle(.battery(a, level: 79), now: .at(4), facts: AwakeHost()).isEmpty)
    }

    @Test("unpair: the interval ends as unwanted (unpaired) and the device is forgotten")
    func unpair() {
        var r = connectedAt10()
        r.send(.userUnpair(watch))
        #expect(r.records.last?.kind == .down)
        #expect(r.records.last?.condition == .unwanted)
        #expect(r.records.last?.reason == "unpaired")
    }

    @Test("the fast reader agrees with JSONDecoder on what paird writes, and refuses every torn prefix of a line")
    func fastReader() throws {
        let samples = [
            HistoryRecord(kind: .start, at: 1_800_000_000),
            HistoryRecord(kind: .up, at: 1_764_173_129.037, device: "00:AA:01:01:00:01", name: "Watch", latency: 0.25, away: 3601.5),
            HistoryRecord(kind: .down, at: 1_764_173_129.999, device: "00:AA:01:01:00:01", name: "Polar H10 \"7E\" / ✓ 心拍",
                          condition: .away, reason: "link-loss", detail: "timeout", lasted: 86400.001),
            HistoryRecord(kind: .change, at: 951_782_400.5, device: "C0:FF:EE:00:00:02", name: "tab\there", condition: .down, reason: "bond-lost",
                          detail: "suspected-bond-loss"),
            HistoryRecord(kind: .battery, at: 4_102_444_799.1, device: "C0:FF:EE:00:00:02", level: 7),
            HistoryRecord(kind: .reason, at: 1_709_164_800.2, device: "C0:FF:EE:00:00:02", reason: "bluetoothd-crash"),
        ]
        for r in samples {
            let line = Array(r.line.utf8)
            let slow = try JSONDecoder().decode(HistoryRecord.self, from: Data(line))
            let fast = try #require(HistoryRecord.parse(line: line), "\(r.line)")
            // Without an escape in it (a name with a quote has one), JSONDecoder is not needed.
            #expect((HistoryRecord.fastParse(line[...]) == nil) == r.line.contains("\\"), "\(r.line)")
            #expect(abs(fast.at - slow.at) < 1e-6, "\(r.line)")
            var f = fast, s = slow
            f.at = 0; s.at = 0
            #expect(f == s, "\(r.line)")
            #expect(abs(fast.at - r.at) < 0.0015, "milliseconds kept: \(r.line)")
            for n in 1..<line.count {
                #expect(HistoryRecord.fastParse(line.prefix(n)) == nil, "a torn prefix of \(n) bytes: \(r.line)")
                #expect(HistoryRecord.parse(line: line.prefix(n)) == nil, "a torn prefix of \(n) bytes: \(r.line)")
            }
        }
        let edited = Array(#"{ "type": "up", "at": "2026-11-26T17:05:29+01:00", "device": "00:AA:01:01:00:01" }"#.utf8)
        #expect(HistoryRecord.fastParse(edited[...]) == nil)
        #expect(HistoryRecord.parse(line: edited)?.at == 1_795_709_129, "another form of time: JSONDecoder reads it")
        let long = Array(#"{"at":"2026-11-26T16:05:29.000Z","lasted":1234567890.1234567,"type":"down"}"#.utf8)
        #expect(HistoryRecord.fastParse(long[...]) == nil, "more digits than a Double holds exactly: JSONDecoder's")
        #expect(HistoryRecord.parse(line: long)?.lasted == 1234567890.1234567)
    }

    @Test("records read back as they were written (JSON line, RFC 3339 with milliseconds)")
    func line() {
        let rec = HistoryRecord(kind: .down, at: 1_800_000_000.125, device: "00:AA:01:01:00:01", name: "W \"x\"",
                                condition: .away, reason: "link-loss", detail: "timeout", lasted: 12.5)
        #expect(rec.line == #"{"at":"2027-01-15T08:00:00.125Z","condition":"away","detail":"timeout","device":"00:AA:01:01:00:01","lasted":12.5,"name":"W \"x\"","reason":"link-loss","type":"down"}"#)
        #expect(HistoryRecord.parse(line: Array(rec.line.utf8)) == rec)
        #expect(HistoryRecord.parse(line: Array(rec.line.utf8.dropLast(9))) == nil, "a torn line is none")
    }

    @Test("bluetoothd stopping cleanly: the link drops 3.3 s before the adapter, and bluetoothd leaves after: one drop, bluetoothd's")
    func stopDropsLinksFirst() {
        var r = connectedAt10()
        r.h.advance(.seconds(100))                               // t = 110
        r.send(.linkDown(watch, linkLoss))                       // Connected=false, no reason (5.66)
        r.h.advance(.milliseconds(3300))                         // t = 113.3: Powered=false
        r.send(.adapterLost)
        r.h.advance(.milliseconds(200))                          // t = 113.5: org.bluez leaves the bus
        r.send(.bluetoothdLeft)
        let w = watch.description
        #expect(Array(r.records.suffix(4)) == [
            HistoryRecord(kind: .down, at: epoch + 110, device: w, name: "Watch", condition: .away, reason: "link-loss", lasted: 100),
            HistoryRecord(kind: .reason, at: epoch + 113.3, device: w, name: "Watch", reason: "adapter-gone"),
            HistoryRecord(kind: .change, at: epoch + 113.3, device: w, name: "Watch", condition: .down, reason: "adapter-gone"),
            HistoryRecord(kind: .reason, at: epoch + 113.5, device: w, name: "Watch", reason: "bluetoothd-gone"),
        ])
        let drops = HistoryAnalysis.analyse(r.records, device: w, since: epoch, until: epoch + 200).drops
        #expect(drops.map(\.reason) == ["bluetoothd-gone"])
        // The status says so too.
        #expect(r.h.machine.device(watch)?.lastDisconnect?.reason.token == "adapter-gone")
    }

    @Test("a link lost longer than the cause window before the adapter went stays the wearable's")
    func linkLossLongBeforeAdapter() {
        var r = connectedAt10()
        r.send(.linkDown(watch, linkLoss))
        r.h.advance(.seconds(11))
        r.send(.adapterLost)
        let w = watch.description
        #expect(Array(r.records.suffix(2)) == [
            HistoryRecord(kind: .down, at: epoch + 10, device: w, name: "Watch", condition: .away, reason: "link-loss", lasted: 0),
            HistoryRecord(kind: .change, at: epoch + 21, device: w, name: "Watch", condition: .down, reason: "adapter-gone"),
        ])
        #expect(r.h.machine.device(watch)?.lastDisconnect?.reason.token == "link-loss")
    }
}
