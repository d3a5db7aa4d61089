import Testing
import PairingCore

/// Issue 30, items 1 and 2: re-pairing waits for BlueZ to remove the stale bond; a scan's
/// candidates are what advertises during it; a bond is taken or removed only when the user named
/// the wearable. Each decision is checked on the whole action list.
@Suite("Pairing that takes and removes only what the user named")
struct TrustPairingTests {
    let watch = Harness.watch
    let other = Harness.ring
    let hr = ServiceUUID.heartRate

    /// `Harness.watch` connected, then forgotten by the wearable (a factory reset): Connect() fails
    /// authentication, so it is `needsRepair` while BlueZ still holds the dead bond.
    func factoryReset() -> Harness {
        var h = Harness.connected()
        h.send(.linkDown(watch, linkLoss))
        h.fireNext()
        h.connectFailed(watch, BlueZFailure(errorName: "org.bluez.Error.AuthenticationFailed", message: ""))
        precondition(h.stateName(watch) == "needsRepair")
        return h
    }

    func ready() -> Harness {
        var h = Harness()
        h.send(.adapterReady([:]))
        return h
    }

    /// The actions of a candidate taken for `Pair()`, given the scan's countdowns before it.
    func taken(_ c: Candidate, scan: Countdown, restart: Countdown, _ h: Harness, progress: [PairingProgress] = []) -> [Action] {
        let pair = h.machine.pairing!.countdown
        return progress.map { .pairingProgress($0) } + [
            .cancel(scan.id), .cancel(restart.id), .arm(pair), .stopDiscovery,
            .pairingProgress(.found(c)), .pairingProgress(.pairing(c.address)),
            .pair(c.address, call: h.lastPairCall!, timeout: MachineConfig().pairTimeout),
        ]
    }

    func scanStart(_ request: PairRequest, _ h: Harness) -> [Action] {
        let cds = h.machine.pairing!.countdowns
        return [.arm(cds[0]), .arm(cds[1]), .startDiscovery(request), .pairingProgress(.scanning)]
    }

    // MARK: Item 1: re-pairing waits for BlueZ

    @Test("pairctl pair ADDRESS of a factory-reset wearable: its stale object is removed once heard, discovery stops meanwhile, the scan goes on only once BlueZ answered (after the restart pause), and the fresh object is paired")
    func repairWaitsForRemoval() {
        var h = factoryReset()
        let request = PairRequest(address: watch)
        var out = h.send(.userPair(request))
        #expect(out == scanStart(request, h), "nothing removed before the wearable is heard")
        let scan = h.machine.pairing!.countdowns[0], restart = h.machine.pairing!.countdowns[1]

        // BlueZ's remembered object (the daemon offers the named one at the start): still
        // bonded, not heard in this scan. Neither taken nor removed.
        let stale = Candidate(address: watch, name: "Watch", serviceUUIDs: [hr], bonded: true)
        #expect(h.send(.candidateFound(stale)) == [])

        // Heard advertising on the still-bonded object: discovery stops, RemoveDevice goes out.
        var heardStale = stale
        heardStale.rssi = -48
        out = h.send(.candidateFound(heardStale))
        #expect(out == [.cancel(restart.id), .stopDiscovery, .pairingProgress(.removingStaleBond(watch)), .removeDevice(watch)])
        #expect(h.machine.pairing?.phase == .removingBond(watch))
        #expect(h.machine.pairing?.countdown == scan, "the scan timeout still bounds the session")

        // While the removal runs nothing is paired, not even a fresh-looking report.
        let fresh = Candidate(address: watch, name: "Watch", rssi: -50, serviceUUIDs: [hr])
        #expect(h.send(.candidateFound(fresh)) == [])
        #expect(h.send(.candidateFound(heardStale)) == [])

        // BlueZ answered RemoveDevice: the scan starts again after the restart pause (BlueZ
        // refuses a StartDiscovery right after a StopDiscovery as busy).
        out = h.send(.removeDeviceAnswered(watch, nil))
        let pause = h.machine.pairing!.countdowns[1]
        #expect(out == [.arm(pause)])
        #expect(pause.deadline == h.now + PairingSession.ScanRestart.restartPause)
        #expect(h.machine.pairing?.phase == .scanning(.stopped(pause)))
        // The removal's InterfacesRemoved, held back by the client, changes nothing more.
        #expect(h.send(.deviceRemoved(watch)) == [])
        out = h.fireNext()
        let restart2 = h.machine.pairing!.countdowns[1]
        #expect(out == [.arm(restart2), .restartDiscovery(request)])
        #expect(h.machine.pairing?.phase == .scanning(.running(restart2)))
        // A late report of the old object, still bonded: never a candidate.
        #expect(h.send(.candidateFound(heardStale)) == [])

        // The wearable's next advertisement makes a fresh object: that one is paired.
        out = h.send(.candidateFound(fresh))
        #expect(out == taken(fresh, scan: scan, restart: restart2, h))
        out = h.send(.pairSucceeded(watch, call: h.lastPairCall!))
        #expect(h.stateName(watch) == "connecting")
        #expect(!h.log.contains(.pairingProgress(.skipped(watch, name: "Watch", why: .needsRepairNotNamed))))
    }

