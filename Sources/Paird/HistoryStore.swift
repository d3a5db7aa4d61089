import EventLoop
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import PairingCore
#if canImport(Glibc)
import Glibc
#endif

/// The availability record on disk: JSON lines (`HistoryRecord.line`), one record a line, beside
/// the state file.
///
/// - **Appending** (on the event loop): each record is one `write` of the whole line on an
///   `O_APPEND` descriptor, then one `fsync` per batch. A crash can tear only the line being
///   written; reading skips it (as any line that is not a record), and opening the file cuts a
///   torn tail off so the next line starts clean. Nothing else is ever written in place.
/// - **The cap** (age and count): `compactFile` writes the newest records within both to
///   `history.jsonl.tmp` and is run on a thread of its own (`compactInBackground`), so the loop
///   never waits for it; back on the loop, `finishCompaction` appends what was recorded
///   meanwhile to the temporary file and renames it over the record (a crash leaves the old or
///   the new file, never a mix). Due when the file holds a tenth more than `maxRecords`, or its
///   oldest record is a tenth older than `maxAge`; so it is rare.
/// - **Reading**: paird does not parse the record while running: `GetHistory` hands the caller a
///   read-only descriptor (`openForReading`) and pairctl reads and analyses it.
public final class HistoryStore {
    public struct Cap: Sendable, Hashable {
        public var maxAge: Duration
        public var maxRecords: Int
        public init(maxAge: Duration = .seconds(30 * 86400), maxRecords: Int = 100_000) {
            self.maxAge = maxAge
            self.maxRecords = maxRecords
        }
    }

