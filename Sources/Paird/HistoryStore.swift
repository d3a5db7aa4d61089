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
/// the state file. Each record is one `write` of the whole line on an `O_APPEND` descriptor, then
/// `fsync`: a crash can tear only the line being written, which reading skips (as any line that
/// is not a record); a torn tail is cut off when the file is opened, so the next line starts
/// clean. Capped by age and count: `compact` keeps the newest records within both, written to a
/// temporary file that is renamed over the record (a crash leaves the old or the new file).
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

    public init(path: String, cap: Cap) {
        self.path = path
        self.cap = cap
    }

    deinit { if fd >= 0 { close(fd) } }

    /// `history.jsonl` in the state file's directory.
    public static func path(besideStateFile state: String) -> String {
        let dir = directory(of: state)
        return dir == "/" ? "/history.jsonl" : dir + "/history.jsonl"
    }

    static func directory(of path: String) -> String {
        path.lastIndex(of: "/").map { $0 == path.startIndex ? "/" : String(path[..<$0]) } ?? "."
    }

    /// Reads every record, skipping lines that are none (torn or garbled).
    public func load() throws -> (records: [HistoryRecord], skipped: Int) {
        guard let bytes = try readFile(path, limit: Int.max) else { return ([], 0) }
        var records: [HistoryRecord] = []
        var skipped = 0
        for line in bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: true) {
            if let r = HistoryRecord.parse(line: line) { records.append(r) } else { skipped += 1 }
        }
        return (records, skipped)
    }

    /// Opens the file for appending (creating it, mode 0600). A last line without its newline
    /// (a write cut short) is cut off. Applies the cap (`compact`) first. Returns the records kept.
    @discardableResult
    public func open(now: Double) throws -> (records: [HistoryRecord], skipped: Int) {
        if fd >= 0 { close(fd); fd = -1 }
        let (records, skipped) = try load()
        let kept = Self.capped(records, cap: cap, now: now)
        if kept.count != records.count || skipped > 0 {
            try rewrite(kept)
        }
        fd = Glibc.open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
        if fd < 0 { throw SystemError("open \(path)", errno) }
        try cutTornTail()
        lineCount = kept.count
        return (kept, skipped)
    }

    /// The newest records within both caps, in file order.
    public static func capped(_ records: [HistoryRecord], cap: Cap, now: Double) -> [HistoryRecord] {
        let oldest = now - cap.maxAge.seconds
        var kept = records.filter { $0.at >= oldest }
        if kept.count > cap.maxRecords { kept.removeFirst(kept.count - cap.maxRecords) }
        return kept
    }

    /// Appends `records`, each line one `write`, then one `fsync`.
    public func append(_ records: [HistoryRecord]) throws {
        guard !records.isEmpty else { return }
        if fd < 0 { throw SystemError("append to \(path): not open", EBADF) }
        for r in records {
            let bytes = Array((r.line + "\n").utf8)
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            if n < 0 { throw SystemError("write \(path)", errno) }
            if n != bytes.count {
                // Short write (disk full): leave no half line for the next to join.
                try cutTornTail()
                throw SystemError("write \(path): short write", ENOSPC)
            }
            lineCount += 1
        }
        if fsync(fd) != 0 { throw SystemError("fsync \(path)", errno) }
    }

    /// The cap is due when the file holds a tenth more than `maxRecords` (so compaction is rare).
    public var needsCompaction: Bool { lineCount > cap.maxRecords + max(1, cap.maxRecords / 10) }

    /// Applies the cap now (rewrite + rename) and reopens for appending.
    public func compact(now: Double) throws {
        try open(now: now)
    }

    /// Truncates the file after its last newline.
    private func cutTornTail() throws {
        let size = lseek(fd, 0, SEEK_END)
        guard size > 0 else { return }
        let rfd = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        if rfd < 0 { throw SystemError("open \(path)", errno) }
        defer { close(rfd) }
        var end = Int(size)
        var buf = [UInt8](repeating: 0, count: 4096)
        while end > 0 {
            let start = max(0, end - buf.count)
            let n = buf.withUnsafeMutableBytes { pread(rfd, $0.baseAddress, end - start, off_t(start)) }
            if n <= 0 { throw SystemError("read \(path)", errno) }
            if let i = buf[0..<n].lastIndex(of: UInt8(ascii: "\n")) {
                let keep = start + i + 1
                if keep < Int(size) { if ftruncate(fd, off_t(keep)) != 0 { throw SystemError("truncate \(path)", errno) } }
                return
            }
            end = start
        }
        if ftruncate(fd, 0) != 0 { throw SystemError("truncate \(path)", errno) }
    }

    /// Writes `records` to a temporary file beside the record, fsyncs it and renames it over the
    /// record, then fsyncs the directory.
    private func rewrite(_ records: [HistoryRecord]) throws {
        let tmp = path + ".tmp"
        let t = Glibc.open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        if t < 0 { throw SystemError("create \(tmp)", errno) }
        var ok = false
        defer { close(t); if !ok { unlink(tmp) } }
        var text = ""
        text.reserveCapacity(records.count * 160)
        for r in records { text += r.line; text += "\n" }
        let bytes = Array(text.utf8)
        var off = 0
        while off < bytes.count {
            let n = bytes.withUnsafeBytes { write(t, $0.baseAddress! + off, $0.count - off) }
            if n < 0 { if errno == EINTR { continue }; throw SystemError("write \(tmp)", errno) }
            off += n
        }
        if fsync(t) != 0 { throw SystemError("fsync \(tmp)", errno) }
        if rename(tmp, path) != 0 { throw SystemError("rename \(tmp) to \(path)", errno) }
        ok = true
        let dfd = Glibc.open(Self.directory(of: path), O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if dfd >= 0 { fsync(dfd); close(dfd) }
    }
}
