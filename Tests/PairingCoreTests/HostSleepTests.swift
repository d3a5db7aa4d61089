#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import PairingCore
import Testing

/// The host sleeps (logind's PrepareForSleep): links let go in order, nothing counted against the
/// wearable, every wanted wearable brought back after the resume.
@Suite("When the host sleeps")
struct HostSleepTests {
    let watch = Harness.watch
    let ring = Harness.ring

    func two() -> Harness {
        var h = Harness(state: PersistedState(devices: [
            PersistedDevice(identity: DeviceIdentity(address: watch, name: "Watch", serviceUUIDs: [ServiceUUID.heartRate]),
                            wanted: .connected, pairedAt: 0, updatedAt: 0),
            PersistedDevice(identity: DeviceIdentity(address: ring, name: "Ring", serviceUUIDs: [ServiceUUID.heartRate]),
                            wanted: .connected, pairedAt: 0, updatedAt: 0),
        ]))
        h.send(.adapterReady([watch: BlueZDeviceView(connected: true, servicesResolved: true), ring: BlueZDeviceView()]))
        h.send(.linkProven(watch))
        h.send(.setUpLinkFinished(watch, failure: nil))
        return h
    }

    @Test("before the sleep: the connected one's link is let go (Disconnect), it waits with host-asleep, reported as such, not as a link loss")
    func letGo() {
        var h = two()
        let out = h.send(.hostSleeping)
        #expect(out.contains(.disconnect(watch)))
        #expect(!out.contains(.disconnect(ring)), "the ring has no link")
        #expect(h.stateName(watch) == "waitingForDevice")
        #expect(h.machine.device(watch)?.lastDisconnect?.reason.token == "host-asleep")
        #expect(out.reports(.hostAsleep).map(\.device) == [watch])
        #expect(out.reports(.linkLost).isEmpty)
        #expect(h.machine.host.asleep)
        #expect(h.machine.host.lastSleep?.awaited == [watch, ring].sorted())
        // The link-down of our own Disconnect finds it waiting: nothing more happens.
        #expect(h.send(.linkDown(watch, linkLoss)).isEmpty)
    }

    @Test("a link the kernel drops at the sleep (its signal arriving after the resume) is host-asleep too, never a set-up failure or a link loss")
    func droppedByTheKernel() {
        var h = two()
        // A link that is being set up when the host goes to sleep, whose drop is only seen after.
        h.send(.linkUp(ring))
        h.advance(.seconds(1))
        h.send(.hostSleeping)
        h.advance(.seconds(600))
        h.send(.hostResumed)
        h.advance(.seconds(1))
        let out = h.send(.linkDown(ring, linkLoss))
        #expect(out.reports(.linkLost).isEmpty)
        #expect(h.machine.device(ring)?.setupFailures == 0)
        #expect(h.machine.device(ring)?.lastDisconnect?.reason.token == "host-asleep")
    }

    @Test("a link that came up after the resume and drops is an ordinary link loss")
    func afterTheResume() {
        var h = two()
        h.send(.hostSleeping)
        h.advance(.seconds(60))
        h.send(.hostResumed)
        h.advance(.seconds(2))
        _ = h.linkComesUp(watch)
        h.advance(.seconds(3))
        let out = h.send(.linkDown(watch, linkLoss))
        #expect(out.reports(.linkLost).map(\.device) == [watch])
        #expect(h.machine.device(watch)?.lastDisconnect?.reason.token == "link-loss")
    }

    @Test("after the resume: the auto-connect re-registered, each wanted wearable brought back (head start, then Connect()); each one's return time kept")
    func resume() {
        var h = two()
        h.send(.hostSleeping)
        h.send(.linkDown(watch, linkLoss))
        h.advance(.seconds(3600))
        let out = h.send(.hostResumed)
        #expect(out.contains { if case .updateAutoConnect = $0 { true } else { false } })
        #expect(!h.machine.host.asleep)
        for a in [watch, ring] {
            guard case .waitingForDevice(.fallbackDue(let c))? = h.state(a) else {
                Issue.record("\(a): \(h.stateName(a) ?? "nil")"); continue
            }
            #expect(c.deadline == h.now.advanced(byNanoseconds: MachineConfig().autoConnectHeadStart.nanoseconds))
        }
        h.advance(.milliseconds(2500))
        _ = h.linkComesUp(watch)
        let back = h.machine.host.lastSleep?.backTimes[watch]
        #expect(back.map { $0.since(h.machine.host.lastSleep!.resumedAt!) } == .milliseconds(2500))
        #expect(h.machine.host.lastSleep?.backTimes[ring] == nil)
        // The ring's head start runs out: paird's own Connect().
        #expect(h.fireNext().connects(ring) == 1)
    }

    @Test("a link the kernel made after it resumed, before logind said so, that carried data and then drops: a link loss")
    func madeBeforeTheSignalAlive() {
        var h = two()
        h.send(.hostSleeping)
        h.advance(.seconds(30))
        _ = h.linkComesUp(watch) // the kernel resumed and the auto-connect brought it back…
        h.advance(.milliseconds(500))
        h.send(.hostResumed)      // …before systemd-sleep ended and logind sent PrepareForSleep(false)
        h.advance(.seconds(1))
        h.send(.dataReceived(watch, characteristic: ServiceUUID.heartRateMeasurement))
        h.advance(.seconds(3))
        let out = h.send(.linkDown(watch, linkLoss)) // walked away
        #expect(out.reports(.linkLost).map(\.device) == [watch])
        #expect(h.machine.device(watch)?.lastDisconnect?.reason.token == "link-loss")
    }

