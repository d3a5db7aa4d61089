import Testing
import PairingCore

/// BlueZ's agent questions during `pairctl pair`, and the ones nobody asked for.
@Suite("Pairing that asks the user")
struct AgentTests {
    let watch = Harness.watch
    let other = Harness.ring
    let hr = ServiceUUID.heartRate

    /// A session in the `pairing` phase with the watch (Pair() in flight).
    func pairing(_ answers: PairingAnswers) -> Harness {
        var h = Harness()
        h.send(.adapterReady([:]))
        h.send(.userPair(PairRequest(serviceUUIDs: [hr], answers: answers)))
        h.send(.candidateFound(Candidate(address: watch, name: "Watch", rssi: -60, serviceUUIDs: [hr])))
        return h
    }

    @Test("a passkey given in advance (--passkey) answers RequestPasskey at once")
    func passkeyInAdvance() {
        var h = pairing(PairingAnswers(passkey: 123_456))
        let out = h.send(.agentAsked(watch, request: 7, .enterPasskey))
        #expect(out == [.answerAgent(request: 7, .passkey(123_456)), .pairingProgress(.answered(watch))])
    }

    @Test("on a terminal: the question goes to pairctl, the answer to BlueZ; a second answer is refused")
    func interactivePasskey() {
        var h = pairing(PairingAnswers(interactive: true))
        var out = h.send(.agentAsked(watch, request: 7, .enterPasskey))
        #expect(out == [.pairingProgress(.passkeyRequested(watch, name: "Watch"))])
        #expect(h.machine.refusal(of: .userAnswer(.confirm(true))) == .noQuestion, "the wrong kind of answer")
        #expect(h.machine.refusal(of: .userAnswer(.passkey(1))) == nil)
        out = h.send(.userAnswer(.passkey(654_321)))
        #expect(out == [.answerAgent(request: 7, .passkey(654_321)), .pairingProgress(.answered(watch))])
        #expect(h.machine.refusal(of: .userAnswer(.passkey(1))) == .noQuestion)
    }

    @Test("numeric comparison: --confirm accepts; on a terminal yes accepts and no rejects")
    func numericComparison() {
        var h = pairing(PairingAnswers(confirm: true))
        #expect(h.send(.agentAsked(watch, request: 3, .confirmPasskey(42))) == [.answerAgent(request: 3, .accept), .pairingProgress(.answered(watch))])

        for (yes, answer) in [(true, AgentAnswer.accept), (false, AgentAnswer.reject("the numbers differ"))] {
            var h = pairing(PairingAnswers(interactive: true))
            #expect(h.send(.agentAsked(watch, request: 3, .confirmPasskey(42))) == [.pairingProgress(.confirmationRequested(watch, name: "Watch", number: 42))])
            #expect(h.send(.userAnswer(.confirm(yes))) == [.answerAgent(request: 3, answer), .pairingProgress(.answered(watch))])
        }
    }

    @Test("no answer in advance and no terminal: the pairing ends at once, BlueZ's question refused, never a wait")
    func nobodyToAsk() {
        for question in [AgentQuestion.enterPasskey, .confirmPasskey(42)] {
            var h = pairing(PairingAnswers())
            let out = h.send(.agentAsked(watch, request: 9, question))
            guard case .needsUserInput? = out.pairingOutcome else { Issue.record("\(out)"); continue }
            #expect(out.first == .answerAgent(request: 9, .reject(question == .enterPasskey ? "no passkey given" : "not confirmed")))
            #expect(out.contains(.cancelPairing(watch)))
            #expect(h.machine.pairing == nil && h.armed.isEmpty)
            // BlueZ answers the canceled Pair(): then its link and device go (nothing half-paired).
            let late = h.send(.pairFailed(watch, call: h.lastPairCall!, .authenticationAborted))
            #expect(late == [.disconnect(watch), .removeDevice(watch)])
            #expect(h.send(.pairFailed(watch, call: h.lastPairCall!, .authenticationAborted)).isEmpty, "once")
        }
    }

