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
            sleep.expected.append(a)
            letGoForSleep(i, now, &actions)
            actions.append(.disconnect(a))
        }
        host.lastSleep = sleep
        // logind's inhibitor goes once BlueZ answered every Disconnect() (the links are down), at
        // the latest after `HostWatch.releaseAfter`: the kernel's own suspend ends any link left.
        guard !sleep.expected.isEmpty else { return actions.append(.releaseSleepInhibitor(.noLinks)) }
        host.lettingGo = Set(sleep.expected)
        let c = countdown(.host, .sleepRelease, now + HostWatch.releaseAfter)
        host.release = c
        actions.append(.arm(c))
    }

    /// A Disconnect() of paird's is over: the last one of those made for the sleep releases the
    /// inhibitor.
    mutating func disconnectAnswered(_ a: DeviceAddress, _ now: Moment, _ actions: inout [Action]) {
        guard host.asleep, host.lettingGo.remove(a) != nil, host.lettingGo.isEmpty, let c = host.release else { return }
        host.release = nil
        actions.append(.cancel(c.id))
        actions.append(.releaseSleepInhibitor(.everyLinkLetGo))
    }

    /// The release countdown ran out with Disconnect() calls still unanswered.
    mutating func sleepReleaseDue(_ id: Countdown.ID, _ now: Moment, _ actions: inout [Action]) {
        guard host.release?.id == id else { return } // stale: ignored
        host.release = nil
        guard host.asleep else { return }
        actions.append(.releaseSleepInhibitor(.timedOut(unanswered: host.lettingGo.count)))
        host.lettingGo = []
    }

    mutating func hostResumed(_ now: Moment, _ actions: inout [Action]) {
        guard host.asleep else { return }
        host.asleep = false
        host.lettingGo = []
        if let c = host.release { actions.append(.cancel(c.id)) }
        host.release = nil
        host.lastSleep?.resumedAt = now
        armResumeDeadline(now, &actions)
        // An adapter that went with the sleep (a USB dongle reset at resume) comes back through
        // `adapterReady`, which reconciles every wearable anyway.
        guard adapterUp else { return }
        for a in sortedAddresses {
            guard let i = slot[a], slots[i].wanted == .connected, case .waitingForDevice = slots[i].state else { continue }
            restoreConnect(i, now, &actions, reason: .hostResumed)
        }
        actions.append(.updateAutoConnect(autoConnectUUIDs))
        if host.lastSleep?.expected.isEmpty == false {
            escalate(.autoConnect, device: nil, now, &actions)
        }
    }

    // MARK: The escalation after a resume

    /// How long after a resume wearable `a` may take before the escalation goes on: twice the
    /// slowest of its last returns, within the floor and the ceiling; the ceiling until it has
    /// returned once.
    public func resumeDeadline(_ a: DeviceAddress) -> Duration {
        let floor = config.resumeDeadlineFloor, ceiling = config.resumeDeadlineCeiling
        guard let slowest = slot[a].flatMap({ slots[$0].learned.resumeReturns.max() }) else { return ceiling }
        return min(max(.fractionalSeconds(slowest * 2), floor), ceiling)
    }

    /// The next deadline of a wearable linked at the sleep that is not back and not yet judged.
    mutating func armResumeDeadline(_ now: Moment, _ actions: inout [Action]) {
        if let c = host.deadline { actions.append(.cancel(c.id)) }
        host.deadline = nil
        guard let s = host.lastSleep, let woke = s.resumedAt else { return }
        let pending = s.expected.filter { s.backTimes[$0] == nil && !s.judged.contains($0) }
        guard let next = pending.map({ woke + resumeDeadline($0) }).min() else { return }
        let c = countdown(.host, .resumeDeadline, max(next, now))
        host.deadline = c
        actions.append(.arm(c))
    }

    /// A wearable linked at the sleep is past its deadline and not back. If another one on its
    /// adapter is back, the adapter works: this one is away, and waits as any away wearable (no
    /// escalation). If none is, its adapter is power-cycled (with several, each adapter that
    /// brought none back) once for this resume, unless `resumePowerCycles` resumes were
    /// power-cycled since a wearable last came back on its own: then paird says so and waits.
    mutating func resumeDeadlineFired(_ id: Countdown.ID, _ now: Moment, _ actions: inout [Action]) {
        guard host.deadline?.id == id, var s = host.lastSleep, let woke = s.resumedAt else { return }
        host.deadline = nil
        let late = s.expected.filter { s.backTimes[$0] == nil && !s.judged.contains($0) && now >= woke + resumeDeadline($0) }
        s.judged.formUnion(late)
        host.lastSleep = s
        let stillWanted = late.filter { a in slot[a].map { slots[$0].wanted == .connected && slots[$0].state.isPursuing } ?? false }
        if !stillWanted.isEmpty, !host.asleep {
            // Late on an adapter where another one is back: that adapter works, they are away.
            let working = Set(s.backTimes.keys.map(ownAdapter))
            let unaided = stillWanted.filter { !working.contains(ownAdapter($0)) }
            for a in stillWanted where !unaided.contains(a) { escalate(.away, device: a, now, &actions) }
            if unaided.isEmpty {
                // every late one's adapter works
            } else if !adapterUp || s.poweredCycled {
                // The adapter is away on its own path, or this resume had its power cycle already.
                for a in unaided { escalate(.away, device: a, now, &actions) }
            } else if host.powerCyclesInVain >= config.resumePowerCycles {
                escalate(.capReached, device: unaided.first, now, &actions)
            } else {
                host.lastSleep?.poweredCycled = true
                host.powerCyclesInVain += 1
                escalate(.powerCycle, device: unaided.first, now, &actions)
                // Each adapter that brought none of its wearables back; with one adapter, it.
                let adapters = Set(unaided.map(ownAdapter))
                if upAdapters.count > 1, adapters.allSatisfy({ $0 != nil }) {
                    for adapter in adapters.compactMap({ $0 }).sorted() { actions.append(.powerCycle(adapter: adapter)) }
                } else {
                    actions.append(.powerCycleAdapter)
                }
            }
        }
        armResumeDeadline(now, &actions)
    }

    /// The adapter wearable `a` belongs to: its bond's, else the one in use.
    func ownAdapter(_ a: DeviceAddress) -> DeviceAddress? {
        slot[a].flatMap { slots[$0].identity.adapterAddress } ?? adapterInUse
    }

    mutating func escalate(_ step: ResumeStep, device: DeviceAddress?, _ now: Moment, _ actions: inout [Action]) {
        host.lastSleep?.steps.append(step)
        let name = device.flatMap { slot[$0] }.map { slots[$0].identity.name } ?? ""
        var detail = ResumeEscalation(step: step)
        if step == .powerCycle || step == .capReached {
            (detail.powerCycles, detail.powerCycleCap) = (host.powerCyclesInVain, config.resumePowerCycles)
        }
        if let a = device, let woke = host.lastSleep?.resumedAt {
            (detail.after, detail.deadline) = (now.since(woke), resumeDeadline(a))
        }
        actions.append(.report(Report(kind: .resumeEscalation, device: device, name: name, reason: .resume(detail))))
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
        slots[i].lastDisconnect = .init(reason: .hostAsleep, at: now)
        if host.asleep {
            waitPassively(i, now, &actions, reason: .hostAsleep, kind: .hostAsleep)
        } else {
            restoreConnect(i, now, &actions, reason: .hostAsleep, kind: .hostAsleep)
        }
    }

    /// A link reached `connected`: the first time since the resume counts as its return.
    mutating func backAfterSleep(_ a: DeviceAddress, _ now: Moment, _ actions: inout [Action]) {
        guard let s = host.lastSleep, let woke = s.resumedAt, s.awaited.contains(a), s.backTimes[a] == nil else { return }
        host.lastSleep?.backTimes[a] = now
        guard s.expected.contains(a), !s.judged.contains(a) else { return }
        armResumeDeadline(now, &actions)
        // Back on its own, in time: the adapter came through this resume unaided. Power cycles
        // count from zero again, and the return time is learned (not one after a power cycle).
        guard !s.poweredCycled else { return }
        host.powerCyclesInVain = 0
        guard let i = slot[a] else { return }
        slots[i].learned.resumeReturns.append(now.since(woke).seconds)
        if slots[i].learned.resumeReturns.count > HostWatch.returnSamples { slots[i].learned.resumeReturns.removeFirst() }
    }
}

