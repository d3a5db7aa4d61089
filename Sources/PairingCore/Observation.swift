/// What the machine's observers are told: one feed for the availability record
/// (`HistoryRecorder`, which the metrics read), the alerts (`AlertDecider`) and whatever
/// subscribes next. The daemon makes each observation once and hands the same value to each.
///
/// `before(_:)` and `after(_:)` switch over every `Event` and `Action` with no `default:`, and the
/// observers switch over every `Observation`: a new kind of event, action or observation does
/// not compile until each place says what it means for it.
public enum Observation: Sendable, Hashable {
    /// paird's own life (the daemon's): started, stopping, and a line that says it was running
    /// after a while with nothing written.
    case pairdStarted
    case pairdStopping
    case alive
    /// bluetoothd left the bus (`Event.bluetoothdLeft`), told before the machine handles it: the
    /// adapter's loss that follows is bluetoothd's.
    case bluetoothdLeft
    /// An adapter is ready again (`Event.adapterReady`).
    case adapterReady
    /// The host is going to sleep, or woke up (`Event.hostSleeping`, `Event.hostResumed`).
    case hostSleeping
    case hostResumed
    /// A private address resolved to the wearable's identity (`Event.addressChanged`): what is
    /// known of it moves to the new address.
    case addressChanged(DeviceAddress, to: DeviceAddress)
    /// A state change of the machine (`Action.report`).
    case report(Report)
    /// systemd called bluetoothd's exit a crash (`BluetoothdReport.crashed`): its cause.
    case bluetoothdCrashed(cause: String)
    /// A battery level that changed (`Action.batteryChanged`).
    case battery(DeviceAddress, level: UInt8)
    /// Time passed: a deadline an observer gave is due (its time-based decisions read the
    /// machine's facts, `WearableFacts`).
    case tick

    /// What of a machine event the observers are told before the machine handles it.
    public static func before(_ event: Event) -> Observation? {
        switch event {
        case .bluetoothdLeft: .bluetoothdLeft
        case .adapterReady: .adapterReady
        case .hostSleeping: .hostSleeping
        case .hostResumed: .hostResumed
        case .addressChanged(let old, let new, _): .addressChanged(old, to: new)
        // What these change, the observers learn from the machine's reports.
        case .adapterIdentified, .adapterInUse, .adapterLost, .adapterGone, .autoConnectArmed, .bluetoothdUnit,
             .bluetoothdStartFailed, .bluetoothdBack, .bluetoothdAbsent, .linkUp, .servicesResolved, .servicesLost,
             .linkProven, .linkDown, .bondLost, .deviceRemoved, .bondedDeviceAppeared, .dataReceived,
             .subscriptionEnded, .probeFinished, .connectSucceeded, .connectFailed, .setUpLinkFinished,
             .characteristicsMissing, .characteristicAppeared, .pairSucceeded, .pairFailed, .removeDeviceAnswered,
             .candidateFound, .discoveryFailed, .agentAsked, .agentCanceled, .countdownFired, .userPair,
             .userCancelPairing, .userAnswer, .userConnect, .userDisconnect, .userUnpair, .disconnectAnswered,
             .powerOnFailed, .batteryRead:
            nil
        }
    }

    /// What of a machine action the observers are told: state changes and bluetoothd's crashes.
    public static func after(_ action: Action) -> Observation? {
        switch action {
        case .report(let r): .report(r)
        case .batteryChanged(let a, let level): .battery(a, level: level)
        case .bluetoothdReport(.crashed(let c)): .bluetoothdCrashed(cause: c.cause)
        // A stop or a wait of bluetoothd's is seen through the adapter's reports; the rest are
        // requests to BlueZ, systemd or the runtime, whose outcomes come back as reports.
        case .bluetoothdReport(.stopped), .bluetoothdReport(.waiting), .connect, .disconnect, .setUpLink, .setTrusted,
             .resubscribe, .probe, .removeDevice, .startDiscovery, .stopDiscovery, .restartDiscovery, .pair,
             .cancelPairing, .answerAgent, .updateAutoConnect, .powerCycleAdapter, .powerCycle, .queryBluetoothdUnit,
             .startBluetoothd, .releaseSleepInhibitor, .powerOn, .powerOnReport, .arm, .cancel, .persist, .pairingProgress, .pairingEnded:
            nil
        }
    }
}
