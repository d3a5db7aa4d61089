/// The state of one managed wearable. The names are the vocabulary of `pairctl status`.
///
/// ```
///                    ┌──────────── restoring ─────────────┐  (start: state file ⨯ BlueZ)
///                    ▼           │            │            ▼
///   pair ──▶ connecting ──link──▶ discovering ──ready──▶ connected
///              │  ▲  ▲              │ timeout            │ link loss
///     absent / │  │  └── retry ◀────┘                    ▼
///     5 fails  ▼  └── fallback Connect ── waitingForDevice ◀── (never gives up; no timer
///                                                                while the auto-connect is armed)
///   ─ user disconnect (any) ──▶ disconnected ── user connect ──▶ waitingForDevice (head start)
///   ─ bond lost / device removed (any) ──▶ needsRepair ── pair ──▶ (pairing)
///   ─ adapter / bluetoothd gone (any live) ──▶ adapterUnavailable ── back ──▶ (reconciled)
/// ```
public enum DeviceState: Sendable, Hashable {
    /// Just started (or the adapter came back): waiting for the runtime to report what BlueZ knows.
    case restoring
    /// A `Connect()` is in flight (`.calling`), or a transient failure is backing off before the
    /// next one (`.backingOff`). `attempt` counts since the link was last usable.
    case connecting(ConnectPhase, attempt: Int, countdown: Countdown)
    /// Link up; waiting for ServicesResolved and for notifications to be set up.
    case discovering(Link, countdown: Countdown)
    /// Link up, services resolved, notifications subscribed; `health` is what paird watches of the
    /// data flow meanwhile (`LinkHealth`), with its countdown while one runs.
    case connected(Link, health: LinkHealth)
    /// Out of range, or not come up yet. The kernel's LE auto-connect (armed by our GattProfile1)
    /// waits for the wearable at no radio cost beyond passive scanning; see `WaitPhase` for what
    /// paird adds.
    case waitingForDevice(WaitPhase)
    /// The user asked for it to stay down. Survives restarts.
    case disconnected
    /// The bond no longer works or BlueZ forgot the device. Never retried; `pairctl pair` fixes it.
    case needsRepair(reason: RepairReason)
    /// No adapter, adapter powered off, or bluetoothd gone.
    case adapterUnavailable

    public enum ConnectPhase: Sendable, Hashable {
        case calling(call: UInt64, startedAt: Moment)
        case backingOff
    }

    public enum WaitPhase: Sendable, Hashable {
        /// BlueZ holds our GattProfile1 with the wearable's service: the auto-connect is armed and
        /// paird waits on it alone, however long, with no timer (nothing wakes it but the return).
        case onAutoConnect
        /// A `Connect()` of paird's own falls due at the countdown: the auto-connect is not armed
        /// for it (registration refused or pending), or its head start after a (re)start, the
        /// adapter's return or the user's `connect` is running.
        case fallbackDue(countdown: Countdown)
        /// That `Connect()` is in flight and must have answered by the countdown.
        case fallbackConnecting(call: UInt64, startedAt: Moment, countdown: Countdown)
    }

    /// The countdown a timed state carries; nil for untimed states.
    public var countdown: Countdown? {
        switch self {
        case .connecting(_, _, let c), .discovering(_, let c), .waitingForDevice(.fallbackDue(let c)),
             .waitingForDevice(.fallbackConnecting(_, _, let c)): c
        case .connected(_, let health): health.countdown
        case .restoring, .waitingForDevice(.onAutoConnect), .disconnected, .needsRepair, .adapterUnavailable: nil
        }
    }

    /// The name `pairctl status` shows.
    public var name: String { kind.token }

