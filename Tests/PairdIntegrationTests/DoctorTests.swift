import Foundation
import Testing
import PairingCore

/// `pairctl doctor` (issue 34, item 1), the real binary against python-dbusmock's BlueZ and the
/// real paird. The private bus has no systemd (doctor then goes by org.bluez's owner) and the
/// rfkill switches are a directory the test writes (`PAIRCTL_RFKILL_DIR`). What the mock cannot
/// show (a real bluetooth.service crashed or stopped, a real rfkill block, advertising heard on
/// a radio, a caller refused by paird's policy: the private bus allows every call) is walked on
/// the bed: Tests/e2e/paird_doctor.py.
@Suite("pairctl doctor against a mocked BlueZ", .serialized)
struct DoctorTests {
    static func object(_ text: String) throws -> [String: Any] {
        guard let o = try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any] else { throw Failure("not a JSON object: \(text)") }
        return o
    }

    /// A fake /sys/class/rfkill with hci0's switch, soft-blocked or not.
    static func rfkill(_ host: MockedHost, soft: Bool) throws -> String {
        let dir = host.dir.appendingPathComponent("rfkill")
        let entry = dir.appendingPathComponent("rfkill0")
        try FileManager.default.createDirectory(at: entry, withIntermediateDirectories: true)
        for (name, value) in [("type", "bluetooth"), ("name", "hci0"), ("soft", soft ? "1" : "0"), ("hard", "0")] {
            try Data((value + "\n").utf8).write(to: entry.appendingPathComponent(name))
        }
        return dir.path
    }

    @Test("all well, then each problem the mock can make: the wearable not heard (5), an rfkill soft block (9), the adapter off (9), paird stopped (3), bluetoothd gone (9)")
    func verdicts() throws {
        let host = try MockedHost()
        host.extraEnv["PAIRCTL_RFKILL_DIR"] = try Self.rfkill(host, soft: false)
        try host.startPaird()
        try host.pairWatchOK()
        try waitFor("connected", deadline: 10) { host.state() == "connected" }

        var r = host.pairctl("doctor")
        #expect(r.status == 0, "\(r.out)\(r.err)")
        let lines = r.out.split(separator: "\n")
        #expect(lines.prefix(6).map { String($0.prefix(15)) } == ["ok   bluetoothd", "ok   rfkill    ", "ok   adapter   ", "ok   paird     ",
                                                                  "ok   rights    ", "ok   wearable  "], "\(r.out)")
        #expect(r.out.contains("verdict: all is well"), "\(r.out)")
        r = host.pairctl("doctor", "--json")
        var o = try Self.object(r.out)
        #expect(r.status == 0 && o["verdict"] as? String == "all-well" && o["exit"] as? Int == 0, "\(r.out)")
        #expect(o["listenSeconds"] is NSNull, "no listen for a connected wearable: \(r.out)")
        // by name, and a name paird does not know (7)
        #expect(host.pairctl("doctor", "watch").status == 0)
        r = host.pairctl("doctor", "Polar", "--json")
        o = try Self.object(r.out)
        #expect(r.status == 7 && o["verdict"] as? String == "unknown-wearable", "\(r.out)")
        #expect(host.pairctl("doctor", "--listen", "0").status == 64)

        // link lost, nothing heard during the listen: not heard, 5; its own discovery session, ended
        try host.setDevice(MockedHost.watch, "'Connected': False, 'ServicesResolved': False")
        try waitFor("waitingForDevice", deadline: 10) { host.state() == "waitingForDevice" }
        let starts = host.adapterCalls("StartDiscovery"), stops = host.adapterCalls("StopDiscovery")
        r = host.pairctl("doctor", "--json", "--listen", "1")
        o = try Self.object(r.out)
        #expect(r.status == 5 && o["verdict"] as? String == "not-heard" && o["exit"] as? Int == 5, "\(r.out)")
        #expect(o["listenSeconds"] as? Int == 1)
        #expect(host.adapterCalls("StartDiscovery") == starts + 1 && host.adapterCalls("StopDiscovery") == stops + 1)
        let check = try #require((o["checks"] as? [[String: Any]])?.last)
        #expect(check["ok"] as? Bool == false && (check["detail"] as? String)?.contains("not heard advertising in 1 s") == true, "\(check)")

        // heard during the listen while paird waits: in range, connecting (8)
        let radio = ScanTests.radio(host, afterDiscoveries: host.adapterCalls("StartDiscovery"), """
            b.get_object('org.bluez', '\(host.devicePath(MockedHost.watch))').UpdateProperties('org.bluez.Device1', {'RSSI': dbus.Int16(-61)}, dbus_interface=m)
            """)
        r = host.pairctl("doctor", "--json", "--listen", "2")
        try host.must(radio.finish(), "advertising")
        o = try Self.object(r.out)
        #expect(r.status == 8 && o["verdict"] as? String == "connecting", "\(r.out)")
        #expect((o["text"] as? String)?.contains("-61 dBm") == true, "\(r.out)")

        // rfkill soft block: 9, and nothing checked after it
        host.extraEnv["PAIRCTL_RFKILL_DIR"] = try Self.rfkill(host, soft: true)
        r = host.pairctl("doctor")
        #expect(r.status == 9, "\(r.out)")
        #expect(r.out.contains("FAIL rfkill") && r.out.contains("fix:     rfkill unblock bluetooth"), "\(r.out)")
        #expect(!r.out.contains("paird "), "stops at the first problem: \(r.out)")
        host.extraEnv["PAIRCTL_RFKILL_DIR"] = try Self.rfkill(host, soft: false)

        // the adapter powered off: 9
        try host.must(host.python("b.get_object('org.bluez', '/org/bluez/hci0').Set('org.bluez.Adapter1', 'Powered', False, dbus_interface='org.freedesktop.DBus.Properties')"))
        r = host.pairctl("doctor", "--json")
        o = try Self.object(r.out)
        #expect(r.status == 9 && o["verdict"] as? String == "adapter-off", "\(r.out)")
        try host.must(host.python("b.get_object('org.bluez', '/org/bluez/hci0').Set('org.bluez.Adapter1', 'Powered', True, dbus_interface='org.freedesktop.DBus.Properties')"))

        // paird stopped: 3
        try host.stopPaird()
        r = host.pairctl("doctor")
        #expect(r.status == 3 && r.out.contains("FAIL paird") && r.out.contains("systemctl start paird"), "\(r.out)")

        // bluetoothd gone, no systemd on the bus to say why: 9
        host.killBlueZ()
        try waitFor("org.bluez gone", deadline: 10) { host.python("import sys; sys.exit(0 if b.name_has_owner('org.bluez') else 1)").status == 1 }
        r = host.pairctl("doctor", "--json")
        o = try Self.object(r.out)
        #expect(r.status == 9 && o["verdict"] as? String == "bluetoothd-not-running", "\(r.out)")
        #expect((o["checks"] as? [[String: Any]])?.count == 1)
    }
}
