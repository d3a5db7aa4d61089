import Foundation
import Testing
@testable import Paird
@testable import PairCtlCommands
import PairingCore

/// `pairctl status` (text and JSON): when data last came, and the health countdown that runs.
@Suite("Status: link health")
struct HealthStatusTests {
    let watch = DeviceAddress("00:AA:01:01:00:01")!
    let hr = ServiceUUID.heartRateMeasurement

    func connected() -> PairingMachine {
        var config = MachineConfig()
        config.firstDataTimeout = .seconds(5)
        var m = PairingMachine(config: config, restoring: PersistedState(devices: [
            PersistedDevice(identity: DeviceIdentity(address: watch, name: "Strap", serviceUUIDs: [ServiceUUID.heartRate]),
                            wanted: .connected, pairedAt: 0, updatedAt: 0),
        ]), now: .at(0))
        _ = m.handle(.adapterReady([watch: BlueZDeviceView(connected: true, servicesResolved: true)]), now: .at(0))
        _ = m.handle(.setUpLinkFinished(watch, failure: nil), now: .at(0))
        return m
    }

    func wall(_ m: Moment) -> Date { Date(timeIntervalSince1970: m.unixTime) }

    @Test("awaiting the first data: the check, its deadline; no data yet")
    func firstData() throws {
        let m = connected()
        let doc = StatusDocument(machine: m, adapter: nil, configuredAdapter: "", now: .at(1))
        let d = try #require(doc.devices.first)
        #expect(d.health == .init(check: "firstData", characteristic: nil, deadline: wall(.at(5))))
        #expect(d.nextDeadline == wall(.at(5)))
        #expect(d.lastData == nil)
        let text = StatusText.render(doc, now: wall(.at(1)))
        #expect(text.contains("connected, since "))
        #expect(text.contains("awaiting the first notification (4.0 s left, then the link is made again)"), "\(text)")
        #expect(try StatusDocument.decode(doc.json()).devices == doc.devices, "round trip")
    }

    @Test("a periodic wearable: when data last came, and the silence watch's real due moment")
    func silence() throws {
        var m = connected()
        for k in 0...9 { _ = m.handle(.dataReceived(watch, characteristic: hr), now: .at(Double(k))) }
        let doc = StatusDocument(machine: m, adapter: nil, configuredAdapter: "", now: .at(10))
        let d = try #require(doc.devices.first)
        #expect(d.lastData == wall(.at(9)))
        #expect(d.health == .init(check: "silence", characteristic: hr, deadline: wall(.at(14))))
        let text = StatusText.render(doc, now: wall(.at(10)))
        #expect(text.contains("data 1.0 s ago,\n  watching 2a37 for silence (probed in 4.0 s unless it notifies)"), "items on lines of 100 columns: \(text)")
        // JSON keys present (null when none) for an older reader's sake.
        let json = doc.json()
        #expect(json.contains("\"lastData\"") && json.contains("\"health\""))
        #expect(try StatusDocument.decode(#"{"daemon":{"running":true},"devices":[{"address":"x","name":"","state":"connected","wanted":"connected","since":"2026-01-01T00:00:00Z","reconnectAttempts":0,"services":[]}]}"#).devices.first?.health == nil,
                "an older paird's status reads")
    }
}