/// What paird knows of the host's sleeps.
public struct HostWatch: Sendable, Hashable {
    public static let asleepReason = ReportReason.hostAsleep.token
    /// Between `PrepareForSleep(true)` and `PrepareForSleep(false)`.
    public internal(set) var asleep = false
    public internal(set) var lastSleep: HostSleep?
    /// How many of a wearable's returns after a resume its deadline is made of
    /// (`ManagedDevice.Learned.resumeReturns`).
    public static let returnSamples = 5
    /// Power cycles since a wearable last came back after a resume on its own, in time
    /// (`MachineConfig.resumePowerCycles`): a controller that needs one at every resume is
    /// power-cycled that many times, then left to the wearables' own reconnects, and said so.
    public internal(set) var powerCyclesInVain = 0
    /// The armed resume deadline, if any.
    var deadline: Countdown?
    /// At most this long between PrepareForSleep(true) and the inhibitor's release, whatever is
    /// still out (logind's own cap, InhibitDelayMaxSec, is 5 s by default).
    public static let releaseAfter: Duration = .seconds(2)
    /// The wearables whose Disconnect() for this sleep BlueZ has not answered yet, and the
    /// countdown that releases the inhibitor all the same.
    public internal(set) var lettingGo: Set<DeviceAddress> = []
    var release: Countdown?
    public init() {}
}

