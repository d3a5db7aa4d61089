#if canImport(Glibc)
import Glibc
#endif

/// Gives back the pages of code that paird's start-up mapped and its steady state does not use
/// (issue 46; BENCHMARKS.md §10).
///
/// Most of paird's resident memory is clean file-backed code: of ~16 MB VmRSS, ~10 MB are its own
/// static binary's r-x segment and ~4 MB the shared libraries'. The code a steady state runs is
/// far less (~1.9 MB of the binary's pages referenced over 60 link drops and returns), but every
/// page fault maps the 64 kB around it (the kernel's fault-around), and start-up runs code once
/// that nothing runs again (argument parsing, the config, the record's scan).
///
/// `release()` drops this process's page-table entries for every private, executable,
/// file-backed mapping (`r-xp` in /proc/self/maps: paird's text and read-only data, and the
/// shared libraries' text) with `MADV_DONTNEED`. What it does and does not do:
/// - The pages stay in the page cache; it frees no memory of the machine by itself. They become
///   unmapped clean cache, the first thing the kernel reclaims under pressure, where mapped
///   executable pages are kept longer.
/// - Code run afterwards faults its pages back from the cache (a minor fault; from the disk if the
///   kernel reclaimed them meanwhile). Nothing else changes: `r-xp` mappings are never written
///   (no text relocations), so nothing of this process's own is lost. Writable mappings and
///   RELRO (`r--p`, written once by the loader) are not touched: `MADV_DONTNEED` would throw their
///   written pages away.
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

    /// The `r-xp` mappings of /proc/self/maps with a file behind them (lines with a path, not
    /// `[vdso]` and the like).
    static func executableFileMappings(_ maps: [UInt8]) -> [(start: UInt, end: UInt)] {
        var out: [(UInt, UInt)] = []
        for line in maps.split(separator: UInt8(ascii: "\n")) {
            // start-end perms offset dev inode path
            let fields = line.split(separator: UInt8(ascii: " "), maxSplits: 5, omittingEmptySubsequences: true)
            guard fields.count == 6, Array(fields[1]) == Array("r-xp".utf8),
                  fields[5].first(where: { $0 != UInt8(ascii: " ") }) == UInt8(ascii: "/") else { continue }
            let range = fields[0].split(separator: UInt8(ascii: "-"))
            guard range.count == 2,
                  let start = UInt(String(decoding: range[0], as: UTF8.self), radix: 16),
                  let end = UInt(String(decoding: range[1], as: UTF8.self), radix: 16),
                  end > start else { continue }
            out.append((start, end))
        }
        return out
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

    /// Drops this process's mappings of its executable file pages (see the type). Throws if
    /// /proc/self/maps cannot be read or a mapping is refused. (The heap is not trimmed: it peaks
    /// at ~0.2 MB, BENCHMARKS.md §10.)
    static func release() throws -> Release {
        guard let maps = try readFile("/proc/self/maps", limit: 1 << 20, chunk: readChunk) else {
            throw SystemError("read /proc/self/maps", ENOENT)
        }
        var r = Release(rssBeforeKB: residentKB())
        for m in executableFileMappings(maps) {
            guard let p = UnsafeMutableRawPointer(bitPattern: m.start) else { continue }
            if madvise(p, Int(m.end - m.start), MADV_DONTNEED) != 0 {
                throw SystemError("madvise(MADV_DONTNEED) of \(String(m.start, radix: 16))-\(String(m.end, radix: 16))", errno)
            }
            r.mappings += 1
            r.bytes += Int(m.end - m.start)
        }
        r.rssAfterKB = residentKB()
        return r
    }
}
