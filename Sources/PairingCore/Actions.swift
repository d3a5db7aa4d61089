/// What the machine asks the runtime to do. Only the runtime performs I/O.
public enum Action: Sendable, Hashable {
    // BlueZ.
    /// `Device1.Connect()` with this D-Bus timeout; answer with `connectSucceeded/Failed(call:)`.
    case connect(DeviceAddress, call: UInt64, timeout: Duration)
    /// `Device1.Disconnect()` — only ever for the user's intent or to abandon a stuck link.
    case disconnect(DeviceAddress)
    /// Services are resolved: find the configured characteristics by UUID, StartNotify them, read
    /// the battery; answer with `Event.setUpLinkFinished`.
    case setUpLink(DeviceAddress)
    case setTrusted(DeviceAddress, Bool)
    /// `StartNotify` the characteristic (128-bit UUID) again, after `StopNotify` where BlueZ still
    /// shows it notifying; a failure answers with `Event.subscriptionEnded`.
    case resubscribe(DeviceAddress, characteristic: String)
    /// Read Battery Level (0x2A19), else `characteristic` itself if it is readable, with this
    /// D-Bus timeout; answer with `Event.probeFinished(call:)`.
    case probe(DeviceAddress, call: UInt64, characteristic: String, timeout: Duration)
    /// `Adapter1.RemoveDevice()`: forget the device and its keys in BlueZ; answer with
    /// `Event.removeDeviceAnswered`.
    case removeDevice(DeviceAddress)
    /// `SetDiscoveryFilter` (UUIDs, LE, address pattern) then `StartDiscovery`.
    case startDiscovery(PairRequest)
    case stopDiscovery
    /// `StartDiscovery` again after a scan restart (`PairingSession.ScanRestart`); a failure is
    /// only logged: the next restart tries again, and the scan countdown ends it all.
    case restartDiscovery(PairRequest)
    /// `Device1.Pair()` with the daemon's agent; answer with `pairSucceeded/Failed(call:)`.
    case pair(DeviceAddress, call: UInt64, timeout: Duration)
    case cancelPairing(DeviceAddress)
    /// Replies to the pending `Agent1` call `request` (see `Event.agentAsked`).
    case answerAgent(request: UInt64, AgentAnswer)
    /// Make the registered GattProfile1 list exactly these service UUIDs (re-register if they
    /// differ), so the kernel's LE auto-connect is armed for every wearable we pursue.
    case updateAutoConnect([String])
    /// Adapter1.Powered false, then true: the last step after a resume that brought no wearable
    /// back (`PairingMachine+Sleep`), capped.
    case powerCycleAdapter
    /// Power-cycle the adapter with this address (a wedged adapter: `PairingMachine+Wedge`).
    case powerCycle(adapter: DeviceAddress)
    /// A power cycle's Powered=true again (try `attempt`, `PairingMachine+Power`) on the adapter
    /// with this address, or (nil) the one in use; a failure answers with `Event.powerOnFailed`.
    case powerOn(adapter: DeviceAddress?, attempt: Int)
    /// What the machine makes of a failed Powered=true, for the journal.
    case powerOnReport(PowerOnOutcome)

    // bluetoothd and systemd.
    /// Ask systemd (`org.freedesktop.systemd1`) for `bluetooth.service`'s ActiveState, Result,
    /// ExecMainCode and ExecMainStatus; answer with `Event.bluetoothdUnit` (nil: no systemd).
    case queryBluetoothdUnit
    /// `org.freedesktop.DBus.StartServiceByName("org.bluez", 0)`: bus activation starts
    /// bluetooth.service. Its return shows as bluetoothd on the bus; a failure answers with
    /// `Event.bluetoothdStartFailed`.
    case startBluetoothd
    /// A journal entry about bluetoothd (one per crash, with its own MESSAGE_ID).
    case bluetoothdReport(BluetoothdReport)

    /// A wearable's battery level changed (`Event.batteryRead`): paird's `Battery` signal, and
    /// the observers' `Observation.battery`.
    case batteryChanged(DeviceAddress, level: UInt8)

    // The host's sleep.
    /// Close logind's delay inhibitor (if paird holds one): the host may sleep now. Why: no link
    /// was up, every Disconnect() for the sleep was answered, or the release countdown ran out.
    case releaseSleepInhibitor(SleepRelease)

    // Time.
    case arm(Countdown)
    case cancel(Countdown.ID)

