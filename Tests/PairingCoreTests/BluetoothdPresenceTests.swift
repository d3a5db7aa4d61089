import Testing
import PairingCore

/// What paird knows of bluetoothd from its first moment (unknown until `org.bluez`'s owner is seen
/// or known absent), and the link the kernel kept while bluetoothd was away: dropped at once when
/// bluetoothd is back, whatever systemd said (or did not say) about why it left.
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
        #expect(h.machine.bluetoothd.phase == .waiting(reason: .notOnBusAtStart))
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
        #expect(left.machine.bluetoothd.phase == .waiting(reason: .noSystemdUnit))
    }

    @Test("a ready adapter is bluetoothd's: unknown becomes running")
    func adapterReadyMeansPresent() {
        var h = Harness(state: Self.oneWatch())
        h.send(.adapterReady([watch: BlueZDeviceView(connected: true, servicesResolved: true)]))
        #expect(h.machine.bluetoothd.phase == .present)
    }

    @Test("bluetoothd seen for the first time after paird started is no return: a link up and unresolved gets the resolve countdown, as after a paird restart")
    func firstSightingIsNoReturn() {
        var h = Harness(state: Self.oneWatch())
        h.send(.bluetoothdAbsent)
        h.send(.bluetoothdBack)
        let out = h.send(.adapterReady([watch: BlueZDeviceView(connected: true)]))
        guard case .discovering(_, let resolve) = h.state(watch) else {
            Issue.record("expected discovering, got \(String(describing: h.state(watch)))")
            return
        }
        #expect(resolve.id.purpose == .resolve)
        #expect(out == [
            .arm(resolve),
            .report(Report(kind: .stateChanged, device: watch, name: "Watch", from: .state(.restoring), to: .state(.discovering))),
            .updateAutoConnect([ServiceUUID.heartRate]),
        ])
    }

    // MARK: A link that outlived bluetoothd

    /// How bluetoothd's departure is explained before it comes back, each ending with it on the bus again.
    enum Why: String, CaseIterable, CustomTestStringConvertible {
        /// Back before systemd answered at all (the question still out).
        case noAnswerYet
        /// No systemd on the bus, or no such unit (the plain bed): LoadUnit failed.
        case noSystemd
        /// systemd never settled the unit within the question limit.
        case neverSettled
        /// An administrator's stop (`Result=success`).
        case adminStop
        /// A failure paird does not act on (`start-limit-hit`).
        case otherFailure
        var testDescription: String { rawValue }
    }

    @Test("bluetoothd left while paird watched and came back, without systemd saying it crashed: the kept link, up and unresolved, is dropped at once; the auto-connect gets its head start",
          arguments: Why.allCases)
    func keptLinkDroppedWithoutCrash(why: Why) {
        var h = Harness.connected()
        h.advance(.seconds(10))
        #expect(h.send(.bluetoothdLeft) == [.queryBluetoothdUnit])
        h.send(.adapterLost)
        switch why {
        case .noAnswerYet: break
        case .noSystemd: h.send(.bluetoothdUnit(nil))
        case .neverSettled:
            h.send(.bluetoothdUnit(BluetoothdUnitState(activeState: "deactivating", result: "success")))
            while case .asking = h.machine.bluetoothd.phase {
                h.fireNext()
                h.send(.bluetoothdUnit(BluetoothdUnitState(activeState: "deactivating", result: "success")))
            }
        case .adminStop: h.send(.bluetoothdUnit(Self.stopped))
        case .otherFailure: h.send(.bluetoothdUnit(BluetoothdUnitState(activeState: "failed", result: "start-limit-hit")))
        }
        #expect(h.machine.bluetoothd.lastCrash == nil, "systemd said nothing of a crash")
        h.advance(.seconds(2))
        h.send(.bluetoothdBack)
        #expect(h.armed.isEmpty, "no bluetoothd countdown left")
        h.advance(.milliseconds(300))
        let ready = h.send(.adapterReady([watch: BlueZDeviceView(connected: true)]))
        guard case .waitingForDevice(.fallbackDue(let headStart)) = h.state(watch) else {
            Issue.record("expected waitingForDevice (fallback due), got \(String(describing: h.state(watch)))")
            return
        }
        #expect(headStart.deadline == h.now + MachineConfig().autoConnectHeadStart)
        #expect(ready == [
            .disconnect(watch),
            .arm(headStart),
            .report(Report(kind: .stateChanged, device: watch, name: "Watch", from: .state(.adapterUnavailable), to: .state(.waitingForDevice),
                           reason: .unresolvableAfterBluetoothdLeft)),
            .updateAutoConnect([ServiceUUID.heartRate]),
        ])
        // The dropped link going is ours: no Connect racing the auto-connect; the new link is an ordinary one.
        #expect(h.send(.linkDown(watch, linkLoss)) == [])
        h.advance(.seconds(1))
        h.send(.linkUp(watch))
        #expect(h.state(watch)?.countdown?.id.purpose == .resolve)
        h.send(.servicesResolved(watch))
        h.send(.setUpLinkFinished(watch, failure: nil))
        #expect(h.state(watch)?.isConnected == true)
    }

    @Test("the dropped link going down unseen (BlueZ 5.66 sends no Connected=false for it): the next link up is set up at once, no Connect")
    func droppedLinkGoneUnseen() {
        var h = Harness.connected()
        h.send(.bluetoothdLeft)
        h.send(.adapterLost)
        h.send(.bluetoothdUnit(nil))
        h.send(.bluetoothdBack)
        h.send(.adapterReady([watch: BlueZDeviceView(connected: true)]))
        h.advance(.milliseconds(400))
        let up = h.send(.linkUp(watch))
        guard case .discovering(_, let resolve) = h.state(watch) else {
            Issue.record("expected discovering, got \(String(describing: h.state(watch)))")
            return
        }
        #expect(resolve.id.purpose == .resolve)
        #expect(up.connects() == 0)
        #expect(h.machine.devices[watch]?.ownDrop == nil)
        h.send(.servicesResolved(watch))
        h.send(.setUpLinkFinished(watch, failure: nil))
        #expect(h.state(watch)?.isConnected == true)
    }

    @Test("a link resolved when bluetoothd is back is adopted as it is, whatever the reason it left")
    func resolvedLinkAdopted() {
        var h = Harness.connected()
        h.send(.bluetoothdLeft)
        h.send(.adapterLost)
        h.send(.bluetoothdUnit(nil))
        h.send(.bluetoothdBack)
        let ready = h.send(.adapterReady([watch: BlueZDeviceView(connected: true, servicesResolved: true)]))
        #expect(ready.disconnects == 0 && ready.connects() == 0)
        #expect(ready.contains(.setUpLink(watch)))
        #expect(h.state(watch)?.countdown?.id.purpose == .discovery)
    }

    @Test("the mark is spent at the first reconciliation: an adapter that goes and comes back with bluetoothd staying is no return of bluetoothd")
    func markSpent() {
        var h = Harness.connected()
        h.send(.bluetoothdLeft)
        h.send(.adapterLost)
        h.send(.bluetoothdUnit(nil))
        h.send(.bluetoothdBack)
        h.send(.adapterReady([watch: BlueZDeviceView()]))
        h.send(.adapterLost)
        h.send(.adapterReady([watch: BlueZDeviceView(connected: true)]))
        #expect(h.state(watch)?.countdown?.id.purpose == .resolve)
    }
}
