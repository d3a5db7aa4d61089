@testable import PairingCore
import Testing

/// A private address resolved to the wearable's identity (`Event.addressChanged`): every table of
/// the machine and of the observers that holds the old address follows it. Checked on the whole
/// state, by reflection, so that a table added later and forgotten in the re-key fails here:
/// - after the re-key, the old address appears nowhere (as a value, a key or an element);
/// - the new address appears exactly where the old one did before;
/// - the stored properties of every type walked are pinned: a new one fails `storedProperties`
///   until it is populated below (if it can hold an address) and its name added.
@Suite("Address re-key: the whole state follows a resolved address")
struct RekeyTests {
    let old = DeviceAddress("5A:11:22:33:44:55")!
    let new = DeviceAddress("F3:5A:B1:00:00:02")!

    /// The paths in `value` where `address` (or its text) appears. Unlabelled children
    /// (dictionary entries, array and set elements) are `[]`, so paths do not depend on order.
    static func paths(of address: DeviceAddress, in value: Any, at path: String = "") -> [String] {
        if let a = value as? DeviceAddress { return a == address ? [path] : [] }
        if let s = value as? String { return s == address.description ? [path] : [] }
        var out: [String] = []
        for child in Mirror(reflecting: value).children {
            out += paths(of: address, in: child.value, at: path + "." + (child.label ?? "[]"))
        }
        return out
    }

    static func labels(_ value: Any) -> [String] { Mirror(reflecting: value).children.map { $0.label ?? "?" } }

    /// A machine with `old` managed and connected, and every other table holding it too.
    func populatedMachine() -> Harness {
        var h = Harness(state: PersistedState(devices: [
            PersistedDevice(identity: DeviceIdentity(address: old, addressType: .random, name: "Watch-1", adapter: "hci0",
                                                     serviceUUIDs: [ServiceUUID.heartRate]),
                            wanted: .connected, pairedAt: 0, updatedAt: 0),
        ]))
        h.send(.adapterReady([old: BlueZDeviceView(connected: true, servicesResolved: true)]))
        h.send(.linkProven(old))
        h.send(.setUpLinkFinished(old, failure: nil))
        h.machine.abandonedPairs[old] = 9
        h.machine.leftoverPairs[old] = .at(1)
        h.machine.autoConnectArmed.insert(old)
        h.machine.bluetoothd.settingUpAtLoss = [old]
        h.machine.bluetoothd.attributedAtLoss = [old]
        h.machine.bluetoothd.linkedAtLoss = [old]
        h.machine.bluetoothd.probation = [old]
        h.machine.bluetoothd.onTrial = old
        h.machine.bluetoothd.lastCrash = BluetoothdCrash(
            at: .at(1), unit: BluetoothdUnitState(activeState: "failed", result: "core-dump"), action: "started again",
            attempt: 1, awaited: [old], backTimes: [old: .at(2)], disarmed: [old])
        var sleep = HostSleep(at: .at(1), awaited: [old], backTimes: [old: .at(2)])
        sleep.expected = [old]
        sleep.judged = [old]
        h.machine.host.lastSleep = sleep
        h.machine.host.lettingGo = [old]
        return h
    }

    @Test("the machine: no table keeps the old address, and the new one is where the old one was")
    func machine() {
        var h = populatedMachine()
        let before = Self.paths(of: old, in: h.machine).sorted()
        // The population reached every table it means to (else the check below proves nothing).
        for table in [".slot", ".slots", ".abandonedPairs", ".leftoverPairs", ".autoConnectArmed",
                      ".bluetoothd.settingUpAtLoss", ".bluetoothd.attributedAtLoss", ".bluetoothd.linkedAtLoss",
                      ".bluetoothd.probation", ".bluetoothd.onTrial", ".bluetoothd.lastCrash",
                      ".host.lastSleep.some.awaited", ".host.lastSleep.some.backTimes",
                      ".host.lastSleep.some.expected", ".host.lastSleep.some.judged", ".host.lettingGo"] {
            #expect(before.contains { $0.hasPrefix(table) }, "not populated: \(table)")
        }
        #expect(Self.paths(of: new, in: h.machine).isEmpty)
        h.send(.addressChanged(old, to: new, .random))
        #expect(Self.paths(of: old, in: h.machine) == [], "left with the old address")
        #expect(Self.paths(of: new, in: h.machine).sorted() == before)
    }

