import Testing
import PairingCore

/// A wearable advertising a private address (RPA) is known by its identity once BlueZ resolved it.
@Suite("Private addresses")
struct IdentityTests {
    let rpa = DeviceAddress("5A:11:22:33:44:55")!
    let identity = DeviceAddress("F3:5A:B1:00:00:02")!
    let hr = ServiceUUID.heartRate

    @Test("pairing an RPA: the identity BlueZ reports while pairing is what is paired, stored and kept connected")
    func pairedByIdentity() {
        var h = Harness()
        h.send(.adapterReady([:]))
        h.send(.userPair(PairRequest(serviceUUIDs: [hr], answers: PairingAnswers(confirm: true))))
        h.send(.candidateFound(Candidate(address: rpa, addressType: .random, name: "Watch-1", rssi: -60, serviceUUIDs: [hr])))
        #expect(h.send(.agentAsked(rpa, request: 1, .confirmPasskey(7))).first == .answerAgent(request: 1, .accept))
        h.send(.addressChanged(rpa, to: identity, .random))
        let out = h.send(.pairSucceeded(identity, call: h.lastPairCall!))
        #expect(out.contains(.persist))
        #expect(h.machine.device(identity)?.identity.addressType == .random)
        #expect(h.machine.device(rpa) == nil)
        #expect(h.machine.persistedState().devices.map(\.address) == [identity])
        h.send(.connectSucceeded(identity, call: h.lastConnectCall[identity]!))
        h.send(.servicesResolved(identity))
        let done = h.send(.setUpLinkFinished(identity, failure: nil))
        #expect(done.pairingOutcome == .success(identity, name: "Watch-1"))
    }

    @Test("a managed device's address changing mid-countdown: the countdown moves with it, nothing is lost")
    func countdownMoves() {
        var h = Harness(state: PersistedState(devices: [
            PersistedDevice(identity: DeviceIdentity(address: rpa, addressType: .random, name: "Watch-1", serviceUUIDs: [hr]),
                            wanted: .connected, pairedAt: 0, updatedAt: 0),
        ]))
        h.send(.adapterReady([rpa: BlueZDeviceView(connected: false)]))
        guard let before = h.machine.device(rpa)?.state.countdown else { Issue.record("no countdown"); return }
        let out = h.send(.addressChanged(rpa, to: identity, .random))
        guard let after = h.machine.device(identity)?.state.countdown else { Issue.record("no countdown after"); return }
        #expect(out.contains(.cancel(before.id)) && out.contains(.arm(after)) && out.contains(.persist))
        #expect(after.deadline == before.deadline && after.id.owner == .device(identity))
        #expect(h.fireNext().contains { if case .connect(identity, _, _) = $0 { true } else { false } })
    }
}
