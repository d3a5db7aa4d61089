/// BlueZ's `Agent1` questions and the user's answers. Only the pairing the session runs is
/// answered, and only for its candidate: a question about any other device, or with no session
/// in the `pairing` phase, is refused (a pairing nobody started through `pairctl pair`).
extension PairingMachine {
    mutating func agentAsked(_ a: DeviceAddress, _ request: UInt64, _ question: AgentQuestion, _ now: Moment,
                             _ actions: inout [Action]) {
        guard var p = pairing, case .pairing(let c, let call, let pending) = p.phase, c.address == a else {
            actions.append(.answerAgent(request: request, .reject("no pairing of \(a) was started with pairctl pair")))
            actions.append(.report(Report(kind: .pairingRefused, device: a, to: .refused, reason: .refused(question))))
            return
        }
        if let pending {
            // BlueZ asks one question at a time; a second one means the first is void.
            actions.append(.answerAgent(request: pending.request, .reject("superseded")))
        }
        func ask(_ progress: PairingProgress) {
            p.phase = .pairing(c, call: call, question: PendingQuestion(request: request, question: question))
            pairing = p
            actions.append(.pairingProgress(progress))
        }
        func answer(_ answer: AgentAnswer) {
            p.phase = .pairing(c, call: call, question: nil)
            pairing = p
            actions.append(.answerAgent(request: request, answer))
        }
        let answers = p.request.answers
        switch question {
        case .enterPasskey:
            if let passkey = answers.passkey {
                answer(.passkey(passkey))
                actions.append(.pairingProgress(.answered(a)))
            } else if answers.interactive {
                ask(.passkeyRequested(a, name: c.name))
            } else {
                answer(.reject("no passkey given"))
                endPairing(.needsUserInput("\(c.label) shows a passkey to type: give --passkey NNNNNN, or run pairctl pair on a terminal"),
                           now, &actions)
            }
        case .confirmPasskey(let number):
            if answers.confirm {
                answer(.accept)
                actions.append(.pairingProgress(.answered(a)))
            } else if answers.interactive {
                ask(.confirmationRequested(a, name: c.name, number: number))
            } else {
                answer(.reject("not confirmed"))
                endPairing(.needsUserInput("\(c.label) asks to compare a number: give --confirm, or run pairctl pair on a terminal"),
                           now, &actions)
            }
        case .displayPasskey(let passkey, _):
            answer(.accept)
            actions.append(.pairingProgress(.displayPasskey(a, name: c.name, passkey: passkey)))
        case .authorizePairing, .authorizeService:
            answer(.accept) // the pairing the user started with pairctl pair
        case .pinCode:
            answer(.reject("PIN codes are for BR/EDR devices; paird pairs Bluetooth LE wearables"))
        }
    }

    mutating func agentCanceled(_ now: Moment, _ actions: inout [Action]) {
        guard var p = pairing, case .pairing(let c, let call, .some) = p.phase else { return }
        p.phase = .pairing(c, call: call, question: nil)
        pairing = p
        actions.append(.pairingProgress(.questionCanceled(c.address)))
    }

    /// The user's answer (refused before it gets here unless a question of its kind waits:
    /// `refusal(of:)` says `.noQuestion`).
    mutating func userAnswered(_ answer: UserAnswer, _ now: Moment, _ actions: inout [Action]) {
        guard var p = pairing, case .pairing(let c, let call, let q?) = p.phase else { return }
        let reply: AgentAnswer
        switch (q.question, answer) {
        case (.enterPasskey, .passkey(let k)): reply = .passkey(k)
        case (.confirmPasskey, .confirm(true)): reply = .accept
        case (.confirmPasskey, .confirm(false)): reply = .reject("the numbers differ")
        default: return
        }
        p.phase = .pairing(c, call: call, question: nil)
        pairing = p
        actions.append(.answerAgent(request: q.request, reply))
        actions.append(.pairingProgress(.answered(c.address)))
    }
}

extension AgentQuestion {
    /// The journal's word for it.
    public var token: String {
        switch self {
        case .enterPasskey: "passkey"
        case .confirmPasskey: "numeric-comparison"
        case .displayPasskey: "display-passkey"
        case .authorizePairing: "authorize-pairing"
        case .authorizeService: "authorize-service"
        case .pinCode: "pin-code"
        }
    }
}

extension Candidate {
    /// "Name (address)", or the address alone.
    var label: String { name.isEmpty ? "\(address)" : "\(name) (\(address))" }
}
