#if canImport(Glibc)
import Glibc
#endif

/// Readiness conditions of a file descriptor.
///
/// `read` and `write` are what a watch asks for; `hangup` and `error` are only ever reported
/// (epoll reports them whether asked or not).
public struct IOEvents: OptionSet, Sendable, Hashable, CustomStringConvertible {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    public static let read = IOEvents(rawValue: 1 << 0)
    public static let write = IOEvents(rawValue: 1 << 1)
    public static let hangup = IOEvents(rawValue: 1 << 2)
    public static let error = IOEvents(rawValue: 1 << 3)

    public var description: String {
        var parts: [String] = []
        if contains(.read) { parts.append("read") }
        if contains(.write) { parts.append("write") }
        if contains(.hangup) { parts.append("hangup") }
        if contains(.error) { parts.append("error") }
        return "[" + parts.joined(separator: ",") + "]"
    }
}

/// A failed system call while setting up or running the loop.
public struct EventLoopError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The system call that failed, e.g. `"epoll_ctl"`.
    public var call: String
    public var errno: Int32

    public init(call: String, errno: Int32) {
        self.call = call
        self.errno = errno
    }

    public var description: String {
        "\(call) failed: \(String(cString: strerror(errno))) (errno \(errno))"
    }
}

/// The one event loop of the process: file descriptors, timers and signals, all dispatched on the
/// thread that calls `run()`.
///
/// Built on epoll. All timers share one `timerfd` on `CLOCK_BOOTTIME` (the clock of
/// `ContinuousClock` on Linux, so time spent suspended counts), signals arrive through one
/// `signalfd`. When nothing is due, `run()` sleeps in `epoll_wait` without a timeout: an idle loop
/// costs no wake-ups (see `wakeups`).
///
/// Not thread-safe by design: create it, use it and run it on one thread. Every object it hands out
/// (`IOWatch`, `TimerHandle`) is for that thread only.
public final class EventLoop {
    private let epollFD: Int32
    private let timerFD: Int32
    private var signalFD: Int32 = -1
    private var signalMask = sigset_t()
    private var signalHandlers: [Int32: () -> Void] = [:]

    /// Watches grouped by fd: libdbus, for one, watches the same socket twice (read and write),
    /// and epoll accepts each fd only once.
    private var fdEntries: [Int32: FDEntry] = [:]
    private var timers = TimerHeap()
    /// The deadline the timerfd is currently armed for (nanoseconds of the loop's clock), if any.
    private var armedDeadline: UInt64?
    private var nextTimerSequence: UInt64 = 0
    private var queued: [() -> Void] = []
    private var stopRequested = false
    private var isRunning = false
    /// Reused epoll_wait buffer.
    private var events = [EpollEvent](repeating: EpollEvent(), count: 64)

    /// Number of times `epoll_wait` returned. Lets tests and benchmarks prove an idle loop sleeps.
    public private(set) var wakeups: UInt64 = 0
    /// How far the loop's clock is ahead of CLOCK_BOOTTIME: zero, unless a test moved it on
    /// (`advanceClock(by:)`). Every deadline and `now()` is on the loop's clock.
    public private(set) var clockSkew: Duration = .zero
    private var skewNanoseconds: UInt64 = 0

    // Tags in epoll_event.data for the two internal fds; user fds are tagged with the fd itself.
    private static let timerTag: UInt64 = 1 << 40
    private static let signalTag: UInt64 = 1 << 41

    public init() throws {
        let ep = sysEpollCreate1(Epoll.cloexec)
        guard ep >= 0 else { throw EventLoopError(call: "epoll_create1", errno: errno) }
        let tfd = sysTimerfdCreate(CLOCK_BOOTTIME, TimerFD.cloexec | TimerFD.nonblock)
        guard tfd >= 0 else {
            let e = errno
            close(ep)
            throw EventLoopError(call: "timerfd_create", errno: e)
        }
        epollFD = ep
        timerFD = tfd
        sigemptyset(&signalMask)
        var ev = EpollEvent(events: Epoll.in, data: Self.timerTag)
        guard sysEpollCtl(ep, Epoll.ctlAdd, tfd, &ev) == 0 else {
            let e = errno
            close(tfd)
            close(ep)
            throw EventLoopError(call: "epoll_ctl(timerfd)", errno: e)
        }
    }

