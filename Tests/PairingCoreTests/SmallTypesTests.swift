import Testing
import Foundation
import PairingCore

@Suite("BlueZ errors, classifier, backoff, addresses")
struct SmallTypesTests {
    @Test("every BlueZ error of bluez-notes §2 maps to what the classifier needs", arguments: [
        ("org.bluez.Error.Failed", "le-connection-abort-by-local", BlueZFailure.abortedByLocal),
        ("org.bluez.Error.Failed", "Software caused connection abort", .abortedByLocal),
        ("org.bluez.Error.Failed", "le-connection-abort-by-remote", .abortedByRemote),
        ("org.bluez.Error.Failed", "le-connection-refused", .abortedByRemote),
        ("org.bluez.Error.Failed", "le-connection-link-layer-protocol-error", .abortedByRemote),
        ("org.bluez.Error.Failed", "le-connection-timeout", .connectTimeout),
        ("org.bluez.Error.Failed", "br-connection-page-timeout", .connectTimeout),
        ("org.bluez.Error.Failed", "le-connection-busy", .busy),
        ("org.bluez.Error.Failed", "Operation already in progress", .busy),
        ("org.bluez.Error.Failed", "le-connection-already-connected", .busy),
        ("org.bluez.Error.Failed", "br-connection-canceled", .canceled),
        ("org.bluez.Error.Failed", "le-connection-adapter-not-powered", .adapterUnavailable),
        ("org.bluez.Error.Failed", "le-connection-key-missing", .authentication),
        ("org.bluez.Error.Failed", "Not connected", .notConnected),
        ("org.bluez.Error.Failed", "Input/output error", .other(name: "org.bluez.Error.Failed", message: "Input/output error")),
        ("org.bluez.Error.InProgress", "In Progress", .busy),
        ("org.bluez.Error.NotReady", "Resource Not Ready", .adapterUnavailable),
        ("org.freedesktop.DBus.Error.ServiceUnknown", "The name org.bluez was not provided", .adapterUnavailable),
        ("org.bluez.Error.AuthenticationFailed", "Authentication Failed", .authentication),
        ("org.bluez.Error.AuthenticationRejected", "Authentication Rejected", .authentication),
        ("org.bluez.Error.NotPermitted", "Not paired", .authentication),
        ("org.bluez.Error.AuthenticationCanceled", "Authentication Canceled", .authenticationAborted),
        ("org.bluez.Error.AuthenticationTimeout", "Authentication Timeout", .authenticationAborted),
        ("org.bluez.Error.ConnectionAttemptFailed", "Page Timeout", .connectTimeout),
        ("org.bluez.Error.AlreadyExists", "Already Paired", .alreadyExists),
        ("org.bluez.Error.DoesNotExist", "Does Not Exist", .deviceGone),
        ("org.freedesktop.DBus.Error.UnknownObject", "Method \"Connect\" doesn't exist", .deviceGone),
        ("org.bluez.Error.NotConnected", "Not Connected", .notConnected),
        ("org.bluez.Error.AlreadyConnected", "Already Connected", .busy),
        ("org.freedesktop.DBus.Error.NoReply", "Did not receive a reply", .noReply),
        ("org.bluez.Error.NotSupported", "Operation is not supported", .other(name: "org.bluez.Error.NotSupported", message: "Operation is not supported")),
    ])
    func errorMapping(name: String, message: String, expected: BlueZFailure) {
        #expect(BlueZFailure(errorName: name, message: message) == expected)
    }

    @Test("rfkill: Powered = true refused with org.bluez.Error.Blocked is told apart; nothing else is")
    func rfkillBlocked() {
        #expect(BlueZFailure(errorName: "org.bluez.Error.Blocked", message: "Blocked through rfkill").rfkillBlocked)
        #expect(!BlueZFailure(errorName: "org.bluez.Error.Failed", message: "Failed").rfkillBlocked)
        #expect(!BlueZFailure.adapterUnavailable.rfkillBlocked)
    }

    @Test("connect failures: elapsed time separates 'away' from 'hiccup'")
    func connectClassifier() {
        let absent = Duration.seconds(20)
        #expect(ConnectFailureClassifier.classify(.abortedByLocal, elapsed: .seconds(40), absentAfter: absent) == .deviceAbsent)
        #expect(ConnectFailureClassifier.classify(.abortedByLocal, elapsed: .milliseconds(30), absentAfter: absent) == .transient)
        #expect(ConnectFailureClassifier.classify(.noReply, elapsed: .seconds(45), absentAfter: absent) == .deviceAbsent)
        #expect(ConnectFailureClassifier.classify(.busy, elapsed: .seconds(45), absentAfter: absent) == .transient)
        #expect(ConnectFailureClassifier.classify(.authentication, elapsed: .zero, absentAfter: absent) == .bondLost)
        #expect(ConnectFailureClassifier.classify(.deviceGone, elapsed: .zero, absentAfter: absent) == .bondLost)
        #expect(ConnectFailureClassifier.classify(.adapterUnavailable, elapsed: .zero, absentAfter: absent) == .adapterGone)
    }

