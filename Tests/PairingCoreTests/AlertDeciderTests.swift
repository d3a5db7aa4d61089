import PairingCore
import Testing

/// The host's own alerts (issue 33, item 4): whole lists of alerts for scripted inputs, and the
/// decider fed from the real machine's actions as the daemon feeds it.
@Suite("AlertDecider: events → alerts")
struct AlertDeciderTests {
    let watch = Harness.watch
    let ring = Harness.ring

    /// The machine's facts as a test sets them: the battery level each `.battery` observation
    /// says (the machine keeps it before it says so), the last data `run(to:lastData:)` gives.
    struct Facts: WearableFacts {
        var battery: [DeviceAddress: UInt8] = [:]
        var lastData: [DeviceAddress: Moment] = [:]
        var hostAsleep = false
        func battery(of a: DeviceAddress) -> UInt8? { battery[a] }
        func lastData(of a: DeviceAddress) -> Moment? { lastData[a] }
    }

    /// A decider with the defaults (BatteryLow 15, hysteresis 5, away 10 min, no data 5 min),
    /// fed at explicit moments.
    struct Feed {
        var decider = AlertDecider(config: AlertConfig())
        var facts = Facts()
        var now = Moment.at(0)
        var alerts: [Alert] = []
        mutating func send(_ i: Observation) {
            if case .battery(let a, let level) = i { facts.battery[a] = level }
            alerts += decider.handle(i, now: now, facts: facts)
            // The machine's host is asleep from its handling of the sleep to that of the resume,
            // each after the observers were told (`Observation.before`).
            if i == .hostSleeping { facts.hostAsleep = true }
            if i == .hostResumed { facts.hostAsleep = false }
        }
        mutating func at(_ seconds: Double, _ i: Observation) { now = .at(seconds); send(i) }
        /// Runs time to `seconds` with the wearables' last data at `lastData`, ticking at each
        /// deadline on the way (as the daemon's timer does).
        mutating func run(to seconds: Double, lastData: [DeviceAddress: Moment] = [:]) {
            facts.lastData = lastData
            var ticks = 0
            while let d = decider.nextDeadline(facts), d <= .at(seconds) {
                ticks += 1
                guard ticks <= 100 else { Issue.record("a deadline that a tick does not move on: \(d)"); return }
                now = max(now, d)
                send(.tick)
            }
            now = .at(seconds)
            send(.tick)
        }
    }

    func report(_ a: DeviceAddress, _ kind: Report.Kind, _ from: DeviceState.Kind, _ to: DeviceState.Kind, reason: ReportReason? = nil) -> Observation {
        .report(Report(kind: kind, device: a, name: "Watch", from: .state(from), to: .state(to), reason: reason))
    }