    deinit {
        close(timerFD)
        if signalFD >= 0 { close(signalFD) }
        close(epollFD)
        // Signals stay blocked: unblocking one that is pending would run its default action.
    }

    // MARK: - Running

    /// Runs until `stop()` is called (from a callback). Returns at once if `stop()` was called
    /// before `run()`. A loop can be run again after it returned.
    public func run() throws {
        try run(until: { false })
    }

    /// Runs until `condition` holds (checked before each iteration) or `stop()` is called.
    /// For a blocking client (pairctl) and for tests: pair it with a deadline timer that calls
    /// `stop()` to bound the wait.
    public func run(until condition: () -> Bool) throws {
        // Not re-entrant: a nested run would overwrite the epoll buffer the outer one is reading,
        // and a callback that blocks on the loop it runs on is a design error anyway.
        guard !isRunning else { throw EventLoopError(call: "EventLoop.run (nested)", errno: EBUSY) }
        isRunning = true
        defer {
            isRunning = false
            stopRequested = false
        }
        while !stopRequested && !condition() {
            try runOnce()
        }
    }

    /// Timers waiting to fire (for tests: cancellation must leave nothing behind).
    var pendingTimerCount: Int { timers.count }

    /// One line for a diagnostic dump (paird's SIGUSR1): wake-ups, timers, queued callbacks, and
    /// each watched fd with what its watches ask for and what epoll has registered.
    public var debugSummary: String {
        let fds = fdEntries.keys.sorted().map { fd -> String in
            let e = fdEntries[fd]!
            let asked = e.watches.map { w in (w.events.contains(.read) ? "r" : "") + (w.events.contains(.write) ? "w" : "") }
            let reg = e.registered ? (e.registeredMask & Epoll.in != 0 ? "r" : "") + (e.registeredMask & Epoll.out != 0 ? "w" : "") : "-"
            return "fd \(fd) watches [\(asked.map { $0.isEmpty ? "off" : $0 }.joined(separator: ","))] epoll \(reg.isEmpty ? "none" : reg)"
        }
        return "loop: \(wakeups) wake-ups, \(timers.count) timers, \(queued.count) queued; " + fds.joined(separator: "; ")
    }

    /// Cancels every watch and timer, forgets signal handlers and queued work. Callbacks often
    /// capture the loop (`loop.onSignal(SIGTERM) { loop.stop() }`), which is a reference cycle;
    /// call this after the last `run()` so that everything the callbacks hold is released
    /// (a daemon exiting cleanly, tests, leak checks). Signals stay blocked.
    public func shutdown() {
        for entry in Array(fdEntries.values) {
            for watch in entry.watches { watch.cancel() }
        }
        fdEntries.removeAll()
        while let t = timers.first { t.cancel() }
        signalHandlers.removeAll()
        queued.removeAll()
    }

    /// Asks `run()` to return after the current iteration.
    public func stop() {
        stopRequested = true
    }

    /// Now on `ContinuousClock` (CLOCK_BOOTTIME on Linux): the clock the timers run on.
    public func now() -> ContinuousClock.Instant {
        clockReference.instant.advanced(by: .nanoseconds(Int64(clockNanoseconds() &- clockReference.boottime)))
    }

    /// For tests: the loop's clock jumps `delta` ahead of the real one, at once. Timers due by the
    /// new time fire on the next iteration, in their order, as if that much time had passed; the
    /// real clock goes on from there. (A test of something timed in minutes runs in milliseconds,
    /// with the loop, its fds and its timers all real.)
    public func advanceClock(by delta: Duration) {
        skewNanoseconds &+= Self.nanoseconds(delta)
        clockSkew = .nanoseconds(Int64(skewNanoseconds))
        armedDeadline = nil
        rearmTimerFD()
    }

    /// The loop's clock: CLOCK_BOOTTIME plus the skew a test gave it.
    private func clockNanoseconds() -> UInt64 { Self.boottimeNanoseconds() &+ skewNanoseconds }