    @Test("a lost bond found at a drop during the sleep keeps its own path")
    func bondLostThroughSleep() {
        var h = two()
        _ = h.linkComesUp(ring)
        h.send(.hostSleeping)
        h.send(.hostResumed)
        h.send(.linkUp(watch))
        h.send(.linkDown(watch, DisconnectClassifier.Evidence(stillBonded: false)))
        #expect(h.state(watch) == .needsRepair(reason: .bondRemoved))
    }

    @Test("no PrepareForSleep(true) seen: a resume alone changes nothing")
    func resumeAlone() {
        var h = two()
        #expect(h.send(.hostResumed).isEmpty)
        #expect(h.machine.host.lastSleep == nil)
    }

    @Test("the record: a link the sleep took whose drop is seen only after the resume is away from then on, not left out")
    func recordedLateDrop() {
        var h = two()
        var recorder = HistoryRecorder()
        var records: [HistoryRecord] = []
        func send(_ e: Event) {
            if let i = Observation.before(e) { records += recorder.handle(i, now: h.now, facts: h.machine) }
            for a in h.send(e) { if let i = Observation.after(a) { records += recorder.handle(i, now: h.now, facts: h.machine) } }
        }
        _ = recorder.handle(.pairdStarted, now: h.now, facts: h.machine)
        send(.linkDown(ring, linkLoss))
        h.advance(.seconds(5))
        send(.hostSleeping)
        h.advance(.milliseconds(800))
        send(.linkUp(ring))   // the auto-connect, between PrepareForSleep and the freeze…
        h.advance(.seconds(60))
        send(.hostResumed)
        records.removeAll()
        h.advance(.seconds(1))
        send(.linkDown(ring, linkLoss)) // …the kernel's suspend ended it, and paird hears of it now
        #expect(h.machine.device(ring)?.lastDisconnect?.reason.token == "host-asleep")
        #expect(h.machine.device(ring)?.setupFailures == 0)
        #expect(records.count == 1)
        #expect(records.first?.condition == .away && records.first?.reason == "host-asleep")
    }

    @Test("the record: the sleep is left out of availability (unwanted, host-asleep) and the time after the resume counts as away")
    func recorded() {
        var h = Harness(state: PersistedState(devices: [
            PersistedDevice(identity: DeviceIdentity(address: watch, name: "Watch", serviceUUIDs: [ServiceUUID.heartRate]),
                            wanted: .connected, pairedAt: 0, updatedAt: 0),
            PersistedDevice(identity: DeviceIdentity(address: ring, name: "Ring", serviceUUIDs: [ServiceUUID.heartRate]),
                            wanted: .connected, pairedAt: 0, updatedAt: 0),
        ]))
        var recorder = HistoryRecorder()
        var records: [HistoryRecord] = [], all: [HistoryRecord] = []
        func send(_ e: Event) {
            var out: [HistoryRecord] = []
            if let i = Observation.before(e) { out += recorder.handle(i, now: h.now, facts: h.machine) }
            for a in h.send(e) { if let i = Observation.after(a) { out += recorder.handle(i, now: h.now, facts: h.machine) } }
            records += out
            all += out
        }
        all += recorder.handle(.pairdStarted, now: h.now, facts: h.machine)
        send(.adapterReady([watch: BlueZDeviceView(connected: true, servicesResolved: true), ring: BlueZDeviceView()]))
        send(.setUpLinkFinished(watch, failure: nil))
        #expect(h.state(watch)?.isConnected == true)
        records.removeAll()
        h.advance(.seconds(10))
        send(.hostSleeping)
        // Both: the connected watch (its drop) and the ring, away since paird's start.
        #expect(records.filter { $0.reason == "host-asleep" && $0.condition == .unwanted }.compactMap(\.device).sorted()
                == [watch, ring].sorted().map(\.description))
        #expect(records.first { $0.device == watch.description }?.kind == .down)
        h.advance(.seconds(100))
        records.removeAll()
        send(.hostResumed)
        #expect(records.map(\.condition) == [.away, .away])
        h.advance(.seconds(4))
        records.removeAll()
        send(.linkUp(watch)); send(.servicesResolved(watch)); send(.setUpLinkFinished(watch, failure: nil))
        #expect(records.first?.kind == .up)
        #expect(records.first?.away == 4, "away from the resume, not from the sleep")
        // Availability from the first link to 6 s after the return: 10 s + 6 s connected, 4 s away,
        // the 100 s asleep left out and said so.
        h.advance(.seconds(6))
        let a = HistoryAnalysis.analyse(all, device: watch.description, since: all[0].at, until: h.now.unixTime)
        #expect(a.asleepSeconds == 100 && a.notWantedSeconds == 100)
        #expect(a.awaySeconds == 4 && a.connectedSeconds == 16)
        #expect(a.availabilityPercent == 80)
        #expect(a.dropsByReason == ["host-asleep": 1], "one drop, the sleep's, by its own reason: \(a.dropsByReason)")
    }
}