    public let path: String
    public let cap: Cap
    private var fd: Int32 = -1
    /// Lines in the file (records and skipped ones), to know when to compact.
    public private(set) var lineCount = 0
    /// The time of the oldest record, as far as known (nil: none, or not readable).
    public private(set) var oldestAt: Double?
    /// Records that could not be written (`record`): kept until they can be, as one span.
    public private(set) var notRecorded: NotRecordedSpan?
    /// Records lost since paird started (`paird_history_not_recorded_total`).
    public private(set) var lostTotal = 0
    /// After a failed compaction, the next waits (`CompactionBackoff`): a full disk does not make
    /// every new record re-read the whole file.
    public var backoff = CompactionBackoff()
    /// Opens the record after the rename (tests make it fail).
    var reopen: (String) -> Int32 = { Glibc.open($0, O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0o600) }
    /// Writes one line (tests make it fail as a full disk does).
    var writeLine: (Int32, [UInt8]) -> Int = { fd, bytes in bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) } }
    public var isOpen: Bool { fd >= 0 }
    /// `open` succeeded once: a later loss of the descriptor is to be repaired by reopening.
    private var opened = false
    /// A compaction running on its thread.
    private var compaction: (watch: IOWatch, pipe: Int32, size: Int, now: Double)?
    public var compacting: Bool { compaction != nil }

    public init(path: String, cap: Cap) {
        self.path = path
        self.cap = cap
    }

    deinit {
        if fd >= 0 { close(fd) }
        if let c = compaction { c.watch.cancel(); close(c.pipe) }
    }

    /// `history.jsonl` in the state file's directory.
    public static func path(besideStateFile state: String) -> String {
        let dir = directory(of: state)
        return dir == "/" ? "/history.jsonl" : dir + "/history.jsonl"
    }

    static func directory(of path: String) -> String {
        path.lastIndex(of: "/").map { $0 == path.startIndex ? "/" : String(path[..<$0]) } ?? "."
    }

    var tmpPath: String { path + ".tmp" }

    /// Opens the file for appending (creating it, mode 0600), cuts a torn tail off, counts its
    /// lines and reads its first line's time. Cheap: no record is parsed but the first and those
    /// in the last 64 KiB, which it returns (the recorder's battery seed). A temporary file a
    /// crash left mid-compaction is removed.
    @discardableResult
    public func open() throws -> [HistoryRecord] {
        if fd >= 0 { close(fd); fd = -1 }
        unlink(tmpPath)
        fd = Glibc.open(path, O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
        if fd < 0 { throw SystemError("open \(path)", errno) }
        opened = true
        try cutTornTail()
        lineCount = 0
        oldestAt = nil
        var offset: off_t = 0
        var buf = [UInt8](repeating: 0, count: 64 * 1024)
        var firstLine: [UInt8] = []
        var firstDone = false
        while true {
            let n = buf.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, offset) }
            if n < 0 { if errno == EINTR { continue }; throw SystemError("read \(path)", errno) }
            if n == 0 { break }
            for b in buf[0..<n] {
                if b == UInt8(ascii: "\n") {
                    lineCount += 1
                    if !firstDone { oldestAt = HistoryRecord.parse(line: firstLine)?.at; firstDone = true }
                } else if !firstDone, firstLine.count < 4096 {
                    firstLine.append(b)
                }
            }
            offset += off_t(n)
        }
        let tailStart = max(0, Int(offset) - buf.count)
        let n = buf.withUnsafeMutableBytes { pread(fd, $0.baseAddress, Int(offset) - tailStart, off_t(tailStart)) }
        guard n > 0 else { return [] }
        var tail = buf[0..<n]
        if tailStart > 0, let nl = tail.firstIndex(of: UInt8(ascii: "\n")) { tail = tail[(nl + 1)...] } // a cut first line
        return HistoryRecord.parse(lines: tail).records
    }

    /// Appends `records`, each line one `write`, then one `fsync`. A store whose reopen failed
    /// (after a compaction's rename) tries it again first, and throws if it still fails: nothing
    /// is ever written into the old, unlinked file.
    public func append(_ records: [HistoryRecord]) throws {
        guard !records.isEmpty else { return }
        if fd < 0, opened {
            let f = reopen(path)
            if f < 0 { throw SystemError("open \(path) again", errno) }
            fd = f
        }
        if fd < 0 { throw SystemError("append to \(path): not open", EBADF) }
        for r in records {
            let bytes = Array((r.line + "\n").utf8)
            var n: Int
            repeat { n = writeLine(fd, bytes) } while n < 0 && errno == EINTR
            if n < 0 { throw SystemError("write \(path)", errno) }
            if n != bytes.count {
                // Short write (disk full): leave no half line for the next to join.
                try cutTornTail()
                throw SystemError("write \(path): short write", ENOSPC)
            }
            lineCount += 1
            if oldestAt == nil { oldestAt = r.at }
        }
        if fsync(fd) != 0 { throw SystemError("fsync \(path)", errno) }
    }

    /// Appends `records` after the span of those that could not be written before (its
    /// `not-recorded` line, then `resync`'s: each device's condition again). What fails to be
    /// written joins the span; returns the error, if any.
    public func record(_ records: [HistoryRecord], now: Double, resync: () -> [HistoryRecord] = { [] }) -> Error? {
        var lines = records
        if let span = notRecorded {
            let mentioned = Set(records.compactMap(\.device))
            lines = [span.record] + records + resync().filter { !mentioned.contains($0.device ?? "") }
        }
        guard !lines.isEmpty else { return nil }
        let before = lineCount
        do {
            try append(lines)
            notRecorded = nil
            return nil
        } catch {
            let written = lineCount - before
            let offset = notRecorded == nil ? 0 : 1
            if offset == 1, written > 0 { notRecorded = nil } // its line is out
            // Lost: the records not written (the resync lines are no events).
            let lost = Array(records.dropFirst(min(records.count, max(0, written - offset))))
            notRecorded = NotRecordedSpan.adding(lost, to: notRecorded, at: now)
            lostTotal += lost.count
            return error
        }
    }

    /// A compaction is to start now: none running, the file open, `needsCompaction`, and no
    /// failed one too recently (`backoff`).
    public func compactionDue(now: Moment, byAge: Bool) -> Bool {
        !compacting && fd >= 0 && backoff.allows(at: now.uptimeNanoseconds) && needsCompaction(now: now.unixTime, byAge: byAge)
    }

    /// A tenth over the count, or the oldest record a tenth past the age (only with `byAge`: the
    /// wall clock agrees with the monotonic one, `ClockWatch.agree`).
    public func needsCompaction(now: Double, byAge: Bool = true) -> Bool {
        if lineCount > cap.maxRecords + max(1, cap.maxRecords / 10) { return true }
        if byAge, let oldest = oldestAt, oldest < now - cap.maxAge.seconds * 1.1 { return true }
        return false
    }

    /// A read-only descriptor of the record as it is now (a compaction's rename later leaves it
    /// on the old file: a consistent snapshot). The caller owns it.
    public func openForReading() throws -> Int32 {
        let r = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        if r < 0 { throw SystemError("open \(path)", errno) }
        return r
    }

    /// Every record in the file (tests, tools): lines that are none are counted, not returned.
    public func load() throws -> (records: [HistoryRecord], skipped: Int) {
        guard let bytes = try readFile(path, limit: Int.max) else { return ([], 0) }
        return HistoryRecord.parse(lines: bytes[...])
    }

    // MARK: The cap

    /// Writes the records of the first `size` bytes of `path` that are within `cap` at `now` to
    /// `tmp`, fsynced; returns how many. Touches nothing else: safe on another thread while the
    /// loop appends to `path` (beyond `size`).
    ///
    /// Streams: two passes over the file in chunks (the first counts the records within the age,
    /// the second copies the newest `maxRecords` of them, each line as it is), so its memory is a
    /// few chunks whatever the record's size. Reading the whole file and its records at once (as
    /// before) took ~55 MB for a record at the default cap (15 MB, 110,000 lines), which glibc
    /// kept in the thread's arena afterwards: paird's RSS went from 15 to 44–73 MB (HistoryBench,
    /// BENCHMARKS.md).
    ///
    /// The count is kept per wearable (`quotas`): one that floods the record loses its own oldest
    /// lines, not another's. Without `byAge` (the clocks disagree) nothing goes for its age; lines
    /// stamped after `now` are kept either way.
    public static func compactFile(path: String, tmp: String, upTo size: Int, cap: Cap, now: Double, byAge: Bool = true) throws -> Int {
        let oldest = byAge ? now - cap.maxAge.seconds : -Double.infinity
        /// The wearable a kept line counts against ("" for paird's own lines); nil: not kept.
        func owner(_ line: ArraySlice<UInt8>) -> String? {
            guard let r = HistoryRecord.parse(line: line), r.at >= oldest else { return nil }
            return r.device ?? ""
        }
        var counts: [String: Int] = [:]
        try forEachLine(path, upTo: size) { if let o = owner($0) { counts[o, default: 0] += 1 } }
        let quota = quotas(counts, max: cap.maxRecords)
        let within = quota.values.reduce(0, +)
        let t = Glibc.open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        if t < 0 { throw SystemError("create \(tmp)", errno) }
        defer { close(t) }
        var out: [UInt8] = []
        out.reserveCapacity(Self.chunkSize + 4096)
        var seen: [String: Int] = [:]
        var written = 0
        try forEachLine(path, upTo: size) { line in
            guard let o = owner(line) else { return }
            seen[o, default: 0] += 1
            guard seen[o]! > counts[o]! - quota[o]!, written < within else { return }
            out.append(contentsOf: line)
            out.append(UInt8(ascii: "\n"))
            written += 1
            if out.count >= Self.chunkSize {
                try writeAll(t, out, tmp)
                out.removeAll(keepingCapacity: true)
            }
        }
        try writeAll(t, out, tmp)
        if fsync(t) != 0 { throw SystemError("fsync \(tmp)", errno) }
        return written
    }

    static let chunkSize = 256 * 1024

    /// How many of each owner's newest lines to keep, `max` in all: while there are more, the
    /// owner with the most loses lines first (all cut to one level, the rest of `max` to the
    /// biggest, in key order), so a wearable with few records keeps them all.
    static func quotas(_ counts: [String: Int], max total: Int) -> [String: Int] {
        guard counts.values.reduce(0, +) > total else { return counts }
        func kept(_ level: Int) -> Int { counts.values.reduce(0) { $0 + min($1, level) } }
        var lo = 0, hi = counts.values.max() ?? 0 // kept(lo) ≤ total < kept(hi)
        while hi - lo > 1 {
            let mid = (lo + hi) / 2
            if kept(mid) <= total { lo = mid } else { hi = mid }
        }
        var q = counts.mapValues { min($0, lo) }
        var left = total - kept(lo)
        for k in counts.keys.sorted() where left > 0 && counts[k]! > lo {
            q[k]! += 1
            left -= 1
        }
        return q
    }

    /// Calls `body` with each line (without its newline) of the first `size` bytes of `path`, a
    /// chunk read at a time; a last line without a newline too.
    static func forEachLine(_ path: String, upTo size: Int, _ body: (ArraySlice<UInt8>) throws -> Void) throws {
        let fd = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        if fd < 0 { if errno == ENOENT { return }; throw SystemError("open \(path)", errno) }
        defer { close(fd) }
        var buf = [UInt8](repeating: 0, count: chunkSize)
        var carry: [UInt8] = [] // a line cut by the chunk's end
        var offset = 0
        while offset < size {
            let n = buf.withUnsafeMutableBytes { pread(fd, $0.baseAddress, min($0.count, size - offset), off_t(offset)) }
            if n < 0 { if errno == EINTR { continue }; throw SystemError("read \(path)", errno) }
            if n == 0 { break }
            offset += n
            var start = 0
            for i in 0..<n where buf[i] == UInt8(ascii: "\n") {
                if carry.isEmpty {
                    if i > start { try body(buf[start..<i]) }
                } else {
                    carry.append(contentsOf: buf[start..<i])
                    try body(carry[...])
                    carry.removeAll(keepingCapacity: true)
                }
                start = i + 1
            }
            carry.append(contentsOf: buf[start..<n])
        }
        if !carry.isEmpty { try body(carry[...]) }
    }

    /// Runs `compactFile` on a thread of its own over what the file holds now; `finishCompaction`
    /// then runs on `loop` and `done` is called with its outcome. At most one at a time.
    /// Its outcome sets `backoff` (`uptime`: the monotonic clock when it ends).
    public func compactInBackground(now: Double, byAge: Bool = true, on loop: EventLoop, uptime: @escaping () -> Int64 = HistoryStore.uptime,
                                    done: @escaping (Error?) -> Void) {
        guard compaction == nil, fd >= 0 else { return }
        let size = Int(lseek(fd, 0, SEEK_END))
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { return done(SystemError("pipe", errno)) }
        for f in fds { _ = fcntl(f, F_SETFD, FD_CLOEXEC) }
        let (path, tmp, cap, writeEnd) = (self.path, tmpPath, self.cap, fds[1])
        let job = BackgroundJob {
            var result = Int64(-1)
            if let kept = try? HistoryStore.compactFile(path: path, tmp: tmp, upTo: size, cap: cap, now: now, byAge: byAge) { result = Int64(kept) }
            _ = withUnsafeBytes(of: &result) { write(writeEnd, $0.baseAddress, 8) }
            close(writeEnd)
        }
        let watch = loop.watch(fd: fds[0], events: .read) { [unowned self] _ in
            guard let c = compaction else { return }
            var result = Int64(-1)
            let n = withUnsafeMutableBytes(of: &result) { read(c.pipe, $0.baseAddress, 8) }
            c.watch.cancel()
            close(c.pipe)
            compaction = nil
            do {
                guard n == 8, result >= 0 else { throw SystemError("compacting \(path) failed", EIO) }
                try finishCompaction(snapshotSize: c.size, kept: Int(result))
                backoff.succeeded()
                done(nil)
            } catch {
                unlink(tmpPath)
                backoff.failed(at: uptime())
                done(error)
            }
        }
        compaction = (watch, fds[0], size, now)
        if !job.start() {
            watch.cancel(); close(fds[0]); close(fds[1]); compaction = nil
            done(SystemError("pthread_create", EAGAIN))
        }
    }

    /// CLOCK_BOOTTIME in nanoseconds (as `Daemon.now()` without a test skew).
    public static func uptime() -> Int64 {
        var t = timespec()
        clock_gettime(CLOCK_BOOTTIME, &t)
        return Int64(t.tv_sec) * 1_000_000_000 + Int64(t.tv_nsec)
    }

    /// On the loop: appends what was recorded since the snapshot (`snapshotSize` on) to the
    /// compacted temporary file, renames it over the record, and appends from then on to it.
    public func finishCompaction(snapshotSize: Int, kept: Int) throws {
        let t = Glibc.open(tmpPath, O_WRONLY | O_APPEND | O_CLOEXEC)
        if t < 0 { throw SystemError("open \(tmpPath)", errno) }
        defer { close(t) }
        let end = Int(lseek(fd, 0, SEEK_END))
        var newer = [UInt8](repeating: 0, count: max(0, end - snapshotSize))
        if !newer.isEmpty {
            let n = newer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, off_t(snapshotSize)) }
            if n != newer.count { throw SystemError("read \(path)", n < 0 ? errno : EIO) }
            try Self.writeAll(t, newer, tmpPath)
        }
        if fsync(t) != 0 { throw SystemError("fsync \(tmpPath)", errno) }
        if rename(tmpPath, path) != 0 { throw SystemError("rename \(tmpPath) to \(path)", errno) }
        let dfd = Glibc.open(Self.directory(of: path), O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if dfd >= 0 { fsync(dfd); close(dfd) }
        let newFD = reopen(path)
        if newFD < 0 {
            // The old file is unlinked now: appending to it would write into the void. Closed;
            // `append` tries to open the record again, and what fails meanwhile is a
            // `not-recorded` span.
            let e = errno
            close(fd)
            fd = -1
            lineCount = kept + newer.count(where: { $0 == UInt8(ascii: "\n") })
            oldestAt = nil // unknown until it opens: the age is not checked meanwhile
            throw SystemError("open \(path) after compacting it (nothing is written until it opens)", e)
        }
        close(fd)
        fd = newFD
        lineCount = kept + newer.count(where: { $0 == UInt8(ascii: "\n") })
        newer.removeAll()
        // The oldest kept record: the first line of the new file.
        var first = [UInt8](repeating: 0, count: 4096)
        let n = first.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        oldestAt = n > 0 ? first[0..<n].split(separator: UInt8(ascii: "\n")).first.flatMap { HistoryRecord.parse(line: $0)?.at } : nil
    }

    /// Applies the cap now, on this thread (tests; paird uses `compactInBackground`).
    public func compact(now: Double, byAge: Bool = true) throws {
        let size = Int(lseek(fd, 0, SEEK_END))
        let kept = try Self.compactFile(path: path, tmp: tmpPath, upTo: size, cap: cap, now: now, byAge: byAge)
        try finishCompaction(snapshotSize: size, kept: kept)
    }

    /// Truncates the file after its last newline.
    private func cutTornTail() throws {
        let size = Int(lseek(fd, 0, SEEK_END))
        guard size > 0 else { return }
        var end = size
        var buf = [UInt8](repeating: 0, count: 4096)
        while end > 0 {
            let start = max(0, end - buf.count)
            let n = buf.withUnsafeMutableBytes { pread(fd, $0.baseAddress, end - start, off_t(start)) }
            if n <= 0 { throw SystemError("read \(path)", errno) }
            if let i = buf[0..<n].lastIndex(of: UInt8(ascii: "\n")) {
                let keep = start + i + 1
                if keep < size, ftruncate(fd, off_t(keep)) != 0 { throw SystemError("truncate \(path)", errno) }
                return
            }
            end = start
        }
        if ftruncate(fd, 0) != 0 { throw SystemError("truncate \(path)", errno) }
    }

    private static func writeAll(_ fd: Int32, _ bytes: [UInt8], _ name: String) throws {
        var off = 0
        while off < bytes.count {
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + off, $0.count - off) }
            if n < 0 { if errno == EINTR { continue }; throw SystemError("write \(name)", errno) }
            off += n
        }
    }
}

