import Testing
import PairingCore

/// bluetoothd leaves the bus: systemd says why; a crash is answered with a start by bus
/// activation (backoff, cap), a stop is respected, no systemd means waiting; a wearable whose
/// link kills bluetoothd twice is disarmed.
@Suite("When bluetoothd crashes")
struct BluetoothdCrashTests {
    let watch = Harness.watch
    let ring = Harness.ring

    static let segv = BluetoothdUnitState(activeState: "failed", result: "core-dump", execMainCode: 3, execMainStatus: 11, execMainStart: 100)
    static let exitAtStart = BluetoothdUnitState(activeState: "failed", result: "exit-code", execMainCode: 1, execMainStatus: 1, execMainStart: 200)
    static let stopped = BluetoothdUnitState(activeState: "inactive", result: "success", execMainCode: 2, execMainStatus: 15)

    @Test("systemd's view → the decision", arguments: [
        (BluetoothdUnitState(activeState: "failed", result: "core-dump", execMainCode: 3, execMainStatus: 11), BluetoothdExit.crashed),
        (BluetoothdUnitState(activeState: "failed", result: "signal", execMainCode: 2, execMainStatus: 9), .crashed),
        (BluetoothdUnitState(activeState: "failed", result: "exit-code", execMainCode: 1, execMainStatus: 1), .crashed),
        (BluetoothdUnitState(activeState: "failed", result: "watchdog", execMainCode: 2, execMainStatus: 6), .crashed),
        (BluetoothdUnitState(activeState: "activating", result: "core-dump", execMainCode: 3, execMainStatus: 11), .crashedSystemdRestarts),
        (BluetoothdUnitState(activeState: "inactive", result: "success", execMainCode: 2, execMainStatus: 15), .stopped),
        (BluetoothdUnitState(activeState: "failed", result: "start-limit-hit"), .failedOther),
        (BluetoothdUnitState(activeState: "deactivating", result: "success"), .notSettled),
        (BluetoothdUnitState(activeState: "active", result: "success"), .notSettled),
    ])
    func classify(unit: BluetoothdUnitState, expected: BluetoothdExit) {
        #expect(BluetoothdExit.classify(unit) == expected)
    }

