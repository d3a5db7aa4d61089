import Testing
@testable import EventLoop
#if canImport(Glibc)
import Glibc
#endif

/// Runs `loop` until `condition` holds, failing (returning false) if `limit` passes first.
/// The limit is a safety net against hangs, not a timing assertion.
func runUntil(_ loop: EventLoop, limit: Duration = .seconds(5), _ condition: () -> Bool) throws -> Bool {
    var expired = false
    let guardTimer = loop.schedule(after: limit) { expired = true; loop.stop() }
    defer { guardTimer.cancel() }
    try loop.run(until: { condition() || expired })
    return condition()
}

/// Runs `loop` until `condition` holds or `seconds` pass on the real clock. The deadline is a
/// timerfd of its own on CLOCK_MONOTONIC that the loop watches: it schedules nothing on the loop,
/// so it neither re-arms the loop's timerfd nor moves with a test's clock (either would hide a
/// timer that waits for the real deadline instead of the loop's).
func runUntilRealDeadline(_ loop: EventLoop, seconds: Int, _ condition: () -> Bool) throws -> Bool {
    let fd = sysTimerfdCreate(CLOCK_MONOTONIC, TimerFD.cloexec | TimerFD.nonblock)
    #expect(fd >= 0)
    defer { close(fd) }
    var spec = itimerspec()
    spec.it_value = timespec(tv_sec: seconds, tv_nsec: 0)
    _ = sysTimerfdSettime(fd, 0, &spec)
    var expired = false
    let watch = loop.watch(fd: fd, events: .read) { _ in expired = true }
    defer { watch.cancel() }
    try loop.run(until: { condition() || expired })
    return condition()
}

@Suite struct EventLoopTests {
    @Test func timersFireInDeadlineOrderAndTiesInSchedulingOrder() throws {
        let loop = try EventLoop()
        var fired: [String] = []
        loop.schedule(after: .milliseconds(30)) { fired.append("c") }
        loop.schedule(after: .milliseconds(10)) { fired.append("a") }
        loop.schedule(after: .milliseconds(20)) { fired.append("b1") }
        loop.schedule(after: .milliseconds(20)) { fired.append("b2") }
        loop.schedule(after: .zero) { fired.append("now") }
        #expect(try runUntil(loop) { fired.count == 5 })
        #expect(fired == ["now", "a", "b1", "b2", "c"])
    }

    @Test("a test's clock: advanceClock fires at once what is due by the new time, in order; now() moves with it; a later timer waits")
    func advancedClock() throws {
        let loop = try EventLoop()
        var fired: [String] = []
        let before = loop.now()
        loop.schedule(after: .seconds(600)) { fired.append("10 min") }
        loop.schedule(after: .seconds(60)) { fired.append("1 min") }
        loop.schedule(at: before + .seconds(120)) { fired.append("2 min, by instant") }
        loop.schedule(after: .seconds(3600)) { fired.append("1 h") }
        loop.advanceClock(by: .seconds(700))
        #expect(loop.clockSkew == .seconds(700))
        #expect(before.duration(to: loop.now()) >= .seconds(700))
        #expect(try runUntilRealDeadline(loop, seconds: 5) { fired.count == 3 })
        #expect(fired == ["1 min", "2 min, by instant", "10 min"])
        #expect(try !runUntilRealDeadline(loop, seconds: 1) { fired.count > 3 }, "the hour is not up on the loop's clock")
        #expect(loop.pendingTimerCount == 1)
    }

    @Test func cancelledTimersDoNotFire() throws {
        let loop = try EventLoop()
        var fired: [String] = []
        // Deadlines from one base instant: the order below is exact whatever the load.
        let base = loop.now()
        let doomed = loop.schedule(at: base.advanced(by: .milliseconds(10))) { fired.append("doomed") }
        // Cancelled from inside the loop by a timer due before it, while it waits in the heap: it
        // is due before "end", so it would fire before "end" had the cancel done nothing. (One
        // cancelled by a timer of its own batch, after both became due: the test below.)
        let alsoDoomed = loop.schedule(at: base.advanced(by: .milliseconds(30))) { fired.append("alsoDoomed") }
        loop.schedule(at: base.advanced(by: .milliseconds(20))) { fired.append("canceller"); alsoDoomed.cancel() }
        loop.schedule(at: base.advanced(by: .milliseconds(40))) { fired.append("end") }
        doomed.cancel()
        #expect(!doomed.isPending)
        #expect(try runUntil(loop) { fired.contains("end") })
        #expect(fired == ["canceller", "end"])
        #expect(!alsoDoomed.isPending)
        #expect(loop.pendingTimerCount == 0)
    }

