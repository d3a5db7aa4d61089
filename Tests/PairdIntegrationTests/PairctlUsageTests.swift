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
            (["pair", "--timeout", "-1"], "'-1' is invalid", "pairctl pair --help"),   // not "Missing value"
            (["pair", "--name", ""], "--name needs some text", "pairctl pair --help"),
            (["pair", "--passkey", "12345"], "--passkey must be 6 digits", "pairctl pair --help"),
            (["disconnect", "00:11:22:33:44:GG"], "not a Bluetooth address", "pairctl disconnect --help"),
            (["unpair", "00-11-22-33-44-55x"], "not a Bluetooth address", "pairctl unpair --help"),
        ] {
            let r = host.run(MockedHost.pairctlBin, args)
            #expect(r.status == 64, "\(args)")
            #expect(r.err.hasPrefix("pairctl: "), "\(r.err)")
            #expect(r.err.contains(text), "\(r.err)")
            #expect(r.err.contains("(see '\(hint)')"), "\(r.err)")
            #expect(r.err.split(separator: "\n").count == 1, "one line: \(r.err)")
        }
    }

    @Test("pair with no filter and no terminal: refused unless --any (it would pair whatever answers first)")
    func pairNeedsAFilter() throws {
        let host = try MockedHost()
        let r = host.run(MockedHost.pairctlBin, ["pair"])
        #expect(r.status == 64, "\(r.err)")
        #expect(r.err.contains("--any"), "\(r.err)")
        // --any gets past the check (and then finds no paird here: exit 3)
        #expect(host.run(MockedHost.pairctlBin, ["pair", "--any"]).status == 3)
    }

    @Test("pairctl alone shows the status (here: paird not running, exit 3)")
    func aloneIsStatus() throws {
        let host = try MockedHost()
        let r = host.run(MockedHost.pairctlBin, [])
        #expect(r.status == 3, "\(r.out) \(r.err)")
        #expect(r.err.contains("paird is not running") || r.err.contains("system bus"), "\(r.err)")
    }
}
