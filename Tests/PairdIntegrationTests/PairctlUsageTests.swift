import Testing

/// pairctl's argument errors, from the real binary (no paird: bad arguments never reach the bus).
@Suite("pairctl bad arguments")
struct PairctlUsageTests {
    @Test("bad arguments: exit 64 and one line on stderr naming the subcommand's --help (the real binary)")
    func usage() throws {
        let host = try MockedHost()   // no paird: bad arguments never reach the bus
        for (args, text, hint) in [
            (["pair", "not-an-address"], "not a Bluetooth address", "pairctl pair --help"),
            (["pair", "--timeout", "0"], "--timeout must be", "pairctl pair --help"),
            (["status", "--bogus"], "Unknown option '--bogus'", "pairctl status --help"),
            (["frobnicate"], "frobnicate", "pairctl --help"),
        ] {
            let r = host.run(MockedHost.pairctlBin, args)
            #expect(r.status == 64, "\(args)")
            #expect(r.err.hasPrefix("pairctl: "), "\(r.err)")
            #expect(r.err.contains(text), "\(r.err)")
            #expect(r.err.contains("(see '\(hint)')"), "\(r.err)")
            #expect(r.err.split(separator: "\n").count == 1, "one line: \(r.err)")
        }
    }
}
