#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import PairingCore
import Testing

/// Several adapters at once (issue 32, part 3; `[General] Adapter = hci0 hci1`): each adapter's
/// readiness is told by `adapterInUse` + `adapterReady`, its loss while another stays by
/// `adapterGone`. A wearable lives on the adapter that holds its bond: only its own adapter's
/// coming and going moves it.
@Suite("Several adapters at once")
struct SeveralAdaptersTests {
    let watch = Harness.watch
    let ring = Harness.ring
    let hr = ServiceUUID.heartRate
    static let adapterA = DeviceAddress("00:AA:01:00:00:00")!
    static let adapterB = DeviceAddress("00:AA:01:02:00:02")!

    /// The watch bonded on A, the ring on B, both wanted connected.
    func restored() -> Harness {
        Harness(state: PersistedState(devices: [
            PersistedDevice(identity: DeviceIdentity(address: watch, name: "Watch", adapter: "hci0 hci2", serviceUUIDs: [hr],
                                                     adapterAddress: Self.adapterA),
                            wanted: .connected, pairedAt: 0, updatedAt: 0),
            PersistedDevice(identity: DeviceIdentity(address: ring, name: "Ring", adapter: "hci0 hci2", serviceUUIDs: [hr],
                                                     adapterAddress: Self.adapterB),
                            wanted: .connected, pairedAt: 0, updatedAt: 0),
        ]))
    }

    static let up = BlueZDeviceView(connected: true, servicesResolved: true)

    /// Both adapters ready, each showing its own wearable's link up.
    func bothUp() -> Harness {
        var h = restored()
        h.send(.adapterInUse(Self.adapterA))
        h.send(.adapterReady([watch: Self.up, ring: .absent]))
        h.send(.adapterInUse(Self.adapterB))
        h.send(.adapterReady([watch: .absent, ring: Self.up]))
        return h
    }

    @Test("each adapter's readiness restores only its own wearable; the other one's absence there is not its lost bond")
    func eachOnItsOwn() {
        var h = restored()
        h.send(.adapterInUse(Self.adapterA))
        let first = h.send(.adapterReady([watch: Self.up, ring: .absent]))
        #expect(h.stateName(watch) == "discovering", "the link on A adopted")
        #expect(h.stateName(ring) == "adapterUnavailable", "waits for B, never needsRepair")
        #expect(first.connects(ring) == 0)
        h.send(.adapterInUse(Self.adapterB))
        let second = h.send(.adapterReady([watch: .absent, ring: Self.up]))
        #expect(h.stateName(ring) == "discovering", "the link on B adopted")
        #expect(h.stateName(watch) == "discovering", "B's view (no watch there) leaves the watch alone")
        #expect(second.connects() == 0 && !second.contains { if case .disconnect = $0 { true } else { false } })
        #expect(h.machine.upAdapters == [Self.adapterA, Self.adapterB])
    }

    @Test("A goes while B stays: only the watch waits (adapter-gone), the ring's link is untouched, and A's return brings the watch back")
    func oneGoesTheOtherStays() {
        var h = bothUp()
        h.send(.servicesResolved(ring))
        let ringBefore = h.stateName(ring)
        let out = h.send(.adapterGone(Self.adapterA))
        #expect(h.stateName(watch) == "adapterUnavailable")
        #expect(h.stateName(ring) == ringBefore)
        #expect(!out.contains { if case .disconnect(ring) = $0 { true } else { false } })
        #expect(out.connects() == 0)
        #expect(h.machine.adapterUp && h.machine.upAdapters == [Self.adapterB])
        #expect(h.machine.adapterAddress(for: watch) == Self.adapterA, "the watch stays A's: never tried on B")
        h.send(.adapterInUse(Self.adapterA))
        h.send(.adapterReady([watch: BlueZDeviceView(connected: false), ring: .absent]))
        #expect(h.stateName(watch) == "waitingForDevice", "back on A: the auto-connect's head start, then Connect()")
        #expect(h.stateName(ring) == ringBefore)
    }

