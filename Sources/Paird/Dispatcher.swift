import EventLoop
#if canImport(Glibc)
import Glibc
#endif

/// Runs the executables of a directory (`[Alerts] DispatcherDir`, /etc/paird/dispatcher.d) for
/// each alert, as NetworkManager-dispatcher runs its own:
///
/// - the directory is listed when the alert's turn comes, names sorted (bytewise, `10-a` before
///   `50-b`); hidden files, backups (`~`) and package leftovers (`.dpkg-old`, `.rpmnew`…) are
///   passed over, and so are files that are not regular or not executable (said at debug
///   priority), and, said as warnings, files not owned by root (or by paird's own user) and
///   files writable by group or others;
/// - each runs with a fresh environment: `PATH`, and the alert's `PAIRD_*` variables; argv is the
///   script, the event and the wearable's address (empty for none); stdin is /dev/null, stdout
///   and stderr are paird's (the journal); the signal mask and dispositions are reset;
/// - one at a time: the next script, or the next alert's scripts, starts when the one before
///   has ended (a queue of at most `maxQueued` alerts; more are dropped, and said so);
/// - each in a process group of its own, killed (SIGKILL to the group) at `timeout`;
/// - never blocking the loop: posix_spawn, and the end is seen through a pidfd the loop watches
///   (where the kernel has none, waitpid(WNOHANG) every 100 ms); every end is reported
///   (`onOutcome`) with its exit status.
public final class Dispatcher {
    public enum Result: Sendable, Hashable, CustomStringConvertible {
        case exited(Int32)
        case signaled(Int32)
        /// Still running at the limit: its process group was killed.
        case killedAtLimit
        /// posix_spawn failed (errno).
        case couldNotStart(Int32)

        public var description: String {
            switch self {
            case .exited(let s): "exit status \(s)"
            case .signaled(let s): "killed by signal \(s)"
            case .killedAtLimit: "killed at the time limit"
            case .couldNotStart(let e): "could not be started: \(String(cString: strerror(e)))"
            }
        }
    }

    public struct Outcome: Sendable, Hashable {
        public var path: String
        public var event: String
        public var result: Result
        public var duration: Duration
    }

    public let directory: String
    public let timeout: Duration
    /// Owners a script may have: root, and the user paird runs as.
    public let allowedOwners: Set<uid_t>
    public static let maxQueued = 64

    /// Each script's end.
    public var onOutcome: ((Outcome) -> Void)?
    /// A file passed over and why; `warning`: insecure (not owned by root, writable by others).
    public var onSkip: ((_ path: String, _ why: String, _ warning: Bool) -> Void)?
    /// An alert dropped because the queue was full, or the directory could not be read.
    public var onProblem: ((String) -> Void)?
    /// Called when the queue ran empty (tests).
    public var onIdle: (() -> Void)?

    struct Job {
        var event: String
        var argv: [String]
        var environment: [String]
        var scripts: [String]?
    }

    struct Running {
        var pid: pid_t
        var path: String
        var event: String
        var startedAt: ContinuousClock.Instant
        var pidfd: Int32
        var watch: IOWatch?
        var limit: TimerHandle?
        var poll: TimerHandle?
        var killed = false
    }

    private let loop: EventLoop
    private var queue: [Job] = []
    private var running: Running?

    public init(directory: String, timeout: Duration, loop: EventLoop, allowedOwners: Set<uid_t>? = nil) {
        self.directory = directory
        self.timeout = timeout
        self.loop = loop
        self.allowedOwners = allowedOwners ?? [0, geteuid()]
    }

    public var isIdle: Bool { running == nil && queue.isEmpty }

    /// Queues the scripts' run for one alert. `environment`: the `PAIRD_*` variables.
    public func dispatch(event: String, device: String = "", environment: [String: String]) {
        guard queue.count < Self.maxQueued else {
            onProblem?("dispatcher: \(queue.count) alerts already waiting; \(event) \(device) dropped")
            return
        }
        var env = environment
        if env["PATH"] == nil { env["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" }
        queue.append(Job(event: event, argv: [event, device],
                         environment: env.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }))
        if running == nil { next() }
    }

    /// Starts the next script of the first job, or the next job, until one runs or nothing is left.
    private func next() {
        while running == nil, !queue.isEmpty {
            if queue[0].scripts == nil { queue[0].scripts = listScripts() }
            guard let script = queue[0].scripts?.first else {
                queue.removeFirst()
                continue
            }
            queue[0].scripts!.removeFirst()
            start(script, queue[0])
        }
        if running == nil, queue.isEmpty { onIdle?() }
    }

    static let leftovers = ["~", ".dpkg-old", ".dpkg-new", ".dpkg-dist", ".dpkg-tmp", ".dpkg-bak", ".rpmsave", ".rpmnew", ".rpmorig", ".ucf-old", ".ucf-new", ".ucf-dist"]

