/// What BlueZ's `Agent1` asks while a `Pair()` runs (bluez doc/org.bluez.Agent.rst). BlueZ hands a
/// `Pair()` call's questions to the agent of the caller that made it, and questions nobody's
/// `Pair()` asked for (a pairing the wearable starts) to the default agent, which paird may be
/// (5.66 makes the first agent registered the default): the machine answers only for the pairing
/// its session runs, and refuses everything else.
public enum AgentQuestion: Sendable, Hashable {
    /// `RequestPasskey`: the wearable shows a 6-digit passkey; the user types it here.
    case enterPasskey
    /// `RequestConfirmation`: numeric comparison; both sides show this number.
    case confirmPasskey(UInt32)
    /// `DisplayPasskey`: the user types this number on the wearable (`entered` digits so far).
    case displayPasskey(UInt32, entered: UInt16)
    /// `RequestAuthorization`: an incoming Just Works pairing (the wearable started it).
    case authorizePairing
    /// `AuthorizeService`: a connection to a local profile.
    case authorizeService(String)
    /// `RequestPinCode` / `DisplayPinCode`: legacy (BR/EDR) pairing, never a BLE wearable's.
    case pinCode
}

/// How the runtime answers a pending `Agent1` call.
public enum AgentAnswer: Sendable, Hashable {
    case passkey(UInt32)
    /// The call's plain reply (confirmation accepted, authorization granted, display acknowledged).
    case accept
    /// `org.bluez.Error.Rejected` with the reason.
    case reject(String)
}

/// What the user answered at `pairctl pair`'s prompt (`Manager1.AnswerPasskey` / `AnswerConfirmation`).
public enum UserAnswer: Sendable, Hashable {
    case passkey(UInt32)
    case confirm(Bool)
}

/// How `pairctl pair` can answer questions: given in advance (`--passkey`, `--confirm`), or by
/// asking the user (on a terminal). With neither, a question ends the pairing at once
/// (`PairingOutcome.needsUserInput`): it never waits for an answer nobody can give.
public struct PairingAnswers: Sendable, Hashable {
    public var passkey: UInt32?
    public var confirm: Bool
    public var interactive: Bool

    public init(passkey: UInt32? = nil, confirm: Bool = false, interactive: Bool = false) {
        self.passkey = passkey
        self.confirm = confirm
        self.interactive = interactive
    }
}

/// A question the session put to the user and waits on; `request` is the runtime's id for the
/// pending `Agent1` call.
public struct PendingQuestion: Sendable, Hashable {
    public var request: UInt64
    public var question: AgentQuestion
    public init(request: UInt64, question: AgentQuestion) {
        self.request = request
        self.question = question
    }
}
