/// What systemd says of `bluetooth.service` (`org.freedesktop.systemd1.Unit.ActiveState`,
/// `org.freedesktop.systemd1.Service.Result`, `ExecMainCode`, `ExecMainStatus`), read after
/// `org.bluez` left the bus.
public struct BluetoothdUnitState: Sendable, Hashable {
    /// `active`, `reloading`, `inactive`, `failed`, `activating`, `deactivating`.
    public var activeState: String
    /// `success`, `exit-code`, `signal`, `core-dump`, `watchdog`, `timeout`, `start-limit-hit`, ….
    public var result: String
    /// The main process's `si_code`: 1 CLD_EXITED (status = exit status), 2 CLD_KILLED,
    /// 3 CLD_DUMPED (status = signal number); 0 when it has not exited.
    public var execMainCode: Int32
    public var execMainStatus: Int32
    /// `ExecMainStartTimestampMonotonic`: which run of bluetoothd these facts are about (a start
    /// paird asked for shows as a new value).
    public var execMainStart: UInt64

    public init(activeState: String, result: String, execMainCode: Int32 = 0, execMainStatus: Int32 = 0, execMainStart: UInt64 = 0) {
        self.activeState = activeState
        self.result = result
        self.execMainCode = execMainCode
        self.execMainStatus = execMainStatus
        self.execMainStart = execMainStart
    }

    /// "SIGSEGV" for a killed or dumped main process, "exit status 1" for one that exited, nil before.
    public var exitDescription: String? {
        switch execMainCode {
        case 1: "exit status \(execMainStatus)"
        case 2, 3: Self.signalName(execMainStatus)
        default: nil
        }
    }

    /// The signal name (Linux x86 numbers); `signal N` for one not listed.
    public static func signalName(_ n: Int32) -> String {
        let names: [Int32: String] = [1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT",
                                      7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL", 11: "SIGSEGV", 13: "SIGPIPE", 15: "SIGTERM"]
        return names[n] ?? "signal \(n)"
    }
}

/// Why bluetoothd left the bus: the decision paird acts on (`BluetoothdExit.classify`).
public enum BluetoothdExit: Sendable, Hashable {
    /// It crashed (`Result` core-dump, signal, exit-code or watchdog) and systemd leaves it down
    /// (Debian's and BlueZ's unit ship `#Restart=on-failure` commented out): paird starts it.
    case crashed
    /// It crashed and systemd is restarting it itself (`Restart=` set: `activating`): paird waits.
    case crashedSystemdRestarts
    /// An administrator's stop (`Result=success`): respected, paird waits.
    case stopped
    /// Down for another reason (`start-limit-hit`, `resources`, …): paird waits and says so.
    case failedOther
    /// systemd has not settled it yet (still `active` or `deactivating`): ask again shortly.
    case notSettled
    /// No systemd on the bus, or no such unit: wait, as without systemd.
    case unknown

    public static let crashResults: Set<String> = ["core-dump", "signal", "exit-code", "watchdog"]

    public static func classify(_ unit: BluetoothdUnitState?) -> BluetoothdExit {
        guard let unit else { return .unknown }
        let crash = crashResults.contains(unit.result)
        switch unit.activeState {
        case "failed", "inactive":
            if crash { return .crashed }
            return unit.result == "success" ? .stopped : .failedOther
        case "activating":
            return crash ? .crashedSystemdRestarts : .notSettled
        default:
            return .notSettled
        }
    }
}

/// bluetoothd as paird follows it: not yet known, present, or gone and why, and its restarts
/// after a crash.
///
/// ```
///   unknown ──seen──▶ present;  unknown ──no owner at the first look──▶ waiting
///   present ──left──▶ asking systemd ──crashed──▶ restartDue (backoff) ──▶ starting ──back──▶ present
///                       │  ▲ not settled                 ▲ start failed / died again │
///                       │  └─ (countdown)                └───────────────────────────┘
///                       ├─stopped──▶ stoppedByAdmin (waits)       (cap reached ──▶ gaveUp, waits)
///                       └─no systemd / other──▶ waiting (as without systemd)
/// ```
public struct BluetoothdWatch: Sendable, Hashable {
    public enum Phase: Sendable, Hashable {
        /// paird has not yet seen whether `org.bluez` has an owner (just started): neither
        /// running nor gone. Left at the first answer (`bluetoothdBack` / `bluetoothdAbsent`).
        case unknown
        case present
        /// Left the bus; systemd is being asked why (`queries` so far; the countdown, when
        /// armed, is the next question after a `notSettled` answer).
        case asking(queries: Int, countdown: Countdown?)
        /// Crashed: `StartServiceByName(org.bluez)` at the countdown.
        case restartDue(Countdown)
        /// `StartServiceByName` in flight; systemd is asked at the countdown whether that start
        /// failed (dbus-daemon answers a failed activation only after its 25 s timeout on the bed).
        case starting(polls: Int, countdown: Countdown?)
        /// Stopped by an administrator: paird does not start it.
        case stoppedByAdmin
        /// Gone for a reason paird does not act on (no systemd, another failure): waits.
        case waiting(reason: BluetoothdWait)
        /// It kept dying before it was ever ready: `bluetoothdRestartCap` starts; paird waits for someone else.
        case gaveUp

