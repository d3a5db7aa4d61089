#if canImport(Glibc)
import Glibc
#endif

/// Gives back the pages of code and read-only data that paird's start-up mapped and its steady
/// state does not use (issue 46; BENCHMARKS.md §10b).
///
/// Most of paird's resident memory is clean file-backed code: of ~16 MB VmRSS, ~10 MB are its own
/// static binary's r-x segment and ~4 MB the shared libraries'. The code a steady state runs is
/// far less (~1.9 MB of the binary's pages referenced over 60 link drops and returns), but every
/// page fault maps the 64 kB around it (the kernel's fault-around), and start-up runs code once
/// that nothing runs again (argument parsing, the config, the record's scan).
///
/// `release()` drops this process's page-table entries for every private, read-only, file-backed
/// mapping none of whose pages was written (/proc/self/smaps: `r-xp` and `r--p` with a path and
/// `Anonymous: 0 kB`; paird's code and read-only data, the shared libraries' code, read-only data
/// and unwind tables) with `MADV_DONTNEED`. What it does and does not do:
/// - The pages stay in the page cache; it frees no memory of the machine by itself. They become
///   unmapped clean cache, the first thing the kernel reclaims under pressure, where mapped
///   executable pages are kept longer.
/// - Code run afterwards faults its pages back from the cache (a minor fault; from the disk if the
///   kernel reclaimed them meanwhile). Nothing of this process's own is lost: only clean pages are
///   dropped. A written page of a private file mapping (RELRO's, relocated by the loader; anything
///   writable) is anonymous, and `MADV_DONTNEED` would throw it away: a mapping with one is not
///   touched, nor is a writable one. paird has one thread, so nothing writes meanwhile.
/// - `MADV_PAGEOUT` would also evict the pages from the cache, but the kernel allows that only to a
///   process that could write the file; paird runs as `paird` and its binary belongs to root.
enum MappedText {
    struct Release: Equatable {
        /// Mappings given back and their total length.
        var mappings = 0
        var bytes = 0
        /// VmRSS (kB) before and after; nil if /proc/self/status could not be read.
        var rssBeforeKB: Int?
        var rssAfterKB: Int?
    }

    /// /proc files are read 4 kB at a time: a larger buffer would grow the heap, whose top glibc
    /// keeps once freed (below its 128 kB trim threshold), for a read of a few kB.
    static let readChunk = 4096

    /// Reads /proc/self/smaps: which mappings can be given back. Fed one line at a time; a
    /// mapping is decided when the next one starts (`feed`) or the file ends (`finish`): private,
    /// readable, not writable, with a file behind it (a path, not `[vdso]` and the like), and no
    /// page of it written (`Anonymous: 0 kB`; a page the loader relocated, RELRO's, is anonymous,
    /// and `MADV_DONTNEED` would throw it away).
    struct Scan {
        private var current: (start: UInt, end: UInt)?
        private var anonymous = 0

        /// A mapping to give back, when `line` starts the next one.
        mutating func feed(_ line: ArraySlice<UInt8>) -> (start: UInt, end: UInt)? {
            let fields = line.split(separator: UInt8(ascii: " "), maxSplits: 5, omittingEmptySubsequences: true)
            if fields.count >= 2, fields[0].last == UInt8(ascii: ":") {
                if Array(fields[0]) == Array("Anonymous:".utf8) {
                    anonymous = Int(String(decoding: fields[1], as: UTF8.self)) ?? 1
                }
                return nil
            }
            let done = finish()
            // start-end perms offset dev inode path
            let range = fields.first?.split(separator: UInt8(ascii: "-")) ?? []
            let perms = fields.count == 6 ? Array(fields[1]) : []
            guard perms.count == 4, range.count == 2,
                  let start = UInt(String(decoding: range[0], as: UTF8.self), radix: 16),
                  let end = UInt(String(decoding: range[1], as: UTF8.self), radix: 16), end > start else { return done }
            if perms[0] == UInt8(ascii: "r"), perms[1] == UInt8(ascii: "-"), perms[3] == UInt8(ascii: "p"),
               fields[5].first(where: { $0 != UInt8(ascii: " ") }) == UInt8(ascii: "/") {
                current = (start, end)
                anonymous = -1   // unknown until its Anonymous: line
            }
            return done
        }

        /// The last mapping, if it can be given back.
        mutating func finish() -> (start: UInt, end: UInt)? {
            defer { current = nil }
            return anonymous == 0 ? current : nil
        }
    }

    /// VmRSS in kB from /proc/self/status.
    static func residentKB() -> Int? {
        guard let bytes = try? readFile("/proc/self/status", limit: 16 * 1024, chunk: readChunk) else { return nil }
        for line in bytes.split(separator: UInt8(ascii: "\n")) where line.starts(with: Array("VmRSS:".utf8)) {
            let digits = line.filter { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }
            return Int(String(decoding: digits, as: UTF8.self))
        }
        return nil
    }

    /// Calls `body` with every line of `path`, read `readChunk` bytes at a time (no copy of the
    /// whole file is kept).
    static func forEachLine(_ path: String, _ body: (ArraySlice<UInt8>) throws -> Void) throws {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        if fd < 0 { throw SystemError("open \(path)", errno) }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: readChunk)
        var line: [UInt8] = []
        line.reserveCapacity(512)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 { if errno == EINTR { continue }; throw SystemError("read \(path)", errno) }
            if n == 0 { break }
            for byte in buffer[0..<n] {
                if byte == UInt8(ascii: "\n") { try body(line[...]); line.removeAll(keepingCapacity: true) } else { line.append(byte) }
            }
        }
        if !line.isEmpty { try body(line[...]) }
    }

    /// Drops this process's page-table entries for its clean, read-only file pages (see the type
    /// and `Scan`). Throws if /proc/self/smaps cannot be read or a mapping is refused. (The heap is
    /// not trimmed: it peaks at ~0.2 MB, BENCHMARKS.md §10.)
    static func release() throws -> Release {
        var r = Release(rssBeforeKB: residentKB())
        func giveBack(_ m: (start: UInt, end: UInt)) throws {
            guard let p = UnsafeMutableRawPointer(bitPattern: m.start) else { return }
            if madvise(p, Int(m.end - m.start), MADV_DONTNEED) != 0 {
                throw SystemError("madvise(MADV_DONTNEED) of \(String(m.start, radix: 16))-\(String(m.end, radix: 16))", errno)
            }
            r.mappings += 1
            r.bytes += Int(m.end - m.start)
        }
        var scan = Scan()
        try forEachLine("/proc/self/smaps") { line in
            if let m = scan.feed(line) { try giveBack(m) }
        }
        if let m = scan.finish() { try giveBack(m) }
        r.rssAfterKB = residentKB()
        return r
    }
}
