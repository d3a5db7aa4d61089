import PairingCore
import Testing

/// After the host's resume, the wearables linked at the sleep are expected back by a deadline
/// learned from their returns; past it paird escalates only as far as needed (issue 32): away if
/// another one is back, else one adapter power cycle per resume, capped over resumes in a row.
@Suite("After the host's resume: the escalation")
struct ResumeEscalationTests {
    let watch = Harness.watch
    let ring = Harness.ring

    /// Both paired; the watch connected; the ring too when `ringLinked`.
    func two(ringLinked: Bool, config: MachineConfig = MachineConfig()) -> Harness {
        var h = Harness(config: config, state: PersistedState(devices: [
            PersistedDevice(identity: DeviceIdentity(address: watch, name: "Watch", serviceUUIDs: [ServiceUUID.heartRate]),
                            wanted: .connected, pairedAt: 0, updatedAt: 0),
            PersistedDevice(identity: DeviceIdentity(address: ring, name: "Ring", serviceUUIDs: [ServiceUUID.heartRate]),
                            wanted: .connected, pairedAt: 0, updatedAt: 0),
        ]))
        h.send(.adapterReady([watch: BlueZDeviceView(connected: true, servicesResolved: true),
                              ring: BlueZDeviceView(connected: ringLinked, servicesResolved: ringLinked)]))
        for a in ringLinked ? [watch, ring] : [watch] {
            h.send(.linkProven(a))
            h.send(.setUpLinkFinished(a, failure: nil))
        }
        return h
    }

    /// A sleep of 10 minutes; the links the sleep let go are seen down. Returns the resume's actions.
    func sleep(_ h: inout Harness) -> [Action] {
        for a in h.send(.hostSleeping) { if case .disconnect(let d) = a { h.send(.linkDown(d, linkLoss)) } }
        h.advance(.seconds(600))
        return h.send(.hostResumed)
    }

    func deadlineCountdown(_ h: Harness) -> Countdown? {
        h.armed.values.first { $0.id.purpose == .resumeDeadline }
    }

    /// Fires the resume deadline (and nothing else), at its time.
    func fireDeadline(_ h: inout Harness) -> [Action] {
        guard let c = deadlineCountdown(h) else { Issue.record("no resume deadline armed"); return [] }
        h.now = c.deadline
        h.armed[c.id] = nil
        return h.send(.countdownFired(c.id))
    }

    func step(_ step: ResumeStep, cycles: (Int, Int)? = nil, after: Int64? = nil, deadline: Int64? = nil,
              _ a: DeviceAddress?, _ name: String) -> Action {
        let e = ResumeEscalation(step: step, powerCycles: cycles?.0, powerCycleCap: cycles?.1,
                                 after: after.map { .seconds($0) }, deadline: deadline.map { .seconds($0) })
        return .report(Report(kind: .resumeEscalation, device: a, name: name, reason: .resume(e)))
    }

    @Test("the first step at the resume: the auto-connect registered again (journal), the deadline armed at the ceiling (nothing learned yet)")
    func firstStep() {
        var h = two(ringLinked: false)
        let out = sleep(&h)
        #expect(out.reports(.resumeEscalation) == [Report(kind: .resumeEscalation, device: nil, reason: .resume(.init(step: .autoConnect)))])
        #expect(out.contains { if case .updateAutoConnect = $0 { true } else { false } })
        #expect(deadlineCountdown(h)?.deadline == h.now + MachineConfig().resumeDeadlineCeiling)
        #expect(h.machine.host.lastSleep?.expected == [watch], "only the one linked at the sleep is expected back")
    }

    @Test("nothing back by the deadline: one power cycle, and nothing more for this resume")
    func powerCycle() {
        var h = two(ringLinked: false)
        _ = sleep(&h)
        let out = fireDeadline(&h)
        #expect(out == [step(.powerCycle, cycles: (1, 2), after: 60, deadline: 60, watch, "Watch"), .powerCycleAdapter])
        #expect(deadlineCountdown(h) == nil, "judged once: no further deadline for this resume")
        // The power cycle's adapter loss and return bring it back as after any adapter return.
        h.send(.adapterLost)
        h.advance(.seconds(1))
        let back = h.send(.adapterReady([watch: BlueZDeviceView(), ring: BlueZDeviceView()]))
        #expect(!back.contains(.powerCycleAdapter))
        _ = h.linkComesUp(watch)
        #expect(h.machine.host.powerCyclesInVain == 1, "back only after the power cycle: it counts")
        #expect(h.machine.devices[watch]?.learned.resumeReturns == [], "a return after a power cycle is not its usual return time")
    }