    @Test func aTimerCancelledByAnEarlierTimerInTheSameBatchDoesNotFire() throws {
        let loop = try EventLoop()
        var fired: [String] = []
        var second: TimerHandle?
        let deadline = loop.now().advanced(by: .milliseconds(10))
        loop.schedule(at: deadline) { fired.append("first"); second?.cancel() }
        second = loop.schedule(at: deadline) { fired.append("second") }
        loop.schedule(after: .milliseconds(30)) { fired.append("end") }
        #expect(try runUntil(loop) { fired.contains("end") })
        #expect(fired == ["first", "end"])
    }

    @Test func manyTimersCostNoFDsAndCancellationLeavesNothingBehind() throws {
        // All timers share the loop's one timerfd, so scheduling opens nothing. (Counting the
        // process's fds would race with tests running in parallel; the heap size does not.)
        let loop = try EventLoop()
        var handles: [TimerHandle] = []
        for i in 0..<10_000 { handles.append(loop.schedule(after: .seconds(3600 + i)) {}) }
        #expect(loop.pendingTimerCount == 10_000)
        for h in handles.shuffled() { h.cancel() }
        #expect(loop.pendingTimerCount == 0)
        var count = 0
        for i in 0..<200 { loop.schedule(after: .microseconds(i * 10)) { count += 1 } }
        #expect(try runUntil(loop) { count == 200 })
    }

    @Test func randomSchedulesAndCancellationsFireExactlyTheSurvivorsInOrder() throws {
        let loop = try EventLoop()
        var rng = SystemRandomNumberGenerator()
        var fired: [(delay: Int, index: Int)] = []
        var handles: [TimerHandle] = []
        // Deadlines from one base instant, so the expected order is exact whatever the load.
        let base = loop.now()
        for i in 0..<300 {
            let delay = Int.random(in: 0...30, using: &rng)
            handles.append(loop.schedule(at: base.advanced(by: .milliseconds(delay))) { fired.append((delay, i)) })
        }
        var cancelled = Set<Int>()
        for i in (0..<300).shuffled(using: &rng).prefix(150) {
            handles[i].cancel()
            cancelled.insert(i)
        }
        #expect(try runUntil(loop) { fired.count == 150 })
        #expect(Set(fired.map(\.index)) == Set(0..<300).subtracting(cancelled))
        // Deadlines never go backwards; equal delays keep scheduling order.
        for (a, b) in zip(fired, fired.dropFirst()) {
            #expect(a.delay < b.delay || (a.delay == b.delay && a.index < b.index), "\(a) fired before \(b)")
        }
        #expect(loop.pendingTimerCount == 0)
    }

    @Test func pipeReadinessIsReported() throws {
        let loop = try EventLoop()
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        defer { close(fds[0]); close(fds[1]) }
        var received: [UInt8] = []
        var seen = IOEvents()
        let watch = loop.watch(fd: fds[0], events: .read) { events in
            seen.formUnion(events)
            var byte: UInt8 = 0
            if read(fds[0], &byte, 1) == 1 { received.append(byte) }
        }
        loop.schedule(after: .milliseconds(5)) {
            var b: UInt8 = 42
            _ = write(fds[1], &b, 1)
        }
        #expect(try runUntil(loop) { received == [42] })
        #expect(seen.contains(.read))

        // Paused watches are not called; resumed ones are.
        watch.update(events: [])
        var b: UInt8 = 7
        _ = write(fds[1], &b, 1)
        var ticks = 0
        loop.schedule(after: .milliseconds(20)) { ticks += 1 }
        #expect(try runUntil(loop) { ticks == 1 })
        #expect(received == [42])
        watch.update(events: .read)
        #expect(try runUntil(loop) { received == [42, 7] })
        watch.cancel()
    }