    @Test("battery: once when draining below, not again while low, once more after recovering above threshold + hysteresis")
    func batteryHysteresis() {
        var f = Feed()
        f.send(report(watch, .connected, .connecting, .connected))
        for (t, level) in [(1.0, 40), (2, 20), (3, 16), (4, 15), (5, 14), (6, 12), (7, 14), (8, 16), (9, 19), (10, 14), (11, 10),
                           (12, 20), (13, 25), (14, 30), (15, 14), (16, 13)] {
            f.at(t, .battery(watch, level: UInt8(level)))
        }
        #expect(f.alerts == [
            Alert(kind: .batteryLow, device: watch, name: "Watch", battery: 14),  // 15 → 14: under 15
            // 16, 19 are above 15 but under 15 + 5: still disarmed, 14 and 10 say nothing
            Alert(kind: .batteryLow, device: watch, name: "Watch", battery: 14),  // re-armed at 20, dropped again
        ])
    }

    @Test("battery: already low at the first reading is a crossing; BatteryLow 0 turns it off")
    func batteryFirstReadingAndOff() {
        var f = Feed()
        f.at(1, .battery(ring, level: 5))
        f.at(2, .battery(ring, level: 4))
        #expect(f.alerts == [Alert(kind: .batteryLow, device: ring, battery: 5)])
        var config = AlertConfig()
        config.batteryLow = nil
        var off = Feed(decider: AlertDecider(config: config))
        off.at(1, .battery(ring, level: 5))
        #expect(off.alerts.isEmpty)
    }

    @Test("away: once per absence after AwayLongerThan; a return re-arms it; the user's disconnect is no absence")
    func away() {
        var f = Feed()
        f.send(report(watch, .connected, .connecting, .connected))
        f.at(100, report(watch, .linkLost, .connected, .waitingForDevice, reason: .linkLoss(nil)))
        #expect(f.decider.nextDeadline(f.facts) == .at(700))
        f.run(to: 699)
        #expect(f.alerts.isEmpty)
        f.run(to: 2000)                                                     // still away: said once
        f.at(2100, report(watch, .stateChanged, .waitingForDevice, .connecting))
        f.at(2101, report(watch, .reconnected, .connecting, .connected))
        f.at(3000, report(watch, .linkLost, .connected, .waitingForDevice))
        f.run(to: 3300)                                                     // back within 10 min: nothing
        f.at(3300, report(watch, .reconnected, .waitingForDevice, .connected))
        f.at(4000, report(watch, .userDisconnected, .connected, .disconnected))
        f.run(to: 9000)                                                     // the user's: no alert
        #expect(f.alerts == [
            Alert(kind: .awayTooLong, device: watch, name: "Watch", reason: "link-loss", duration: .seconds(600)),
        ])
        #expect(f.decider.nextDeadline(f.facts) == nil)
    }

    @Test("away: the host's sleep is no absence; the time after the resume counts")
    func awayAndSleep() {
        var f = Feed()
        f.send(report(watch, .connected, .connecting, .connected))
        f.at(10, .hostSleeping)
        f.at(11, .report(Report(kind: .hostAsleep, device: watch, name: "Watch", from: .state(.connected), to: .state(.waitingForDevice), reason: .hostAsleep)))
        f.run(to: 5000)                                                     // asleep (suspended) for long
        #expect(f.alerts.isEmpty)
        f.at(5000, .hostResumed)
        f.run(to: 5599)
        #expect(f.alerts.isEmpty)
        f.run(to: 5600)
        #expect(f.alerts == [Alert(kind: .awayTooLong, device: watch, name: "Watch", reason: "host-asleep", duration: .seconds(600))])
    }

    /// What the decider reads of the sleep is the machine's (`WearableFacts.hostAsleep`), not a
    /// copy of its own: a ring that drops during the sleep, and a watch that connects during it.
    @Test("asleep, as the machine says: a drop during the sleep starts no absence and a link made during it no silence, until the resume")
    func reportsDuringSleep() {
        var f = Feed()                                                  // away 10 min, no data 5 min
        f.send(.report(Report(kind: .connected, device: ring, name: "Ring", from: .state(.connecting), to: .state(.connected))))
        f.at(10, .hostSleeping)
        f.at(20, .report(Report(kind: .linkLost, device: ring, name: "Ring", from: .state(.connected), to: .state(.waitingForDevice), reason: .linkLoss(nil))))
        f.at(30, report(watch, .reconnected, .waitingForDevice, .connected))
        f.run(to: 5000)                                                     // asleep (suspended) for long
        #expect(f.alerts.isEmpty)
        f.at(5000, .hostResumed)
        f.run(to: 5299)
        #expect(f.alerts.isEmpty)
        f.run(to: 5600)
        #expect(f.alerts == [
            Alert(kind: .noData, device: watch, name: "Watch", duration: .seconds(300)),
            Alert(kind: .awayTooLong, device: ring, name: "Ring", reason: "host-asleep", duration: .seconds(600)),
        ])
    }

    @Test("no data: once per silence while connected, measured from the later of the connection and the last data")
    func noData() {
        var f = Feed()
        f.at(0, report(watch, .connected, .connecting, .connected))
        f.run(to: 200, lastData: [watch: .at(200)])                     // data flows until 200
        f.run(to: 499, lastData: [watch: .at(200)])
        #expect(f.alerts.isEmpty)
        f.run(to: 500, lastData: [watch: .at(200)])                     // 300 s without data
        f.run(to: 1000, lastData: [watch: .at(200)])                    // still silent: once
        f.run(to: 1010, lastData: [watch: .at(1005)])                   // data again: re-armed
        f.run(to: 1305, lastData: [watch: .at(1005)])
        #expect(f.alerts == [
            Alert(kind: .noData, device: watch, name: "Watch", duration: .seconds(300)),
            Alert(kind: .noData, device: watch, name: "Watch", duration: .seconds(300)),
        ])
    }

    @Test("no data: a link paird remade for lack of data is the same silence; away time is not silence")
    func noDataAcrossRemakeAndAbsence() {
        var f = Feed()
        f.at(0, report(watch, .connected, .connecting, .connected))
        f.at(5, report(watch, .stateChanged, .connected, .connecting, reason: .health(.noData)))
        f.at(8, report(watch, .reconnected, .connecting, .connected))
        f.run(to: 299)
        #expect(f.alerts.isEmpty)
        f.run(to: 300)                                                  // 300 s since the first connection
        #expect(f.alerts == [Alert(kind: .noData, device: watch, name: "Watch", duration: .seconds(300))])
        f.alerts = []
        // Away for 20 min (last data long ago), back: the silence is counted from the return.
        f.at(400, report(watch, .linkLost, .connected, .waitingForDevice))
        f.run(to: 1600, lastData: [watch: .at(100)])
        f.at(1600, report(watch, .reconnected, .waitingForDevice, .connected))
        f.run(to: 1899, lastData: [watch: .at(100)])
        #expect(f.alerts == [Alert(kind: .awayTooLong, device: watch, name: "Watch", duration: .seconds(600))])
        f.run(to: 1900, lastData: [watch: .at(100)])
        #expect(f.alerts.last == Alert(kind: .noData, device: watch, name: "Watch", duration: .seconds(300)))
    }

    @Test("needsRepair and bluetoothd's crash: one alert each, as reported")
    func repairAndCrash() {
        var f = Feed()
        f.at(1, .battery(watch, level: 50))
        f.at(2, report(watch, .needsRepair, .connected, .needsRepair, reason: .repair(.authentication)))
        f.at(3, .bluetoothdCrashed(cause: "signal SEGV"))
        f.run(to: 10_000)                                                // needsRepair is no absence
        #expect(f.alerts == [
            Alert(kind: .needsRepair, device: watch, name: "Watch", battery: 50, reason: "authentication"),
            Alert(kind: .bluetoothdCrashed, device: nil, reason: "signal SEGV"),
        ])
    }

    @Test("fed from the real machine: a link loss that lasts, a lost bond; unpaired is forgotten")
    func fromTheMachine() {
        var h = Harness.connected()
        var decider = AlertDecider(config: AlertConfig())
        var alerts: [Alert] = []
        func send(_ e: Event) {
            if let i = Observation.before(e) { alerts += decider.handle(i, now: h.now, facts: h.machine) }
            for a in h.send(e) { if let i = Observation.after(a) { alerts += decider.handle(i, now: h.now, facts: h.machine) } }
        }
        func tick() { alerts += decider.handle(.tick, now: h.now, facts: h.machine) }
        h.advance(.seconds(10))
        send(.linkDown(watch, linkLoss))
        h.advance(.seconds(601))
        tick()
        send(.linkDown(watch, DisconnectClassifier.Evidence(reason: .authentication)))
        h.advance(.seconds(3600))
        tick()
        #expect(alerts.map(\.kind) == [.awayTooLong, .needsRepair])
        #expect(alerts.first?.device == watch && alerts.first?.name == "Watch")
        #expect(decider.nextDeadline(h.machine) == nil)
    }
}
