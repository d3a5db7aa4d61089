/// The host's sleep (logind's `PrepareForSleep`, which paird follows holding a delay inhibitor).
///
/// Before the host sleeps, every wanted wearable's link is let go in order (Disconnect), the
/// wearable waits with the reason `host-asleep`, and nothing of it counts against the wearable:
/// not a link loss, not a failed set-up. After the resume, every wanted wearable that is not
/// connected is brought back as after a restart: the kernel's auto-connect first (re-registered,
/// for controllers that lose their accept list over a sleep), paird's own `Connect()` when the
/// head start runs out. `lastSleep` keeps when each one was back, for `pairctl status`.
extension PairingMachine {
    /// A link that goes down within this long after the resume, came up before it (before the
    /// sleep, or in the moment between PrepareForSleep and the freeze) and carried no data since,
    /// went with the sleep: its link-down can reach paird only once the host runs again. (A link
    /// the kernel made after it resumed, before logind's PrepareForSleep(false), has carried data
    /// by the time it drops: a drop of it is a link loss. The bed's stand-in showed both.)
    static let resumeGrace: Duration = .seconds(30)

    mutating func hostSleeping(_ now: Moment, _ actions: inout [Action]) {
        guard !host.asleep else { return }
        host.asleep = true
        var sleep = HostSleep(at: now)
        for a in sortedAddresses {
            guard let i = slot[a], slots[i].wanted == .connected, slots[i].state.isPursuing else { continue }
            sleep.awaited.append(a)
            guard slots[i].state.link != nil else { continue } // not linked: nothing to let go
            letGoForSleep(i, now, &actions)
            actions.append(.disconnect(a))
        }
        host.lastSleep = sleep
    }

    mutating func hostResumed(_ now: Moment, _ actions: inout [Action]) {
        guard host.asleep else { return }
        host.asleep = false
        host.lastSleep?.resumedAt = now
        // An adapter that went with the sleep (a USB dongle reset at resume) comes back through
        // `adapterReady`, which reconciles every wearable anyway.
        guard adapterUp else { return }
        for a in sortedAddresses {
            guard let i = slot[a], slots[i].wanted == .connected, case .waitingForDevice = slots[i].state else { continue }
            restoreConnect(i, now, &actions, reason: "host-resumed")
        }
        actions.append(.updateAutoConnect(autoConnectUUIDs))
    }

    /// The link of slot `i` went with the host's sleep: the host is asleep, or woke up less than
    /// `resumeGrace` ago, and the link predates the resume and carried no data since.
    func sleepTookLink(_ i: Int, _ link: Link, _ now: Moment) -> Bool {
        if host.asleep { return true }
        guard let s = host.lastSleep, let woke = s.resumedAt else { return false }
        let aliveSince = slots[i].lastDataAt.map { $0 >= woke } ?? false
        return link.upAt < woke && !aliveSince && now.since(woke) < Self.resumeGrace
    }

    /// Waits for it (the auto-connect, or paird's `Connect()` after the resume) with the reason
    /// `host-asleep`; its drop is not counted.
    mutating func letGoForSleep(_ i: Int, _ now: Moment, _ actions: inout [Action]) {
        slots[i].ownDrop = nil
        slots[i].lastDisconnect = .init(reason: HostWatch.asleepReason, at: now)
        if host.asleep {
            waitPassively(i, now, &actions, reason: HostWatch.asleepReason, kind: .hostAsleep)
        } else {
            restoreConnect(i, now, &actions, reason: HostWatch.asleepReason, kind: .hostAsleep)
        }
    }

    /// A link reached `connected`: the first time since the resume counts as its return.
    mutating func backAfterSleep(_ a: DeviceAddress, _ now: Moment) {
        guard let s = host.lastSleep, s.resumedAt != nil, s.awaited.contains(a), s.backTimes[a] == nil else { return }
        host.lastSleep?.backTimes[a] = now
    }
}

/// What paird knows of the host's sleeps.
public struct HostWatch: Sendable, Hashable {
    public static let asleepReason = "host-asleep"
    /// Between `PrepareForSleep(true)` and `PrepareForSleep(false)`.
    public internal(set) var asleep = false
    public internal(set) var lastSleep: HostSleep?
    public init() {}
}

/// One sleep of the host, as paird saw it.
public struct HostSleep: Sendable, Hashable {
    public var at: Moment
    public var resumedAt: Moment?
    /// The wanted wearables when it went to sleep, and when each was connected again.
    public var awaited: [DeviceAddress] = []
    public var backTimes: [DeviceAddress: Moment] = [:]
    public init(at: Moment, resumedAt: Moment? = nil, awaited: [DeviceAddress] = [], backTimes: [DeviceAddress: Moment] = [:]) {
        self.at = at
        self.resumedAt = resumedAt
        self.awaited = awaited
        self.backTimes = backTimes
    }
}

extension DisconnectClassifier.Verdict {
    /// A drop the host's sleep may explain: a link loss, or one we asked for. A lost bond or the
    /// adapter's loss keeps its own path through a sleep.
    var mayBeSleep: Bool {
        switch self {
        case .linkLoss, .requested: true
        case .bondLost, .adapterGone: false
        }
    }
}
