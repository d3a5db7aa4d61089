import Testing
import PairingCore

@Suite("Pairing a new wearable")
struct PairingScenarioTests {
    let watch = Harness.watch
    let hr = ServiceUUID.heartRate

    func readyHarness() -> Harness {
        var h = Harness()
        h.send(.adapterReady([:]))
        return h
    }

    @Test("scan by service, pair, trust, connect, resolve, subscribe: connected and persisted")
    func happyPath() {
        var h = readyHarness()
        var out = h.send(.userPair(PairRequest(serviceUUIDs: [hr])))
        #expect(out.contains(.startDiscovery(PairRequest(serviceUUIDs: [hr]))))
        #expect(out.armedPurposes == [.scan, .scanRestart])
        #expect(h.machine.pairing?.phase.name == "scanning")

        let candidate = Candidate(address: watch, name: "Watch", rssi: -54, serviceUUIDs: [hr])
        out = h.send(.candidateFound(candidate))
        #expect(out.contains(.stopDiscovery))
        #expect(out.contains(.pairingProgress(.found(candidate))))
        #expect(out.contains { if case .pair(watch, _, _) = $0 { true } else { false } })

        out = h.send(.pairSucceeded(watch, call: h.lastPairCall!))
        #expect(out.persists, "a new identity is written to the state file")
        #expect(out.contains(.setTrusted(watch, true)))
        #expect(out.connects(watch) == 1)
        #expect(out.contains(.updateAutoConnect([hr])))
        #expect(h.stateName(watch) == "connecting")
        #expect(h.machine.persistedState().devices.map(\.address) == [watch])

        out = h.connectSucceeded(watch)
        #expect(h.stateName(watch) == "discovering")
        out = h.send(.servicesResolved(watch))
        #expect(out.contains(.setUpLink(watch)))
        out = h.send(.setUpLinkFinished(watch, failure: nil))
        #expect(h.state(watch)?.isConnected == true)
        #expect(out.pairingOutcome == .success(watch, name: "Watch"))
        #expect(h.machine.pairing == nil)
        #expect(h.armed.isEmpty, "nothing left ticking once connected")
    }

    @Test("nothing matching before the scan timeout: no device found, discovery stopped")
    func scanTimeout() {
        var h = readyHarness()
        h.send(.userPair(PairRequest(serviceUUIDs: [hr], scanTimeout: .seconds(3))))
        // A device advertising something else does not match.
        h.send(.candidateFound(Candidate(address: Harness.ring, name: "Ring", rssi: -60, serviceUUIDs: [ServiceUUID.battery])))
        #expect(h.machine.pairing?.phase.name == "scanning")
        let out = h.fireNext()
        #expect(h.now == .at(3))
        #expect(out.contains(.stopDiscovery))
        #expect(out.pairingOutcome == .noDeviceFound)
        #expect(h.machine.devices.isEmpty)
    }

    @Test("a scan that finds nothing is stopped every 4 s and started again 300 ms later, until its timeout")
    func scanRestarts() {
        var h = readyHarness()
        let request = PairRequest(serviceUUIDs: [hr], scanTimeout: .seconds(10))
        h.send(.userPair(request))
        var out = h.fireNext()
        #expect(h.now == .at(4))
        #expect(out == [.arm(h.machine.pairing!.countdowns[1]), .stopDiscovery])
        out = h.fireNext()
        #expect(h.now == .at(4) + .milliseconds(300))
        #expect(out == [.arm(h.machine.pairing!.countdowns[1]), .restartDiscovery(request)])
        #expect(h.machine.pairing?.countdowns[1].deadline == .at(8) + .milliseconds(300))
        // A candidate found now ends the restarts with the scan: nothing of them is left armed.
        let candidate = Candidate(address: watch, name: "Watch", rssi: -60, serviceUUIDs: [hr])
        out = h.send(.candidateFound(candidate))
        #expect(out.armedPurposes == [.pair])
        #expect(h.armed.keys.map(\.purpose) == [.pair])
        #expect(!out.contains(.restartDiscovery(request)))
    }

    @Test("a scan ended while stopped for a restart leaves no restart behind")
    func scanTimeoutDuringRestart() {
        var h = readyHarness()
        h.send(.userPair(PairRequest(serviceUUIDs: [hr], scanTimeout: .seconds(4) + .milliseconds(100))))
        h.fireNext() // 4 s: stopped for a restart
        let out = h.fireNext() // 4.1 s: the scan's own timeout
        #expect(out.pairingOutcome == .noDeviceFound)
        #expect(h.armed.isEmpty)
        #expect(h.fireNext().isEmpty)
    }