    /// One reading of both clocks, taken together once. `ContinuousClock.Instant` hides its raw
    /// value, so instants are converted to timerfd nanoseconds through this fixed pair: equal
    /// instants always map to equal deadlines (tie order stays scheduling order), and `now()` maps
    /// back exactly. The two reads are nanoseconds apart; that constant offset is irrelevant.
    private let clockReference = (instant: ContinuousClock.now, boottime: EventLoop.boottimeNanoseconds())

    /// Runs `callback` on the next loop iteration, after the current callback has returned.
    /// Use it to leave a callback before doing work that must not re-enter (e.g. D-Bus dispatch).
    public func enqueue(_ callback: @escaping () -> Void) {
        queued.append(callback)
    }

    /// One iteration: wait (without a timeout unless work is queued), dispatch ready fds and due
    /// timers, then queued callbacks.
    private func runOnce() throws {
        let timeout: Int32 = queued.isEmpty ? -1 : 0
        var n: Int32
        repeat {
            n = events.withUnsafeMutableBufferPointer { sysEpollWait(epollFD, $0, timeout) }
        } while n < 0 && errno == EINTR
        wakeups &+= 1
        guard n >= 0 else { throw EventLoopError(call: "epoll_wait", errno: errno) }

        for i in 0..<Int(n) {
            let tag = events[i].data
            let flags = events[i].events
            if tag == Self.timerTag {
                fireDueTimers()
            } else if tag == Self.signalTag {
                readSignals()
            } else {
                dispatchFD(Int32(truncatingIfNeeded: tag), flags: flags)
            }
        }

        if !queued.isEmpty {
            let work = queued
            queued.removeAll(keepingCapacity: true)
            for callback in work { callback() }
        }
    }

    // MARK: - File descriptors

    /// Calls `callback` on the loop thread whenever `fd` is ready for any of `events`.
    ///
    /// Level-triggered: the callback must consume the readiness (read until EAGAIN, or at least
    /// once) or it is called again on the next iteration. Cancel the watch before closing the fd.
    /// Several watches on one fd are allowed.
    @discardableResult
    public func watch(fd: Int32, events: IOEvents, _ callback: @escaping (IOEvents) -> Void) -> IOWatch {
        let watch = IOWatch(loop: self, fd: fd, events: events, callback: callback)
        let entry: FDEntry
        if let existing = fdEntries[fd] {
            entry = existing
        } else {
            entry = FDEntry()
            fdEntries[fd] = entry
        }
        entry.watches.append(watch)
        updateInterest(fd: fd)
        return watch
    }

    func watchChanged(_ watch: IOWatch) {
        updateInterest(fd: watch.fd)
    }

    func removeWatch(_ watch: IOWatch) {
        guard let entry = fdEntries[watch.fd] else { return }
        entry.watches.removeAll { $0 === watch }
        updateInterest(fd: watch.fd)
        if entry.watches.isEmpty { fdEntries[watch.fd] = nil }
    }

    /// Makes epoll's registration of `fd` match the union of its watches. An fd nobody wants
    /// events for is removed from epoll altogether, because epoll reports hang-ups even for an
    /// empty event mask, and a hung-up fd nobody reads would spin the loop.
    private func updateInterest(fd: Int32) {
        guard let entry = fdEntries[fd] else { return }
        var wanted = IOEvents()
        for w in entry.watches { wanted.formUnion(w.events) }
        var mask: UInt32 = 0
        if wanted.contains(.read) { mask |= Epoll.in }
        if wanted.contains(.write) { mask |= Epoll.out }

        var ev = EpollEvent(events: mask, data: UInt64(UInt32(bitPattern: fd)))
        if mask == 0 {
            if entry.registered {
                // EBADF/ENOENT: the fd was closed before the watch was cancelled; epoll already forgot it.
                _ = sysEpollCtl(epollFD, Epoll.ctlDel, fd, &ev)
                entry.registered = false
            }
        } else if entry.registered {
            if entry.registeredMask != mask {
                if sysEpollCtl(epollFD, Epoll.ctlMod, fd, &ev) != 0 {
                    // The fd was closed and reopened under us; register the new one.
                    _ = sysEpollCtl(epollFD, Epoll.ctlAdd, fd, &ev)
                }
            }
        } else {
            if sysEpollCtl(epollFD, Epoll.ctlAdd, fd, &ev) != 0 && errno == EEXIST {
                _ = sysEpollCtl(epollFD, Epoll.ctlMod, fd, &ev)
            }
            entry.registered = true
        }
        entry.registeredMask = mask
    }