    // Reporting and persistence.
    /// Intent or identity changed: write the state file (`persistedState(now:)`).
    case persist
    case report(Report)
    case pairingProgress(PairingProgress)
    case pairingEnded(PairingOutcome)
}

/// One journal-worthy happening. `kind` selects the journal `MESSAGE_ID`.
public struct Report: Sendable, Hashable {
    public enum Kind: String, Sendable, Hashable, CaseIterable {
        case paired, connected, reconnected, linkLost, needsRepair, unpaired, userDisconnected
        case adapterLost, pairingFailed, stateChanged
        /// BlueZ asked paird's agent about a pairing nobody started with `pairctl pair`: refused.
        case pairingRefused
        /// A configured characteristic is not on the wearable's set-up link (said once, until it
        /// is back or another one goes missing); `reason`: the UUIDs, space-separated.
        case characteristicMissing
        /// The host is going to sleep: the wearable's link is let go (`reason` host-asleep). Not a
        /// link loss, and not counted against the wearable.
        case hostAsleep
        /// A step after the host's resume, for the wearables linked at the sleep (`reason`: the
        /// step, `ResumeStep`): the auto-connect re-registered and paird's Connect() after the
        /// head start; at a wearable's learned deadline, away (others are back), or the adapter
        /// power-cycled, or that step's cap reached.
        case resumeEscalation
        /// Every wanted wearable on an adapter failed at once as a lost bond would: the adapter is
        /// taken for wedged (`reason`: `power-cycle k/N` or `cap-reached k/N`, then the adapter's address).
        case adapterWedged
    }

    public var kind: Kind
    public var device: DeviceAddress?
    public var name: String
    public var from: ReportState?
    public var to: ReportState?
    public var reason: ReportReason?
    public var attempt: Int?
    /// The reason's words, as the journal, the signal and the record carry them.
    public var reasonToken: String? { reason?.token }
    /// The states' words (empty for none), as the journal and the signal carry them.
    public var fromToken: String { from?.token ?? "" }
    public var toToken: String { to?.token ?? "" }

    public init(kind: Kind, device: DeviceAddress?, name: String = "", from: ReportState? = nil, to: ReportState? = nil,
                reason: ReportReason? = nil, attempt: Int? = nil) {
        self.kind = kind
        self.device = device
        self.name = name
        self.from = from
        self.to = to
        self.reason = reason
        self.attempt = attempt
    }
}

/// Progress of `pairctl pair`, forwarded to the waiting client as lines.
public enum PairingProgress: Sendable, Hashable {
    case scanning
    case found(Candidate)
    case pairing(DeviceAddress)
    /// A wearable paird must pair again, named by the user and heard advertising in this scan:
    /// its old BlueZ object (still holding the dead bond) is removed, and the scan goes on once
    /// BlueZ is done (`PairingSession.Phase.removingBond`).
    case removingStaleBond(DeviceAddress)
    /// The named address is bonded in BlueZ already (paired with another tool): paird takes that
    /// bond over instead of pairing anew (`Pair()` answers AlreadyExists).
    case adoptingBond(DeviceAddress, name: String)
    /// Heard advertising, matches the request, but not taken, once per scan: a wearable that
    /// needs pairing again (its bond is removed only when the user names it) or a bond made
    /// outside paird (taken over only by its address).
    case skipped(DeviceAddress, name: String, why: SkipReason)
    /// `Pair()` could not reach a private address (it may have rotated since it was found):
    /// scanning again for the wearable's new address (`PairingSession.unreachable`).
    case rescanning(DeviceAddress, reason: String)
    /// The wearable shows a passkey: the user must type it (`Event.userAnswer(.passkey)`).
    case passkeyRequested(DeviceAddress, name: String)
    /// Numeric comparison: does the wearable show this number? (`Event.userAnswer(.confirm)`).
    case confirmationRequested(DeviceAddress, name: String, number: UInt32)
    /// The user types this passkey on the wearable.
    case displayPasskey(DeviceAddress, name: String, passkey: UInt32)
    /// A question answered in advance (`--passkey`, `--confirm`), or the user's answer, went to BlueZ.
    case answered(DeviceAddress)
    /// BlueZ withdrew its question (`Agent1.Cancel`).
    case questionCanceled(DeviceAddress)
    case paired(DeviceAddress)
}

/// Why a matching wearable heard in a scan was not taken (`PairingProgress.skipped`).
public enum SkipReason: String, Sendable, Hashable {
    /// paird manages it and it needs pairing again: its old bond goes only when the user names it.
    case needsRepairNotNamed = "needs-repair"
    /// BlueZ holds a bond for it that paird does not manage: taken over only by its address.
    case bondedElsewhere = "bonded-elsewhere"
}