    /// The runnable scripts of the directory, sorted by name.
    func listScripts() -> [String] {
        guard let dir = opendir(directory) else {
            let e = errno
            if e != ENOENT { onProblem?("dispatcher: cannot read \(directory): \(String(cString: strerror(e)))") }
            return []
        }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafePointer(to: &entry.pointee.d_name) {
                String(cString: UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self))
            }
            if name.hasPrefix(".") || Self.leftovers.contains(where: { name.hasSuffix($0) }) { continue }
            names.append(name)
        }
        names.sort { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }
        var scripts: [String] = []
        for name in names {
            let path = directory.hasSuffix("/") ? directory + name : directory + "/" + name
            var st = stat()
            guard stat(path, &st) == 0 else { onSkip?(path, "cannot stat: \(String(cString: strerror(errno)))", true); continue }
            guard (st.st_mode & S_IFMT) == S_IFREG else { onSkip?(path, "not a regular file", false); continue }
            guard st.st_mode & S_IXUSR != 0 else { onSkip?(path, "not executable", false); continue }
            guard allowedOwners.contains(st.st_uid) else {
                onSkip?(path, "not owned by root (owner uid \(st.st_uid)): not run", true)
                continue
            }
            guard st.st_mode & (S_IWGRP | S_IWOTH) == 0 else {
                onSkip?(path, "writable by group or others: not run", true)
                continue
            }
            scripts.append(path)
        }
        return scripts
    }

    private func start(_ path: String, _ job: Job) {
        let began = loop.now()
        let spawned = Self.spawn(path, argv: [path] + job.argv, environment: job.environment)
        guard case .success(let pid) = spawned else {
            if case .failure(let e) = spawned {
                onOutcome?(Outcome(path: path, event: job.event, result: .couldNotStart(e.errno), duration: .zero))
            }
            return
        }
        var r = Running(pid: pid, path: path, event: job.event, startedAt: began, pidfd: Self.pidfdOpen(pid))
        if r.pidfd >= 0 {
            r.watch = loop.watch(fd: r.pidfd, events: .read) { [unowned self] _ in reap() }
        } else {
            r.poll = schedulePoll()
        }
        r.limit = loop.schedule(after: timeout) { [unowned self] in
            guard let pid = running?.pid else { return }
            running?.killed = true
            kill(-pid, SIGKILL)
            kill(pid, SIGKILL) // should it have left its group
        }
        running = r
    }

    private func schedulePoll() -> TimerHandle {
        loop.schedule(after: .milliseconds(100)) { [unowned self] in
            guard running != nil else { return }
            if !reap() { running?.poll = schedulePoll() }
        }
    }

    /// Collects the running script's exit, if it has ended; then starts the next.
    @discardableResult
    private func reap() -> Bool {
        guard let r = running else { return true }
        var status: Int32 = 0
        let rc = waitpid(r.pid, &status, WNOHANG)
        if rc == 0 { return false }
        let result: Result
        if rc < 0 {
            result = .exited(-1) // ECHILD: someone else reaped it
        } else if r.killed {
            result = .killedAtLimit
        } else if status & 0x7f == 0 {
            result = .exited((status >> 8) & 0xff)
        } else {
            result = .signaled(status & 0x7f)
        }
        r.watch?.cancel()
        if r.pidfd >= 0 { close(r.pidfd) }
        r.limit?.cancel()
        r.poll?.cancel()
        running = nil
        onOutcome?(Outcome(path: r.path, event: r.event, result: result, duration: r.startedAt.duration(to: loop.now())))
        // The next one from the loop, not from inside this callback (a watch being cancelled).
        loop.enqueue { [unowned self] in if running == nil { next() } }
        return true
    }

    struct SpawnError: Error { var errno: Int32 }

    /// posix_spawn in a new process group, with the signal mask emptied and every signal's
    /// disposition at its default (paird blocks the ones its loop reads, and libdbus ignores
    /// SIGPIPE: a script must not inherit either), stdin from /dev/null.
    static func spawn(_ path: String, argv: [String], environment: [String]) -> Swift.Result<pid_t, SpawnError> {
        var attr = posix_spawnattr_t()
        posix_spawnattr_init(&attr)
        defer { posix_spawnattr_destroy(&attr) }
        var empty = sigset_t()
        sigemptyset(&empty)
        var all = sigset_t()
        sigfillset(&all)
        posix_spawnattr_setsigmask(&attr, &empty)
        posix_spawnattr_setsigdefault(&attr, &all)
        posix_spawnattr_setpgroup(&attr, 0)
        posix_spawnattr_setflags(&attr, Int16(POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)

        let cArgs = argv.map { strdup($0) }
        let cEnv = environment.map { strdup($0) }
        defer { (cArgs + cEnv).forEach { free($0) } }
        var pid: pid_t = 0
        let rc = (cArgs + [nil]).withUnsafeBufferPointer { a in
            (cEnv + [nil]).withUnsafeBufferPointer { e in
                posix_spawn(&pid, path, &actions, &attr, a.baseAddress!, e.baseAddress!)
            }
        }
        return rc == 0 ? .success(pid) : .failure(SpawnError(errno: rc))
    }

    private typealias PidfdOpen = @convention(c) (pid_t, UInt32) -> Int32
    private static let pidfdOpenSymbol: PidfdOpen? = dlsym(nil, "pidfd_open").map { unsafeBitCast($0, to: PidfdOpen.self) }

    /// pidfd_open(2) (glibc ≥ 2.36, Linux ≥ 5.3): readable when the process ends; -1 without it.
    static func pidfdOpen(_ pid: pid_t) -> Int32 {
        pidfdOpenSymbol?(pid, 0) ?? -1
    }
}