    @Test("the last adapter going is the adapter's loss: every wearable waits, the pairing ends")
    func lastOneGoes() {
        var h = bothUp()
        h.send(.adapterGone(Self.adapterA))
        h.send(.userPair(PairRequest(serviceUUIDs: [hr], adapter: Self.adapterB)))
        #expect(h.machine.pairing != nil)
        h.send(.adapterGone(Self.adapterB))
        #expect(h.stateName(ring) == "adapterUnavailable" && h.stateName(watch) == "adapterUnavailable")
        #expect(h.machine.pairing == nil)
        #expect(!h.machine.adapterUp && h.machine.upAdapters.isEmpty)
    }

    @Test("pairctl pair --adapter: the bond is recorded as that adapter's, and the candidate is looked for there")
    func pairOnTheNamedAdapter() {
        var h = bothUp()
        let strap = DeviceAddress("F3:5A:B1:00:00:01")!
        h.send(.userPair(PairRequest(serviceUUIDs: [hr], adapter: Self.adapterB)))
        #expect(h.machine.adapterAddress(for: strap) == Self.adapterB, "a candidate is heard on B")
        h.send(.candidateFound(Candidate(address: strap, name: "Strap", rssi: -50, serviceUUIDs: [hr])))
        h.send(.pairSucceeded(strap, call: h.lastPairCall!))
        #expect(h.machine.devices[strap]?.identity.adapterAddress == Self.adapterB)
        #expect(h.machine.persistedState().devices.first { $0.address == strap }?.adapterAddress == Self.adapterB)
    }

    @Test("a pairing on an adapter that is not ready is refused at once (adapterUnavailable); one going mid-scan ends it, the other's does not")
    func pairingOnAnAdapterThatIsNotUp() {
        var h = bothUp()
        h.send(.adapterGone(Self.adapterA))
        let out = h.send(.userPair(PairRequest(serviceUUIDs: [hr], adapter: Self.adapterA)))
        #expect(out.contains(.pairingEnded(.adapterUnavailable)))
        #expect(h.machine.pairing == nil)
        h.send(.adapterInUse(Self.adapterA))
        h.send(.adapterReady([watch: .absent, ring: .absent]))
        h.send(.userPair(PairRequest(serviceUUIDs: [hr], adapter: Self.adapterB)))
        h.send(.adapterGone(Self.adapterA))
        #expect(h.machine.pairing != nil, "A's loss does not end a pairing on B")
        h.send(.adapterInUse(Self.adapterA))
        h.send(.adapterReady([watch: .absent, ring: .absent]))
        h.send(.adapterGone(Self.adapterB))
        #expect(h.machine.pairing == nil, "B's loss ends it")
    }

    // MARK: After the host's resume

    /// Both connected on their adapters, the host sleeps 10 minutes and resumes.
    func slept() -> Harness {
        var h = bothUp()
        for a in [watch, ring] { h.send(.linkProven(a)); h.send(.setUpLinkFinished(a, failure: nil)) }
        precondition(h.state(watch)?.isConnected == true && h.state(ring)?.isConnected == true)
        for a in h.send(.hostSleeping) { if case .disconnect(let d) = a { h.send(.linkDown(d, linkLoss)) } }
        h.advance(.seconds(600))
        h.send(.hostResumed)
        return h
    }

    mutating func fireResumeDeadline(_ h: inout Harness) throws -> [Action] {
        let c = try #require(h.armed.values.first { $0.id.purpose == .resumeDeadline })
        h.now = c.deadline
        h.armed[c.id] = nil
        return h.send(.countdownFired(c.id))
    }

    @Test("after a resume the watch is back on A, the ring not on B: only B is power-cycled (the watch shows A works)")
    func resumePowerCyclesTheSilentAdapter() throws {
        var t = self
        var h = slept()
        _ = h.linkComesUp(watch)
        let out = try t.fireResumeDeadline(&h)
        #expect(out.filter { if case .powerCycle = $0 { true } else { false } } == [.powerCycle(adapter: Self.adapterB)])
        #expect(!out.contains(.powerCycleAdapter))
        #expect(out.reports(.resumeEscalation).map(\.reasonToken) == ["power-cycle 1/2 after 60.0 s (deadline 60.0 s)"])
    }