    @Test("no systemd on the bus: unknown") func noSystemd() { #expect(BluetoothdExit.classify(nil) == .unknown) }

    @Test("exit descriptions", arguments: [(segv, "SIGSEGV"), (exitAtStart, "exit status 1"), (stopped, "SIGTERM")])
    func exitDescription(unit: BluetoothdUnitState, text: String) { #expect(unit.exitDescription == text) }

    /// A connected watch, bluetoothd killed by SIGSEGV (systemd says so) and back on the bus; the
    /// adapter ready with `view` of the watch. Returns the harness and adapterReady's actions.
    func crashedAndBack(_ view: BlueZDeviceView) -> (Harness, [Action]) {
        var h = Harness.connected()
        _ = bluetoothdDies(&h)
        h.send(.bluetoothdUnit(Self.segv))
        h.send(.bluetoothdBack)
        let ready = h.send(.adapterReady([watch: view]))
        return (h, ready)
    }

    /// bluetoothd leaves the bus as the runtime reports it: presence first, then the adapter.
    func bluetoothdDies(_ h: inout Harness) -> [Action] {
        h.send(.bluetoothdLeft) + h.send(.adapterLost)
    }

    @Test("crash while connected: systemd asked, bluetoothd started at once, one crash report; back → adopted")
    func crashWhileConnected() {
        var h = Harness.connected()
        h.advance(.seconds(10))
        let left = h.send(.bluetoothdLeft)
        #expect(left == [.queryBluetoothdUnit])
        h.send(.adapterLost)
        #expect(h.stateName(watch) == "adapterUnavailable")
        h.advance(.milliseconds(30))
        let out = h.send(.bluetoothdUnit(Self.segv))
        let crash = BluetoothdCrash(at: .at(10), unit: Self.segv, action: "started again", attempt: 1, awaited: [watch])
        guard case .starting(polls: 0, let poll?) = h.machine.bluetoothd.phase else {
            Issue.record("expected starting, got \(h.machine.bluetoothd.phase)")
            return
        }
        #expect(out == [.bluetoothdReport(.crashed(crash)), .startBluetoothd, .arm(poll)])
        h.advance(.seconds(1))
        h.send(.bluetoothdBack)
        #expect(h.machine.bluetoothd.phase == .present)
        #expect(h.machine.bluetoothd.lastCrash?.backAt == .at(11.03))
        // The new bluetoothd reports the kernel's link up but unresolved: it predates the new
        // bluetoothd, which never resolves it: dropped at once; the new link is the auto-connect's
        // (its head start, then one Connect() of paird's own).
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
                           reason: .unresolvableAfterCrash)),
            .updateAutoConnect([ServiceUUID.heartRate]),
        ])
        #expect(h.send(.linkDown(watch, linkLoss)).connects() == 0, "the dropped link goes: no Connect racing the auto-connect")
        h.advance(.seconds(1))
        h.send(.linkUp(watch))
        h.send(.servicesResolved(watch))
        h.send(.setUpLinkFinished(watch, failure: nil))
        #expect(h.state(watch)?.isConnected == true)
        #expect(h.machine.bluetoothd.lastCrash?.backTimes[watch] == h.now)
        #expect(!h.log.persists, "a connected wearable's crash is nothing to remember")
    }

    @Test("a bond the crash took (bluetoothd back without the device, or without its bond): needsRepair, bond-lost-in-crash; no connect, no loop",
          arguments: [BlueZDeviceView.absent, BlueZDeviceView(exists: true, bonded: false, connected: true)])
    func bondLostInCrash(view: BlueZDeviceView) {
        var (h, ready) = crashedAndBack(view)
        #expect(h.state(watch) == .needsRepair(reason: .bondLostInCrash))
        #expect(ready.connects() == 0)
        #expect(ready.reports(.needsRepair).first?.reasonToken == "bond-lost-in-crash")
        #expect(!h.machine.autoConnectArmed.contains(watch), "the kernel's auto-connect is not armed for it")
        #expect(h.armed.values.allSatisfy { ![.connectReply, .retryBackoff, .fallbackConnect, .discovery, .resolve].contains($0.id.purpose) }, "no countdown of its own")
        h.advance(.seconds(120))
        #expect(h.state(watch) == .needsRepair(reason: .bondLostInCrash))
    }

    @Test("a bond lost in a crash, on an object whose UUIDs BlueZ never filled (its browse failed on the link paird dropped): pairctl pair --service takes it by the services paird knows, once heard")
    func bondLostObjectWithoutUUIDs() {
        var (h, _) = crashedAndBack(BlueZDeviceView(exists: true, bonded: false, connected: true))
        #expect(h.state(watch) == .needsRepair(reason: .bondLostInCrash))
        h.send(.userPair(PairRequest(serviceUUIDs: [ServiceUUID.heartRate])))
        // BlueZ's object, as 5.66 leaves it: no UUIDs, no name; remembered, then heard.
        #expect(h.send(.candidateFound(Candidate(address: watch, addressType: .random))) == [])
        let out = h.send(.candidateFound(Candidate(address: watch, addressType: .random, rssi: 127)))
        #expect(out.contains(.pair(watch, call: h.lastPairCall ?? 0, timeout: MachineConfig().pairTimeout)))
        #expect(h.machine.pairing?.phase.name == "pairing")
        // Someone else's wearable with no UUIDs is still no match for the service.
        var g = Harness()
        g.send(.adapterReady([:]))
        g.send(.userPair(PairRequest(serviceUUIDs: [ServiceUUID.heartRate])))
        #expect(g.send(.candidateFound(Candidate(address: watch, addressType: .random, rssi: 127))) == [])
    }

    @Test("without a crash, BlueZ without the device or the bond is device-removed / bond-removed")
    func bondGoneWithoutCrash() {
        let state = PersistedState(devices: [
            PersistedDevice(identity: DeviceIdentity(address: watch, name: "Watch", adapter: "hci0", serviceUUIDs: [ServiceUUID.heartRate]),
                            wanted: .connected, pairedAt: 0, updatedAt: 0),
        ])
        var h = Harness(state: state)
        h.send(.adapterReady([watch: .absent]))
        #expect(h.state(watch) == .needsRepair(reason: .deviceRemoved))
        var h2 = Harness(state: state)
        h2.send(.adapterReady([watch: BlueZDeviceView(exists: true, bonded: false)]))
        #expect(h2.state(watch) == .needsRepair(reason: .bondRemoved))
    }

    @Test("after a crash, the kept link reported Connected just after reconciliation gets the resolve countdown, as every fresh link does")
    func keptLinkReportedLate() {
        var (h, _) = crashedAndBack(BlueZDeviceView())
        #expect(h.stateName(watch) == "waitingForDevice")
        h.advance(.milliseconds(40))
        h.send(.linkUp(watch))
        let resolve = h.state(watch)!.countdown!
        #expect(resolve.id.purpose == .resolve)
        let out = h.fireNext()
        #expect(h.now == resolve.deadline)
        #expect(out.disconnects == 1 && h.stateName(watch) == "connecting")
        // The next links are ordinary ones: the resolve countdown until resolved, then the discovery one.
        #expect(h.send(.linkDown(watch, linkLoss)).connects(watch) == 1)
        h.connectSucceeded(watch)
        #expect(h.state(watch)?.countdown?.id.purpose == .resolve)
        h.send(.linkDown(watch, linkLoss))
        h.send(.linkUp(watch))
        #expect(h.state(watch)?.countdown?.id.purpose == .resolve)
        h.send(.servicesResolved(watch))
        #expect(h.state(watch)?.countdown?.id.purpose == .discovery)
    }

    @Test("the crash mark is spent at the first reconciliation after a crash (a stop: BluetoothdPresenceTests)")
    func crashMarkSpent() {
        var (h, _) = crashedAndBack(BlueZDeviceView())
        h.send(.adapterLost)
        h.send(.adapterReady([watch: BlueZDeviceView(connected: true)]))
        #expect(h.state(watch)?.countdown?.id.purpose == .resolve)
    }

    @Test("an administrator's stop is respected: no start; started again by them → back")
    func stopRespected() {
        var h = Harness.connected()
        _ = bluetoothdDies(&h)
        let out = h.send(.bluetoothdUnit(Self.stopped))
        #expect(out == [.bluetoothdReport(.stopped)])
        #expect(h.machine.bluetoothd.phase == .stoppedByAdmin)
        #expect(h.armed.isEmpty, "no timer: paird waits")
        #expect(h.machine.bluetoothd.lastCrash == nil)
        h.send(.bluetoothdBack)
        #expect(h.machine.bluetoothd.phase == .present)
    }

    @Test("no systemd on the bus: waits, as without systemd")
    func noSystemdWaits() {
        var h = Harness.connected()
        _ = bluetoothdDies(&h)
        #expect(h.send(.bluetoothdUnit(nil)) == [.bluetoothdReport(.waiting(unit: nil))])
        #expect(h.machine.bluetoothd.phase == .waiting(reason: .noSystemdUnit))
        #expect(h.armed.isEmpty)
    }

    @Test("systemd has not settled the unit yet: asked again after a short countdown, then decides")
    func notSettledAskedAgain() {
        var h = Harness.connected()
        _ = bluetoothdDies(&h)
        var out = h.send(.bluetoothdUnit(BluetoothdUnitState(activeState: "deactivating", result: "success")))
        #expect(out.armedPurposes == [.unitQuery])
        out = h.fireNext()
        #expect(out == [.queryBluetoothdUnit])
        out = h.send(.bluetoothdUnit(Self.segv))
        #expect(out.contains(.startBluetoothd))
    }

    @Test("systemd never settles it: after the question limit, waits")
    func neverSettles() {
        var h = Harness.connected()
        _ = bluetoothdDies(&h)
        for _ in 0..<50 where h.machine.bluetoothd.phase.name == "gone" {
            h.send(.bluetoothdUnit(BluetoothdUnitState(activeState: "active", result: "success")))
            h.fireNext()
        }
        guard case .waiting = h.machine.bluetoothd.phase else {
            Issue.record("expected waiting, got \(h.machine.bluetoothd.phase)")
            return
        }
        #expect(h.armed.isEmpty)
    }

    @Test("a bluetoothd that exits at every start: starts at once, then after 2, 4, 8, 16 s, then gives up (cap 5)")
    func backoffThenCap() {
        var h = Harness.connected()
        _ = bluetoothdDies(&h)
        var startsAt: [Double] = []
        var out = h.send(.bluetoothdUnit(Self.segv))
        for _ in 0..<10 {
            if out.contains(.startBluetoothd) {
                startsAt.append(Double(h.now.uptimeNanoseconds - Moment.at(0).uptimeNanoseconds) / 1e9)
                out = h.send(.bluetoothdStartFailed)
                #expect(out.last == .queryBluetoothdUnit)
                out = h.send(.bluetoothdUnit(Self.exitAtStart))
            } else if h.machine.bluetoothd.phase == .gaveUp {
                break
            } else {
                out = h.fireNext()
            }
        }
        #expect(startsAt == [0, 2, 6, 14, 30])
        #expect(h.machine.bluetoothd.phase == .gaveUp)
        #expect(h.machine.bluetoothd.lastCrash?.action == "gave up after 5 starts")
        #expect(h.armed.isEmpty, "no more tries")
    }

    @Test("a start that fails is seen from systemd's next run of the unit, not from dbus-daemon's 25 s activation timeout")
    func failedStartSeenFromSystemd() {
        var h = Harness.connected()
        _ = bluetoothdDies(&h)
        #expect(h.send(.bluetoothdUnit(Self.segv)).contains(.startBluetoothd))
        #expect(h.fireNext() == [.queryBluetoothdUnit], "a second later: has the start failed?")
        // systemd has not run it yet (still the crashed run), then is starting it: ask again.
        #expect(h.send(.bluetoothdUnit(Self.segv)).armedPurposes == [.unitQuery])
        h.fireNext()
        #expect(h.send(.bluetoothdUnit(BluetoothdUnitState(activeState: "activating", result: "success", execMainStart: 200)))
            .armedPurposes == [.unitQuery])
        h.fireNext()
        // The new run exited: the next try follows the backoff.
        let out = h.send(.bluetoothdUnit(Self.exitAtStart))
        #expect(out.armedPurposes == [.bluetoothdStart])
        #expect(h.machine.bluetoothd.lastCrash?.action == "start 2 in 2.0 s")
        // dbus-daemon's late answer to the first start changes nothing.
        #expect(h.send(.bluetoothdStartFailed) == [])
    }

    @Test("a start that works: bluetoothd back, the polling ends")
    func startWorks() {
        var h = Harness.connected()
        _ = bluetoothdDies(&h)
        h.send(.bluetoothdUnit(Self.segv))
        let out = h.send(.bluetoothdBack)
        #expect(out.count == 1, "the poll countdown cancelled")
        #expect(h.machine.bluetoothd.phase == .present)
        #expect(h.armed.isEmpty)
    }

    @Test("a bluetoothd that served (adapter ready) and then crashed gets a start at once, however often")
    func crashesAfterServing() {
        var h = Harness.connected()
        for _ in 0..<8 {
            _ = bluetoothdDies(&h)
            #expect(h.send(.bluetoothdUnit(Self.segv)).contains(.startBluetoothd))
            h.send(.bluetoothdBack)
            h.advance(.seconds(1))
            h.send(.adapterReady([watch: BlueZDeviceView()]))
            h.advance(.seconds(3))
        }
        #expect(h.machine.bluetoothd.lastCrash?.action == "started again")
    }

    /// Two wearables: the watch's link is being set up (discovering), the ring is connected.
    func twoWearables() -> Harness {
        var h = Harness(state: PersistedState(devices: [
            PersistedDevice(identity: DeviceIdentity(address: watch, name: "Watch", serviceUUIDs: [ServiceUUID.heartRate]),
                            wanted: .connected, pairedAt: 0, updatedAt: 0),
            PersistedDevice(identity: DeviceIdentity(address: ring, name: "Ring", serviceUUIDs: [ServiceUUID.heartRate]),
                            wanted: .connected, pairedAt: 0, updatedAt: 0),
        ]))
        h.send(.adapterReady([watch: BlueZDeviceView(), ring: BlueZDeviceView(connected: true, servicesResolved: true)]))
        h.send(.linkProven(ring))
        h.send(.setUpLinkFinished(ring, failure: nil))
        return h
    }

    @Test("bluetoothd dies twice on the watch's link set-up: remembered (persisted), then disarmed; the ring keeps its link")
    func crashLoopDisarmed() {
        var h = twoWearables()
        // Each death past the attribution window into the set-up: systemd's word decides, not the
        // timing (deaths within it of the link-up: BluetoothdAttributionTests).
        let intoSetUp = PairingMachine.attributionWindow + .seconds(1)
        h.send(.linkUp(watch))
        h.advance(intoSetUp)
        #expect(h.stateName(watch) == "discovering")
        _ = bluetoothdDies(&h)
        var out = h.send(.bluetoothdUnit(Self.segv))
        #expect(out.persists, "remembered in the state file")
        #expect(h.machine.persistedState().devices.first { $0.address == watch }?.bluetoothdCrashedOnLink == true)
        #expect(h.machine.persistedState().devices.first { $0.address == ring }?.bluetoothdCrashedOnLink == nil)
        #expect(h.stateName(watch) == "adapterUnavailable", "one crash: still pursued")

        h.send(.bluetoothdBack)
        h.send(.adapterReady([watch: BlueZDeviceView(), ring: BlueZDeviceView(connected: true, servicesResolved: true)]))
        h.send(.setUpLinkFinished(ring, failure: nil))
        h.send(.linkUp(watch)) // the kernel's auto-connect: the link that kills bluetoothd
        h.advance(intoSetUp)
        _ = bluetoothdDies(&h)
        out = h.send(.bluetoothdUnit(Self.segv))
        #expect(h.state(watch) == .needsRepair(reason: .bluetoothdCrashes))
        #expect(out.reports(.needsRepair).map(\.reasonToken) == ["bluetoothd-crashed"])
        #expect(out.contains(.setTrusted(watch, false)))
        #expect(out.contains(.startBluetoothd), "the other wearables still need bluetoothd (it served: started at once)")
        #expect(h.machine.bluetoothd.lastCrash?.disarmed == [watch])

        h.send(.bluetoothdBack)
        out = h.send(.adapterReady([watch: BlueZDeviceView(), ring: BlueZDeviceView(connected: true, servicesResolved: true)]))
        #expect(out.contains(.setTrusted(watch, false)) && out.contains(.disconnect(watch)),
                "the new bluetoothd has it Trusted again: disarmed again")
        #expect(!out.contains(.disconnect(ring)))
        h.send(.setUpLinkFinished(ring, failure: nil))
        #expect(h.state(ring)?.isConnected == true)
        #expect(h.state(watch) == .needsRepair(reason: .bluetoothdCrashes))
        #expect(h.send(.linkUp(watch)).connects() == 0)
    }

    @Test("two wearables setting up at both crashes (the culprit and one reconnecting beside it): both disarmed, then let back one at a time; the innocent is cleared, the culprit stays disarmed")
    func disarmedTogetherThenOnTrial() {
        var h = twoWearables()
        h.send(.linkDown(ring, linkLoss)) // the ring walked away; both come back together
        func crashWithBothSettingUp() -> [Action] {
            h.send(.linkUp(watch))
            h.send(.linkUp(ring))
            _ = bluetoothdDies(&h)
            return h.send(.bluetoothdUnit(Self.segv))
        }
        _ = crashWithBothSettingUp()
        h.send(.bluetoothdBack)
        h.send(.adapterReady([watch: BlueZDeviceView(), ring: BlueZDeviceView()]))
        let out = crashWithBothSettingUp()
        #expect(h.state(watch) == .needsRepair(reason: .bluetoothdCrashes) && h.state(ring) == .needsRepair(reason: .bluetoothdCrashes))
        #expect(h.machine.bluetoothd.lastCrash?.disarmed == [watch, ring].sorted())
        #expect(h.machine.bluetoothd.probation == [watch, ring].sorted())
        #expect(out.contains(.setTrusted(watch, false)) && out.contains(.setTrusted(ring, false)))

        // bluetoothd back: the first one alone is let back; the other stays disarmed.
        h.send(.bluetoothdBack)
        var ready = h.send(.adapterReady([watch: BlueZDeviceView(), ring: BlueZDeviceView()]))
        let first = [watch, ring].sorted()[0], second = [watch, ring].sorted()[1]
        #expect(h.machine.bluetoothd.onTrial == first)
        #expect(ready.contains(.setTrusted(first, true)))
        #expect(h.stateName(first) == "waitingForDevice")
        #expect(h.state(second) == .needsRepair(reason: .bluetoothdCrashes))

        // The first one's link comes up and is set up: innocent. The second is let back.
        h.send(.linkUp(first))
        h.send(.servicesResolved(first))
        ready = h.send(.setUpLinkFinished(first, failure: nil))
        #expect(h.state(first)?.isConnected == true)
        #expect(h.machine.bluetoothd.onTrial == second)
        #expect(ready.contains(.setTrusted(second, true)))
        #expect(h.stateName(second) == "waitingForDevice")

        // The second one's set-up kills bluetoothd again: the culprit, disarmed for good.
        h.send(.linkUp(second))
        _ = bluetoothdDies(&h)
        let last = h.send(.bluetoothdUnit(Self.segv))
        #expect(h.state(second) == .needsRepair(reason: .bluetoothdCrashes))
        #expect(h.machine.bluetoothd.lastCrash?.disarmed == [second])
        #expect(last.reports(.needsRepair).map(\.device) == [second])
        #expect(h.machine.bluetoothd.onTrial == nil && h.machine.bluetoothd.probation.isEmpty)
        h.send(.bluetoothdBack)
        ready = h.send(.adapterReady([watch: BlueZDeviceView(), ring: BlueZDeviceView()]))
        #expect(!ready.contains(.setTrusted(second, true)), "not let back again")
        #expect(h.stateName(first) != "needsRepair", "the innocent one is pursued as usual")
    }

    @Test("the one on trial leaves the trial without a verdict (its bond lost, the user's disconnect, unpair): the next one disarmed with it is let back", arguments: ["bondLost", "userDisconnect", "userUnpair"])
    func trialEndsWithoutVerdict(_ how: String) {
        var h = twoWearables()
        h.send(.linkDown(ring, linkLoss))
        for _ in 0..<2 {
            h.send(.linkUp(watch))
            h.send(.linkUp(ring))
            _ = bluetoothdDies(&h)
            h.send(.bluetoothdUnit(Self.segv))
            h.send(.bluetoothdBack)
            h.send(.adapterReady([watch: BlueZDeviceView(), ring: BlueZDeviceView()]))
        }
        let first = [watch, ring].sorted()[0], second = [watch, ring].sorted()[1]
        #expect(h.machine.bluetoothd.onTrial == first)
        #expect(h.state(second) == .needsRepair(reason: .bluetoothdCrashes))
        h.send(.linkUp(first))
        let out = switch how {
        case "bondLost": h.send(.bondLost(first))
        case "userDisconnect": h.send(.userDisconnect(first))
        default: h.send(.userUnpair(first))
        }
        #expect(h.machine.bluetoothd.onTrial == second, "\(how): the next one is on trial")
        #expect(out.contains(.setTrusted(second, true)))
        #expect(h.stateName(second) == "waitingForDevice")
        #expect(h.machine.bluetoothd.probation.isEmpty)
    }

    @Test("the memory survives a paird restart (state file)")
    func rememberedAcrossRestart() {
        var h = twoWearables()
        h.send(.linkUp(watch))
        _ = bluetoothdDies(&h)
        h.send(.bluetoothdUnit(Self.segv))
        var restarted = Harness(state: h.machine.persistedState())
        restarted.send(.adapterReady([watch: BlueZDeviceView(), ring: BlueZDeviceView()]))
        restarted.send(.linkUp(watch))
        _ = bluetoothdDies(&restarted)
        restarted.send(.bluetoothdUnit(Self.segv))
        #expect(restarted.state(watch) == .needsRepair(reason: .bluetoothdCrashes))
    }

    @Test("a link that reaches connected after the crash clears the memory (persisted)")
    func clearedWhenConnected() {
        var h = twoWearables()
        h.send(.linkUp(watch))
        _ = bluetoothdDies(&h)
        h.send(.bluetoothdUnit(Self.segv))
        h.send(.bluetoothdBack)
        h.send(.adapterReady([watch: BlueZDeviceView(), ring: BlueZDeviceView(connected: true, servicesResolved: true)]))
        let out = h.linkComesUp(watch)
        #expect(h.state(watch)?.isConnected == true)
        #expect(out.persists)
        #expect(h.machine.persistedState().devices.allSatisfy { $0.bluetoothdCrashedOnLink == nil })
        // Crashing again while it is connected is no set-up crash.
        h.send(.linkUp(watch))
        _ = bluetoothdDies(&h)
        h.send(.bluetoothdUnit(Self.segv))
        #expect(h.state(watch) == .adapterUnavailable)
    }

    @Test("an administrator's stop during a set-up is no crash: nothing remembered")
    func stopIsNoCrash() {
        var h = twoWearables()
        h.send(.linkUp(watch))
        _ = bluetoothdDies(&h)
        #expect(!h.send(.bluetoothdUnit(Self.stopped)).persists)
        #expect(h.machine.persistedState().devices.allSatisfy { $0.bluetoothdCrashedOnLink == nil })
    }
}
