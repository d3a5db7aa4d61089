import Testing
import PairingCore

/// Several wearables under one machine (issue 17, part 3): whatever happens to one — it walks
/// away, its bond is lost, it is unpaired or paired again — leaves the others' records and
/// countdowns alone; and one pairing runs at a time. (The e2e twin: Tests/e2e/paird_several.py.)
@Suite("Several wearables at once")
struct SeveralWearablesTests {
    static let strap = DeviceAddress("F3:5A:B1:00:00:01")!
    static let watch = DeviceAddress("F3:5A:B1:00:00:02")!
    static let ring = DeviceAddress("F3:5A:B1:00:00:03")!
    let hr = ServiceUUID.heartRate

    /// Strap, watch and ring paired, connected and settled.
    func threeConnected() -> Harness {
        let all = [Self.strap, Self.watch, Self.ring]
        var h = Harness(state: PersistedState(devices: all.enumerated().map { i, a in
            PersistedDevice(identity: DeviceIdentity(address: a, name: ["Pulse-1", "Watch-1", "Ring-1"][i], adapter: "hci0",
                                                     serviceUUIDs: [ServiceUUID.heartRate]),
                            wanted: .connected, pairedAt: 0, updatedAt: 0)
        }))
        h.send(.adapterReady(Dictionary(uniqueKeysWithValues: all.map { ($0, BlueZDeviceView(connected: true, servicesResolved: true)) })))
        for a in all {
            h.send(.linkProven(a))
            h.send(.setUpLinkFinished(a, failure: nil))
            precondition(h.state(a)?.isConnected == true)
        }
        return h
    }

    /// Runs `step` on `h`; the `others`' records stay exactly as they were, and no action of the
    /// step names one of them (the auto-connect list and the state file are shared: left out).
    func expectUndisturbed(_ h: inout Harness, _ subject: DeviceAddress, _ others: [DeviceAddress], _ what: Comment,
                           _ step: (inout Harness) -> [Action]) {
        let before = others.map { h.machine.devices[$0] }
        let actions = step(&h)
        // the match below does find a device's actions: the subject's own are there
        #expect(actions.contains { "\($0)".contains(subject.description) }, "\(what): no action names \(subject)")
        #expect(others.map { h.machine.devices[$0] } == before, what)
        let touching = actions.filter { a in
            if case .updateAutoConnect = a { return false }
            if case .persist = a { return false }
            return others.contains { "\(a)".contains($0.description) }
        }
        #expect(touching.isEmpty, "\(what): \(touching)")
    }

    @Test("the ring walks away and comes back: strap and watch untouched")
    func walkAway() {
        var h = threeConnected()
        expectUndisturbed(&h, Self.ring, [Self.strap, Self.watch], "the ring's link loss") { h in
            h.send(.linkDown(Self.ring, linkLoss))
        }
        #expect(h.stateName(Self.ring) == "waitingForDevice")
        h.advance(.seconds(5))
        expectUndisturbed(&h, Self.ring, [Self.strap, Self.watch], "the ring's return") { h in
            h.linkComesUp(Self.ring)
        }
        #expect(h.state(Self.ring)?.isConnected == true)
    }

    @Test("the strap loses its bond, is repaired by one pairing: watch and ring untouched")
    func bondLostAndRepaired() {
        var h = threeConnected()
        expectUndisturbed(&h, Self.strap, [Self.watch, Self.ring], "the strap's bond loss") { h in
            h.send(.linkDown(Self.strap, DisconnectClassifier.Evidence(stillBonded: false)))
        }
        #expect(h.stateName(Self.strap) == "needsRepair")
        expectUndisturbed(&h, Self.strap, [Self.watch, Self.ring], "pairing the strap again") { h in
            h.send(.userPair(PairRequest(address: Self.strap)))
                + h.send(.deviceRemoved(Self.strap))
                + h.send(.candidateFound(Candidate(address: Self.strap, name: "Pulse-1", rssi: -60, serviceUUIDs: [hr])))
                + h.send(.pairSucceeded(Self.strap, call: h.lastPairCall!))
                + h.linkComesUp(Self.strap)
        }
        #expect(h.state(Self.strap)?.isConnected == true)
        #expect(h.machine.pairing == nil)
    }

    @Test("the strap is unpaired, then paired again: watch and ring untouched")
    func unpairAndPairAgain() {
        var h = threeConnected()
        expectUndisturbed(&h, Self.strap, [Self.watch, Self.ring], "unpairing the strap") { h in
            h.send(.userUnpair(Self.strap)) + h.send(.deviceRemoved(Self.strap))
        }
        #expect(h.machine.devices[Self.strap] == nil)
        expectUndisturbed(&h, Self.strap, [Self.watch, Self.ring], "pairing the strap again") { h in
            h.send(.userPair(PairRequest(serviceUUIDs: [hr])))
                + h.send(.candidateFound(Candidate(address: Self.strap, name: "Pulse-1", rssi: -60, serviceUUIDs: [hr])))
                + h.send(.pairSucceeded(Self.strap, call: h.lastPairCall!))
                + h.linkComesUp(Self.strap)
        }
        #expect(h.state(Self.strap)?.isConnected == true)
    }

    @Test("a second pairing while one runs is refused (pairingBusy); the running one goes on")
    func onePairingAtATime() {
        var h = threeConnected()
        h.send(.userPair(PairRequest(nameContains: "Nobody-9")))
        let session = h.machine.pairing
        #expect(session != nil)
        let second = Event.userPair(PairRequest(nameContains: "Ring-1"))
        #expect(h.machine.refusal(of: second) == .pairingBusy)
        // Fed anyway (the runtime refuses first), it changes nothing.
        #expect(h.send(second) == [])
        #expect(h.machine.pairing == session)
        // The first one still ends normally, and then a pairing is taken again.
        h.send(.userCancelPairing)
        #expect(h.machine.pairing == nil)
        #expect(h.machine.refusal(of: second) == nil)
    }
}