    private func dispatchFD(_ fd: Int32, flags: UInt32) {
        guard let entry = fdEntries[fd] else { return }
        var ready = IOEvents()
        if flags & Epoll.in != 0 { ready.insert(.read) }
        if flags & Epoll.out != 0 { ready.insert(.write) }
        if flags & (Epoll.hup | Epoll.rdhup) != 0 { ready.insert(.hangup) }
        if flags & Epoll.err != 0 { ready.insert(.error) }
        // A snapshot: callbacks may add or cancel watches on this fd.
        for w in entry.watches where w.isActive {
            let relevant = ready.intersection(w.events.union([.hangup, .error]))
            let asked = relevant.intersection([.read, .write])
            let problem = relevant.intersection([.hangup, .error])
            if !asked.isEmpty || (!problem.isEmpty && !w.events.isEmpty) {
                w.callback?(relevant)
            }
        }
    }

    // MARK: - Timers

    /// Calls `callback` once, on the loop thread, `delay` from now. Timers due at the same instant
    /// fire in the order they were scheduled. All timers share one timerfd.
    @discardableResult
    public func schedule(after delay: Duration, _ callback: @escaping () -> Void) -> TimerHandle {
        schedule(atBoottime: clockNanoseconds() &+ Self.nanoseconds(delay), callback)
    }

    /// Calls `callback` once at `deadline` (an instant of `now()`), or on the next iteration if it
    /// has passed.
    @discardableResult
    public func schedule(at deadline: ContinuousClock.Instant, _ callback: @escaping () -> Void) -> TimerHandle {
        let offset = clockReference.instant.duration(to: deadline)
        let ns: UInt64
        if offset < .zero {
            let back = Self.nanoseconds(.zero - offset)
            ns = back >= clockReference.boottime ? 0 : clockReference.boottime - back
        } else {
            ns = clockReference.boottime &+ Self.nanoseconds(offset)
        }
        return schedule(atBoottime: ns, callback)
    }

    private func schedule(atBoottime deadline: UInt64, _ callback: @escaping () -> Void) -> TimerHandle {
        nextTimerSequence &+= 1
        let handle = TimerHandle(loop: self, deadline: deadline, sequence: nextTimerSequence, callback: callback)
        timers.insert(handle)
        rearmTimerFD()
        return handle
    }

    func cancelTimer(_ handle: TimerHandle) {
        guard handle.heapIndex >= 0 else { return }
        timers.remove(handle)
        rearmTimerFD()
    }

    /// Arms the timerfd for the earliest deadline, only when that deadline changed.
    private func rearmTimerFD() {
        let wanted = timers.first?.deadline
        guard wanted != armedDeadline else { return }
        var spec = itimerspec()
        if let deadline = wanted {
            // On CLOCK_BOOTTIME (the skew taken off). A zero it_value disarms, so a deadline of 0
            // (already due) becomes 1 ns.
            let d = max(deadline > skewNanoseconds ? deadline - skewNanoseconds : 0, 1)
            spec.it_value = timespec(tv_sec: Int(d / 1_000_000_000), tv_nsec: Int(d % 1_000_000_000))
        }
        if sysTimerfdSettime(timerFD, TimerFD.timerAbstime, &spec) == 0 {
            armedDeadline = wanted
        } else {
            armedDeadline = nil
        }
    }

    private func fireDueTimers() {
        var expirations: UInt64 = 0
        _ = read(timerFD, &expirations, MemoryLayout<UInt64>.size)
        armedDeadline = nil
        let now = clockNanoseconds()
        // Collect first, so a timer scheduled by a callback with a zero delay waits for the next
        // iteration instead of starving everything else.
        var due: [TimerHandle] = []
        while let top = timers.first, top.deadline <= now {
            timers.remove(top)
            due.append(top)
        }
        for handle in due {
            // An earlier callback in this batch may have cancelled it.
            guard !handle.isCancelled, let callback = handle.callback else { continue }
            handle.callback = nil
            handle.fired = true
            callback()
        }
        rearmTimerFD()
    }

