import CSpawn
import EventLoop
import PairingCore
#if canImport(Glibc)
import Glibc
#endif

/// Runs the executables of a directory (`[Alerts] DispatcherDir`, /etc/paird/dispatcher.d) for
/// each alert, as NetworkManager-dispatcher runs its own:
///
/// - the directory is opened when the alert's turn comes and checked on that descriptor (fstat):
///   it must be owned by root (or by paird's own user, `directoryOwners`) and not writable by
///   group or others, or no script of it runs, said once per alert (`onRefused`);
/// - its names sorted (bytewise, `10-a` before `50-b`); hidden files, backups (`~`) and package
///   leftovers (`.dpkg-old`, `.rpmnew`…) are passed over; each other name is opened with
///   openat(O_PATH|O_NOFOLLOW) and checked with fstat on that descriptor: symbolic links (said as
///   warnings), files that are not regular or not executable (said at debug priority), and, said
///   as warnings, files not owned by root (or by paird's own user) and files writable by group or
///   others are not run;
/// - the script runs from that same descriptor (execveat(AT_EMPTY_PATH), `paird_spawn_fd` in
///   CSpawn): what runs is the inode that was checked, whatever the name points to by then;
/// - each runs with a fresh environment: `PATH`, and the alert's `PAIRD_*` variables; argv is the
///   script, the event and the wearable's address (empty for none); stdin is /dev/null; the signal
///   mask and dispositions are reset;
/// - stdout and stderr are a pipe paird reads: at most `maxOutputLines` lines per run, each cut at
///   `maxLineBytes` and made `terminalSafe`, go to `onOutput` (the journal, under the script's own
///   identifier `paird-dispatch-NAME`); the rest is counted (`Outcome.linesNotLogged`), read and
///   dropped up to `maxDiscardedBytes`, then paird closes its end (a script still writing gets
///   EPIPE/SIGPIPE). journald rate-limits per unit, not per identifier: the scripts run in
///   paird.service, so their output is capped here, or a flood would hide paird's own entries;
/// - one at a time: the next script, or the next alert's scripts, starts when the one before
///   has ended (a queue of at most `maxQueued` alerts; more are dropped, and said so);
/// - each in a process group of its own; at `timeout` everything it started is killed, a child
///   that called `setsid` included: paird is a child subreaper (PR_SET_CHILD_SUBREAPER), so what a
///   script leaves behind is reparented to paird, not to init, and a sweep of /proc kills
///   (SIGKILL) the script and every process descending from it or adopted by paird and carrying
///   the run's `PAIRD_DISPATCH_RUN`, and reaps them, until none is left. The same sweep runs when
///   a script exits: nothing it started outlives its run. What escapes: what another service
///   starts on a script's request (`systemd-run`, at(1), D-Bus activation), which is not a
///   descendant, and an orphan whose environment was emptied (`env -i`);
/// - never blocking the loop: the end is seen through a pidfd the loop watches (where the kernel
///   has none, waitpid(WNOHANG) every 100 ms); every end is reported (`onOutcome`) with its exit
///   status.
///
/// The documentation and paird.conf call this the dispatcher (`DispatcherDir`, `DispatcherTimeout`);
/// it is not the state machine's event dispatch table.
public final class AlertScripts {
    public enum Result: Sendable, Hashable, CustomStringConvertible {
        case exited(Int32)
        case signaled(Int32)
        /// Still running at the limit: it and everything it started were killed.
        case killedAtLimit
        /// Could not be started (errno of fork or execveat).
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
        /// Lines of output past `maxOutputLines` (or after paird closed the pipe), not logged.
        public var linesNotLogged = 0
        /// Processes it left running (killed by the sweep at its end).
        public var leftoversKilled = 0
    }

    public let directory: String
    public let timeout: Duration
    /// Owners a script may have: root, and the user paird runs as.
    public let allowedOwners: Set<uid_t>
    /// Owners the directory may have: root, and the user paird runs as (a script owned by that
    /// user may run anyway, so its directory gives nothing more).
    public let directoryOwners: Set<uid_t>
    public static let maxQueued = 64
    public static let maxOutputLines = 100
    public static let maxLineBytes = 2048
    public static let maxDiscardedBytes = 1 << 20