    /// Can transition to: every state each one may move to, by `name` (the doc comment of each case
    /// says when). The property test holds every step of the machine to this table.
    public static let transitions: [String: Set<String>] = [
        "restoring": ["discovering", "connecting", "waitingForDevice", "disconnected", "needsRepair", "adapterUnavailable"],
        "connecting": ["discovering", "waitingForDevice", "disconnected", "needsRepair", "adapterUnavailable"],
        "discovering": ["connected", "connecting", "waitingForDevice", "disconnected", "needsRepair", "adapterUnavailable"],
        "connected": ["discovering", "connecting", "waitingForDevice", "disconnected", "needsRepair", "adapterUnavailable"],
        "waitingForDevice": ["discovering", "connecting", "disconnected", "needsRepair", "adapterUnavailable"],
        "disconnected": ["waitingForDevice", "connecting", "needsRepair", "adapterUnavailable"],
        "needsRepair": ["waitingForDevice", "connecting", "disconnected"],
        "adapterUnavailable": ["discovering", "connecting", "waitingForDevice", "disconnected", "needsRepair"],
    ]

    /// The link a linked state carries; nil in the others.
    public var link: Link? {
        switch self {
        case .discovering(let l, _), .connected(let l, _): l
        case .restoring, .connecting, .waitingForDevice, .disconnected, .needsRepair, .adapterUnavailable: nil
        }
    }

    public var isConnected: Bool { if case .connected = self { true } else { false } }

    /// True while the daemon is trying to keep the link up (intent "connected" being served).
    public var isPursuing: Bool {
        switch self {
        case .restoring, .connecting, .discovering, .connected, .waitingForDevice, .adapterUnavailable: true
        case .disconnected, .needsRepair: false
        }
    }
}

/// What the machine knows of the current link: carried by `discovering` and `connected`, gone with
/// them, so a fact about a link cannot outlive it.
public struct Link: Sendable, Hashable {
    /// When it came up (as far as the machine saw), for `MachineConfig.proofWindow`.
    public var upAt: Moment
    /// It reached `ServicesResolved`. Not proof of the bond (BlueZ may resolve from its cache, see
    /// `proven`), but a resolved link whose set-up outlasts the discovery countdown is retried
    /// without counting toward the lost-bond heuristic.
    public var resolved: Bool
    /// Found up, services unresolved, at reconciliation. After a bluetoothd restart such a link can
    /// have no ATT channel (5.66 attaches ATT only to links it makes or accepts) and never
    /// resolves: its timeout or drop says nothing about the bond.
    public var adoptedUnresolved: Bool
    /// The wearable answered over it (`Event.linkProven`): the bond works.
    public var proven: Bool
    /// What the lost-bond heuristic made of the current set-up (since the link came up or its
    /// services last resolved) when its services went; nil while it has not judged it.
    public var setupVerdict: SetupVerdict?
    /// A subscribed characteristic delivered over this link (`Event.dataReceived`).
    public var dataSeen: Bool = false
    /// Subscriptions paird made again on this link after BlueZ ended them (`Event.subscriptionEnded`)
    /// since data last came: at `MachineConfig.resubscribesPerLink` the link is made again instead.
    public var resubscribes: Int = 0

    public init(upAt: Moment, resolved: Bool = false, adoptedUnresolved: Bool = false, proven: Bool = false,
                setupVerdict: SetupVerdict? = nil) {
        self.upAt = upAt
        self.resolved = resolved
        self.adoptedUnresolved = adoptedUnresolved
        self.proven = proven
        self.setupVerdict = setupVerdict
    }

    /// See `setupVerdict`. The drop BlueZ often signals right after the services went
    /// (ServicesResolved=false and Connected=false arrive separately) is the same failure, not
    /// another: it is never counted after a verdict.
    public enum SetupVerdict: Sendable, Hashable {
        /// The services went on an unproven link: counted as a failed set-up. A discovery
        /// timeout that follows is not counted again.
        case counted
        /// The services went on a proven link (a Service Changed re-read): no failure; but if
        /// they never come back, the discovery timeout still counts one.
        case excused
    }
}

