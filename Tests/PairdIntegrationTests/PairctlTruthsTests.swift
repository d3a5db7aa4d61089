import Foundation
import Testing
import PairingCore

/// Issue 34's small truths, from the real binaries (against the mocked BlueZ where paird runs).
@Suite("pairctl and paird: versions, help, JSON, errors (issue 34)", .serialized)
struct PairctlTruthsTests {
    @Test("--version of pairctl and paird, and paird's D-Bus Version, are the same build string")
    func versions() throws {
        let host = try MockedHost()
        let c = host.pairctl("--version")
        let d = host.run(MockedHost.pairdBin, ["--version"])
        #expect(c.status == 0 && d.status == 0)
        let ctl = c.out.trimmingCharacters(in: .whitespacesAndNewlines)
        let daemon = d.out.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(ctl.hasPrefix("pairctl "), "\(ctl)")
        #expect(daemon.hasPrefix("paird "), "\(daemon)")
        let build = String(ctl.dropFirst("pairctl ".count))
        #expect(daemon == "paird \(build)")
        // The code's version, or the package's (`make`: 0.1.0+git263.48e976b, .dirty when the tree was).
        #expect(build == PairdAPI.version || build.wholeMatch(of: /\d+\.\d+\.\d+\+git\d+\.[0-9A-Za-z]+(\.dirty)?/) != nil, "\(build)")
        #expect(build.hasPrefix(PairdAPI.version))
        try host.startPaird()
        let prop = host.python("print(b.get_object('org.paird1', '/org/paird1').Get('org.paird1.Manager1', 'Version', dbus_interface='org.freedesktop.DBus.Properties'))")
        #expect(prop.out.trimmingCharacters(in: .whitespacesAndNewlines) == build, "\(prop.err)")
        #expect(try host.status().daemon.version == build)
    }

    @Test("paird --check-config: a missing file is \"no file, defaults\" (exit 0), every error of a bad one is named (exit 78)")
    func checkConfig() throws {
        let host = try MockedHost()
        let missing = host.dir.appendingPathComponent("absent.conf").path
        // without --config paird reads /etc/paird/paird.conf, absent or not on this host: an
        // explicit but absent --config must exist (78), so the default path's rule is checked in
        // ConfigTests.checkMissing; here the text of the two outcomes.
        let m = host.run(MockedHost.pairdBin, ["--check-config", "--config", missing])
        #expect(m.status == 78)
        #expect(m.err.contains("absent.conf:0: cannot read: no such file"), "\(m.err)")
        #expect(!m.out.contains("OK"), "\(m.out)")
        let conf = host.dir.appendingPathComponent("paird.conf").path
        try "[Pairing]\nScanTimeout = soon\n[Connection]\nFastAttempts = -1\nNope = 1\n".write(toFile: conf, atomically: true, encoding: .utf8)
        let r = host.run(MockedHost.pairdBin, ["--check-config", "--config", conf])
        #expect(r.status == 78)
        #expect(r.err.contains("paird.conf:2: ScanTimeout must be"), "\(r.err)")
        #expect(r.err.contains("paird.conf:4: FastAttempts must be"), "\(r.err)")
        #expect(r.out.contains("paird.conf:5: unknown key Nope"), "\(r.out)")
        #expect(r.out.contains("2 error(s)"), "\(r.out)")
        #expect(!r.out.contains(": OK"), "\(r.out)")
        try "[Pairing]\nScanTimeout = 5\n".write(toFile: conf, atomically: true, encoding: .utf8)
        let ok = host.run(MockedHost.pairdBin, ["--check-config", "--config", conf])
        #expect(ok.status == 0 && ok.out.contains("paird.conf: OK"), "\(ok.out) \(ok.err)")
    }

    @Test("paird --check-config without --config on a host without /etc/paird/paird.conf: \"no file, defaults\", exit 0",
          .enabled(if: !FileManager.default.fileExists(atPath: "/etc/paird/paird.conf"), "this host has /etc/paird/paird.conf"))
    func checkConfigDefaults() throws {
        let host = try MockedHost()
        let r = host.run(MockedHost.pairdBin, ["--check-config"])
        #expect(r.status == 0, "\(r.err)")
        #expect(r.out.trimmingCharacters(in: .whitespacesAndNewlines) == "/etc/paird/paird.conf: no file, defaults")
    }
}