        public var name: String {
            switch self {
            case .unknown: "unknown"
            case .present: "running"
            case .asking: "gone"
            case .restartDue: "restarting"
            case .starting: "starting"
            case .stoppedByAdmin: "stopped"
            case .waiting: "gone"
            case .gaveUp: "gave-up"
            }
        }

        public var countdown: Countdown? {
            switch self {
            case .asking(_, let c): c
            case .restartDue(let c): c
            case .starting(_, let c): c
            case .unknown, .present, .stoppedByAdmin, .waiting, .gaveUp: nil
            }
        }
    }

    public internal(set) var phase: Phase = .unknown
    /// When it left the bus this time (nil while present).
    public internal(set) var goneSince: Moment?
    /// Starts paird made since the adapter was last ready (a bluetoothd dying at each start).
    public internal(set) var starts = 0
    public internal(set) var lastStartAt: Moment?
    /// When it last came onto the bus (`bluetoothdBack`): a departure soon after it may be one on a
    /// link it never got to signal (`PairingMachine.attributeDeparture`).
    public internal(set) var backAt: Moment?
    /// Devices whose link was being set up when it left (their link may be what killed it).
    var settingUpAtLoss: [DeviceAddress] = []
    /// Devices disarmed when it left because it keeps dying on their link-up
    /// (`PairingMachine.attributeDeparture`): listed in the crash's `disarmed` if systemd reports one.
    var attributedAtLoss: [DeviceAddress] = []
    /// Devices linked (set up or being set up) when it left: awaited back after a crash.
    var linkedAtLoss: [DeviceAddress] = []
    /// It crashed since the adapter was last ready (a bond missing at the next reconciliation is
    /// one the crash took: `bondLostInCrash`).
    var crashedSinceReady = false
    /// It left the bus while paird watched, since the adapter was last ready, whatever the reason
    /// (crash, stop, systemd silent or absent): a link found up and unresolved at the next
    /// reconciliation predates the new bluetoothd, which has no ATT channel on it and never
    /// resolves it, and is dropped at once (`reconcile`).
    var leftSinceReady = false
    /// `execMainStart` of the run that crashed: a failed start shows a different one.
    var crashedRun: UInt64?
    /// The last crash, for the journal and `pairctl status`.
    public internal(set) var lastCrash: BluetoothdCrash?
    /// Wearables disarmed together at one crash (each had its link being set up at both crashes:
    /// the culprit and whoever was reconnecting beside it). They are let back one at a time, the
    /// one `onTrial` alone; one that reaches `connected` is cleared, one whose set-up kills
    /// bluetoothd again stays disarmed. Not persisted: after a paird restart they stay disarmed.
    public internal(set) var probation: [DeviceAddress] = []
    public internal(set) var onTrial: DeviceAddress?

    public init() {}
}

/// One crash of bluetoothd as paird saw it.
public struct BluetoothdCrash: Sendable, Hashable {
    public var at: Moment
    public var unit: BluetoothdUnitState
    /// What paird does about it: `started again`, `start again in N s`, `systemd restarts it`,
    /// `gave up after N starts`.
    public var action: String
    /// The start (1-based) paird made or will make for it; nil when paird does not start it.
    public var attempt: Int?
    /// When bluetoothd was on the bus again; nil until then.
    public var backAt: Moment?
    /// The wearables linked (or being linked) when it died, and when each was connected again.
    public var awaited: [DeviceAddress]
    public var backTimes: [DeviceAddress: Moment] = [:]
    /// Wearables disarmed for it (their link crashed it twice).
    public var disarmed: [DeviceAddress] = []

    /// "SIGSEGV", "exit status 1", or systemd's result word.
    public var cause: String { unit.exitDescription ?? unit.result }

    public init(at: Moment, unit: BluetoothdUnitState, action: String, attempt: Int?, backAt: Moment? = nil,
                awaited: [DeviceAddress], backTimes: [DeviceAddress: Moment] = [:], disarmed: [DeviceAddress] = []) {
        self.at = at
        self.unit = unit
        self.action = action
        self.attempt = attempt
        self.backAt = backAt
        self.awaited = awaited
        self.backTimes = backTimes
        self.disarmed = disarmed
    }
}