/// Why a wearable needs pairing again. The raw values are the journal's and the D-Bus error's words.
public enum RepairReason: String, Sendable, Hashable, CaseIterable {
    /// BlueZ forgot the device (`RemoveDevice` elsewhere, or its object vanished).
    case deviceRemoved = "device-removed"
    /// BlueZ still has the device, but `Paired` (or `Bonded`) turned false.
    case bondRemoved = "bond-removed"
    /// Authentication with the stored key failed (`Disconnected` reason, or a request's error).
    case authentication = "authentication"
    /// A request answered `DoesNotExist`: BlueZ no longer has the device.
    case deviceGone = "device-gone"
    /// Set-ups kept failing before the wearable ever answered (`MachineConfig.setupFailuresBeforeRepair`):
    /// on BlueZ 5.66, what a wearable that forgot its bond looks like.
    case suspectedBondLoss = "suspected-bond-loss"
    /// bluetoothd crashed twice while this wearable's link was being set up: its link presumably
    /// triggers a BlueZ bug, and reconnecting would drive a crash loop. Pairing it again helps.
    case bluetoothdCrashes = "bluetoothd-crashed"
    /// bluetoothd came back from a crash without the device or its bond (one made just before
    /// the crash and not yet stored, or a store it could not read back).
    case bondLostInCrash = "bond-lost-in-crash"
    /// bluetoothd left the bus within `PairingMachine.attributionWindow` of this wearable's link
    /// coming up, twice in a row, whatever systemd said (or nobody said) why it died, and the
    /// evidence points at its bond: both links died in their set-up, or its links ended in an
    /// authentication failure. What a factory-reset wearable does to Debian 12's 6.1 kernel (the
    /// host's old key fails, the kernel oopses, bluetoothd dies): `PairingMachine+Attribution`.
    case bluetoothdDiedOnLink = "bluetoothd-died-on-link"

    public var token: String { rawValue }

    /// What `pairctl status` says of it, after "needs pairing again".
    public var explanation: String {
        switch self {
        case .deviceRemoved: "BlueZ no longer has it (removed outside paird)"
        case .bondRemoved: "BlueZ no longer holds its bond"
        case .authentication: "its stored key was refused: the wearable forgot the bond (reset, or paired elsewhere)"
        case .deviceGone: "BlueZ no longer has it"
        case .suspectedBondLoss: "its links kept failing before it answered: it probably forgot the bond"
        case .bluetoothdCrashes: "bluetoothd crashed twice connecting to it"
        case .bondLostInCrash: "bluetoothd came back from a crash without its bond"
        case .bluetoothdDiedOnLink: "bluetoothd died twice as its link came up: it was probably reset (it lost its bond, "
            + "the host still has the old key) and this kernel crashes on the failed encryption"
        }
    }

    /// The reason behind a request failure that `ConnectFailureClassifier` calls `.bondLost`.
    public init(bondFailure failure: BlueZFailure) {
        switch failure {
        case .authentication: self = .authentication
        case .deviceGone: self = .deviceGone
        default:
            assertionFailure("\(failure) is no lost bond (ConnectFailureClassifier)")
            self = .authentication
        }
    }
}

/// Identity of a wearable: what the state file remembers besides intent.
public struct DeviceIdentity: Sendable, Hashable, Codable {
    public var address: DeviceAddress
    public var addressType: AddressType
    public var name: String
    /// The adapter it is bonded through (`hci0` or its address), as configured when paired.
    public var adapter: String
    /// Service UUIDs (128-bit, lower case) it advertised or was paired for; they go into the
    /// GattProfile1 that arms the kernel's auto-connect.
    public var serviceUUIDs: [String]
    /// The address of the adapter that holds its bond (the one it was paired on). A bond belongs
    /// to that adapter: paird never tries the wearable on another one, and never pairs it again
    /// there by itself. nil: not known yet (a state file from before paird recorded it; filled in
    /// at the first adapter that shows the bond).
    public var adapterAddress: DeviceAddress?

    public init(address: DeviceAddress, addressType: AddressType = .public, name: String = "",
                adapter: String = "", serviceUUIDs: [String] = [], adapterAddress: DeviceAddress? = nil) {
        self.address = address
        self.addressType = addressType
        self.name = name
        self.adapter = adapter
        self.serviceUUIDs = serviceUUIDs
        self.adapterAddress = adapterAddress
    }
}

