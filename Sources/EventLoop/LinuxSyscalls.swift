#if canImport(Glibc)
import Glibc
#endif

// Swift's Glibc module map does not include <sys/epoll.h>, <sys/timerfd.h> or <sys/signalfd.h>,
// and the EventLoop target has no C dependency of its own. Until it gets one (a shim header
// including those three, as swift-nio's CNIOLinux does), the six calls it needs are resolved once
// from the already-loaded libc with dlsym and called through `@convention(c)` function types:
// the real C calling convention, no unsafe compiler flags. Layouts and constants below are the
// kernel ABI (uapi), stable by contract; a test checks the layouts against the kernel's behaviour.
//
// Everything Linux-specific the loop uses is in this file, so swapping in a C module is local.

/// `struct epoll_event`: packed on x86_64 (12 bytes), naturally aligned elsewhere (16 bytes).
#if arch(x86_64)
struct EpollEvent {
    // Stored as three UInt32 to reproduce the packed layout: events, then the 64-bit data word
    // split in two (little-endian).
    var events: UInt32 = 0
    private var dataLow: UInt32 = 0
    private var dataHigh: UInt32 = 0

    init() {}
    init(events: UInt32, data: UInt64) {
        self.events = events
        self.data = data
    }

    var data: UInt64 {
        get { UInt64(dataHigh) << 32 | UInt64(dataLow) }
        set {
            dataLow = UInt32(truncatingIfNeeded: newValue)
            dataHigh = UInt32(truncatingIfNeeded: newValue >> 32)
        }
    }
}
#else
struct EpollEvent {
    var events: UInt32 = 0
    private var padding: UInt32 = 0
    var data: UInt64 = 0

    init() {}
    init(events: UInt32, data: UInt64) {
        self.events = events
        self.data = data
    }
}
#endif

enum Epoll {
    static let cloexec: Int32 = O_CLOEXEC
    static let ctlAdd: Int32 = 1
    static let ctlDel: Int32 = 2
    static let ctlMod: Int32 = 3
    static let `in`: UInt32 = 0x001
    static let out: UInt32 = 0x004
    static let err: UInt32 = 0x008
    static let hup: UInt32 = 0x010
    static let rdhup: UInt32 = 0x2000
}

enum TimerFD {
    static let cloexec: Int32 = O_CLOEXEC
    static let nonblock: Int32 = O_NONBLOCK
    static let timerAbstime: Int32 = 1
}

enum SignalFD {
    static let cloexec: Int32 = O_CLOEXEC
    static let nonblock: Int32 = O_NONBLOCK
    /// `sizeof(struct signalfd_siginfo)`; `ssi_signo` is its first `uint32_t`.
    static let infoSize = 128
}

private func resolve<F>(_ name: String, as type: F.Type) -> F {
    guard let symbol = dlsym(nil, name) else {
        // libc without epoll is not a Linux this daemon can run on: a programmer/platform error.
        fatalError("libc does not export \(name)")
    }
    return unsafeBitCast(symbol, to: type)
}

private typealias EpollCreate1 = @convention(c) (Int32) -> Int32
private typealias EpollCtl = @convention(c) (Int32, Int32, Int32, UnsafeMutableRawPointer?) -> Int32
private typealias EpollWait = @convention(c) (Int32, UnsafeMutableRawPointer?, Int32, Int32) -> Int32
private typealias TimerfdCreate = @convention(c) (Int32, Int32) -> Int32
private typealias TimerfdSettime = @convention(c) (Int32, Int32, UnsafeRawPointer?, UnsafeMutableRawPointer?) -> Int32
private typealias Signalfd = @convention(c) (Int32, UnsafeRawPointer?, Int32) -> Int32

private enum Symbols {
    static let epollCreate1 = resolve("epoll_create1", as: EpollCreate1.self)
    static let epollCtl = resolve("epoll_ctl", as: EpollCtl.self)
    static let epollWait = resolve("epoll_wait", as: EpollWait.self)
    static let timerfdCreate = resolve("timerfd_create", as: TimerfdCreate.self)
    static let timerfdSettime = resolve("timerfd_settime", as: TimerfdSettime.self)
    static let signalfd = resolve("signalfd", as: Signalfd.self)
}

func sysEpollCreate1(_ flags: Int32) -> Int32 { Symbols.epollCreate1(flags) }

func sysEpollCtl(_ epfd: Int32, _ op: Int32, _ fd: Int32, _ event: inout EpollEvent) -> Int32 {
    withUnsafeMutablePointer(to: &event) { Symbols.epollCtl(epfd, op, fd, UnsafeMutableRawPointer($0)) }
}

func sysEpollWait(_ epfd: Int32, _ events: UnsafeMutableBufferPointer<EpollEvent>, _ timeoutMS: Int32) -> Int32 {
    Symbols.epollWait(epfd, UnsafeMutableRawPointer(events.baseAddress), Int32(events.count), timeoutMS)
}

func sysTimerfdCreate(_ clock: Int32, _ flags: Int32) -> Int32 { Symbols.timerfdCreate(clock, flags) }

func sysTimerfdSettime(_ fd: Int32, _ flags: Int32, _ spec: inout itimerspec) -> Int32 {
    withUnsafePointer(to: &spec) { Symbols.timerfdSettime(fd, flags, UnsafeRawPointer($0), nil) }
}

func sysSignalfd(_ fd: Int32, _ mask: inout sigset_t, _ flags: Int32) -> Int32 {
    withUnsafePointer(to: &mask) { Symbols.signalfd(fd, UnsafeRawPointer($0), flags) }
}