    @Test("after a resume neither is back: both adapters power-cycled, once, one escalation step")
    func resumePowerCyclesBoth() throws {
        var t = self
        var h = slept()
        let out = try t.fireResumeDeadline(&h)
        #expect(out.filter { if case .powerCycle = $0 { true } else { false } } == [.powerCycle(adapter: Self.adapterA), .powerCycle(adapter: Self.adapterB)])
        #expect(out.reports(.resumeEscalation).count == 1)
    }
}

/// The controller's limit on LE connections (issue 32, part 3). Neither BlueZ 5.66 nor the
/// kernel exposes the number; a BlueZ that names the failure (`…-concurrent-connection-limit`)
/// is reported as such, and 5.66's `abort-by-local` with links already up on the adapter says
/// that the limit may be why, instead of a bare token.
@Suite("The controller's LE connection limit")
struct ConnectionLimitTests {
    let hr = ServiceUUID.heartRate
    let strap = DeviceAddress("F3:5A:B1:00:00:01")!

    @Test("the error names of BlueZ map to connectionLimit (newer BlueZ) and abortedByLocal (5.66)")
    func mapping() {
        #expect(BlueZFailure(errorName: "org.bluez.Error.Failed", message: "le-connection-concurrent-connection-limit") == .connectionLimit)
        #expect(BlueZFailure(errorName: "org.bluez.Error.Failed", message: "le-connection-abort-by-local") == .abortedByLocal)
        #expect(ConnectFailureClassifier.classify(.connectionLimit, elapsed: .seconds(60), absentAfter: .seconds(30)) == .transient,
                "never taken for an absent wearable: another link going makes room")
    }

    /// The ring connected on A, then a pairing on A whose Pair() fails with `failure`.
    func pairingFails(_ failure: BlueZFailure, ringConnected: Bool = true) -> PairingOutcome? {
        var h = Harness(state: PersistedState(devices: [
            PersistedDevice(identity: DeviceIdentity(address: Harness.ring, name: "Ring", adapter: "", serviceUUIDs: [hr],
                                                     adapterAddress: SeveralAdaptersTests.adapterA),
                            wanted: .connected, pairedAt: 0, updatedAt: 0),
        ]))
        h.send(.adapterInUse(SeveralAdaptersTests.adapterA))
        h.send(.adapterReady([Harness.ring: ringConnected ? SeveralAdaptersTests.up : BlueZDeviceView(connected: false)]))
        h.send(.userPair(PairRequest(serviceUUIDs: [hr], adapter: SeveralAdaptersTests.adapterA)))
        h.send(.candidateFound(Candidate(address: strap, name: "Strap", rssi: -50, serviceUUIDs: [hr])))
        return h.send(.pairFailed(strap, call: h.lastPairCall!, failure)).pairingOutcome
    }

    @Test("a pairing refused at the limit says so, with how many are connected on the adapter and what to do")
    func named() throws {
        guard case .failed(let text)? = pairingFails(.connectionLimit) else { Issue.record("not a failure"); return }
        #expect(text.hasPrefix("connection-limit: "))
        #expect(text.contains("1 wearable(s) connected on it") && text.contains("pairctl disconnect") && text.contains("--adapter"))
    }

    @Test("5.66's abort-by-local with links up on the adapter: the limit named as a possible cause; without, the bare token")
    func abortByLocal() throws {
        guard case .failed(let text)? = pairingFails(.abortedByLocal) else { Issue.record("not a failure"); return }
        #expect(text.hasPrefix("abort-by-local: ") && text.contains("1 wearable(s) already connected") && text.contains("limit of LE connections"))
        #expect(pairingFails(.abortedByLocal, ringConnected: false) == .failed("abort-by-local"))
    }
}
