import Testing
import PairingCore

/// What paird knows of bluetoothd from its first moment: unknown until `org.bluez`'s owner is seen
/// or known absent.
@Suite("bluetoothd's presence, and links that outlived it")
struct BluetoothdPresenceTests {
    let watch = Harness.watch

    static let segv = BluetoothdUnitState(activeState: "failed", result: "core-dump", execMainCode: 3, execMainStatus: 11, execMainStart: 100)
    static let stopped = BluetoothdUnitState(activeState: "inactive", result: "success", execMainCode: 2, execMainStatus: 15)

    static func oneWatch() -> PersistedState {
        PersistedState(devices: [
            PersistedDevice(identity: DeviceIdentity(address: Harness.watch, name: "Watch", adapter: "hci0", serviceUUIDs: [ServiceUUID.heartRate]),
                            wanted: .connected, pairedAt: 0, updatedAt: 0),
        ])
    }

    // MARK: The first moment

    @Test("just started: bluetoothd is unknown (not running, not gone), with no countdown")
    func startsUnknown() {
        let h = Harness(state: Self.oneWatch())
        #expect(h.machine.bluetoothd.phase == .unknown)
        #expect(h.machine.bluetoothd.phase.name == "unknown")
        #expect(h.machine.bluetoothd.phase.countdown == nil)
        #expect(h.machine.bluetoothd.goneSince == nil)
    }

    @Test("unknown → its owner seen: running; no action")
    func unknownThenSeen() {
        var h = Harness(state: Self.oneWatch())
        #expect(h.send(.bluetoothdBack) == [])
        #expect(h.machine.bluetoothd.phase == .present)
        #expect(h.machine.bluetoothd.phase.name == "running")
        #expect(h.machine.bluetoothd.lastCrash == nil)
    }

    @Test("unknown → no owner at the first look: gone (paird waits; it starts nothing, asks nothing); then started by someone: running")
    func unknownThenAbsentThenSeen() {
        var h = Harness(state: Self.oneWatch())
        #expect(h.send(.bluetoothdAbsent) == [])
        #expect(h.machine.bluetoothd.phase == .waiting(reason: "not on the bus when paird started"))
        #expect(h.machine.bluetoothd.phase.name == "gone")
        #expect(h.armed.isEmpty)
        #expect(h.send(.bluetoothdBack) == [])
        #expect(h.machine.bluetoothd.phase == .present)
        #expect(h.machine.bluetoothd.lastCrash == nil, "not a crash: nothing to report")
    }

    @Test("a late answer of absence once bluetoothd was seen changes nothing")
    func lateAbsenceIgnored() {
        var h = Harness(state: Self.oneWatch())
        h.send(.bluetoothdBack)
        #expect(h.send(.bluetoothdAbsent) == [])
        #expect(h.machine.bluetoothd.phase == .present)
        var left = Harness.connected()
        left.send(.bluetoothdLeft)
        left.send(.bluetoothdUnit(nil))
        #expect(left.send(.bluetoothdAbsent) == [])
        #expect(left.machine.bluetoothd.phase == .waiting(reason: "no systemd unit"))
    }

    @Test("a ready adapter is bluetoothd's: unknown becomes running")
    func adapterReadyMeansPresent() {
        var h = Harness(state: Self.oneWatch())
        h.send(.adapterReady([watch: BlueZDeviceView(connected: true, servicesResolved: true)]))
        #expect(h.machine.bluetoothd.phase == .present)
    }
}
