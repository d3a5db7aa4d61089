import Testing
import PairingCore

/// What a device BlueZ shows means to the machine (`events(forFound:_:)`): the choice the daemon
/// used to make by reading the machine's state itself.
@Suite("A device BlueZ shows, by the machine's state")
struct FoundDeviceTests {
    let watch = Harness.watch
    let ring = Harness.ring
    let hr = ServiceUUID.heartRate

    func candidate(_ a: DeviceAddress) -> Candidate { Candidate(address: a, name: "X", rssi: -60, serviceUUIDs: [ServiceUUID.heartRate]) }

    @Test("idle: a stranger's object means nothing; connected, it is a link up (a kept link after a crash)")
    func idle() {
        var h = Harness()
        h.send(.adapterReady([:]))
        #expect(h.machine.events(forFound: candidate(ring), BlueZDeviceView()) == [])
        #expect(h.machine.events(forFound: candidate(ring), BlueZDeviceView(bonded: true)) == [])
        #expect(h.machine.events(forFound: candidate(ring), BlueZDeviceView(connected: true)) == [.linkUp(ring)])
    }

    @Test("paird's own wearable: connected is no new link up; bonded again while it needs re-pairing is")
    func ownWearable() {
        var h = Harness.connected()
        #expect(h.machine.events(forFound: candidate(watch), BlueZDeviceView(bonded: true, connected: true)) == [])
        h.send(.bondLost(watch))
        #expect(h.machine.events(forFound: candidate(watch), BlueZDeviceView(bonded: false)) == [])
        #expect(h.machine.events(forFound: candidate(watch), BlueZDeviceView(bonded: true)) == [.bondedDeviceAppeared(watch)])
    }

    @Test("while a pairing scans every device is a candidate (a connected stranger a link up first); once it pairs, none")
    func scanning() {
        var h = Harness()
        h.send(.adapterReady([:]))
        h.send(.userPair(PairRequest(serviceUUIDs: [hr])))
        #expect(h.machine.events(forFound: candidate(watch), BlueZDeviceView()) == [.candidateFound(candidate(watch))])
        #expect(h.machine.events(forFound: candidate(ring), BlueZDeviceView(connected: true))
                == [.linkUp(ring), .candidateFound(candidate(ring))])
        h.send(.candidateFound(candidate(watch)))
        #expect(h.machine.events(forFound: candidate(ring), BlueZDeviceView()) == [], "Pair() in flight: no more candidates")
    }
}