/// Why logind's delay inhibitor is released before a sleep (`Action.releaseSleepInhibitor`).
public enum SleepRelease: Sendable, Hashable, CustomStringConvertible {
    /// No wanted wearable had a link to let go.
    case noLinks
    /// BlueZ answered every Disconnect() made for the sleep.
    case everyLinkLetGo
    /// `HostWatch.releaseAfter` passed with this many Disconnect() calls unanswered.
    case timedOut(unanswered: Int)

    public var description: String {
        switch self {
        case .noLinks: "no link to let go"
        case .everyLinkLetGo: "every link let go"
        case .timedOut(let n): "\(n) Disconnect() call(s) still unanswered"
        }
    }
}

/// The steps after a resume, in their order (each one a journal entry, `Report.Kind.resumeEscalation`).
public enum ResumeStep: String, Sendable, Hashable {
    /// The auto-connect registered again, paird's Connect() after the head start.
    case autoConnect = "auto-connect-and-connect"
    /// Past its deadline while another one is back (or after the power cycle): away, waited for.
    case away
    /// Past its deadline and nothing back: the adapter power-cycled.
    case powerCycle = "power-cycle"
    /// …but that many power cycles in a row brought nothing back: not again.
    case capReached = "power-cycle-cap-reached"
}

/// One sleep of the host, as paird saw it.
public struct HostSleep: Sendable, Hashable {
    public var at: Moment
    public var resumedAt: Moment?
    /// The wanted wearables when it went to sleep, and when each was connected again.
    public var awaited: [DeviceAddress] = []
    public var backTimes: [DeviceAddress: Moment] = [:]
    /// Those linked when it went to sleep: expected back after the resume (the escalation's).
    public var expected: [DeviceAddress] = []
    /// Past their deadline (judged once each), the steps taken, whether the adapter was power-cycled.
    public var judged: Set<DeviceAddress> = []
    public var steps: [ResumeStep] = []
    public var poweredCycled = false
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