    @Test("filters: address and name must match too", arguments: [
        (PairRequest(address: DeviceAddress("00:AA:01:01:00:01")), true),
        (PairRequest(address: DeviceAddress("00:AA:01:01:00:02")), false),
        (PairRequest(nameContains: "watch"), true),
        (PairRequest(nameContains: "ring"), false),
        (PairRequest(serviceUUIDs: [ServiceUUID.heartRate], nameContains: "Wat"), true),
    ])
    func filters(request: PairRequest, matches: Bool) {
        let c = Candidate(address: Harness.watch, name: "Watch", serviceUUIDs: [ServiceUUID.heartRate])
        #expect(request.matches(c) == matches)
    }

    @Test("authentication failure ends the session with a clear outcome and remembers nothing",
          arguments: [BlueZFailure.authentication, .authenticationAborted])
    func authenticationFailure(failure: BlueZFailure) {
        var h = readyHarness()
        h.send(.userPair(PairRequest(serviceUUIDs: [hr])))
        h.send(.candidateFound(Candidate(address: watch, rssi: -60, serviceUUIDs: [hr])))
        let out = h.send(.pairFailed(watch, call: h.lastPairCall!, failure))
        #expect(out.pairingOutcome == .authenticationFailed(failure.token))
        #expect(out.reports(.pairingFailed).count == 1)
        #expect(h.machine.devices.isEmpty)
        #expect(!out.persists)
    }

    @Test("Pair() that cannot reach a resolvable private address scans again for the new one, at most twice; other addresses and failures end the session")
    func privateAddressRotatedBeforePair() {
        let oldRPA = DeviceAddress("4A:9F:26:95:FB:D2")!, newRPA = DeviceAddress("73:F3:0C:82:E1:3F")!
        #expect(oldRPA.isResolvablePrivate && newRPA.isResolvablePrivate)
        #expect(!DeviceAddress("F3:5A:B1:00:00:02")!.isResolvablePrivate, "random static")
        #expect(!DeviceAddress("00:AA:01:01:00:02")!.isResolvablePrivate)
        var h = readyHarness()
        let request = PairRequest(nameContains: "Watch")
        h.send(.userPair(request))
        h.send(.candidateFound(Candidate(address: oldRPA, addressType: .random, name: "Watch-1", rssi: -60)))
        var out = h.send(.pairFailed(oldRPA, call: h.lastPairCall!, .connectTimeout))
        #expect(out.pairingOutcome == nil, "the session goes on")
        #expect(out.contains(.pairingProgress(.rescanning(oldRPA, reason: BlueZFailure.connectTimeout.token))))
        #expect(out.contains(.removeDevice(oldRPA)), "the old address's device object goes")
        #expect(out.contains(.startDiscovery(request)))
        #expect(out.armedPurposes == [.scan, .scanRestart])
        #expect(out.reports(.pairingFailed).isEmpty)
        #expect(h.machine.pairing?.phase.name == "scanning")
        // The new address is found and pairs.
        h.send(.candidateFound(Candidate(address: newRPA, addressType: .random, name: "Watch-1", rssi: -60)))
        out = h.send(.pairSucceeded(newRPA, call: h.lastPairCall!))
        #expect(out.persists)
        #expect(h.stateName(newRPA) == "connecting")

        // The address that failed is not tried again in the session (BlueZ may still list it, the
        // wearable may still advertise it a moment): a scan that finds no other address ends
        // with the failure, not with "no device found".
        var f = readyHarness()
        f.send(.userPair(request))
        f.send(.candidateFound(Candidate(address: oldRPA, addressType: .random, name: "Watch-1", rssi: -60)))
        f.send(.pairFailed(oldRPA, call: f.lastPairCall!, .deviceGone))
        out = f.send(.candidateFound(Candidate(address: oldRPA, addressType: .random, name: "Watch-1", rssi: -60)))
        #expect(!out.contains { if case .pair = $0 { true } else { false } }, "the unreachable address is not paired again")
        #expect(f.machine.pairing?.phase.name == "scanning")
        for _ in 0..<20 where f.machine.pairing != nil { out = f.fireNext() } // scan restarts, then the scan timeout
        #expect(out.pairingOutcome == .failed(BlueZFailure.deviceGone.token))

        // Addresses that keep failing: two rescans, then the failure ends the session.
        var g = readyHarness()
        g.send(.userPair(request))
        let rpas = ["4A:00:00:00:00:01", "4A:00:00:00:00:02", "4A:00:00:00:00:03"].map { DeviceAddress($0)! }
        for (n, (a, failure)) in zip(rpas, [BlueZFailure.deviceGone, .abortedByLocal, .connectTimeout]).enumerated() {
            g.send(.candidateFound(Candidate(address: a, addressType: .random, name: "Watch-1", rssi: -60)))
            out = g.send(.pairFailed(a, call: g.lastPairCall!, failure))
            #expect((out.pairingOutcome == nil) == (n + 1 <= PairingSession.maxRescans), "try \(n + 1)")
        }
        #expect(out.pairingOutcome == .failed(BlueZFailure.connectTimeout.token))
        #expect(g.machine.pairing == nil)

        // A static or public address does not rotate: the failure ends the session at once.
        for (a, type) in [(DeviceAddress("F3:5A:B1:00:00:02")!, AddressType.random), (watch, .public)] {
            var k = readyHarness()
            k.send(.userPair(request))
            k.send(.candidateFound(Candidate(address: a, addressType: type, name: "Watch-1", rssi: -60)))
            out = k.send(.pairFailed(a, call: k.lastPairCall!, .connectTimeout))
            #expect(out.pairingOutcome == .failed(BlueZFailure.connectTimeout.token), "\(a) \(type)")
        }
        // An authentication failure on a private address is the user's answer: no rescan.
        var e = readyHarness()
        e.send(.userPair(request))
        e.send(.candidateFound(Candidate(address: oldRPA, addressType: .random, name: "Watch-1", rssi: -60)))
        out = e.send(.pairFailed(oldRPA, call: e.lastPairCall!, .authentication))
        #expect(out.pairingOutcome == .authenticationFailed(BlueZFailure.authentication.token))
    }

