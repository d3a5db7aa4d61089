import PairingCore

/// Drives a `PairingMachine` the way the runtime does, without I/O: keeps the armed countdowns
/// (so a test can "let time pass" to the next one), the last Connect/Pair call ids, and every
/// action emitted, so scenarios read as steps.
struct Harness {
    var machine: PairingMachine
    var now: Moment = .at(0)
    var armed: [Countdown.ID: Countdown] = [:]
    var log: [Action] = []
    var lastConnectCall: [DeviceAddress: UInt64] = [:]
    var lastPairCall: UInt64?
    var lastProbeCall: [DeviceAddress: UInt64] = [:]

    static let watch = DeviceAddress("00:AA:01:01:00:01")!
    static let ring = DeviceAddress("C0:FF:EE:00:00:02")!

    init(config: MachineConfig = MachineConfig(), state: PersistedState? = nil) {
        machine = PairingMachine(config: config, restoring: state, now: .at(0))
    }

    /// A harness with `Harness.watch` paired, connected and settled.
    static func connected(config: MachineConfig = MachineConfig()) -> Harness {
        var h = Harness(config: config, state: PersistedState(devices: [
            PersistedDevice(identity: DeviceIdentity(address: watch, name: "Watch", adapter: "hci0",
                                                     serviceUUIDs: [ServiceUUID.heartRate]),
                            wanted: .connected, pairedAt: 0, updatedAt: 0),
        ]))
        h.send(.adapterReady([watch: BlueZDeviceView(connected: true, servicesResolved: true)]))
        h.send(.linkProven(watch))   // the battery read during set-up answered
        h.send(.setUpLinkFinished(watch, failure: nil))
        precondition(h.state(watch)?.isConnected == true)
        return h
    }

    @discardableResult
    mutating func send(_ event: Event) -> [Action] {
        let actions = machine.handle(event, now: now)
        for a in actions {
            switch a {
            case .arm(let c): armed[c.id] = c
            case .cancel(let id): armed[id] = nil
            case .connect(let d, let call, _): lastConnectCall[d] = call
            case .pair(_, let call, _): lastPairCall = call
            case .probe(let d, let call, _, _): lastProbeCall[d] = call
            case .disconnect, .setUpLink, .setTrusted, .resubscribe, .removeDevice, .startDiscovery, .stopDiscovery, .restartDiscovery, .cancelPairing, .answerAgent,
                 .updateAutoConnect, .queryBluetoothdUnit, .startBluetoothd, .bluetoothdReport, .persist, .report, .pairingProgress, .pairingEnded,
                 .powerCycleAdapter, .powerCycle, .releaseSleepInhibitor, .powerOn, .powerOnReport, .batteryChanged:
                break
            }
        }
        log += actions
        return actions
    }

    mutating func advance(_ d: Duration) { now = now + d }

    /// The link comes up without a Connect() of ours (the kernel's auto-connect) and is set up:
    /// Connected, ServicesResolved, the runtime's set-up done. Returns every action on the way.
    mutating func linkComesUp(_ a: DeviceAddress) -> [Action] {
        send(.linkUp(a)) + send(.servicesResolved(a)) + send(.setUpLinkFinished(a, failure: nil))
    }

    /// Lets time pass to the earliest armed countdown and fires it.
    @discardableResult
    mutating func fireNext() -> [Action] {
        guard let next = armed.values.min(by: { $0.deadline < $1.deadline }) else { return [] }
        if next.deadline > now { now = next.deadline }
        armed[next.id] = nil
        return send(.countdownFired(next.id))
    }

    func state(_ a: DeviceAddress) -> DeviceState? { machine.devices[a]?.state }
    func stateName(_ a: DeviceAddress) -> String? { machine.devices[a]?.state.name }

    @discardableResult
    mutating func connectSucceeded(_ a: DeviceAddress) -> [Action] { send(.connectSucceeded(a, call: lastConnectCall[a]!)) }
    @discardableResult
    mutating func connectFailed(_ a: DeviceAddress, _ f: BlueZFailure, after: Duration = .zero) -> [Action] {
        advance(after)
        return send(.connectFailed(a, call: lastConnectCall[a]!, f))
    }
}

extension Array where Element == Action {
    func connects(_ a: DeviceAddress? = nil) -> Int {
        filter { if case .connect(let d, _, _) = $0 { return a == nil || d == a } else { return false } }.count
    }
    var disconnects: Int { filter { if case .disconnect = $0 { return true } else { return false } }.count }
    var persists: Bool { contains(.persist) }
    func reports(_ kind: Report.Kind) -> [Report] {
        compactMap { if case .report(let r) = $0, r.kind == kind { return r } else { return nil } }
    }
    var pairingOutcome: PairingOutcome? {
        for a in self { if case .pairingEnded(let o) = a { return o } }
        return nil
    }
    var armedPurposes: [CountdownPurpose] {
        compactMap { if case .arm(let c) = $0 { return c.id.purpose } else { return nil } }
    }
}

/// The 5.66 view of a link loss: no reason, bond intact, device and adapter present.
let linkLoss = DisconnectClassifier.Evidence()

/// A report of the watch's, as the machine words it (for whole action lists).
func watchReport(_ kind: Report.Kind, _ from: DeviceState.Kind, _ to: DeviceState.Kind,
                 reason: ReportReason? = nil, attempt: Int? = nil) -> Action {
    .report(Report(kind: kind, device: Harness.watch, name: "Watch", from: .state(from), to: .state(to), reason: reason, attempt: attempt))
}

/// The machine's facts for an observer fed without a machine: an awake host, and no battery
/// level or data known for any wearable.
struct AwakeHost: WearableFacts {
    func battery(of a: DeviceAddress) -> UInt8? { nil }
    func lastData(of a: DeviceAddress) -> Moment? { nil }
    var hostAsleep: Bool { false }
}
