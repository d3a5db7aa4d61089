#if canImport(Glibc)
import Glibc
#endif
@testable import Paird
import Testing

/// `MappedText`: which mappings it gives back, and that giving them back lowers this process's
/// VmRSS and leaves it running.
@Suite("MappedText")
struct MappedTextTests {
    @Test("only private, read-only, file-backed mappings with no page written: not [vdso], not data, not RELRO")
    func picksCleanReadOnlyFileMappings() {
        func mapping(_ head: String, anonymous: Int?) -> String {
            head + "\nSize:               1024 kB\nRss:                 512 kB\n"
                + (anonymous.map { "Anonymous:          \($0) kB\n" } ?? "") + "VmFlags: rd ex mr mw me\n"
        }
        let smaps = [
            mapping("55d0c0000000-55d0c0100000 r--p 00000000 fe:01 1234                       /usr/bin/paird", anonymous: 0),
            mapping("55d0c0100000-55d0c0a00000 r-xp 00100000 fe:01 1234                       /usr/bin/paird", anonymous: 0),
            mapping("55d0c0a00000-55d0c0b00000 r--p 00a00000 fe:01 1234                       /usr/bin/paird", anonymous: 364), // RELRO
            mapping("55d0c0b00000-55d0c0c00000 rw-p 00b00000 fe:01 1234                       /usr/bin/paird", anonymous: 0),
            mapping("55d0c1000000-55d0c1100000 rw-p 00000000 00:00 0                          [heap]", anonymous: 4),
            mapping("7f0000000000-7f0000100000 r-xp 00028000 fe:01 99                         /usr/lib/x86_64-linux-gnu/libc.so.6", anonymous: 0),
            mapping("7f0000200000-7f0000201000 r-xs 00000000 fe:01 77                         /usr/lib/shared map", anonymous: 0),
            mapping("7f0000300000-7f0000301000 r-xp 00000000 00:00 0", anonymous: 0),
            mapping("7f0000400000-7f0000401000 ---p 00000000 fe:01 99                         /usr/lib/x86_64-linux-gnu/libc.so.6", anonymous: 0),
            mapping("7f0000500000-7f0000501000 r--p 00000000 fe:01 98                         /usr/lib/no-anonymous-line.so", anonymous: nil),
            mapping("7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0                          [vdso]", anonymous: 0),
            mapping("7ffd00003000-7ffd00004000 r-xp 00000000 fe:01 5                          /opt/my tools/lib.so", anonymous: 0),
        ].joined()
        var scan = MappedText.Scan()
        var picked: [String] = []
        for line in smaps.utf8.split(separator: UInt8(ascii: "\n")) {
            if let m = scan.feed(ArraySlice(line)) { picked.append("\(String(m.start, radix: 16))-\(String(m.end, radix: 16))") }
        }
        if let m = scan.finish() { picked.append("\(String(m.start, radix: 16))-\(String(m.end, radix: 16))") }
        #expect(picked == ["55d0c0000000-55d0c0100000", "55d0c0100000-55d0c0a00000", "7f0000000000-7f0000100000",
                           "7ffd00003000-7ffd00004000"])
    }

    @Test("smaps is read line by line, the last line without its newline too")
    func readsLines() throws {
        let path = "/tmp/paird-mappedtext-\(getpid())"
        let text = String(repeating: "x", count: 5000) + "\nshort\n\nlast"
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        _ = text.utf8CString.withUnsafeBytes { write(fd, $0.baseAddress, $0.count - 1) }
        close(fd)
        defer { unlink(path) }
        var lines: [Int] = []
        try MappedText.forEachLine(path) { lines.append($0.count) }
        #expect(lines == [5000, 5, 0, 4])
    }

    @Test("giving the code pages back lowers VmRSS, and the process goes on running its code")
    func releaseLowersResidentMemory() throws {
        let r = try MappedText.release()
        #expect(r.mappings > 0)
        let before = try #require(r.rssBeforeKB), after = try #require(r.rssAfterKB)
        #expect(after < before, "VmRSS \(before) → \(after) kB")
        // Code from every module runs after: its pages fault back in.
        var scan = MappedText.Scan()
        _ = scan.feed(ArraySlice("1-2 r-xp 0 0:0 1 /x".utf8))
        _ = scan.feed(ArraySlice("Anonymous: 0 kB".utf8))
        #expect(scan.finish() != nil)
        #expect(MappedText.residentKB() != nil)
    }
}
