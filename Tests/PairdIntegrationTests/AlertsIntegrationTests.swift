import Foundation
import Testing
import PairingCore

/// The host's own alerts end to end: the real paird against the mocked BlueZ, a dispatcher
/// directory with a script that records what it is given.
@Suite("Alerts and the dispatcher against a mocked BlueZ", .serialized)
struct AlertsIntegrationTests {
    let watch = MockedHost.watch

    /// Pairs `address` (a device the mock lists as `name`) with the real pairctl, and waits for it
    /// to be connected.
    func pair(_ host: MockedHost, _ address: String, name: String) throws {
        try host.addDevice(address, name: name)
        let scans = host.adapterCalls("StartDiscovery")
        let pairing = host.start(MockedHost.pairctlBin, ["pair", address, "--timeout", "5"])
        try host.advertise(address, afterDiscoveries: scans)
        try waitFor("paird to call Connect on \(name) after pairing", deadline: 20) { host.calls("Connect", address) >= 1 }
        try host.setDevice(address, "'ServicesResolved': True")
        try host.must(pairing.finish(), "pairctl pair \(address)")
        try waitFor("\(name) connected", deadline: 10) { host.state(address) == "connected" }
    }

    @Test("away longer than [Alerts] AwayLongerThan: one journal entry, the dispatcher script run once with the wearable's environment")
    func awayTooLong() throws {
        let host = try MockedHost()
        let hooks = host.dir.appendingPathComponent("dispatcher.d")
        let out = host.dir.appendingPathComponent("ran").path
        try FileManager.default.createDirectory(at: hooks, withIntermediateDirectories: true)
        let script = hooks.appendingPathComponent("50-record").path
        // Its output: a line that would be an emergency-priority line of paird's, were the
        // script's stdout paird's journal stream.
        try "#!/bin/sh\necho \"$1 $2 $PAIRD_EVENT $PAIRD_DEVICE $PAIRD_NAME $PAIRD_DURATION $PAIRD_THRESHOLD\" >> \(out)\nprintf 'seen\\n<0>emergency %s\\033[8m\\n' \"$PAIRD_NAME\"\n"
            .write(toFile: script, atomically: false, encoding: .utf8)
        chmod(script, 0o755)
        try "[Health]\nFirstDataTimeout = 0\n[Alerts]\nAwayLongerThan = 10s\nDispatcherDir = \(hooks.path)\nDispatcherTimeout = 5s\n"
            .write(toFile: host.dir.appendingPathComponent("paird.conf").path, atomically: true, encoding: .utf8)
        try host.startPaird()
        // The watch, whose absence is alerted; a band, whose later absence marks the end of a
        // window in which a repeat of the watch's alert would have shown.
        let band = "00:AA:01:01:00:02"
        try pair(host, watch, name: "Watch")
        try pair(host, band, name: "Band")
        func lines() -> [[String]] {
            ((try? String(contentsOfFile: out, encoding: .utf8)) ?? "").split(separator: "\n").map { $0.split(separator: " ").map(String.init) }
        }
        #expect(lines().isEmpty, "no alert before anything was away: \(lines())")

        try host.setDevice(watch, "'Connected': False, 'ServicesResolved': False") // link loss
        let lost = Date()
        try waitFor("the dispatcher script to run for the watch", deadline: 30) { lines().contains { $0.count > 3 && $0[3] == watch } }
        print("awayTooLong: the watch's alert ran \(Date().timeIntervalSince(lost)) s after its loss (AwayLongerThan 10 s)")
        // Not before the threshold: paird's own figure for the absence it alerted.
        let first = lines().first ?? []
        #expect(first.count == 7 && first[0] == "awayTooLong" && first[1] == watch && first[2] == "awayTooLong"
                && first[3] == watch && first[4] == "Watch" && first[6] == "10", "\(first)")
        #expect(first.count == 7 && (Int(first[5]) ?? 0) >= 10, "the absence it alerted reached the 10 s threshold: \(first)")

        // The band goes away only now: its alert comes a whole threshold after the watch's, and
        // the dispatcher runs alerts in their order, so any repeat of the watch's within that
        // window runs before the band's.
        try host.setDevice(band, "'Connected': False, 'ServicesResolved': False")
        let bandLost = Date()
        try waitFor("the dispatcher script to run for the band", deadline: 30) { lines().contains { $0.count > 3 && $0[3] == band } }
        print("awayTooLong: the band's alert ran \(Date().timeIntervalSince(bandLost)) s after its loss, \(Date().timeIntervalSince(lost)) s after the watch's")
        // paird journals a script's outcome once it has exited, after its line was written.
        let outcome = "dispatcher: \(script) awayTooLong: exit status 0"
        try waitFor("paird's journal entry of the band's script outcome", deadline: 10) { host.log().components(separatedBy: outcome).count >= 3 }
        let ran = lines()
        #expect(ran.map { $0.count > 3 ? $0[3] : "?" } == [watch, band], "the watch's alert once, then the band's: \(ran)")
        let log = host.log()
        #expect(log.components(separatedBy: "Watch (\(watch)): away for ").count == 2, "one journal entry for the watch's absence: \(log)")
        #expect(log.components(separatedBy: "Band (\(band)): away for ").count == 2, "one journal entry for the band's absence: \(log)")
        #expect(log.components(separatedBy: outcome).count == 3, "the script ran twice: \(log)")
        // Its output under its own identifier, one line each, the `<0>` as text.
        #expect(log.components(separatedBy: "paird-dispatch-50-record: <0>emergency Watch\\x1b[8m\n").count == 2, "the script's line under its identifier: \(log)")
        #expect(!log.split(separator: "\n").contains { $0.hasPrefix("<") }, "no line of paird's stderr starts with a priority: \(log)")
        try host.stopPaird()
    }
}