    @Test func twoWatchesOnOneFDBothWork() throws {
        // libdbus watches its socket twice (read and write); epoll accepts an fd once.
        let loop = try EventLoop()
        var sv: [Int32] = [0, 0]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &sv) == 0)
        defer { close(sv[0]); close(sv[1]) }
        var wrote = false
        var readByte: UInt8 = 0
        let writer = loop.watch(fd: sv[0], events: .write) { _ in
            var b: UInt8 = 9
            _ = write(sv[0], &b, 1)
            wrote = true
        }
        let reader = loop.watch(fd: sv[0], events: .read) { _ in _ = read(sv[0], &readByte, 1) }
        #expect(try runUntil(loop) { wrote })
        writer.cancel()
        var b: UInt8 = 5
        _ = write(sv[1], &b, 1)
        #expect(try runUntil(loop) { readByte == 5 })
        reader.cancel()
    }

    @Test func hangupIsReported() throws {
        let loop = try EventLoop()
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        defer { close(fds[0]) }
        var seen = IOEvents()
        let w = loop.watch(fd: fds[0], events: .read) { events in seen.formUnion(events) }
        close(fds[1])
        #expect(try runUntil(loop) { seen.contains(.hangup) })
        w.cancel()
    }

    @Test func signalArrivesThroughTheLoop() throws {
        let loop = try EventLoop()
        var got = false
        try loop.onSignal(SIGUSR1) { got = true }
        // raise() targets this thread, which now blocks SIGUSR1, so it waits for the signalfd.
        loop.schedule(after: .milliseconds(5)) { _ = raise(SIGUSR1) }
        #expect(try runUntil(loop) { got })
    }

    @Test func anIdleLoopDoesNotWakeUp() throws {
        let loop = try EventLoop()
        loop.schedule(after: .seconds(3600)) { Issue.record("far timer fired") }
        let start = loop.wakeups
        // The bounded wait is the stop timer itself: it is the only thing that may wake the loop.
        loop.schedule(after: .milliseconds(300)) { loop.stop() }
        try loop.run()
        #expect(loop.wakeups - start <= 1)
    }

    @Test func stopFromACallbackEndsRunAndTheLoopCanRunAgain() throws {
        let loop = try EventLoop()
        var order: [Int] = []
        loop.enqueue { order.append(1); loop.stop() }
        try loop.run()
        #expect(order == [1])
        loop.schedule(after: .milliseconds(1)) { order.append(2); loop.stop() }
        try loop.run()
        #expect(order == [1, 2])
    }

    @Test func enqueuedWorkRunsOnTheNextIterationInOrder() throws {
        let loop = try EventLoop()
        var order: [String] = []
        loop.enqueue {
            order.append("a")
            loop.enqueue { order.append("c") }
        }
        loop.enqueue { order.append("b") }
        #expect(try runUntil(loop) { order.count == 3 })
        #expect(order == ["a", "b", "c"])
    }

    @Test func nestedRunIsRefused() throws {
        let loop = try EventLoop()
        var nestedError: EventLoopError?
        loop.enqueue {
            do { try loop.run() } catch let e as EventLoopError { nestedError = e } catch {}
            loop.stop()
        }
        try loop.run()
        #expect(nestedError?.errno == EBUSY)
    }

    @Test func shutdownReleasesCallbacksThatCaptureTheLoop() throws {
        weak var weakLoop: EventLoop?
        do {
            let loop = try EventLoop()
            weakLoop = loop
            var fds: [Int32] = [0, 0]
            #expect(pipe(&fds) == 0)
            defer { close(fds[0]); close(fds[1]) }
            loop.watch(fd: fds[0], events: .read) { _ in loop.stop() }
            loop.schedule(after: .seconds(60)) { loop.stop() }
            try loop.onSignal(SIGUSR2) { loop.stop() }
            loop.enqueue { loop.stop() }
            loop.shutdown()
        }
        #expect(weakLoop == nil)
    }

    @Test func epollEventLayoutMatchesTheKernelABI() {
        #if arch(x86_64)
        #expect(MemoryLayout<EpollEvent>.size == 12)
        #else
        #expect(MemoryLayout<EpollEvent>.size == 16)
        #endif
        let e = EpollEvent(events: 1, data: 0x1122_3344_5566_7788)
        #expect(e.data == 0x1122_3344_5566_7788)
    }
}
