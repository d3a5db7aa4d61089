import PairingCore
import Testing

/// A wearable's battery level is the machine's fact (issue 44, "facts live once"): kept on its
/// device, said once per change (`Action.batteryChanged`: paird's signal and the observers'
/// `.battery`), forgotten with the device's BlueZ object, and carried by a re-key with the rest.
@Suite("The battery level, kept once")
struct BatteryTests {
    let watch = Harness.watch

    @Test("a reading is kept and said; the same level again says nothing; a new one is said")
    func changesOnly() {
        var h = Harness.connected()
        #expect(h.machine.devices[watch]?.battery == nil)
        #expect(h.send(.batteryRead(watch, level: 80)) == [.batteryChanged(watch, level: 80)])
        #expect(h.send(.batteryRead(watch, level: 80)) == [])
        #expect(h.send(.batteryRead(watch, level: 79)) == [.batteryChanged(watch, level: 79)])
        #expect(h.machine.devices[watch]?.battery == 79)
    }

    @Test("a device paird does not manage: nothing kept, nothing said")
    func unknownDevice() {
        var h = Harness.connected()
        #expect(h.send(.batteryRead(Harness.ring, level: 50)) == [])
        #expect(h.machine.devices[Harness.ring] == nil)
    }

    @Test("BlueZ forgets the device: its level is forgotten too, and the next reading is said again")
    func forgottenWithTheDevice() {
        var h = Harness.connected()
        h.send(.batteryRead(watch, level: 60))
        h.send(.deviceRemoved(watch))
        #expect(h.machine.devices[watch]?.battery == nil)
        #expect(h.send(.batteryRead(watch, level: 60)) == [.batteryChanged(watch, level: 60)])
    }

    @Test("a private address resolving to its identity: the level moves with the device")
    func followsTheReKey() {
        var h = Harness.connected()
        h.send(.batteryRead(watch, level: 42))
        let identity = DeviceAddress("C4:00:00:00:00:09")!
        h.send(.addressChanged(watch, to: identity, .random))
        #expect(h.machine.devices[identity]?.battery == 42)
        #expect(h.send(.batteryRead(identity, level: 42)) == [])
    }
}
