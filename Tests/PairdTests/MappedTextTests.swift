#if canImport(Glibc)
import Glibc
#endif
@testable import Paird
import Testing

/// `MappedText`: which mappings it gives back, and that giving them back lowers this process's
/// VmRSS and leaves it running.
@Suite("MappedText")
struct MappedTextTests {
    @Test("only private executable mappings of a file: not the loader's [vdso], not data, not RELRO")
    func picksExecutableFileMappings() {
        let maps = """
        55d0c0000000-55d0c0100000 r--p 00000000 fe:01 1234                       /usr/bin/paird
        55d0c0100000-55d0c0a00000 r-xp 00100000 fe:01 1234                       /usr/bin/paird
        55d0c0a00000-55d0c0b00000 r--p 00a00000 fe:01 1234                       /usr/bin/paird
        55d0c0b00000-55d0c0c00000 rw-p 00b00000 fe:01 1234                       /usr/bin/paird
        55d0c1000000-55d0c1100000 rw-p 00000000 00:00 0                          [heap]
        7f0000000000-7f0000100000 r-xp 00028000 fe:01 99                         /usr/lib/x86_64-linux-gnu/libc.so.6
        7f0000200000-7f0000201000 r-xs 00000000 fe:01 77                         /usr/lib/shared map
        7f0000300000-7f0000301000 r-xp 00000000 00:00 0
        7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0                          [vdso]
        7ffd00003000-7ffd00004000 r-xp 00000000 fe:01 5                          /opt/my tools/lib.so
        """
        let picked = MappedText.executableFileMappings(Array(maps.utf8)).map { "\(String($0.start, radix: 16))-\(String($0.end, radix: 16))" }
        #expect(picked == ["55d0c0100000-55d0c0a00000", "7f0000000000-7f0000100000", "7ffd00003000-7ffd00004000"])
    }

    @Test("giving the code pages back lowers VmRSS, and the process goes on running its code")
    func releaseLowersResidentMemory() throws {
        let r = try MappedText.release()
        #expect(r.mappings > 0)
        let before = try #require(r.rssBeforeKB), after = try #require(r.rssAfterKB)
        #expect(after < before, "VmRSS \(before) → \(after) kB")
        // Code from every module runs after: its pages fault back in.
        #expect(MappedText.executableFileMappings(Array("1-2 r-xp 0 0:0 1 /x\n".utf8)).count == 1)
        #expect(MappedText.residentKB() != nil)
    }
}
