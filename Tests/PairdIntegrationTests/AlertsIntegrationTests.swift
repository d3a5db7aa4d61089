import Foundation
import Testing
import PairingCore

/// The host's own alerts end to end: the real paird against the mocked BlueZ, a dispatcher
/// directory with a script that records what it is given.
@Suite("Alerts and the dispatcher against a mocked BlueZ", .serialized)
struct AlertsIntegrationTests {
    let watch = MockedHost.watch

    @Test("away longer than [Alerts] AwayLongerThan: one journal entry, the dispatcher script run once with the wearable's environment")
    func awayTooLong() throws {
        let host = try MockedHost()
        let hooks = host.dir.appendingPathComponent("dispatcher.d")
        let out = host.dir.appendingPathComponent("ran").path
        try FileManager.default.createDirectory(at: hooks, withIntermediateDirectories: true)
        let script = hooks.appendingPathComponent("50-record").path
        try "#!/bin/sh\necho \"$1 $2 $PAIRD_EVENT $PAIRD_DEVICE $PAIRD_NAME $PAIRD_DURATION $PAIRD_THRESHOLD\" >> \(out)\n"
            .write(toFile: script, atomically: false, encoding: .utf8)
        chmod(script, 0o755)
        try "[Health]\nFirstDataTimeout = 0\n[Alerts]\nAwayLongerThan = 10s\nDispatcherDir = \(hooks.path)\nDispatcherTimeout = 5s\n"
            .write(toFile: host.dir.appendingPathComponent("paird.conf").path, atomically: true, encoding: .utf8)
        try host.startPaird()

        try host.addDevice(watch)
        let scans = host.adapterCalls("StartDiscovery")
        let pairing = host.start(MockedHost.pairctlBin, ["pair", watch, "--timeout", "5"])
        try host.advertise(watch, afterDiscoveries: scans)
        try waitFor("paird to call Connect after pairing", deadline: 20) { host.calls("Connect") >= 1 }
        try host.setDevice(watch, "'ServicesResolved': True")
        try host.must(pairing.finish(), "pairctl pair")
        try waitFor("connected", deadline: 10) { host.state(watch) == "connected" }

        try host.setDevice(watch, "'Connected': False, 'ServicesResolved': False") // link loss
        let lost = Date()
        try waitFor("the dispatcher script to run", deadline: 30) { FileManager.default.fileExists(atPath: out) }
        let after = Date().timeIntervalSince(lost)
        #expect(after >= 9.5 && after < 20, "alerted \(after) s after the loss, the limit is 10 s")
        Thread.sleep(forTimeInterval: 2)
        let lines = ((try? String(contentsOfFile: out, encoding: .utf8)) ?? "").split(separator: "\n")
        #expect(lines.count == 1, "once per absence: \(lines)")
        let fields = lines.first.map { $0.split(separator: " ").map(String.init) } ?? []
        #expect(fields.count == 7 && fields[0] == "awayTooLong" && fields[1] == watch && fields[2] == "awayTooLong"
                && fields[3] == watch && fields[4] == "Watch" && fields[6] == "10", "\(fields)")
        #expect(host.log().contains("Watch (\(watch)): away for 10 s"), "\(host.log())")
        #expect(host.log().contains("dispatcher: \(script) awayTooLong: exit status 0"), "\(host.log())")
        try host.stopPaird()
    }
}