    /// Each script's end.
    public var onOutcome: ((Outcome) -> Void)?
    /// A file passed over and why; `warning`: insecure (a symlink, not owned by root, writable by others).
    public var onSkip: ((_ path: String, _ why: String, _ warning: Bool) -> Void)?
    /// The directory is not safe: no script of it runs (once per alert).
    public var onRefused: ((String) -> Void)?
    /// A line of a script's output, cut and made terminal-safe.
    public var onOutput: ((_ path: String, _ line: String) -> Void)?
    /// An alert dropped because the queue was full, or the directory could not be read.
    public var onProblem: ((String) -> Void)?
    /// Called when the queue ran empty (tests).
    public var onIdle: (() -> Void)?

    struct Script {
        var path: String
        var fd: Int32
    }

    struct Job {
        var event: String
        var argv: [String]
        var environment: [String]
        var scripts: [Script]?
    }

    struct Running {
        var pid: pid_t
        var path: String
        var event: String
        var startedAt: ContinuousClock.Instant
        var pidfd: Int32
        var output: Int32
        var outputWatch: IOWatch?
        var pending: [UInt8] = []
        var linesLogged = 0
        var linesNotLogged = 0
        var discarded = 0
        var watch: IOWatch?
        var limit: TimerHandle?
        var poll: TimerHandle?
        var killed = false
        /// Set once the main process is reaped: the sweep of what it left runs, then the outcome.
        var result: Result?
        var sweepRounds = 0
        var sweepTimer: TimerHandle?
        var leftoversKilled = Set<pid_t>()
        /// `PAIRD_DISPATCH_RUN`'s value in this run's environment: an adopted orphan is this run's
        /// only if it still carries it (`sweep`).
        var token: String
    }

    private let loop: EventLoop
    private var queue: [Job] = []
    private var running: Running?
    /// Script runs started so far (each run's `PAIRD_DISPATCH_RUN`).
    private var runs = 0
    /// Whether this process is a child subreaper: orphans of the scripts come back to it.
    let adoptsOrphans: Bool

    public init(directory: String, timeout: Duration, loop: EventLoop, allowedOwners: Set<uid_t>? = nil, directoryOwners: Set<uid_t>? = nil) {
        self.directory = directory
        self.timeout = timeout
        self.loop = loop
        self.allowedOwners = allowedOwners ?? [0, geteuid()]
        self.directoryOwners = directoryOwners ?? [0, geteuid()]
        adoptsOrphans = Self.subreaper == 0
    }

    /// PR_SET_CHILD_SUBREAPER, once per process (0, or its errno).
    static let subreaper: Int32 = paird_set_child_subreaper()

    public var isIdle: Bool { running == nil && queue.isEmpty }