    @Test("a wearable's passkey to type is shown and acknowledged; Just Works asks nothing")
    func displayPasskey() {
        var h = pairing(PairingAnswers())
        let out = h.send(.agentAsked(watch, request: 4, .displayPasskey(12, entered: 0)))
        #expect(out == [.answerAgent(request: 4, .accept), .pairingProgress(.displayPasskey(watch, name: "Watch", passkey: 12))])
        #expect(h.machine.pairing != nil)
    }

    @Test("questions nobody's pairctl pair asked for are refused: no session, another device, or the scan still running")
    func unsolicitedIsRefused() {
        var idle = Harness()
        idle.send(.adapterReady([:]))
        for question in [AgentQuestion.confirmPasskey(1), .authorizePairing, .enterPasskey, .authorizeService("180d")] {
            let out = idle.send(.agentAsked(watch, request: 1, question))
            #expect(out.first == .answerAgent(request: 1, .reject("no pairing of \(watch) was started with pairctl pair")))
            #expect(out.reports(.pairingRefused).count == 1)
        }
        var h = pairing(PairingAnswers(confirm: true, interactive: true))
        var out = h.send(.agentAsked(other, request: 2, .confirmPasskey(1)))
        #expect(out.first == .answerAgent(request: 2, .reject("no pairing of \(other) was started with pairctl pair")))
        var scanning = Harness()
        scanning.send(.adapterReady([:]))
        scanning.send(.userPair(PairRequest(serviceUUIDs: [hr], answers: PairingAnswers(confirm: true))))
        out = scanning.send(.agentAsked(watch, request: 5, .confirmPasskey(1)))
        #expect(out.first == .answerAgent(request: 5, .reject("no pairing of \(watch) was started with pairctl pair")))
    }

    @Test("the pairing timeout holds through the prompt: the question is refused, then CancelPairing")
    func timeoutDuringPrompt() {
        var h = pairing(PairingAnswers(interactive: true))
        h.send(.agentAsked(watch, request: 7, .enterPasskey))
        let out = h.fireNext()
        #expect(out.pairingOutcome == .timedOut(phase: "pairing"))
        let answer = out.firstIndex(of: .answerAgent(request: 7, .reject("pairing ended")))
        let cancel = out.firstIndex(of: .cancelPairing(watch))
        #expect(answer != nil && cancel != nil && answer! < cancel!)
    }

    @Test("Ctrl-C at the prompt (CancelPairing): the question is refused and the session ends canceled")
    func cancelDuringPrompt() {
        var h = pairing(PairingAnswers(interactive: true))
        h.send(.agentAsked(watch, request: 7, .confirmPasskey(5)))
        let out = h.send(.userCancelPairing)
        #expect(out.pairingOutcome == .canceled)
        #expect(out.contains(.answerAgent(request: 7, .reject("pairing ended"))))
    }

    @Test("BlueZ withdraws its question (Agent1.Cancel): no answer is taken any more")
    func bluezCancels() {
        var h = pairing(PairingAnswers(interactive: true))
        h.send(.agentAsked(watch, request: 7, .enterPasskey))
        #expect(h.send(.agentCanceled) == [.pairingProgress(.questionCanceled(watch))])
        #expect(h.machine.refusal(of: .userAnswer(.passkey(1))) == .noQuestion)
    }

    @Test("a wrong passkey: Pair() fails with an authentication error, the session ends authenticationFailed, nothing kept")
    func wrongPasskey() {
        var h = pairing(PairingAnswers(passkey: 1))
        h.send(.agentAsked(watch, request: 7, .enterPasskey))
        let out = h.send(.pairFailed(watch, call: h.lastPairCall!, .authentication))
        guard case .authenticationFailed? = out.pairingOutcome else { Issue.record("\(out)"); return }
        #expect(h.machine.devices.isEmpty)
        #expect(out.contains(.removeDevice(watch)), "BlueZ keeps nothing of it either")
    }
}