    /// The journal's PAIRD_REASON and the NeedsRepair D-Bus error carry these words: scripts read them.
    @Test("repair reasons keep their words")
    func repairReasonTokens() {
        #expect(RepairReason.allCases.map(\.token) ==
                ["device-removed", "bond-removed", "authentication", "device-gone", "suspected-bond-loss", "bluetoothd-crashed", "bond-lost-in-crash",
                 "bluetoothd-died-on-link"])
        #expect(RepairReason(bondFailure: .authentication) == .authentication)
        #expect(RepairReason(bondFailure: .deviceGone) == .deviceGone)
    }

    @Test("disconnect classifier: evidence order")
    func disconnectClassifier() {
        typealias C = DisconnectClassifier
        #expect(C.classify(.init(), weAskedForIt: false) == .linkLoss(reason: nil))
        #expect(C.classify(.init(), weAskedForIt: true) == .requested)
        #expect(C.classify(.init(reason: .timeout), weAskedForIt: false) == .linkLoss(reason: .timeout))
        #expect(C.classify(.init(reason: .authentication), weAskedForIt: true) == .bondLost(reason: .authentication))
        #expect(C.classify(.init(stillBonded: false), weAskedForIt: true) == .bondLost(reason: .bondRemoved))
        #expect(C.classify(.init(deviceExists: false), weAskedForIt: false) == .bondLost(reason: .deviceRemoved))
        #expect(C.classify(.init(stillBonded: false, adapterUp: false), weAskedForIt: false) == .adapterGone)
        #expect(C.Reason(name: "org.bluez.Reason.Future") == .unknown)
    }

    @Test("backoff grows to its cap and stays inside the jitter band")
    func backoff() {
        let b = Backoff(initial: .seconds(1), maximum: .seconds(60), multiplier: 2, jitter: 0.2)
        var rng = SplitMix64(seed: 42)
        for attempt in 1...40 {
            let base = min(pow(2, Double(attempt - 1)), 60)
            let d = b.delay(attempt: attempt, unit: rng.nextUnit()).seconds
            #expect(d >= base * 0.8 - 1e-9 && d <= base * 1.2 + 1e-9, "attempt \(attempt): \(d)")
        }
        #expect(b.delay(attempt: 1, unit: 0).seconds == 0.8)
        #expect(b.delay(attempt: 1_000_000, unit: 0.5).seconds == 60)
    }

    @Test("addresses parse in either case, print upper case, round-trip object paths")
    func addresses() throws {
        let a = try #require(DeviceAddress("c0:ff:ee:00:00:0a"))
        #expect(a.description == "C0:FF:EE:00:00:0A")
        #expect(a.pathComponent == "dev_C0_FF_EE_00_00_0A")
        #expect(DeviceAddress(objectPath: "/org/bluez/hci0/dev_C0_FF_EE_00_00_0A") == a)
        for bad in ["", "C0:FF:EE:00:00", "C0:FF:EE:00:00:0G", "C0-FF-EE-00-00-0A", "C0:FF:EE:00:00:0A:", "hello world 17ch"] {
            #expect(DeviceAddress(bad) == nil, "\(bad)")
        }
        #expect(DeviceAddress(objectPath: "/org/bluez/hci0/dev_C0_FF_EE_00_00_0A/service0010") == nil)
    }

    @Test("service UUIDs: short forms expand against the base UUID; junk is refused")
    func uuids() {
        #expect(ServiceUUID.normalize("180d") == ServiceUUID.heartRate)
        #expect(ServiceUUID.normalize("0x180D") == ServiceUUID.heartRate)
        #expect(ServiceUUID.normalize("0000180D-0000-1000-8000-00805F9B34FB") == ServiceUUID.heartRate)
        for bad in ["", "18", "xyz1", "0000180d-0000-1000-8000-00805f9b34f", "0000180d_0000-1000-8000-00805f9b34fb"] {
            #expect(ServiceUUID.normalize(bad) == nil, "\(bad)")
        }
    }
}

@Suite("The state file document")
struct PersistedStateTests {
    let sample = PersistedState(devices: [
        PersistedDevice(identity: DeviceIdentity(address: Harness.watch, addressType: .random, name: "Watch \"7\" ✓",
                                                 adapter: "hci0", serviceUUIDs: [ServiceUUID.heartRate]),
                        wanted: .connected, pairedAt: 1_800_000_000, updatedAt: 1_800_000_100),
        PersistedDevice(identity: DeviceIdentity(address: Harness.ring), wanted: .disconnected, pairedAt: 1_800_000_000, updatedAt: 1_800_000_000),
    ])

