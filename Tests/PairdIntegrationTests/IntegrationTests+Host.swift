import Foundation
import Testing
import PairingCore

/// The second half of the same serialized suite: paird's life on its host: a corrupt state file,
/// readiness, the watchdog and STOPPING with systemd, the dump on SIGUSR1, a missing or returning
/// adapter, and a configuration it must refuse.
extension IntegrationTests {
    @Test("a corrupt state file is moved aside and paird runs on")
    func corruptStateFile() throws {
        let host = try MockedHost()
        try "{\"version\": 1, \"devices\": [".write(toFile: host.statePath, atomically: false, encoding: .utf8)
        try host.startPaird()
        let files = try FileManager.default.contentsOfDirectory(atPath: host.dir.path)
        #expect(files.contains { $0.hasPrefix("state.json.corrupt-") })
        #expect(host.log().contains("unusable"))
        #expect(try host.status().daemon.running)
    }

    @Test("READY=1 with an adapter, and also without a usable one or without bluetoothd; STATUS= lines; STOPPING=1",
          arguments: ["hci0", "hci7", "no-bluetoothd"])
    func readiness(adapter: String) throws {
        let host = try MockedHost()
        if adapter == "no-bluetoothd" { host.killBlueZ() }
        let notify = try NotifySocket(in: host.dir)
        try host.startPaird(adapter == "no-bluetoothd" ? [] : ["--adapter", adapter],
                            env: ["NOTIFY_SOCKET": notify.path], waitReady: false)
        try waitFor("READY=1", deadline: 15) { notify.received("READY=1") }
        #expect(notify.messages.contains { $0.contains("STATUS=") })
        // bluetoothd as status says it: running with the mock on the bus, never "running" without it.
        let bluetoothd = try host.status().bluetoothd?.state
        #expect(bluetoothd == (adapter == "no-bluetoothd" ? "gone" : "running"))
        #expect(!notify.messages.contains { $0.contains("WATCHDOG=1") }, "no watchdog pings without WATCHDOG_USEC")
        try host.stopPaird()
        #expect(notify.received("STOPPING=1"))
    }

    @Test("WATCHDOG=1 at half of WATCHDOG_USEC, from the event loop")
    func watchdog() throws {
        let host = try MockedHost()
        let notify = try NotifySocket(in: host.dir)
        try host.startPaird(env: ["NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "400000"], waitReady: false)
        try waitFor("three WATCHDOG=1 pings", deadline: 15) {
            notify.drain().filter { $0.contains("WATCHDOG=1") }.count >= 3
        }
        // A stopped loop stops pinging (what systemd's watchdog then acts on).
        kill(host.paird!.processIdentifier, SIGSTOP)
        _ = notify.drain()
        let before = notify.messages.count
        usleep(600_000) // deliberately: the process is frozen; nothing can arrive
        #expect(notify.drain().count == before)
        kill(host.paird!.processIdentifier, SIGCONT)
        try waitFor("pings again after SIGCONT", deadline: 10) { notify.drain().count > before }
    }

    @Test("--verbose logs BlueZ events, machine events and actions; SIGUSR1 dumps machine, loop and bus and paird runs on")
    func verboseAndDump() throws {
        let host = try MockedHost()
        try host.startPaird()
        #expect(!host.log().contains("event: adapterReady"), "no debug lines without --verbose")
        try host.stopPaird()
        try host.startPaird(["--verbose"])
        try waitFor("debug lines", deadline: 10) {
            host.log().contains("event: adapterReady") && host.log().contains("machine: adapterReady")
                && host.log().contains("action: updateAutoConnect")
        }
        kill(host.paird!.processIdentifier, SIGUSR1)
        try waitFor("the SIGUSR1 dump", deadline: 10) {
            host.log().contains("SIGUSR1: loop: ") && host.log().contains("SIGUSR1: dbus: dispatch ")
        }
        #expect(host.log().components(separatedBy: "SIGUSR1: ").count - 1 == 3, "status line, loop, bus")
        #expect(host.paird!.isRunning)
        #expect(try host.status().daemon.running)
    }

    @Test("a missing adapter: status says so; pairing waits for it within its timeout, says so, then exits 9")
    func missingAdapter() throws {
        let host = try MockedHost()
        try host.startPaird(["--adapter", "hci7"])
        let doc = try host.status()
        #expect(doc.adapter?.present == false)
        let r = host.pairctl("pair", "--any", "--timeout", "1")
        #expect(r.status == 9, "\(r.out) \(r.err)")
        #expect(r.out.contains("Bluetooth is not available now") && r.out.contains("waiting for it"), "\(r.out)")
    }

    @Test("Bluetooth back while pairctl pair waits for it (issue 49: bluetoothd away as the command starts): the pairing runs")
    func adapterBackDuringPairWait() throws {
        let host = try MockedHost()
        try host.startPaird(["--adapter", "hci7"])
        let out = host.dir.appendingPathComponent("pair.out").path
        let pairing = host.start("/bin/sh", ["-c", "exec '\(MockedHost.pairctlBin)' pair --any --timeout 6 >'\(out)'"])
        // paird refused the first Pair (no adapter) and pairctl said it waits (asking again each second)
        try waitFor("pairctl waiting for Bluetooth", deadline: 10) {
            ((try? String(contentsOfFile: out, encoding: .utf8)) ?? "").contains("waiting for it")
        }
        try host.must(host.python("b.get_object('org.bluez', '/').AddAdapter('hci7', 'host', dbus_interface='org.bluez.Mock')"), "plug in hci7")
        try waitFor("paird scanning on hci7", deadline: 15) {
            Int(host.python("print(len(b.get_object('org.bluez', '/org/bluez/hci7').GetMethodCalls('StartDiscovery', dbus_interface='org.freedesktop.DBus.Mock')))")
                .out.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0 > 0
        }
        let r = pairing.finish()
        // nothing advertises on the mock: the scan on the adapter that came back ends with exit 5
        // (no wearable found), not 9 (no adapter): pairctl waited and paird ran the pairing
        #expect(r.status == 5, "exit \(r.status): \(r.err) \((try? String(contentsOfFile: out, encoding: .utf8)) ?? "")")
    }

    @Test("a bad configuration stops paird with file, line and reason, exit 78")
    func badConfig() throws {
        let host = try MockedHost()
        let conf = host.dir.appendingPathComponent("paird.conf").path
        try "[Connection]\nConnectTimeout = forever\n".write(toFile: conf, atomically: true, encoding: .utf8)
        let r = host.run(MockedHost.pairdBin, ["--config", conf, "--state-file", host.statePath])
        #expect(r.status == 78)
        #expect(r.err.contains("paird.conf:2: ConnectTimeout must be a number of seconds"))
        #expect(host.run(MockedHost.pairdBin, ["--adapter", "wlan0"]).status == 64)
        // a mistyped explicit --config is refused, not run on the defaults
        let missing = host.dir.appendingPathComponent("no-such.conf").path
        let m = host.run(MockedHost.pairdBin, ["--config", missing, "--state-file", host.statePath])
        #expect(m.status == 78)
        #expect(m.err.contains("no-such.conf:0: cannot read: no such file"), "\(m.err)")
        #expect(host.run(MockedHost.pairdBin, ["--check-config", "--config", missing]).status == 78)
    }
}