    @Test("the observers: the availability recorder's and the alerts' tables follow too")
    func observers() {
        var recorder = HistoryRecorder()
        var alerts = AlertDecider(config: AlertConfig())
        let h = populatedMachine()
        _ = recorder.handle(.pairdStarted, now: h.now, facts: h.machine)
        for a in h.log {
            if let i = Observation.after(a) { _ = recorder.handle(i, now: h.now, facts: h.machine) }
            if let i = Observation.after(a) { _ = alerts.handle(i, now: h.now, facts: h.machine) }
        }
        _ = recorder.handle(.battery(old, level: 50), now: h.now, facts: h.machine)
        _ = alerts.handle(.battery(old, level: 50), now: h.now, facts: h.machine)
        let (recorderBefore, alertsBefore) = (Self.paths(of: old, in: recorder).sorted(), Self.paths(of: old, in: alerts).sorted())
        for table in [".devices", ".battery", ".batteryAt"] {
            #expect(recorderBefore.contains { $0.hasPrefix(table) }, "recorder not populated: \(table)")
        }
        #expect(alertsBefore.contains { $0.hasPrefix(".devices") })
        _ = recorder.handle(.addressChanged(old, to: new), now: h.now, facts: h.machine)
        _ = alerts.handle(.addressChanged(old, to: new), now: h.now, facts: h.machine)
        #expect(Self.paths(of: old, in: recorder) == [] && Self.paths(of: old, in: alerts) == [])
        #expect(Self.paths(of: new, in: recorder).sorted() == recorderBefore)
        #expect(Self.paths(of: new, in: alerts).sorted() == alertsBefore)
    }

    /// A stored property added to one of these types fails here: if it can hold a wearable's
    /// address, re-key it (`PairingMachine.addressChanged`, the observers' `.addressChanged`),
    /// populate it in `populatedMachine` or `observers`, then add its name.
    @Test("the stored properties walked are the ones this test populates")
    func storedProperties() {
        let h = populatedMachine()
        #expect(Self.labels(h.machine) == [
            "config", "slots", "slot", "pairing", "abandonedPairs", "leftoverPairs", "adapterUp", "adapterInUse",
            "upAdapters", "autoConnectArmed", "bluetoothd", "host", "wedge", "powerOnRetries", "adapters", "connectReplyNanos",
            "discoveryNanos", "resolveNanos", "fallbackNanos", "headStartNanos", "generation", "rng",
        ])
        #expect(Self.labels(h.machine.bluetoothd) == [
            "phase", "goneSince", "starts", "lastStartAt", "backAt", "settingUpAtLoss", "attributedAtLoss",
            "linkedAtLoss", "crashedSinceReady", "leftSinceReady", "crashedRun", "lastCrash", "probation", "onTrial",
        ])
        #expect(Self.labels(h.machine.host) == ["asleep", "lastSleep", "powerCyclesInVain", "deadline", "lettingGo", "release"])
        #expect(Self.labels(h.machine.host.lastSleep!) == [
            "at", "resumedAt", "awaited", "backTimes", "expected", "judged", "steps", "poweredCycled",
        ])
        #expect(Self.labels(h.machine.bluetoothd.lastCrash!) == [
            "at", "unit", "action", "attempt", "backAt", "awaited", "backTimes", "disarmed",
        ])
        #expect(Self.labels(HistoryRecorder()) == ["devices", "battery", "batteryAt", "batteryLimit", "bluetoothdGone"])
        #expect(Self.labels(AlertDecider(config: AlertConfig())) == ["config", "devices"])
    }
}
