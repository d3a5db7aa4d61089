import Foundation
import Testing
import PairingCore

/// paird checks the caller itself (issue 43): on the tests' private bus, which allows everything
/// (the "permissive extra policy file" case), a caller paird takes for user nobody
/// (`PAIRD_TEST_CALLER_UID`, as the tests run as paird's own user) gets the states only and is
/// refused what changes something or reads wearable data.
@Suite("paird's own check of the caller", .serialized)
struct CallerCheckIntegrationTests {
    @Test("another user: the states; Disconnect, Pair and GetHistory refused by paird itself")
    func otherUser() throws {
        let host = try MockedHost()
        try host.startPaird()
        try host.pairWatchOK()
        // (the mock gives no battery or data: that the status leaves them out for another user is
        // CallerCheckTests' statesOnly test; here: the states still reach that user)
        try host.stopPaird()
        try host.startPaird(env: ["PAIRD_TEST_CALLER_UID": "65534"])
        try waitFor("the watch in the status", deadline: 20) { host.state() != nil }
        let device = try #require(try host.status().devices.first)
        #expect(device.battery == nil && device.lastData == nil)

        let disconnects = host.calls("Disconnect")
        let d = host.pairctl("disconnect", MockedHost.watch)
        #expect(d.status != 0)
        #expect(d.err.contains("bluetooth"), "\(d.err)")
        #expect(host.calls("Disconnect") == disconnects, "paird disconnected for another user")

        let h = host.pairctl("history", "--json")
        #expect(h.status != 0, "history for another user: \(h.out)")
        #expect(h.err.contains("bluetooth"), "\(h.err)")
        let p = host.pairctl("pair", "C0:FF:EE:00:00:01", "--timeout", "1")
        #expect(p.status != 0)
        #expect(p.err.contains("bluetooth"), "\(p.err)")
    }
}
