import Foundation
import Testing
import PairingCore

/// A wearable named with an escape sequence and a new line, through the real paird and pairctl
/// (issue 43, item 1): every text output shows it `terminalSafe`, `--json` exact.
@Suite("a hostile name through the real binaries", .serialized)
struct HostileNameIntegrationTests {
    /// In the mock's Python string: ESC [8m (hide), a new line, a fake line, BEL.
    static let pythonName = "Evil\\x1b[8mX\\nFAKE 00:00:00:00:00:00\\x07"
    static let exact = "Evil\u{1b}[8mX\nFAKE 00:00:00:00:00:00\u{07}"
    static let shown = "Evil\\x1b[8mX\\nFAKE 00:00:00:00:00:00\\x07"

    @Test("pair, list --no-legend (one line), status, status WEARABLE: escaped; status --json: exact")
    func hostileName() throws {
        let host = try MockedHost()
        try host.startPaird()
        try host.addDevice(MockedHost.watch, name: Self.pythonName)
        let r = try host.pairWatch(added: true)
        #expect(r.status == 0, "\(r.err)")
        func clean(_ text: String, _ what: String) {
            #expect(!text.contains("\u{1b}") && !text.contains("\u{07}"), "\(what): \(text.debugDescription)")
            #expect(!text.split(separator: "\n").contains { $0.hasPrefix("FAKE") }, "\(what): \(text)")
        }
        clean(r.out, "pair")
        #expect(r.out.contains("found \(Self.shown) (\(MockedHost.watch)"), "\(r.out)")

        let list = host.pairctl("list", "--no-legend")
        #expect(list.status == 0)
        #expect(list.out.split(separator: "\n").count == 1, "one line for one wearable: \(list.out.debugDescription)")
        #expect(list.out.hasSuffix("  \(Self.shown)\n"), "\(list.out.debugDescription)")
        for args in [["status"], ["status", MockedHost.watch], ["list"]] {
            let t = host.run(MockedHost.pairctlBin, args)
            #expect(t.status == 0)
            clean(t.out, args.joined(separator: " "))
            #expect(t.out.contains(Self.shown), "\(args): \(t.out)")
        }
        let doc = try host.status()
        #expect(doc.devices.first?.name == Self.exact, "status --json round-trips the exact name")
    }
}