    @Test("the removal's end is whichever BlueZ says first: the object gone, or RemoveDevice answering there was none; a refused removal ends the pairing")
    func removalEnds() {
        for end in [Event.deviceRemoved(Harness.watch), .removeDeviceAnswered(Harness.watch, .deviceGone)] {
            var h = factoryReset()
            let request = PairRequest(nameContains: "watch")
            h.send(.userPair(request))
            h.send(.candidateFound(Candidate(address: watch, name: "Watch", rssi: -40, bonded: true)))
            let out = h.send(end)
            #expect(out == [.arm(h.machine.pairing!.countdowns[1])], "\(end)")
            #expect(h.machine.pairing?.countdowns[1].id.purpose == .scanRestart)
            #expect(h.send(.removeDeviceAnswered(watch, nil)) == [], "the other signal of the same removal: nothing more")
        }

        var h = factoryReset()
        h.send(.userPair(PairRequest(address: watch)))
        let scan = h.machine.pairing!.countdown
        h.send(.candidateFound(Candidate(address: watch, name: "Watch", rssi: -40, bonded: true)))
        let failure = BlueZFailure.other(name: "org.bluez.Error.NotReady", message: "Resource Not Ready")
        let out = h.send(.removeDeviceAnswered(watch, failure))
        let outcome = PairingOutcome.failed("could not remove the old bond of \(watch): \(failure.token)")
        #expect(out == [.cancel(scan.id),
                        .report(Report(kind: .pairingFailed, device: nil, to: .pairing(.removingOldBond), reason: .pairing(outcome))),
                        .pairingEnded(outcome)])
        #expect(h.stateName(watch) == "needsRepair")
    }

    @Test("the scan timeout during the removal ends the pairing as a timeout, with nothing left armed")
    func removalTimesOut() {
        var h = factoryReset()
        h.send(.userPair(PairRequest(address: watch)))
        h.send(.candidateFound(Candidate(address: watch, name: "Watch", rssi: -40, bonded: true)))
        let out = h.fireNext()
        #expect(out.pairingOutcome == .timedOut(phase: "removing the old bond"))
        #expect(!out.contains(.stopDiscovery), "discovery was already stopped for the removal")
        #expect(h.armed.isEmpty)
    }

    @Test("a link that comes up to a needsRepair wearable is dropped, whenever it comes up; the pairing's own Pair() link is not")
    func linkToNeedsRepairDropped() {
        var h = Harness.connected()
        var out = h.send(.bondLost(watch))
        #expect(out.contains(.setTrusted(watch, false)) && out.contains(.disconnect(watch)), "entering needsRepair disarms the auto-connect")
        // The kernel's pending connection wins the race 50 ms later.
        h.advance(.milliseconds(50))
        #expect(h.send(.linkUp(watch)) == [.disconnect(watch)])
        #expect(h.send(.servicesResolved(watch)) == [.disconnect(watch)])
        // Much later, again.
        h.advance(.seconds(600))
        #expect(h.send(.linkUp(watch)) == [.disconnect(watch)])
        #expect(h.stateName(watch) == "needsRepair")

        // Being paired again: Pair() brings the link up itself, and it stays.
        h.send(.userPair(PairRequest(address: watch)))
        h.send(.candidateFound(Candidate(address: watch, name: "Watch", rssi: -50)))
        #expect(h.machine.pairing?.phase.name == "pairing")
        #expect(h.send(.linkUp(watch)) == [])
        #expect(h.send(.servicesResolved(watch)) == [])
    }

    // MARK: Item 2: candidates are what advertises now

    @Test("a device BlueZ merely remembers (no RSSI from this scan) is no candidate for a service, a name or --any, bonded or not; the one heard is paired",
          arguments: [PairRequest(serviceUUIDs: [ServiceUUID.heartRate]), PairRequest(nameContains: "Strap"), PairRequest()])
    func rememberedIsNoCandidate(request: PairRequest) {
        var h = ready()
        h.send(.userPair(request))
        let scan = h.machine.pairing!.countdowns[0], restart = h.machine.pairing!.countdowns[1]
        let oldStrap = Candidate(address: other, name: "Strap-old", serviceUUIDs: [hr], bonded: true)
        let forgotten = Candidate(address: DeviceAddress("AA:BB:CC:00:00:03")!, name: "Strap-gone", serviceUUIDs: [hr])
        #expect(h.send(.candidateFound(oldStrap)) == [])
        #expect(h.send(.candidateFound(forgotten)) == [])
        let newStrap = Candidate(address: watch, name: "Strap-new", rssi: -55, serviceUUIDs: [hr])
        let out = h.send(.candidateFound(newStrap))
        #expect(out == taken(newStrap, scan: scan, restart: restart, h))
        #expect(!h.log.contains { if case .removeDevice = $0 { true } else { false } })
    }

    @Test("RSSI 127 (HCI's \"not available\", what the bed's btvirt reports) is an advertisement heard in this scan")
    func rssiNotAvailableIsHeard() {
        var h = ready()
        h.send(.userPair(PairRequest(serviceUUIDs: [hr])))
        let scan = h.machine.pairing!.countdowns[0], restart = h.machine.pairing!.countdowns[1]
        let strap = Candidate(address: watch, name: "Pulse-1", rssi: 127, serviceUUIDs: [hr])
        #expect(h.send(.candidateFound(strap)) == taken(strap, scan: scan, restart: restart, h))
    }

    @Test("a bond made outside paird, heard in a scan by service: skipped (said once), never taken")
    func bondedElsewhereNotTakenByFilter() {
        var h = ready()
        h.send(.userPair(PairRequest(serviceUUIDs: [hr])))
        let oldStrap = Candidate(address: other, name: "Strap-old", rssi: -60, serviceUUIDs: [hr], bonded: true)
        #expect(h.send(.candidateFound(oldStrap)) == [.pairingProgress(.skipped(other, name: "Strap-old", why: .bondedElsewhere))])
        #expect(h.send(.candidateFound(oldStrap)) == [])
        #expect(h.machine.pairing?.phase.name == "scanning")
    }

    @Test("an explicit address adopts a bond made outside paird, heard or not (a connected wearable does not advertise), and says so")
    func explicitAddressAdoptsBond() {
        var h = ready()
        let request = PairRequest(address: watch)
        h.send(.userPair(request))
        let scan = h.machine.pairing!.countdowns[0], restart = h.machine.pairing!.countdowns[1]
        let bonded = Candidate(address: watch, name: "Watch", serviceUUIDs: [hr], bonded: true)
        var out = h.send(.candidateFound(bonded))
        #expect(out == taken(bonded, scan: scan, restart: restart, h, progress: [.adoptingBond(watch, name: "Watch")]))
        out = h.send(.pairFailed(watch, call: h.lastPairCall!, .alreadyExists))
        #expect(out.persists)
        #expect(h.stateName(watch) == "connecting")
        #expect(!h.log.contains(.removeDevice(watch)))

        // Not bonded and not heard: not taken even by address (it must advertise to be paired).
        var g = ready()
        g.send(.userPair(request))
        #expect(g.send(.candidateFound(Candidate(address: watch, name: "Watch"))) == [])
    }

    @Test("a scan by service never removes a needsRepair wearable's bond, heard or not: heard, it is skipped with a hint; out of range, the scan ends with no device found")
    func genericScanKeepsRepairBond() {
        var h = factoryReset()
        let request = PairRequest(serviceUUIDs: [hr])
        h.send(.userPair(request))
        let scan = h.machine.pairing!.countdowns[0]
        // Remembered by BlueZ, not heard: nothing.
        #expect(h.send(.candidateFound(Candidate(address: watch, name: "Watch", serviceUUIDs: [hr], bonded: true))) == [])
        // Heard: not taken, not removed; said once.
        let heard = Candidate(address: watch, name: "Watch", rssi: -44, serviceUUIDs: [hr], bonded: true)
        #expect(h.send(.candidateFound(heard)) == [.pairingProgress(.skipped(watch, name: "Watch", why: .needsRepairNotNamed))])
        #expect(h.send(.candidateFound(heard)) == [])
        // The scan runs out (through its restarts).
        var out: [Action] = []
        for _ in 0..<10 where h.machine.pairing != nil { out = h.fireNext() }
        let restart = h.log.compactMap { if case .arm(let c) = $0, c.id.purpose == .scanRestart { c } else { nil } }.last!
        #expect(out == [.cancel(scan.id), .cancel(restart.id), .stopDiscovery,
                        .report(Report(kind: .pairingFailed, device: nil, to: .pairing(.scanning), reason: .pairing(.noDeviceFound))),
                        .pairingEnded(.noDeviceFound)])
        #expect(!h.log.contains(.removeDevice(watch)))
        #expect(h.stateName(watch) == "needsRepair")
    }

    @Test("named but out of range: pairctl pair ADDRESS of a needsRepair wearable leaves its bond when it is never heard")
    func namedOutOfRangeKeepsBond() {
        var h = factoryReset()
        h.send(.userPair(PairRequest(address: watch)))
        h.send(.candidateFound(Candidate(address: watch, name: "Watch", serviceUUIDs: [hr], bonded: true)))
        var out: [Action] = []
        for _ in 0..<10 where h.machine.pairing != nil { out = h.fireNext() }
        #expect(out.pairingOutcome == .noDeviceFound)
        #expect(!h.log.contains(.removeDevice(watch)))
    }
}
