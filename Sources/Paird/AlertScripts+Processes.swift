import CSpawn
#if canImport(Glibc)
import Glibc
#endif

/// The processes of the scripts' runs as the kernel has them: a checked descriptor spawned
/// (`paird_spawn_fd`), the end of a run seen through a pidfd, and /proc read for the sweep (each
/// process's parent and state, and whether it carries a run's `PAIRD_DISPATCH_RUN`). No state of
/// its own: `AlertScripts` keeps the queue and the run.
extension AlertScripts {
    struct Process { var ppid: pid_t; var state: Character }

    /// Whether /proc/PID/environ holds `entry` (the environment it started with).
    static func carries(_ pid: pid_t, _ entry: String) -> Bool {
        let fd = open("/proc/\(pid)/environ", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var data: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while data.count < 1 << 20 {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            guard n > 0 else { break }
            data += buffer[0..<n]
        }
        let want = Array(entry.utf8)
        return data.split(separator: 0).contains { $0.elementsEqual(want) }
    }

    /// /proc/PID/stat of every process this user may see: its parent and its state.
    static func processTable() -> [pid_t: Process] {
        guard let dir = opendir("/proc") else { return [:] }
        defer { closedir(dir) }
        var table: [pid_t: Process] = [:]
        while let entry = readdir(dir) {
            let name = withUnsafePointer(to: &entry.pointee.d_name) {
                String(cString: UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self))
            }
            guard let pid = pid_t(name) else { continue }
            let fd = open("/proc/\(name)/stat", O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { continue }
            var buffer = [UInt8](repeating: 0, count: 1024)
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            close(fd)
            guard n > 0, let close = buffer[0..<n].lastIndex(of: UInt8(ascii: ")")) else { continue }
            let fields = buffer[(close + 1)..<n].split(separator: UInt8(ascii: " "))
            guard fields.count > 1, let ppid = pid_t(String(decoding: fields[1], as: UTF8.self)) else { continue }
            table[pid] = Process(ppid: ppid, state: Character(UnicodeScalar(fields[0].first ?? 0x3f)))
        }
        return table
    }

    struct SpawnError: Error { var errno: Int32 }

    /// Runs the checked descriptor (`paird_spawn_fd`): its own process group, the signal mask
    /// emptied and every signal's disposition at its default (paird blocks the ones its loop
    /// reads, and libdbus ignores SIGPIPE: a script must not inherit either), stdin from
    /// /dev/null, stdout and stderr a pipe whose read end (non-blocking) is returned.
    static func spawn(_ fd: Int32, argv: [String], environment: [String]) -> Swift.Result<(pid_t, Int32), SpawnError> {
        let null = open("/dev/null", O_RDONLY | O_CLOEXEC)
        guard null >= 0 else { return .failure(SpawnError(errno: errno)) }
        defer { close(null) }
        var pipe: [Int32] = [-1, -1]
        guard paird_pipe_cloexec(&pipe) == 0 else { return .failure(SpawnError(errno: errno)) }
        let cArgs = argv.map { strdup($0) }
        let cEnv = environment.map { strdup($0) }
        defer { (cArgs + cEnv).forEach { free($0) } }
        var err: Int32 = 0
        let pid = (cArgs + [nil]).withUnsafeBufferPointer { a in
            (cEnv + [nil]).withUnsafeBufferPointer { e in
                paird_spawn_fd(fd, a.baseAddress!, e.baseAddress!, null, pipe[1], &err)
            }
        }
        close(pipe[1])
        guard pid > 0 else {
            close(pipe[0])
            return .failure(SpawnError(errno: err))
        }
        _ = fcntl(pipe[0], F_SETFL, fcntl(pipe[0], F_GETFL) | O_NONBLOCK)
        return .success((pid, pipe[0]))
    }

    private typealias PidfdOpen = @convention(c) (pid_t, UInt32) -> Int32
    private static let pidfdOpenSymbol: PidfdOpen? = dlsym(nil, "pidfd_open").map { unsafeBitCast($0, to: PidfdOpen.self) }

    /// pidfd_open(2) (glibc ≥ 2.36, Linux ≥ 5.3): readable when the process ends; -1 without it.
    static func pidfdOpen(_ pid: pid_t) -> Int32 {
        pidfdOpenSymbol?(pid, 0) ?? -1
    }
}