/// How a pairing session ended.
public enum PairingOutcome: Sendable, Hashable {
    case success(DeviceAddress, name: String)
    case alreadyPaired(DeviceAddress)
    case noDeviceFound
    case authenticationFailed(String)
    case timedOut(phase: String)
    case canceled
    case adapterUnavailable
    /// Bluetooth went away while the session ran (bluetoothd stopped or crashed, the adapter
    /// was removed): the wearable is not paired with paird; pair again once it is back.
    case adapterLost
    /// The wearable asked a question (the text says which) that nobody can answer: no answer
    /// given in advance and no terminal to ask on.
    case needsUserInput(String)
    case failed(String)

    public var succeeded: Bool {
        switch self {
        case .success, .alreadyPaired: true
        case .noDeviceFound, .authenticationFailed, .timedOut, .canceled, .adapterUnavailable, .adapterLost, .needsUserInput, .failed: false
        }
    }
}

/// The `pairctl pair` session, while one runs (at most one; a second `pair` is refused).
///
/// ```
///   userPair ──▶ scanning ──candidate──▶ pairing ──paired──▶ settling ("connecting")
///   (already paired:      │ countdown       │ auth error        │ device reaches `connected`
///    ends at once)        ▼                 ▼ other error       ▼
///                    noDeviceFound   authenticationFailed   success
///                                    / failed                (timeout: timedOut)
///   scanning ──a named needsRepair wearable's stale object heard──▶ removingBond
///   removingBond ──RemoveDevice answered / object gone──▶ scanning (after the restart pause)
///   ─ any phase: countdown → timedOut / noDeviceFound; cancel → canceled;
///     adapter gone → adapterLost; unpair while settling → canceled
/// ```
/// Each phase carries the session's one countdown (`countdown`); the device, once paired, is a
/// `ManagedDevice` that the session only watches until it is `connected`.
public struct PairingSession: Sendable, Hashable {
    public enum Phase: Sendable, Hashable {
        case scanning(ScanRestart)
        /// Discovery stopped; `RemoveDevice` of the named wearable's stale object in flight. The
        /// scan goes on once BlueZ answered or the object is gone (`Event.removeDeviceAnswered`,
        /// `Event.deviceRemoved`): an object being removed is never paired.
        case removingBond(DeviceAddress)
        /// `Pair()` in flight; `question`: the one put to the user and not yet answered.
        case pairing(Candidate, call: UInt64, question: PendingQuestion?)
        /// Paired; waiting for the device to reach `connected`.
        case settling(DeviceAddress)

        public var name: String { step.token }

        public var step: PairingStep {
            switch self {
            case .scanning: .scanning
            case .removingBond: .removingOldBond
            case .pairing: .pairing
            case .settling: .settling
            }
        }

        /// The wearable this phase is about (none while scanning).
        public var address: DeviceAddress? {
            switch self {
            case .scanning: nil
            case .removingBond(let a), .settling(let a): a
            case .pairing(let c, _, _): c.address
            }
        }
    }

    /// A scan that finds nothing is stopped every `restartInterval` and started again
    /// `restartPause` later. The kernel drops advertising reports that arrive while its discovery
    /// is still starting, and the controller's duplicate filter then hides that device for the
    /// rest of the scan (seen on the bed: `pairctl pair` found nothing in 20 s next to an
    /// advertising wearable). The session's `countdown` (the scan timeout) ends it all.
    public enum ScanRestart: Sendable, Hashable {
        /// Discovery runs; stopped at the countdown.
        case running(Countdown)
        /// Stopped; started again at the countdown (`StopDiscovery` is answered before the kernel
        /// is done: a `StartDiscovery` right after is refused as busy).
        case stopped(Countdown)

        public var countdown: Countdown {
            switch self { case .running(let c), .stopped(let c): c }
        }

        public static let restartInterval = Duration.seconds(4)
        public static let restartPause = Duration.milliseconds(300)
    }

    public var request: PairRequest
    public var phase: Phase
    public var countdown: Countdown
    /// Every countdown the session carries: its phase's, and while scanning the restart's.
    public var countdowns: [Countdown] {
        if case .scanning(let restart) = phase { [countdown, restart.countdown] } else { [countdown] }
    }