    @Test("Pair answering AlreadyExists (bonded outside paird) counts as paired")
    func alreadyBonded() {
        var h = readyHarness()
        h.send(.userPair(PairRequest(address: watch)))
        h.send(.candidateFound(Candidate(address: watch, bonded: true)))
        let out = h.send(.pairFailed(watch, call: h.lastPairCall!, .alreadyExists))
        #expect(out.persists)
        #expect(h.stateName(watch) == "connecting")
    }

    @Test("Pair that never answers times out; settling that never connects times out but keeps the bond")
    func pairTimeouts() {
        var h = readyHarness()
        h.send(.userPair(PairRequest()))
        h.send(.candidateFound(Candidate(address: watch, rssi: -60)))
        var out = h.fireNext()
        #expect(out.pairingOutcome == .timedOut(phase: "pairing"))
        #expect(out.contains(.cancelPairing(watch)))

        h.send(.userPair(PairRequest()))
        h.send(.candidateFound(Candidate(address: watch, rssi: -60)))
        h.send(.pairSucceeded(watch, call: h.lastPairCall!))
        // The device's own countdown (connect reply) and the session's settle countdown are both armed.
        while h.machine.pairing != nil { out = h.fireNext() }
        #expect(out.pairingOutcome == .timedOut(phase: "connecting"))
        #expect(h.machine.devices[watch]?.wanted == .connected, "paired is paired: it stays managed")
    }

    @Test("pairing needs the adapter; a second request while one runs is not started")
    func pairingPreconditions() {
        var h = Harness()
        h.send(.adapterLost)
        #expect(h.send(.userPair(PairRequest())).pairingOutcome == .adapterUnavailable)
        h.send(.adapterReady([:]))
        h.send(.userPair(PairRequest()))
        #expect(h.send(.userPair(PairRequest(nameContains: "x"))).isEmpty)
        let out = h.send(.userCancelPairing)
        #expect(out.pairingOutcome == .canceled)
        #expect(out.contains(.stopDiscovery))
    }

    @Test("the adapter going away ends a pairing session: lost during it, not unavailable from the start")
    func adapterLossDuringPairing() {
        var h = readyHarness()
        h.send(.userPair(PairRequest()))
        let out = h.send(.adapterLost)
        #expect(out.pairingOutcome == .adapterLost)
        #expect(out.pairingOutcome?.succeeded == false)
        #expect(h.armed.isEmpty)
    }