    /// Queues the scripts' run for one alert. `environment`: the `PAIRD_*` variables.
    public func run(event: String, device: String = "", environment: [String: String]) {
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
            close(script.fd)
        }
        if running == nil, queue.isEmpty { onIdle?() }
    }

    static let leftovers = ["~", ".dpkg-old", ".dpkg-new", ".dpkg-dist", ".dpkg-tmp", ".dpkg-bak", ".rpmsave", ".rpmnew", ".rpmorig", ".ucf-old", ".ucf-new", ".ucf-dist"]

    /// The runnable scripts of the directory, sorted by name, each open (O_PATH) and checked on
    /// that descriptor.
    func listScripts() -> [Script] {
        let dirfd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard dirfd >= 0 else {
            let e = errno
            if e != ENOENT { onProblem?("dispatcher: cannot read \(directory): \(String(cString: strerror(e)))") }
            return []
        }
        defer { close(dirfd) }
        var dst = stat()
        guard fstat(dirfd, &dst) == 0 else {
            onProblem?("dispatcher: cannot stat \(directory): \(String(cString: strerror(errno)))")
            return []
        }
        guard directoryOwners.contains(dst.st_uid) else {
            onRefused?("dispatcher: \(directory) is not owned by root (owner uid \(dst.st_uid)): none of its scripts is run; chown root \(directory)")
            return []
        }
        guard dst.st_mode & (S_IWGRP | S_IWOTH) == 0 else {
            onRefused?("dispatcher: \(directory) is writable by group or others (mode \(String(dst.st_mode & 0o7777, radix: 8))): none of its scripts is run; chmod go-w \(directory)")
            return []
        }
        guard let dir = fdopendir(dup(dirfd)) else {
            onProblem?("dispatcher: cannot read \(directory): \(String(cString: strerror(errno)))")
            return []
        }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafePointer(to: &entry.pointee.d_name) {
                String(cString: UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self))
            }
            if name.hasPrefix(".") || Self.leftovers.contains(where: { name.hasSuffix($0) }) { continue }
            names.append(name)
        }
        closedir(dir)
        names.sort { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }
        var scripts: [Script] = []
        for name in names {
            let path = directory.hasSuffix("/") ? directory + name : directory + "/" + name
            let fd = paird_open_path_nofollow(dirfd, name)
            guard fd >= 0 else { onSkip?(path, "cannot open: \(String(cString: strerror(errno)))", true); continue }
            var st = stat()
            guard fstat(fd, &st) == 0 else { onSkip?(path, "cannot stat: \(String(cString: strerror(errno)))", true); close(fd); continue }
            let why: (String, Bool)?
            if (st.st_mode & S_IFMT) == S_IFLNK {
                why = ("a symbolic link: not run (put the script itself in \(directory))", true)
            } else if (st.st_mode & S_IFMT) != S_IFREG {
                why = ("not a regular file", false)
            } else if st.st_mode & S_IXUSR == 0 {
                why = ("not executable", false)
            } else if !allowedOwners.contains(st.st_uid) {
                why = ("not owned by root (owner uid \(st.st_uid)): not run", true)
            } else if st.st_mode & (S_IWGRP | S_IWOTH) != 0 {
                why = ("writable by group or others: not run", true)
            } else {
                why = nil
            }
            if let why {
                onSkip?(path, why.0, why.1)
                close(fd)
                continue
            }
            scripts.append(Script(path: path, fd: fd))
        }
        return scripts
    }

    private func start(_ script: Script, _ job: Job) {
        let path = script.path
        let began = loop.now()
        runs += 1
        let token = "\(getpid()).\(runs)"
        let spawned = Self.spawn(script.fd, argv: [path] + job.argv, environment: job.environment + ["PAIRD_DISPATCH_RUN=\(token)"])
        guard case .success(let (pid, output)) = spawned else {
            if case .failure(let e) = spawned {
                onOutcome?(Outcome(path: path, event: job.event, result: .couldNotStart(e.errno), duration: .zero))
            }
            return
        }
        var r = Running(pid: pid, path: path, event: job.event, startedAt: began, pidfd: Self.pidfdOpen(pid), output: output, token: token)
        if r.pidfd >= 0 {
            r.watch = loop.watch(fd: r.pidfd, events: .read) { [unowned self] _ in reap() }
        } else {
            r.poll = schedulePoll()
        }
        r.outputWatch = loop.watch(fd: output, events: .read) { [unowned self] _ in readOutput() }
        r.limit = loop.schedule(after: timeout) { [unowned self] in
            guard running?.pid == pid, running?.result == nil else { return }
            running?.killed = true
            kill(-pid, SIGKILL)
            // Everything it started, now; its end (the pidfd) brings the sweep until none is left.
            sweep(includingMain: true)
        }
        running = r
    }

    private func schedulePoll() -> TimerHandle {
        loop.schedule(after: .milliseconds(100)) { [unowned self] in
            guard running != nil, running?.result == nil else { return }
            if !reap() { running?.poll = schedulePoll() }
        }
    }

    // MARK: - Output

    /// Reads what the pipe has (one read per call: the loop calls again while there is more).
    private func readOutput() {
        guard let fd = running?.output, fd >= 0 else { return }
        var buffer = [UInt8](repeating: 0, count: 65536)
        let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if n < 0 {
            if errno == EAGAIN || errno == EINTR { return }
            closeOutput()
            return
        }
        if n == 0 {
            closeOutput()
            return
        }
        take(buffer[0..<n])
    }

    /// Splits into lines; logs the first `maxOutputLines`; counts and drops the rest.
    private func take(_ bytes: ArraySlice<UInt8>) {
        guard var r = running else { return }
        if r.linesLogged >= Self.maxOutputLines {
            // A partial line left from before is counted with its newline, here.
            r.pending = []
            r.linesNotLogged += bytes.reduce(0) { $0 + ($1 == 0x0a ? 1 : 0) }
            r.discarded += bytes.count
            running = r
            if r.discarded > Self.maxDiscardedBytes { closeOutput() }
            return
        }
        r.pending += bytes
        running = r
        while let nl = running!.pending.firstIndex(of: 0x0a) {
            let line = Array(running!.pending[..<nl])
            running!.pending.removeSubrange(...nl)
            emit(line)
        }
        while running!.pending.count > Self.maxLineBytes {
            // A line without end: its first part now, the rest as further lines.
            let line = Array(running!.pending.prefix(Self.maxLineBytes))
            running!.pending.removeFirst(line.count)
            emit(line)
        }
    }

    private func emit(_ bytes: [UInt8]) {
        guard running != nil else { return }
        if running!.linesLogged >= Self.maxOutputLines {
            running!.linesNotLogged += 1
            return
        }
        running!.linesLogged += 1
        var text = String(decoding: bytes.prefix(Self.maxLineBytes), as: UTF8.self).terminalSafe
        if bytes.count > Self.maxLineBytes { text += "…" }
        onOutput?(running!.path, text)
    }

    private func closeOutput() {
        guard let r = running, r.output >= 0 else { return }
        r.outputWatch?.cancel()
        close(r.output)
        running?.output = -1
        running?.outputWatch = nil
    }

    /// What is left in the pipe once the run is over (non-blocking reads), then closes it.
    private func drainOutput() {
        guard let fd = running?.output, fd >= 0 else { return }
        var buffer = [UInt8](repeating: 0, count: 65536)
        while running?.output ?? -1 >= 0 {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n <= 0 { break }
            take(buffer[0..<n])
        }
        if let rest = running?.pending, !rest.isEmpty {
            running?.pending = []
            emit(rest)
        }
        closeOutput()
    }

    // MARK: - The end

    /// Collects the running script's exit, if it has ended; then sweeps what it left.
    @discardableResult
    private func reap() -> Bool {
        guard let r = running, r.result == nil else { return true }
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
        r.poll?.cancel()
        r.limit?.cancel()
        running?.limit = nil
        running?.watch = nil
        running?.pidfd = -1
        running?.poll = nil
        running?.result = result
        // The sweep from the loop, not from inside this callback (a watch being cancelled).
        let pid = r.pid
        loop.enqueue { [unowned self] in if running?.pid == pid { sweep(includingMain: false) } }
        return true
    }

    /// Kills (SIGKILL) and reaps everything the script started: the descendants of its main
    /// process, and the orphans paird adopted as a subreaper. Again every 10 ms until none is
    /// left (at most 5 s); then the outcome.
    private func sweep(includingMain: Bool) {
        guard let r = running else { return }
        let me = getpid()
        let table = Self.processTable()
        var roots: [pid_t] = []
        if includingMain || r.result == nil { roots.append(r.pid) }
        // An orphan a script left is reparented to paird (its subreaper); it is this run's if it
        // still carries the run's PAIRD_DISPATCH_RUN (whatever else paird's process runs, a test
        // binary's other children for one, is left alone; a script that empties the environment
        // of what it leaves behind escapes: docs/reference.md).
        if adoptsOrphans {
            // (one killed already is a zombie with no environment left to read: still ours to reap)
            roots += table.filter { $0.value.ppid == me && $0.key != r.pid
                && (r.leftoversKilled.contains($0.key) || Self.carries($0.key, "PAIRD_DISPATCH_RUN=\(r.token)")) }.map(\.key)
        }
        var children: [pid_t: [pid_t]] = [:]
        for (pid, p) in table { children[p.ppid, default: []].append(pid) }
        var family = Set<pid_t>()
        var todo = roots
        while let p = todo.popLast() {
            guard family.insert(p).inserted else { continue }
            todo += children[p] ?? []
        }
        var left = 0
        for pid in family {
            guard let p = table[pid] else { continue }
            if p.state == "Z" {
                // Ours to reap (not the main process, which reap() collects).
                if p.ppid == me, pid != r.pid { var st: Int32 = 0; waitpid(pid, &st, WNOHANG) }
                else { left += 1 }
                continue
            }
            kill(pid, SIGKILL)
            if pid != r.pid { running?.leftoversKilled.insert(pid) }
            left += 1
        }
        // At the limit, before the main process's end: that end (its pidfd) brings the sweep again.
        guard r.result != nil else { return }
        running?.sweepRounds += 1
        if left > 0 && running!.sweepRounds < 500 {
            let pid = r.pid
            running?.sweepTimer = loop.schedule(after: .milliseconds(10)) { [unowned self] in
                if running?.pid == pid { sweep(includingMain: false) }
            }
            return
        }
        if left > 0 {
            onProblem?("dispatcher: \(r.path): \(left) processes it started are still there after 5 s of SIGKILL")
        }
        finish()
    }

    private func finish() {
        drainOutput()
        guard let r = running, let result = r.result else { return }
        r.sweepTimer?.cancel()
        running = nil
        onOutcome?(Outcome(path: r.path, event: r.event, result: result, duration: r.startedAt.duration(to: loop.now()),
                           linesNotLogged: r.linesNotLogged, leftoversKilled: r.leftoversKilled.count))
        loop.enqueue { [unowned self] in if running == nil { next() } }
    }
}
