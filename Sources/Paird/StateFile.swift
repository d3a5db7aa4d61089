#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import PairingCore
#if canImport(Glibc)
import Glibc
#endif

/// The JSON state file: loaded once at start, rewritten atomically when intent or identity
/// changes. A write is: temp file in the same directory (mode 0600) → write → fsync → rename over
/// the old file → fsync the directory. A crash at any point leaves either the old or the new
/// document, never half of one.
public struct StateFile: Sendable {
    public let path: String

    public init(path: String) { self.path = path }

    public enum LoadResult: Sendable {
        /// No file: a first start.
        case missing
        case loaded(PersistedState)
        /// The file could not be used; it was moved to `movedTo` and the daemon starts empty.
        case quarantined(StateFileError, movedTo: String)
    }

    /// A state path paird must not run with: a configuration error (exit 78, so systemd does not
    /// restart it in a loop), never something to overwrite.
    public struct Unusable: Error, CustomStringConvertible, Sendable {
        public let description: String
    }

    /// Reads the file; anything damaged (corrupt, truncated, oversized) is moved aside, never
    /// deleted, so a person can look at it. A file of a newer paird is left as it is and paird
    /// refuses to start (`Unusable`): running on would write a version-1 document over it and a
    /// downgrade would forget every wearable. So is a path that is a directory, whose directory
    /// does not exist, or a file that is there but cannot be read (EACCES, EPERM, EIO).
    public func load(now: Date = Date()) throws -> LoadResult {
        var st = stat()
        if stat(path, &st) == 0, (st.st_mode & S_IFMT) != S_IFREG {
            throw Unusable(description: "state file \(path) is not a regular file (a directory?): give --state-file a file path")
        }
        let dir = directory
        if stat(dir, &st) != 0 || (st.st_mode & S_IFMT) != S_IFDIR {
            throw Unusable(description: "the directory of state file \(path) (\(dir)) does not exist or is not a directory")
        }
        removeStaleTemporaries()
        // Reading one byte past the limit is enough to know a file is too large.
        let read: [UInt8]?
        do {
            read = try readFile(path, limit: PersistedState.maximumSize + 1)
        } catch let e as SystemError where Self.unreadableCodes.contains(e.code) {
            throw Unusable(description: Self.unreadable(path, e))
        }
        guard let bytes = read else { return .missing }
        do {
            return .loaded(try PersistedState.decode(Data(bytes)))
        } catch StateFileError.futureVersion(let v) {
            throw Unusable(description: "state file \(path) was written by a newer paird (version \(v); this one reads up to "
                + "\(PersistedState.currentVersion)) and is left untouched: run the newer paird, or move the file aside to start empty")
        } catch {
            let stamp = Int(now.timeIntervalSince1970)
            let aside = "\(path).corrupt-\(stamp)"
            if rename(path, aside) != 0 { throw SystemError("rename \(path) to \(aside)", errno) }
            return .quarantined(error, movedTo: aside)
        }
    }

    /// Errors that make a state file that is there unreadable (not missing, not corrupt): paird
    /// must not start empty over it (it would forget every wearable at its next write), and a
    /// restart does not fix them.
    static let unreadableCodes: Set<Int32> = [EACCES, EPERM, EIO]

    /// The message for an unreadable state file: its path, the error, and the fix.
    static func unreadable(_ path: String, _ e: SystemError) -> String {
        let fix = e.code == EIO
            ? "check the disk (dmesg), then copy the file elsewhere or move it aside to start empty"
            : "let the user paird read and write it (sudo chown paird:paird \(path); sudo chmod 600 \(path))"
        return "state file \(path) cannot be read (\(e)): paird does not start without it, so as not to forget "
            + "the wearables it holds: \(fix)"
    }

    /// A crash between creating the temporary file and renaming it leaves `state.json.tmp-XXXXXX`
    /// behind; it was never the state, so it is removed at the next start.
    func removeStaleTemporaries() {
        let url = URL(fileURLWithPath: path)
        let dir = url.deletingLastPathComponent().path
        let prefix = url.lastPathComponent + ".tmp-"
        for name in (try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? [] where name.hasPrefix(prefix) {
            unlink(dir + "/" + name)
        }
    }

    var directory: String {
        path.lastIndex(of: "/").map { $0 == path.startIndex ? "/" : String(path[..<$0]) } ?? "."
    }

    /// Atomically replaces the file with `state`.
    public func save(_ state: PersistedState) throws {
        let data = state.encoded()
        let dir = directory
        var template = Array("\(path).tmp-XXXXXX".utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        if fd < 0 { throw SystemError("create a temporary file next to \(path)", errno) }
        let tmp = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        var ok = false
        defer { if !ok { unlink(tmp) } }
        defer { if fd >= 0 { close(fd) } }
        if fchmod(fd, 0o600) != 0 { throw SystemError("chmod \(tmp)", errno) }
        try data.withUnsafeBytes { buf in
            var off = 0
            while off < buf.count {
                let n = write(fd, buf.baseAddress! + off, buf.count - off)
                if n < 0 { if errno == EINTR { continue }; throw SystemError("write \(tmp)", errno) }
                off += n
            }
        }
        if fsync(fd) != 0 { throw SystemError("fsync \(tmp)", errno) }
        if rename(tmp, path) != 0 { throw SystemError("rename \(tmp) to \(path)", errno) }
        ok = true
        let dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if dfd >= 0 { fsync(dfd); close(dfd) }
    }
}

/// Reads at most `limit` bytes of `path`, `chunk` bytes per read; nil if it does not exist.
func readFile(_ path: String, limit: Int, chunk chunkSize: Int = 64 * 1024) throws -> [UInt8]? {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    if fd < 0 {
        if errno == ENOENT { return nil }
        throw SystemError("open \(path)", errno)
    }
    defer { close(fd) }
    var bytes = [UInt8]()
    var chunk = [UInt8](repeating: 0, count: chunkSize)
    while bytes.count < limit {
        let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, min($0.count, limit - bytes.count)) }
        if n < 0 { if errno == EINTR { continue }; throw SystemError("read \(path)", errno) }
        if n == 0 { break }
        bytes += chunk[0..<n]
    }
    return bytes
}

/// An errno with what was being done, for logs and pairctl.
public struct SystemError: Error, CustomStringConvertible, Sendable {
    public let what: String
    public let code: Int32
    public init(_ what: String, _ code: Int32) { self.what = what; self.code = code }
    public var description: String { "\(what): \(String(cString: strerror(code)))" }
}