    @Test("bluetoothd dies with the Pair() in flight (either order of the bus's news): the pairing's link and device are removed again from the next bluetoothd",
          arguments: [true, false])
    func crashDuringPair(lostFirst: Bool) {
        var h = readyHarness()
        h.send(.userPair(PairRequest(serviceUUIDs: [hr])))
        h.send(.candidateFound(Candidate(address: watch, rssi: -60, serviceUUIDs: [hr])))
        let call = h.lastPairCall!
        var out: [Action]
        if lostFirst {
            out = h.send(.bluetoothdLeft) + h.send(.adapterLost)
            #expect(out.pairingOutcome == .adapterLost)
            out = h.send(.pairFailed(watch, call: call, .noReply))
        } else {
            out = h.send(.pairFailed(watch, call: call, .noReply))
            #expect(out.pairingOutcome == .failed("no-reply"))
            out += h.send(.bluetoothdLeft) + h.send(.adapterLost)
        }
        #expect(out.contains(.removeDevice(watch)), "cleaned up at once too (sent to a bluetoothd going away)")
        h.send(.bluetoothdBack)
        #expect(h.machine.leftoverPairAddresses == [watch], "its view is asked for at the adapter's return")
        out = h.send(.adapterReady([watch: BlueZDeviceView(bonded: true, connected: true)]))
        #expect(Array(out.prefix(2)) == [.disconnect(watch), .removeDevice(watch)],
                "the kernel kept the link: the next bluetoothd's device goes, so the wearable advertises again")
        #expect(h.machine.devices.isEmpty)
        h.send(.adapterLost)
        #expect(!h.send(.adapterReady([watch: BlueZDeviceView(bonded: true, connected: true)])).contains(.removeDevice(watch)), "once")
        #expect(h.send(.linkUp(watch)).isEmpty, "once")
    }

    @Test("the next bluetoothd shows the kernel's kept link of an abandoned pairing only after its adapter: that link goes when it shows, once")
    func crashDuringPairLinkShownLate() {
        var h = readyHarness()
        h.send(.userPair(PairRequest(serviceUUIDs: [hr])))
        h.send(.candidateFound(Candidate(address: watch, rssi: -60, serviceUUIDs: [hr])))
        let call = h.lastPairCall!
        h.send(.bluetoothdLeft)
        h.send(.adapterLost)
        h.send(.pairFailed(watch, call: call, .noReply))
        h.send(.bluetoothdBack)
        var out = h.send(.adapterReady([watch: .absent]))
        #expect(!out.contains(.removeDevice(watch)) && !out.contains(.disconnect(watch)),
                "no object yet (the bond was never stored): nothing to remove, and nothing to wait on either")
        h.advance(.seconds(3))
        out = h.send(.linkUp(watch))
        #expect(out == [.disconnect(watch), .removeDevice(watch)], "its object appeared connected: it goes, so the wearable advertises again")
        #expect(h.machine.devices.isEmpty)
        #expect(h.send(.linkUp(watch)).isEmpty, "once")
        #expect(h.machine.leftoverPairAddresses.isEmpty)
    }

    @Test("a leftover's link is not dropped while a new pairing is at that address, nor after its window")
    func leftoverLinkSpared() {
        var h = readyHarness()
        h.send(.userPair(PairRequest(serviceUUIDs: [hr])))
        h.send(.candidateFound(Candidate(address: watch, rssi: -60, serviceUUIDs: [hr])))
        h.send(.bluetoothdLeft)
        h.send(.adapterLost)
        h.send(.pairFailed(watch, call: h.lastPairCall!, .noReply))
        h.send(.bluetoothdBack)
        h.send(.adapterReady([watch: .absent]))
        h.send(.userPair(PairRequest(serviceUUIDs: [hr])))
        h.send(.candidateFound(Candidate(address: watch, rssi: -60, serviceUUIDs: [hr])))
        #expect(!h.send(.linkUp(watch)).contains(.removeDevice(watch)), "the new pairing's own link")
        h.send(.userCancelPairing)
        h.advance(.seconds(121))
        #expect(!h.send(.linkUp(watch)).contains(.removeDevice(watch)), "past the window: someone else's link")
        #expect(h.machine.leftoverPairAddresses.isEmpty)
    }

    @Test("a Pair() without reply long before the adapter's next return leaves nothing for it")
    func staleLeftover() {
        var h = readyHarness()
        h.send(.userPair(PairRequest(serviceUUIDs: [hr])))
        h.send(.candidateFound(Candidate(address: watch, rssi: -60, serviceUUIDs: [hr])))
        h.send(.pairFailed(watch, call: h.lastPairCall!, .noReply))
        h.advance(.seconds(600))
        h.send(.adapterLost)
        #expect(!h.send(.adapterReady([:])).contains(.removeDevice(watch)))
    }

    @Test("a pairing that failed with Bluetooth up leaves nothing for the next adapter return")
    func failedPairNoLeftover() {
        var h = readyHarness()
        h.send(.userPair(PairRequest(serviceUUIDs: [hr])))
        h.send(.candidateFound(Candidate(address: watch, rssi: -60, serviceUUIDs: [hr])))
        let out = h.send(.pairFailed(watch, call: h.lastPairCall!, .authentication))
        #expect(out.contains(.removeDevice(watch)))
        h.send(.adapterLost)
        #expect(!h.send(.adapterReady([:])).contains(.removeDevice(watch)))
    }

    @Test("pairing an address that is already managed says so instead of pairing twice")
    func alreadyManaged() {
        var h = Harness.connected()
        let out = h.send(.userPair(PairRequest(address: watch)))
        #expect(out.pairingOutcome == .alreadyPaired(watch))
        #expect(h.state(watch)?.isConnected == true)
    }
}
