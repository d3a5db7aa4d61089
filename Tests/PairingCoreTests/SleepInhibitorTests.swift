import PairingCore
import Testing

/// logind's delay inhibitor before a sleep: the machine says when it goes (issue 44, "the driver
/// only drives"): once BlueZ answered every Disconnect() made for the sleep, at the latest after
/// `HostWatch.releaseAfter`, at once when no link was up.
@Suite("The sleep inhibitor's release")
struct SleepInhibitorTests {
    let watch = Harness.watch
    let ring = Harness.ring

    /// Watch and ring paired; `linked` of them connected.
    func host(linked: [DeviceAddress]) -> Harness {
        var h = Harness(state: PersistedState(devices: [watch, ring].map { a in
            PersistedDevice(identity: DeviceIdentity(address: a, name: a == watch ? "Watch" : "Ring", serviceUUIDs: [ServiceUUID.heartRate]),
                            wanted: .connected, pairedAt: 0, updatedAt: 0)
        }))
        h.send(.adapterReady(Dictionary(uniqueKeysWithValues: [watch, ring].map { a in
            (a, linked.contains(a) ? BlueZDeviceView(connected: true, servicesResolved: true) : BlueZDeviceView())
        })))
        for a in linked {
            h.send(.linkProven(a))
            h.send(.setUpLinkFinished(a, failure: nil))
        }
        return h
    }

    /// The sleep's release countdown that `out` armed.
    func releaseCountdown(_ out: [Action]) -> Countdown? {
        out.compactMap { if case .arm(let c) = $0, c.id.purpose == .sleepRelease { c } else { nil } }.first
    }

    @Test("no link up: the inhibitor goes at once, no countdown")
    func noLink() {
        var h = host(linked: [])
        h.advance(.seconds(10))
        let out = h.send(.hostSleeping)
        #expect(out.last == .releaseSleepInhibitor(.noLinks))
        #expect(releaseCountdown(out) == nil)
        #expect(out.disconnects == 0)
    }

    @Test("the links let go: the inhibitor goes when BlueZ answered the last Disconnect(), and the countdown is cancelled")
    func everyLinkLetGo() throws {
        var h = host(linked: [watch, ring])
        h.advance(.seconds(10))
        let sleeping = h.send(.hostSleeping)
        let c = try #require(releaseCountdown(sleeping))
        #expect(c.deadline == h.now + HostWatch.releaseAfter)
        #expect(sleeping.last == .arm(c), "armed after both Disconnect() calls")
        #expect(sleeping.disconnects == 2)
        #expect(!sleeping.contains { if case .releaseSleepInhibitor = $0 { true } else { false } })
        h.advance(.milliseconds(300))
        #expect(h.send(.disconnectAnswered(ring)) == [], "the watch's is still out")
        #expect(h.machine.host.lettingGo == [watch])
        h.advance(.milliseconds(300))
        #expect(h.send(.disconnectAnswered(watch)) == [.cancel(c.id), .releaseSleepInhibitor(.everyLinkLetGo)])
        #expect(h.machine.host.lettingGo.isEmpty)
        #expect(h.armed[c.id] == nil)
    }

    @Test("a Disconnect() BlueZ never answers: the countdown releases the inhibitor, saying how many were out; a late answer changes nothing")
    func timedOut() throws {
        var h = host(linked: [watch, ring])
        let c = try #require(releaseCountdown(h.send(.hostSleeping)))
        h.send(.disconnectAnswered(watch))
        #expect(h.fireNext() == [.releaseSleepInhibitor(.timedOut(unanswered: 1))])
        #expect(h.now == c.deadline)
        #expect(h.send(.disconnectAnswered(ring)) == [])
    }

    @Test("a resume before the release cancels its countdown; answers after it, and any Disconnect() outside a sleep, release nothing")
    func resumeFirst() throws {
        var h = host(linked: [watch])
        let c = try #require(releaseCountdown(h.send(.hostSleeping)))
        h.advance(.seconds(1))
        let resumed = h.send(.hostResumed)
        #expect(resumed.first == .cancel(c.id))
        #expect(h.armed[c.id] == nil)
        #expect(h.send(.disconnectAnswered(watch)) == [])
        // The countdown, were it to fire all the same (a cancel and a fire crossing), is stale.
        #expect(h.send(.countdownFired(c.id)) == [])
        // A user's disconnect while awake: its answer is no release.
        h.advance(.seconds(5))
        h.send(.userDisconnect(watch))
        #expect(h.send(.disconnectAnswered(watch)) == [])
    }
}
