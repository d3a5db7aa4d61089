import Testing
import PairingCore

/// The lost-bond half of "Keeping a wearable connected": a wearable that forgot its bond, as each
/// BlueZ and kernel shows it, asks for re-pairing and never loops; links that only look like it
/// (re-read services, quiet or flapping links whose bond works) never trip it.
extension ReconnectScenarioTests {
    @Test("a lost bond asks for re-pairing and never loops",
          arguments: [Event.bondLost(Harness.watch), .deviceRemoved(Harness.watch),
                      .linkDown(Harness.watch, .init(stillBonded: false))])
    func bondLost(event: Event) {
        var h = Harness.connected()
        var out = h.send(event)
        let why: RepairReason = if case .deviceRemoved = event { .deviceRemoved } else { .bondRemoved }
        #expect(out == [.setTrusted(watch, false), .disconnect(watch),
                        watchReport(.needsRepair, .connected, .needsRepair, reason: .repair(why)), .updateAutoConnect([])])
        for _ in 0..<10 { out += h.fireNext(); out += h.send(.linkDown(watch, linkLoss)) }
        #expect(out.connects() == 0)
        #expect(h.armed.isEmpty)
    }

    @Test("5.66, wearable forgot its bond: the link comes up and drops before services resolve, again and again → needsRepair")
    func forgottenBondOn566() {
        var h = Harness.connected()
        h.send(.linkDown(watch, linkLoss)) // forget-bond drops the link: looks like any link loss
        var connects = 0
        for round in 1...3 {
            h.send(.linkUp(watch))          // kernel auto-connect: the link comes up…
            let out = h.send(.linkDown(watch, linkLoss)) // …and encryption fails
            if round < 3 {
                #expect(h.stateName(watch) == "waitingForDevice")
            } else {
                #expect(h.state(watch) == .needsRepair(reason: .suspectedBondLoss))
                #expect(out.contains(.setTrusted(watch, false)), "BlueZ's auto-connect is turned off for it too")
                #expect(out.contains(.disconnect(watch)))
            }
            connects += out.connects()
        }
        for _ in 0..<20 { connects += h.fireNext().connects() }
        #expect(connects == 0)
        #expect(h.armed.isEmpty)
    }

    @Test("5.66, wearable forgot its bond: Connect answered at once with abort-by-local, thrice → needsRepair")
    func quickAbortsMeanBondLoss() {
        var h = Harness.connected()
        h.send(.linkDown(watch, linkLoss))
        h.fireNext()
        _ = h.connectFailed(watch, .abortedByLocal, after: .milliseconds(300))
        #expect(h.stateName(watch) == "waitingForDevice")
        h.fireNext()
        _ = h.connectFailed(watch, .abortedByLocal, after: .milliseconds(300))
        h.fireNext()
        let out = h.connectFailed(watch, .abortedByLocal, after: .milliseconds(300))
        #expect(h.stateName(watch) == "needsRepair")
        #expect(out.reports(.needsRepair).first?.reasonToken == "suspected-bond-loss")
    }

    @Test("5.66, wearable forgot its bond while connected: the link stays up but services go; discovery times out, and again → needsRepair")
    func servicesLostWhileConnected() {
        var h = Harness.connected()
        var out = h.send(.servicesLost(watch))
        #expect(h.stateName(watch) == "discovering")
        #expect(out.connects() == 0 && out.disconnects == 0, "give it the discovery window first")
        for round in 1...3 {
            out = h.fireNext() // discovery countdown: our own disconnect
            #expect(out.disconnects == 1)
            if round == 3 { break }
            h.fireNext()       // backoff → Connect
            h.send(.linkUp(watch))
        }
        #expect(h.state(watch) == .needsRepair(reason: .suspectedBondLoss))
        #expect(h.armed.isEmpty)
        #expect(h.send(.servicesLost(watch)).isEmpty, "ignored outside connected")
    }

    @Test("wearable forgot its bond, seen on kernel 6.12 (CI): the link stays up while ServicesResolved turns false and true again, nothing from the wearable → needsRepair")
    func forgottenBondTogglingServices() {
        var h = Harness.connected()             // proven: the bond worked until now
        var reconnects = 0
        for round in 1...4 {
            h.advance(.seconds(3))
            let lost = h.send(.servicesLost(watch))
            if round < 4 {
                #expect(h.stateName(watch) == "discovering", "round \(round)")
                #expect(lost.disconnects == 0)
                h.send(.servicesResolved(watch)) // from BlueZ's cache
                reconnects += h.send(.setUpLinkFinished(watch, failure: nil)).reports(.reconnected).count
            } else {
                // the first loss was on the proven link; the next three on unproven ones
                #expect(h.state(watch) == .needsRepair(reason: .suspectedBondLoss))
                #expect(lost.contains(.setTrusted(watch, false)))
                #expect(lost.disconnects == 1, "the useless link is dropped")
            }
        }
        #expect(reconnects == 3)
        var connects = 0
        for _ in 0..<20 { connects += h.fireNext().connects() }
        #expect(connects == 0)
        #expect(h.armed.isEmpty)
    }

    @Test("forgotten bond, the bed's timeline (fb-run4): the link stays up and loses its services 4, 31 and 34 s after they resolved (ATT gives up) → needsRepair at the third")
    func forgottenBondAttTimeoutCycle() {
        var h = Harness.connected()
        h.send(.linkDown(watch, linkLoss))       // forget-bond drops the proven link
        h.send(.linkUp(watch))
        for (round, after) in [(1, 4.0), (2, 30.8), (3, 34.3)] {
            h.send(.servicesResolved(watch))     // from the cache, 0.1–0.3 s after the loss
            h.send(.setUpLinkFinished(watch, failure: nil))
            h.advance(.milliseconds(Int64(after * 1000)))
            h.send(.servicesLost(watch))
            if round < 3 {
                #expect(h.stateName(watch) == "discovering")
                #expect(h.machine.devices[watch]?.setupFailures == round)
            }
        }
        #expect(h.state(watch) == .needsRepair(reason: .suspectedBondLoss))
    }

    @Test("a set-up reply that arrives after the services went does not make the link connected")
    func staleSetUpReplyAfterServicesLost() {
        var h = Harness.connected()
        h.send(.servicesLost(watch))
        h.send(.servicesResolved(watch))          // setUpLink #2 issued
        h.send(.servicesLost(watch))              // ignored in discovering, but the link is unresolved
        #expect(h.send(.setUpLinkFinished(watch, failure: nil)).reports(.reconnected).isEmpty)
        #expect(h.stateName(watch) == "discovering")
        h.send(.servicesResolved(watch))
        #expect(h.send(.setUpLinkFinished(watch, failure: nil)).reports(.reconnected).count == 1)
        #expect(h.state(watch)?.isConnected == true)
    }

    @Test("BlueZ may signal ServicesResolved=false before Connected=false: a proven link going that way is a plain link loss")
    func provenLinkLosingServicesThenDropping() {
        var h = Harness.connected()
        for _ in 0..<5 {
            h.advance(.seconds(60))
            h.send(.servicesLost(watch))
            let out = h.send(.linkDown(watch, linkLoss))
            #expect(out.reports(.linkLost).count == 1)
            #expect(h.stateName(watch) == "waitingForDevice")
            #expect(h.machine.devices[watch]?.setupFailures == 0)
            h.send(.linkUp(watch))
            h.send(.servicesResolved(watch))
            h.send(.linkProven(watch))
            h.send(.setUpLinkFinished(watch, failure: nil))
        }
        #expect(h.state(watch)?.isConnected == true)
    }

    @Test("wearable forgot its bond, seen on the 6.12 bed: each unproven link loses its services, then drops — one failed set-up each, needsRepair at the third")
    func forgottenBondServicesLostThenDrop() {
        var h = Harness.connected()
        h.send(.linkDown(watch, linkLoss))       // forget-bond: the proven link drops
        for round in 1...3 {
            h.send(.linkUp(watch))
            h.send(.servicesResolved(watch))     // from the cache
            h.send(.setUpLinkFinished(watch, failure: nil))
            h.advance(.seconds(2))
            let lost = h.send(.servicesLost(watch))
            if round < 3 {
                #expect(h.stateName(watch) == "discovering")
                #expect(h.machine.devices[watch]?.setupFailures == round)
                h.send(.linkDown(watch, linkLoss))
                #expect(h.machine.devices[watch]?.setupFailures == round, "the drop is the same failure")
                #expect(h.stateName(watch) == "waitingForDevice")
            } else {
                #expect(h.state(watch) == .needsRepair(reason: .suspectedBondLoss))
                #expect(lost.disconnects == 1)
            }
        }
    }

    @Test("services re-read on a live link (Service Changed) over which the wearable answers each time never trip the lost-bond heuristic")
    func servicesRereadOnProvenLinks() {
        var h = Harness.connected()
        for _ in 0..<20 {
            h.advance(.seconds(1))
            h.send(.servicesLost(watch))
            h.send(.servicesResolved(watch))
            h.send(.linkProven(watch))
            h.send(.setUpLinkFinished(watch, failure: nil))
            #expect(h.state(watch)?.isConnected == true)
        }
    }

    @Test("a quiet link (nothing ever proves it) whose services are re-read now and then is not a lost bond")
    func quietLinkServicesRereadRarely() {
        var h = Harness.connected()
        for _ in 0..<10 {
            h.advance(MachineConfig().proofWindow + .seconds(1))
            h.send(.servicesLost(watch))
            h.send(.servicesResolved(watch))
            h.send(.setUpLinkFinished(watch, failure: nil))
            #expect(h.state(watch)?.isConnected == true)
        }
    }

    @Test("a link that becomes usable clears the count of failed setups")
    func setupFailuresReset() {
        var h = Harness.connected()
        for _ in 0..<5 {
            h.send(.linkDown(watch, linkLoss))
            h.send(.linkUp(watch))
            h.send(.linkDown(watch, linkLoss))
            h.send(.linkUp(watch))
            h.send(.servicesResolved(watch))
            h.send(.linkProven(watch))
            h.send(.setUpLinkFinished(watch, failure: nil))
            #expect(h.state(watch)?.isConnected == true)
        }
    }


    @Test("a flapping link over which the wearable answers each time (the bond works) never trips the lost-bond heuristic")
    func flappingProvenLinkIsNotABondLoss() {
        var h = Harness.connected()
        var connects = 0
        for _ in 0..<50 {
            connects += h.send(.linkDown(watch, linkLoss)).connects()
            h.send(.linkUp(watch))
            h.send(.servicesResolved(watch))
            h.send(.linkProven(watch))         // a notification or the battery read came through…
            connects += h.send(.linkDown(watch, linkLoss)).connects() // …dropped before setUpLink replied
            h.send(.linkUp(watch))
            h.send(.servicesResolved(watch))
            h.send(.linkProven(watch))
            #expect(h.stateName(watch) == "discovering")
        }
        #expect(connects == 0)
        h.send(.setUpLinkFinished(watch, failure: nil))
        #expect(h.state(watch)?.isConnected == true)
    }

    @Test("wearable forgot its bond, seen on kernel 6.12: links resolve from BlueZ's cache and even set up, then drop seconds later with nothing from the wearable → needsRepair")
    func forgottenBondResolvingFromCache() {
        var h = Harness.connected()
        h.send(.linkDown(watch, linkLoss))     // forget-bond drops the link: any link loss
        for round in 1...3 {
            h.send(.linkUp(watch))              // kernel auto-connect
            h.send(.servicesResolved(watch))    // from the cache
            let setUp = h.send(.setUpLinkFinished(watch, failure: nil)) // StartNotify accepted; ReadValue "Not connected"
            #expect(setUp.reports(.reconnected).count == 1)
            h.advance(.seconds(4))
            let out = h.send(.linkDown(watch, linkLoss)) // encryption with the stale key failed
            if round < 3 {
                #expect(h.stateName(watch) == "waitingForDevice")
                #expect(out.reports(.linkLost).count == 1)
            } else {
                #expect(h.state(watch) == .needsRepair(reason: .suspectedBondLoss))
            }
        }
    }

    @Test("a long-lived link that never carried data (a quiet ring) dropping is a plain link loss, however often")
    func quietLongLinksAreNotCounted() {
        var h = Harness.connected()
        for _ in 0..<10 {
            h.send(.linkDown(watch, linkLoss))
            h.send(.linkUp(watch))
            h.send(.servicesResolved(watch))
            h.send(.setUpLinkFinished(watch, failure: nil))
            h.advance(MachineConfig().proofWindow + .seconds(1))
        }
        h.send(.linkDown(watch, linkLoss))
        #expect(h.stateName(watch) == "waitingForDevice")
    }

    @Test("a resolved link that is not set up in time is dropped and retried, but not counted as a lost bond")
    func slowSetUpOfResolvedLinkIsRetried() {
        var h = Harness.connected()
        h.send(.linkDown(watch, linkLoss))
        h.send(.linkUp(watch))
        for _ in 0..<5 {
            h.send(.servicesResolved(watch))
            let out = h.fireNext() // discovery countdown: StartNotify never answered
            #expect(out.disconnects == 1)
            #expect(h.stateName(watch) == "connecting")
            // our own disconnect, seen while waiting for it: Connect() at once
            #expect(h.send(.linkDown(watch, linkLoss)).connects() == 1)
            h.send(.linkUp(watch))
        }
        #expect(h.stateName(watch) == "discovering", "after 5 timeouts of a resolved link: still trying, not needsRepair")
    }
    @Test("our Connect answered by the old link before our own disconnect took: that drop is ours; connect again, count nothing")
    func connectRacingOwnDisconnect() {
        var h = Harness.connected()
        for _ in 0..<3 {
            h.send(.linkDown(watch, linkLoss))
            h.send(.linkUp(watch))
            #expect(h.fireNext().disconnects == 1)     // discovery countdown (failed setup 1): drop it ourselves
            #expect(h.fireNext().connects(watch) == 1) // LinkDownWait over, but BlueZ has not dropped it yet…
            h.connectSucceeded(watch)                  // …so 5.66 answers Connect at once
            #expect(h.stateName(watch) == "discovering")
            let out = h.send(.linkDown(watch, linkLoss)) // now our disconnect takes effect
            #expect(out.reports(.linkLost).isEmpty, "our own disconnect is no link loss")
            #expect(out.connects(watch) == 1, "connect again at once, not wait passively")
            #expect(h.stateName(watch) == "connecting")
            h.connectSucceeded(watch)
            #expect(h.fireNext().disconnects == 1, "discovery countdown again (failed setup 2): not yet needsRepair")
            #expect(h.stateName(watch) == "connecting")
            h.fireNext()
            h.connectSucceeded(watch)
            h.send(.servicesResolved(watch))
            h.send(.linkProven(watch))
            h.send(.setUpLinkFinished(watch, failure: nil))
            #expect(h.state(watch)?.isConnected == true)
        }
        // A drop we did not ask for is a link loss again.
        let out = h.send(.linkDown(watch, linkLoss))
        #expect(out.reports(.linkLost).count == 1)
    }

    @Test("Connect failing authentication (the wearable forgot us) means needsRepair")
    func connectAuthFailure() {
        var h = Harness.connected()
        h.send(.linkDown(watch, linkLoss))
        h.fireNext()
        _ = h.connectFailed(watch, BlueZFailure(errorName: "org.bluez.Error.AuthenticationFailed", message: ""))
        #expect(h.stateName(watch) == "needsRepair")
    }

    @Test("re-pairing a needsRepair wearable whose BlueZ object already lost the bond: nothing to remove, paired again once heard")
    func repair() {
        var h = Harness.connected()
        h.send(.bondLost(watch))
        var out = h.send(.userPair(PairRequest(address: watch)))
        #expect(!out.contains(.removeDevice(watch)), "a bond is removed only once the wearable is heard (TrustPairingTests)")
        out = h.send(.candidateFound(Candidate(address: watch, name: "Watch", rssi: -60)))
        #expect(!out.contains(.removeDevice(watch)), "its object holds no bond: nothing to remove")
        #expect(out.contains { if case .pair = $0 { true } else { false } })
        h.send(.pairSucceeded(watch, call: h.lastPairCall!))
        _ = h.connectSucceeded(watch)
        h.send(.servicesResolved(watch))
        out = h.send(.setUpLinkFinished(watch, failure: nil))
        #expect(h.state(watch)?.isConnected == true)
        #expect(out.pairingOutcome == .success(watch, name: "Watch"))
    }
}
