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
}