/// Everything the machine keeps about one wearable.
public struct ManagedDevice: Sendable, Hashable {
    public var identity: DeviceIdentity
    public var wanted: Wanted
    public var state: DeviceState
    /// When `state` last changed its name.
    public var since: Moment
    /// Wall-clock seconds: when it was paired, and when identity or intent last changed.
    public var pairedAt: Double
    public var updatedAt: Double
    public var lastDisconnect: LastDisconnect?
    /// Connect attempts since the link was last usable.
    public var reconnectAttempts: Int
    /// Set-ups in a row that failed before the wearable answered (links that dropped or lost their
    /// services, links that never resolved, quick abort-by-local failures); at
    /// `MachineConfig.setupFailuresBeforeRepair` the bond is presumed lost.
    public var setupFailures: Int
    /// The link paird asked BlueZ to drop (at the discovery timeout) and has not yet seen go down:
    /// an outstanding request, not the current link's fact, so it outlives the state that made
    /// it. A Connect issued meanwhile is answered at once while that link is still up (5.66
    /// `dev_connect`: `le_state.connected` → success), so the drop that follows is ours: neither a
    /// link loss nor a failed set-up; connect again.
    public var ownDrop: Link?
    /// Has reached `connected` since the daemon started (a later connect is a *reconnect*).
    public var hasBeenConnected: Bool
    /// bluetoothd died while this wearable's link was being set up, and it has not reached
    /// `connected` since. Persisted (the state file's `bluetoothdCrashedOnLink`), so a paird
    /// restart does not forget it: a second such crash disarms it (`RepairReason.bluetoothdCrashes`).
    public var bluetoothdCrashedOnLink: Bool = false
    /// When its link last came up (`Event.linkUp`), and bluetoothd's departures in a row that
    /// followed it within `PairingMachine.attributionWindow` (`PairingMachine+Attribution`). Not
    /// persisted.
    public var linkUpAt: Moment?
    public var deathsOnLink = DeathsOnLink()
    /// Configured characteristics its last set-up link did not show (`Event.characteristicsMissing`):
    /// reported once, shown in the status, never a reason to drop the link (a new one would not
    /// bring them back: a firmware update dropped them, or BlueZ's cache lost them).
    public var missingCharacteristics: Set<String> = []
    /// Links made again for a weak health reason (no first data, subscriptions that kept ending)
    /// in a row without data in between: at `MachineConfig.healthRemakesInRow` paird stops doing
    /// that for this wearable until it delivers again (a wearable that notifies rarely is not
    /// reconnected in a loop).
    public var healthRemakes: Int = 0
    /// When a subscribed characteristic last delivered (for status).
    public var lastDataAt: Moment?
    /// The last Battery Level read (0–100 %, its set-up link's read or a notification): for status
    /// and paird's `Battery` signal. nil: none read yet, or BlueZ forgot the device.
    public var battery: UInt8?
    /// What paird learned of this wearable's habits while it runs (`Learned`).
    public var learned = Learned()

    /// What paird learns of one wearable while it runs, kept across its links, never persisted:
    /// each feature that learns something keeps it here rather than in a loose field of the device.
    public struct Learned: Sendable, Hashable {
        /// The notification rhythm per subscribed characteristic (128-bit UUID): what the silence
        /// watch reads.
        public var rhythms: [String: NotificationRhythm] = [:]
        /// How long its last links took from up to `ServicesResolved` (at most
        /// `MachineConfig.resolveSamples`, oldest first): what its learned resolve deadline is made of.
        public var resolveTimes: [Duration] = []
        /// The generation of the resolve countdown armed with a learned (shorter than configured)
        /// deadline, if the current one is.
        public var resolveCountdown: UInt64?
        /// A link was ended at a learned resolve deadline: the next one gets the whole `resolveTimeout`.
        public var resolveCutShort = false
        /// Its last returns after the host's resume, in seconds (at most `HostWatch.returnSamples`,
        /// oldest first): what its resume deadline is made of (`PairingMachine.resumeDeadline`).
        public var resumeReturns: [Double] = []
        public init() {}
    }

    public struct LastDisconnect: Sendable, Hashable {
        public var reason: ReportReason
        public var at: Moment
    }

    public var address: DeviceAddress { identity.address }
}