    @Test("another one back by the deadline: the adapter works, the late one is away; no power cycle")
    func away() {
        var h = two(ringLinked: true)
        _ = sleep(&h)
        h.advance(.seconds(4))
        _ = h.linkComesUp(ring)
        #expect(deadlineCountdown(h)?.deadline == h.machine.host.lastSleep!.resumedAt! + .seconds(60))
        let out = fireDeadline(&h)
        #expect(out == [step(.away, after: 60, deadline: 60, watch, "Watch")])
        #expect(h.machine.devices[ring]?.learned.resumeReturns == [4])
    }

    @Test("a controller that needs a power cycle at every resume gets it up to the cap, then not; a return on its own starts the count over")
    func cap() {
        var config = MachineConfig()
        config.resumePowerCycles = 2
        var h = two(ringLinked: false, config: config)
        var steps: [[Action]] = []
        for _ in 0..<3 {
            _ = sleep(&h)
            steps.append(fireDeadline(&h))
            // Back only once the adapter came back from the power cycle (or, capped, later).
            h.send(.adapterLost)
            h.advance(.seconds(2))
            h.send(.adapterReady([watch: BlueZDeviceView(), ring: BlueZDeviceView()]))
            _ = h.linkComesUp(watch)
        }
        #expect(steps[0] == [step(.powerCycle, cycles: (1, 2), after: 60, deadline: 60, watch, "Watch"), .powerCycleAdapter])
        #expect(steps[1] == [step(.powerCycle, cycles: (2, 2), after: 60, deadline: 60, watch, "Watch"), .powerCycleAdapter])
        #expect(steps[2] == [step(.capReached, cycles: (2, 2), after: 60, deadline: 60, watch, "Watch")])
        #expect(h.machine.host.powerCyclesInVain == 2)
        // At the next resume it comes back on its own, in time: the count starts over, and a
        // later resume that brings nothing back may power-cycle again.
        _ = sleep(&h)
        h.advance(.seconds(5))
        _ = h.linkComesUp(watch)
        #expect(h.machine.host.powerCyclesInVain == 0)
        _ = sleep(&h)
        #expect(fireDeadline(&h) == [step(.powerCycle, cycles: (1, 2), after: 10, deadline: 10, watch, "Watch"), .powerCycleAdapter],
                "its deadline learned from that return (5 s: twice, at the 10 s floor)")
    }

    @Test("ResumePowerCycles = 0: never a power cycle")
    func never() {
        var config = MachineConfig()
        config.resumePowerCycles = 0
        var h = two(ringLinked: false, config: config)
        _ = sleep(&h)
        #expect(fireDeadline(&h) == [step(.capReached, cycles: (0, 0), after: 60, deadline: 60, watch, "Watch")])
    }

    @Test("the deadline is learned from the wearable's own returns: twice the slowest of the last five, within floor and ceiling")
    func learned() {
        var h = two(ringLinked: false)
        for (back, deadline) in [(4.0, 10.0), (12.0, 24.0), (3.0, 24.0), (45.0, 60.0)] {
            _ = sleep(&h)
            h.advance(.fractionalSeconds(back))
            _ = h.linkComesUp(watch)
            #expect(deadlineCountdown(h) == nil, "back: nothing left to judge")
            #expect(h.machine.resumeDeadline(watch) == .fractionalSeconds(deadline), "after a return in \(back) s")
        }
        // The next resume's deadline is the learned one.
        _ = sleep(&h)
        #expect(deadlineCountdown(h)?.deadline == h.now + .seconds(60))
        #expect(h.machine.devices[watch]?.learned.resumeReturns == [4, 12, 3, 45])
    }

    @Test("a wearable back before its deadline: no escalation step at all")
    func backInTime() {
        var h = two(ringLinked: false)
        _ = sleep(&h)
        h.advance(.seconds(2))
        _ = h.linkComesUp(watch)
        #expect(deadlineCountdown(h) == nil)
        #expect(!h.log.contains(.powerCycleAdapter))
        #expect(h.log.reports(.resumeEscalation).map(\.reasonToken) == ["auto-connect-and-connect"])
    }

    @Test("the user disconnects it after the resume: past the deadline nothing happens for it")
    func notWantedAnyMore() {
        var h = two(ringLinked: false)
        _ = sleep(&h)
        h.send(.userDisconnect(watch))
        #expect(fireDeadline(&h).isEmpty)
    }
}
