#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import PairingCore
import Testing

/// A bond belongs to the adapter it was made on (issue 32, part 3): paird records that adapter's
/// address at pairing, and a wearable whose bond is on another adapter than the one in use waits
/// for its own: never tried, never sent to needsRepair, never paired again by paird itself.
@Suite("A bond belongs to its adapter")
struct AdapterBondTests {
    let watch = Harness.watch
    let hr = ServiceUUID.heartRate
    static let adapterA = DeviceAddress("00:AA:01:00:00:00")!
    static let adapterB = DeviceAddress("00:AA:01:09:00:00")!

    func restored(bondOn: DeviceAddress?, wanted: Wanted = .connected) -> Harness {
        Harness(state: PersistedState(devices: [
            PersistedDevice(identity: DeviceIdentity(address: watch, name: "Watch", adapter: "", serviceUUIDs: [hr],
                                                     adapterAddress: bondOn),
                            wanted: wanted, pairedAt: 0, updatedAt: 0),
        ]))
    }

    @Test("paired on the adapter in use: its address is the bond's, written to the state file")
    func pairingRecordsTheAdapter() {
        var h = Harness()
        h.send(.adapterInUse(Self.adapterA))
        h.send(.adapterReady([:]))
        h.send(.userPair(PairRequest(serviceUUIDs: [hr])))
        h.send(.candidateFound(Candidate(address: watch, name: "Watch", rssi: -50, serviceUUIDs: [hr])))
        let out = h.send(.pairSucceeded(watch, call: h.lastPairCall!))
        #expect(out.persists)
        #expect(h.machine.persistedState().devices.first?.adapterAddress == Self.adapterA)
        #expect(h.machine.devices[watch]?.identity.adapterAddress == Self.adapterA)
    }

    @Test("bonded on A, B in use: it waits for A (no Connect, no needsRepair, nothing asked of BlueZ); A back: restored and adopted")
    func waitsForItsAdapter() {
        var h = restored(bondOn: Self.adapterA)
        h.send(.adapterInUse(Self.adapterB))
        // B shows no such device: on B it would be "device removed" → needsRepair.
        let out = h.send(.adapterReady([watch: .absent]))
        #expect(h.stateName(watch) == "adapterUnavailable")
        #expect(out.connects(watch) == 0)
        #expect(!out.contains { if case .disconnect = $0 { true } else if case .setTrusted = $0 { true } else { false } })
        #expect(out.contains { if case .report(let r) = $0 { r.to == .state(.adapterUnavailable) && r.reasonToken == "bond-on-adapter \(Self.adapterA)" } else { false } })
        h.send(.adapterLost)
        h.send(.adapterInUse(Self.adapterA))
        h.send(.adapterReady([watch: BlueZDeviceView(connected: true, servicesResolved: true)]))
        #expect(h.stateName(watch) == "discovering", "the link on A adopted")
    }

    @Test("a state file from before (no adapter recorded): the first adapter that shows the bond is its adapter from then on")
    func legacyFilledIn() {
        var h = restored(bondOn: nil)
        h.send(.adapterInUse(Self.adapterA))
        let out = h.send(.adapterReady([watch: BlueZDeviceView(connected: false)]))
        #expect(out.persists)
        #expect(h.machine.persistedState().devices.first?.adapterAddress == Self.adapterA)
        #expect(h.stateName(watch) == "waitingForDevice")
    }

    @Test("a state file from before, and the adapter in use does not show the bond: needsRepair as before, nothing recorded")
    func legacyAbsent() {
        var h = restored(bondOn: nil)
        h.send(.adapterInUse(Self.adapterB))
        h.send(.adapterReady([watch: .absent]))
        #expect(h.stateName(watch) == "needsRepair")
        #expect(h.machine.devices[watch]?.identity.adapterAddress == nil)
    }

    @Test("disconnected by the user, bonded on another adapter: stays disconnected")
    func disconnectedStaysDisconnected() {
        var h = restored(bondOn: Self.adapterA, wanted: .disconnected)
        h.send(.adapterInUse(Self.adapterB))
        h.send(.adapterReady([watch: .absent]))
        #expect(h.stateName(watch) == "disconnected")
    }

    @Test("the state file keeps the bond's adapter; a file without the key reads as not known")
    func persistedRoundTrip() throws {
        let d = PersistedDevice(identity: DeviceIdentity(address: watch, name: "Watch", adapter: "hci0", adapterAddress: Self.adapterA),
                                wanted: .connected, pairedAt: 0, updatedAt: 0)
        let state = PersistedState(devices: [d])
        let data = state.encoded()
        #expect(String(decoding: data, as: UTF8.self).contains("\"adapterAddress\" : \"00:AA:01:00:00:00\""))
        #expect(try PersistedState.decode(data).devices.first?.identity.adapterAddress == Self.adapterA)
    }
}