    @Test("round-trips exactly")
    func roundTrip() throws {
        let data = sample.encoded()
        #expect(try PersistedState.decode(data) == sample)
        let text = String(decoding: data, as: UTF8.self)
        #expect(text.contains("\"version\" : 1"))
        #expect(text.contains("\"address\" : \"00:AA:01:01:00:01\""))
        #expect(text.contains("2027-01-15T08:00:00Z"))
        #expect(text.hasSuffix("}\n"))
    }

    @Test("the machine's own document round-trips through restoration")
    func machineRoundTrip() throws {
        let m = PairingMachine(restoring: sample, now: .at(0))
        #expect(try PersistedState.decode(m.persistedState().encoded()) == sample)
    }

    @Test("the adapter's address is remembered at first sight (written once), follows its kernel name, and survives a restart; a file without it reads as unknown")
    func adapters() throws {
        var h = Harness(state: sample)
        let a = DeviceAddress("00:AA:01:00:00:00")!
        #expect(h.send(.adapterIdentified(configured: "hci0", address: a, name: "hci0")) == [.persist])
        #expect(h.send(.adapterIdentified(configured: "hci0", address: a, name: "hci0")).isEmpty, "known: nothing to write")
        #expect(h.send(.adapterIdentified(configured: "hci0", address: a, name: "hci2")) == [.persist], "renumbered: the name follows")
        let doc = h.machine.persistedState()
        #expect(doc.adapters?.map { "\($0.configured)=\($0.address) \($0.name)" } == ["hci0=00:AA:01:00:00:00 hci2"])
        let decoded = try PersistedState.decode(doc.encoded())
        #expect(decoded == doc)
        #expect(PairingMachine(restoring: decoded, now: .at(9)).adapters == doc.adapters)
        #expect(try PersistedState.decode(sample.encoded()).adapters == nil)
        #expect(!String(decoding: sample.encoded(), as: UTF8.self).contains("adapters"), "not written while unknown")
    }

    @Test("garbage is refused with a typed error", arguments: [
        ("", StateFileError.empty),
        ("{\"version\":1,\"devices\":[", nil),
        ("not json at all", nil),
        ("[1,2,3]", nil),
        ("{\"version\":99,\"devices\":[]}", .futureVersion(99)),
        ("{\"version\":0,\"devices\":[]}", .unsupportedVersion(0)),
        ("{\"version\":1}", nil),
        ("{\"version\":1,\"devices\":[{\"address\":\"nope\"}]}", nil),
    ] as [(String, StateFileError?)])
    func garbage(text: String, expected: StateFileError?) {
        #expect(throws: StateFileError.self) { try PersistedState.decode(Data(text.utf8)) }
        if let expected {
            #expect(throws: expected) { try PersistedState.decode(Data(text.utf8)) }
        }
    }

    @Test("every truncation of a valid file is refused, never half-read")
    func truncations() {
        let data = sample.encoded()
        for n in 0..<(data.count - 2) {
            #expect(throws: StateFileError.self) { try PersistedState.decode(data.prefix(n)) }
        }
    }

    @Test("oversized and duplicated content is refused")
    func oversizedAndDuplicates() {
        let big = Data(repeating: 0x20, count: PersistedState.maximumSize + 1)
        #expect(throws: StateFileError.tooLarge(bytes: big.count)) { try PersistedState.decode(big) }
        var dup = sample
        dup.devices.append(dup.devices[0])
        #expect(throws: StateFileError.self) { try PersistedState.decode(dup.encoded()) }
    }
}

@Suite("The status document")
struct StatusDocumentTests {
    @Test("round-trips through its JSON, and a status from a paird without autoConnect / nextDeadline still reads")
    func lenientDecoding() throws {
        let at = Date(timeIntervalSince1970: 1_790_000_000)
        let doc = StatusDocument(daemon: .init(running: true, version: "1"), adapter: nil, pairing: nil, devices: [
            .init(address: "C0:FF:EE:00:00:01", name: "Pulse", state: "waitingForDevice", wanted: "connected", since: at,
                  lastDisconnect: nil, reconnectAttempts: 0, battery: nil, services: [], autoConnect: true,
                  nextDeadline: at.addingTimeInterval(60)),
        ])
        #expect(try StatusDocument.decode(doc.json()) == doc)

        let old = """
            {"daemon": {"running": true}, "adapter": null, "pairing": null, "devices": [
              {"address": "C0:FF:EE:00:00:01", "name": "Pulse", "state": "connected", "wanted": "connected",
               "since": "2026-09-21T12:26:40Z", "lastDisconnect": null, "reconnectAttempts": 0,
               "battery": 87, "services": []}]}
            """
        let d = try #require(try StatusDocument.decode(old).devices.first)
        #expect(d.autoConnect == false)
        #expect(d.nextDeadline == nil)
        #expect(d.battery == 87)
    }
}