    // MARK: - Signals

    /// Calls `callback` on the loop thread when `signo` arrives; replaces an earlier callback for
    /// the same signal.
    ///
    /// The signal is blocked in the calling thread and read through a signalfd. Only threads that
    /// also block it are safe: call this from the main thread before any other thread starts (threads
    /// inherit the mask), or a process-directed signal may be delivered to a thread that still has
    /// the default action. The signal stays blocked after the loop is gone.
    public func onSignal(_ signo: Int32, _ callback: @escaping () -> Void) throws {
        sigaddset(&signalMask, signo)
        var mask = signalMask
        var block = sigset_t()
        sigemptyset(&block)
        sigaddset(&block, signo)
        let rc = pthread_sigmask(SIG_BLOCK, &block, nil)
        guard rc == 0 else { throw EventLoopError(call: "pthread_sigmask", errno: rc) }
        let fd = sysSignalfd(signalFD, &mask, SignalFD.cloexec | SignalFD.nonblock)
        guard fd >= 0 else { throw EventLoopError(call: "signalfd", errno: errno) }
        if signalFD < 0 {
            signalFD = fd
            var ev = EpollEvent(events: Epoll.in, data: Self.signalTag)
            guard sysEpollCtl(epollFD, Epoll.ctlAdd, fd, &ev) == 0 else {
                throw EventLoopError(call: "epoll_ctl(signalfd)", errno: errno)
            }
        }
        signalHandlers[signo] = callback
    }

    private func readSignals() {
        // struct signalfd_siginfo is 128 bytes; ssi_signo is its first uint32_t.
        var info = [UInt32](repeating: 0, count: SignalFD.infoSize / 4)
        while info.withUnsafeMutableBytes({ read(signalFD, $0.baseAddress, SignalFD.infoSize) }) == SignalFD.infoSize {
            signalHandlers[Int32(bitPattern: info[0])]?()
        }
    }

    // MARK: - Clock

    /// CLOCK_BOOTTIME in nanoseconds, the timerfd's clock.
    static func boottimeNanoseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_BOOTTIME, &ts)
        return UInt64(ts.tv_sec) &* 1_000_000_000 &+ UInt64(ts.tv_nsec)
    }

    /// A duration as nanoseconds, negative durations as 0, huge ones clamped (about 292 years).
    static func nanoseconds(_ d: Duration) -> UInt64 {
        let (seconds, attoseconds) = d.components
        if seconds < 0 || (seconds == 0 && attoseconds <= 0) { return 0 }
        if seconds >= Int64(UInt64.max / 2_000_000_000) { return UInt64.max / 2 }
        return UInt64(seconds) * 1_000_000_000 + UInt64(attoseconds / 1_000_000_000)
    }
}

/// The watches of one fd and what epoll currently knows about it.
private final class FDEntry {
    var watches: [IOWatch] = []
    var registered = false
    var registeredMask: UInt32 = 0
}

/// A registration of interest in an fd's readiness. Loop thread only.
public final class IOWatch {
    private weak var loop: EventLoop?
    public let fd: Int32
    /// What the watch asks for; an empty set pauses it without cancelling.
    public private(set) var events: IOEvents
    var callback: ((IOEvents) -> Void)?

    init(loop: EventLoop, fd: Int32, events: IOEvents, callback: @escaping (IOEvents) -> Void) {
        self.loop = loop
        self.fd = fd
        self.events = events.intersection([.read, .write])
        self.callback = callback
    }

    public var isActive: Bool { callback != nil }

    /// Changes what the watch asks for. `[]` pauses it.
    public func update(events: IOEvents) {
        guard isActive else { return }
        self.events = events.intersection([.read, .write])
        loop?.watchChanged(self)
    }

    /// Stops the watch and releases its callback. Idempotent.
    public func cancel() {
        guard isActive else { return }
        callback = nil
        events = []
        loop?.removeWatch(self)
    }
}