/// Work on a detached POSIX thread of its own (no Foundation `Thread` in paird). The thread
/// inherits the blocked signals of paird's main thread, so SIGTERM still reaches the loop.
final class BackgroundJob: @unchecked Sendable {
    let work: () -> Void
    init(_ work: @escaping () -> Void) { self.work = work }

    func start() -> Bool {
        var tid = pthread_t()
        let context = Unmanaged.passRetained(self).toOpaque()
        let rc = pthread_create(&tid, nil, { context in
            let job = Unmanaged<BackgroundJob>.fromOpaque(context!).takeRetainedValue()
            job.work()
            return nil
        }, context)
        if rc != 0 { Unmanaged<BackgroundJob>.fromOpaque(context).release(); return false }
        pthread_detach(tid)
        return true
    }
}

/// When the next compaction may run after failed ones: a minute after the first failure,
/// doubling to an hour; at once after a success. Monotonic nanoseconds.
public struct CompactionBackoff: Sendable, Hashable {
    public private(set) var failures = 0
    public private(set) var retryAt: Int64 = 0
    static let first: Int64 = 60 * 1_000_000_000
    static let most: Int64 = 3600 * 1_000_000_000

    public init() {}

    public func allows(at uptime: Int64) -> Bool { failures == 0 || uptime >= retryAt }

    public mutating func failed(at uptime: Int64) {
        failures += 1
        retryAt = uptime + min(Self.most, Self.first << min(failures - 1, 16))
    }

    public mutating func succeeded() { failures = 0; retryAt = 0 }
}
