import Testing
import PairingCore

/// Every way into `needsRepair` takes the device off the kernel's auto-connect list in the same
/// step: untrusted, disconnected, reported, and an auto-connect update without its services.
/// (Three of the routes below emitted no update before the rule moved into the machine's `move`.)
@Suite("needsRepair routes")
struct RepairRouteTests {
    let watch = Harness.watch

    /// The actions of one step, with the report reduced to its kind and states.
    func shape(_ actions: [Action]) -> [String] {
        actions.map {
            if case .report(let r) = $0 { return "report \(r.kind) \(r.fromToken)→\(r.toToken)" }
            return "\($0)"
        }
    }

    func expectRepair(_ actions: [Action], from: String, countdown: Countdown? = nil) {
        var expected: [Action] = []
        if let c = countdown { expected.append(.cancel(c.id)) }
        expected += [.setTrusted(watch, false), .disconnect(watch)]
        let expectedShape = shape(expected) + ["report needsRepair \(from)→needsRepair", "\(Action.updateAutoConnect([]))"]
        #expect(shape(actions) == expectedShape)
    }

    @Test("a link loss on a connected wearable whose bond BlueZ no longer has")
    func linkDownBondGone() {
        var h = Harness.connected()
        let actions = h.send(.linkDown(watch, DisconnectClassifier.Evidence(stillBonded: false)))
        #expect(h.stateName(watch) == "needsRepair")
        expectRepair(actions, from: "connected")
    }

    @Test("an authentication failure while waiting for the wearable (BlueZ ≥ 5.83 says why)")
    func linkDownAuthWhileWaiting() {
        var h = Harness.connected()
        h.send(.linkDown(watch, linkLoss))
        #expect(h.stateName(watch) == "waitingForDevice")
        let countdown = h.state(watch)?.countdown
        let actions = h.send(.linkDown(watch, DisconnectClassifier.Evidence(reason: .authentication)))
        #expect(h.stateName(watch) == "needsRepair")
        expectRepair(actions, from: "waitingForDevice", countdown: countdown)
    }

    @Test("a link set-up that fails with an authentication error")
    func setUpAuthFailure() {
        var h = Harness.connected()
        h.send(.linkDown(watch, linkLoss))
        h.send(.linkUp(watch))
        h.send(.servicesResolved(watch))
        #expect(h.stateName(watch) == "discovering")
        let countdown = h.state(watch)?.countdown
        let actions = h.send(.setUpLinkFinished(watch, failure: .authentication))
        #expect(h.stateName(watch) == "needsRepair")
        expectRepair(actions, from: "discovering", countdown: countdown)
    }
}