    /// needsRepair devices whose stale BlueZ object we removed during this session.
    public var removedForRepair: Set<DeviceAddress> = []
    /// Matching wearables heard but not taken (`PairingProgress.skipped`): said once each.
    public var skipped: Set<DeviceAddress> = []
    /// The private addresses whose `Pair()` could not reach the wearable, each followed by a scan
    /// started again: the wearable may have rotated it between the advertisement and the
    /// connection (seen once in `paird_several`: the kernel waits for the old address, and
    /// `Pair()` fails with connect-timeout). Never tried again in this session (the wearable's next
    /// address differs; BlueZ may list the old one a while); at most `maxRescans` of them, each
    /// rescan with a fresh scan timeout.
    public var unreachable: Set<DeviceAddress> = []
    public static let maxRescans = 2
    /// What ended the last `Pair()` before a rescan: the session's outcome if the scan then finds
    /// no new address (not "no device found": one was found, and could not be reached).
    public var rescanAfter: BlueZFailure?
}

/// Tunables; every one is a key in paird.conf.
public struct MachineConfig: Sendable, Hashable {
    public var scanTimeout: Duration = .seconds(10)
    public var pairTimeout: Duration = .seconds(30)
    /// D-Bus timeout for Connect(): above BlueZ's ~40 s so BlueZ, not libdbus, ends a failed attempt.
    public var connectTimeout: Duration = .seconds(45)
    public var discoveryTimeout: Duration = .seconds(30)
    /// A link that is up but whose services have not resolved (found so at reconciliation, e.g.
    /// after bluetoothd returned under a live link: 5.66 attaches ATT only to links it makes or
    /// accepts, so such a link never resolves) gets this long to reach `ServicesResolved`; then
    /// paird drops it and connects again instead of waiting out `discoveryTimeout`. Once the
    /// services resolve, the rest of the set-up gets `discoveryTimeout`. Measured on the bed: a
    /// good link resolves well within it (README, "When bluetoothd crashes").
    public var resolveTimeout: Duration = .seconds(6)
    /// The least resolve deadline learned for a wearable (`ResolveFloor`): once paird has seen a
    /// wearable's links resolve `resolveLearnAfter` times, a new link of it gets `resolveLearnFactor`
    /// times the slowest of its last `resolveSamples` resolutions, at least this, at most
    /// `resolveTimeout`. A link ended at such a learned deadline counts toward no lost bond, and
    /// the next link gets the whole `resolveTimeout` (a firmware update that makes BlueZ discover
    /// everything again costs one link). Measured on the bed: returns resolve 0.3–1.4 s after the
    /// link (ServicesResolved after Connected, 5.66/5.82/5.87), up to 4 s on a loaded host after
    /// a bluetoothd crash; paired first, 2.6–4.6 s. `resolveFloor >= resolveTimeout`: no learning.
    public var resolveFloor: Duration = .seconds(3)
    public var resolveLearnFactor: Int = 3
    public var resolveLearnAfter: Int = 3
    public static let resolveSamples = 8
    /// After paird drops an unusable link (`ResolveTimeout`, `DiscoveryTimeout`), its Connect()
    /// waits for that link to be seen down, at most this long: one sent while the link is still
    /// going down is answered at once by it and only adds a set-up round. Measured on the bed: an
    /// own Disconnect() is seen down within a second; a link the kernel kept through a bluetoothd
    /// crash went down ~2.5 s after the drop (BENCHMARKS.md §5).
    public var linkDownWait: Duration = .seconds(4)
    public var backoff = Backoff()
    /// Quick transient failures in a row before the device counts as away and is waited for passively.
    public var fastAttempts: Int = 5
    /// While waiting for an absent wearable that the kernel's auto-connect is not armed for (BlueZ
    /// does not hold our GattProfile1 with its service), how long between fallback Connect() calls.
    /// With the auto-connect armed paird sets no timer: a Connect() in flight as the wearable
    /// returns stalled the new link for BlueZ's 30 s ATT timeout (BENCHMARKS.md finding 15).
    public var fallbackInterval: Duration = .seconds(60)
    /// At start-up, whenever the adapter comes back, and on the user's `connect`, a wanted device
    /// that is not connected is left to the kernel's auto-connect (armed by the GattProfile1) this long before paird's own
    /// Connect(); 0 = Connect() at once. A Connect() racing the auto-connect to a wearable that is
    /// coming up stalls or breaks the link (testbed.md; soak, bluetoothd restarts).
    public var autoConnectHeadStart: Duration = .seconds(5)
    /// After the host's resume, a wearable linked at the sleep is expected back within twice its
    /// slowest of its last returns (`HostWatch.returnSamples`), kept within these (the ceiling
    /// until it has returned once). Past it, with no wearable back, the adapter is power-cycled.
    public var resumeDeadlineFloor: Duration = .seconds(10)
    public var resumeDeadlineCeiling: Duration = .seconds(60)
    /// Power cycles after resumes since a wearable last came back on its own in time, before
    /// paird stops trying them (until one does again); 0: never.
    public var resumePowerCycles: Int = 2
    /// Power cycles of a wedged adapter in a row (no wearable connected on it in between); 0: never.
    public var wedgePowerCycles: Int = 2
    /// While every wanted wearable on an adapter (two or more) waits on the kernel's auto-connect,
    /// one of them gets a `Connect()` this often, to find a wedged adapter: BlueZ 5.66 reports
    /// none of the auto-connect's refusals (`PairingMachine+Wedge`). It costs no extra radio (the
    /// kernel's passive scan for the auto-connect runs anyway) but a wearable returning during
    /// the probe's ~40 s may meet finding 15's stall (BENCHMARKS.md); 0: never.
    public var wedgeProbeInterval: Duration = .seconds(900)
    /// A connect failure that took at least this long means nobody answered: the device is away.
    public var absentAfter: Duration = .seconds(20)
    /// Links in a row that come up but drop within `proofWindow` without the wearable ever
    /// answering over them (or never resolve, or Connects it answers with a quick abort-by-local)
    /// before the bond is presumed lost → `needsRepair`. BlueZ 5.66 gives no reason on D-Bus;
    /// this is how a wearable that forgot its bond looks.
    public var setupFailuresBeforeRepair: Int = 3
    /// How long after coming up (or after its services resolved again) a link that carried no
    /// data from the wearable still counts as a failed setup when it drops or loses its services.
    /// Seen in the test bed (kernel 6.12) with a forgotten bond: the link resolves from BlueZ's
    /// cache and drops on the encryption failure ~4 s later; or it stays up and loses its
    /// services every 30–35 s (BlueZ's ATT layer gives up after a security failure or its 30 s
    /// request timeout), so the window must outlast that timeout: 30 s missed it.
    public var proofWindow: Duration = .seconds(60)
    /// The adapter devices are paired through, recorded in their identity.
    public var adapter: String = "hci0"
    public var jitterSeed: UInt64 = 0x5EED
    /// After a bluetoothd crash: the first start at once, then these delays (2, 4, 8, 16 s) before
    /// each further one while it dies before its adapter was ever ready (it dies at each start).
    /// A bluetoothd that was ready and then crashed starts the count anew: one that crashes on a
    /// wearable's link is the crash-loop rule's (`RepairReason.bluetoothdCrashes`), and systemd's
    /// own start limit (`StartLimitBurst`) still ends a loop of starts (`start-limit-hit`: paird waits).
    public var bluetoothdRestart = Backoff(initial: .seconds(2), maximum: .seconds(60), jitter: 0)
    /// Starts in a row that never reached a ready adapter before paird stops (and says so).
    public var bluetoothdRestartCap: Int = 5
    /// A link set up (services resolved, subscribed) whose subscriptions deliver nothing by then
    /// is ended and made again (`LinkHealth.awaitingFirstData`); nil: not watched. The machine
    /// cannot know whether anything was subscribed: the runtime sets it (paird.conf's
    /// `FirstDataTimeout`, on when `Subscribe` names a characteristic).
    public var firstDataTimeout: Duration?
    /// A characteristic that notifies periodically (`NotificationRhythm.period`) is probed when
    /// silent this many of its periods…
    public var silencePeriods: Int = 5
    /// …and at least this long (a fast stream's short gap is no stall).
    public var silenceMinimum: Duration = .seconds(3)
    /// The probe (a read) must answer within this, or the link is made again.
    public var probeTimeout: Duration = .seconds(5)
    /// Subscriptions made again on one link (since data last came) before paird makes the link
    /// again instead: BlueZ that keeps ending or refusing them is not asked in a tight loop.
    public var resubscribesPerLink: Int = 3
    /// See `ManagedDevice.healthRemakes`.
    public var healthRemakesInRow: Int = 2

    public init() {}

    /// Slack added to a call's own D-Bus timeout before its countdown gives up on the reply.
    var replySlack: Duration { .seconds(5) }
}
