import Testing
import DBus
import EventLoop
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// A leak check, not a timing check: 100,000 PropertiesChanged signals go from one connection
/// through the bus to another and are decoded there; resident memory after them must be about
/// what it was after a 10,000-signal warm-up. A leak of even one small object per signal
/// (a message, a pending call, a closure) would show up as several MB.
@Suite(.serialized) struct SignalStormTests {
    @Test func aHundredThousandPropertiesChangedKeepMemoryFlat() throws {
        let f = try Fixture()
        var received = 0
        var lastCounter: UInt32 = 0
        try f.subscribe(f.client, MatchRule(interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged",
                                            path: "/org/paird/storm")) { msg in
            guard let args = try? msg.arguments().expect("sa{sv}as"),
                  let counter = args[1].dictionary?["Counter"]?.uint32 else { return }
            lastCounter = counter
            received += 1
        }

        var sent = 0
        /// Emits in batches and waits for each batch to arrive, so neither side queues the whole
        /// storm at once (that would measure queue sizes and the allocator, not leaks).
        func pump(_ count: Int) throws {
            let target = sent + count
            while sent < target {
                let batch = min(500, target - sent)
                for _ in 0..<batch {
                    sent += 1
                    try f.server.emitPropertiesChanged(path: "/org/paird/storm", interface: "org.paird.Storm1",
                                                       changed: ["Counter": .uint32(UInt32(sent)), "Name": "storm"])
                }
                try runUntil(f.loop, "signal \(sent)", limit: .seconds(30)) { received == sent }
            }
        }

        try pump(10_000)
        let afterWarmup = residentBytes()
        try pump(100_000)
        let afterStorm = residentBytes()
        #expect(received == 110_000)
        #expect(lastCounter == 110_000)
        let growth = afterStorm - afterWarmup
        print("signal storm: RSS \(afterWarmup / 1024) KiB after 10k warm-up, \(afterStorm / 1024) KiB after 100k more (growth \(growth / 1024) KiB)")
        // Under AddressSanitizer (leakcheck.sh) freed memory sits in quarantine, so RSS says
        // nothing there; LeakSanitizer does the checking instead.
        if getenv("PAIRD_SANITIZER_RUN") == nil {
            #expect(growth < 20 * 1024 * 1024, "RSS grew by \(growth / 1024) KiB over 100k signals")
        }
    }
}

/// Resident set size from /proc/self/statm (second field, in pages).
func residentBytes() -> Int {
    let fd = open("/proc/self/statm", O_RDONLY)
    guard fd >= 0 else { return 0 }
    defer { close(fd) }
    var buffer = [UInt8](repeating: 0, count: 256)
    let n = read(fd, &buffer, buffer.count)
    guard n > 0 else { return 0 }
    let fields = String(decoding: buffer[..<n], as: UTF8.self).split(separator: " ")
    guard fields.count > 1, let pages = Int(fields[1]) else { return 0 }
    return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
}
