import Foundation
import Testing
import PairingCore

/// `pairctl scan` (issue 34, item 2), the real binary against python-dbusmock's BlueZ.
///
/// What the mock does not reproduce: its StartDiscovery/StopDiscovery/SetDiscoveryFilter are
/// global, not per client (one Discovering flag, one filter: the last one set), it ends no
/// session when a client's connection closes, and it reports no RSSI by itself: the test plays
/// the radio (an RSSI set on an object, an object added) once pairctl's StartDiscovery reached it.
/// BlueZ's per-client sessions are read from its source (see Scan in ScanCommand.swift).
@Suite("pairctl scan against a mocked BlueZ", .serialized)
struct ScanTests {
    static let strap = "C0:00:00:00:00:02"
    static let drawer = "C0:00:00:00:00:03"
    static let newcomer = "C0:00:00:00:00:04"

    static func object(_ text: String) throws -> [String: Any] {
        guard let o = try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any] else { throw Failure("not a JSON object: \(text)") }
        return o
    }

    /// Plays the radio from one Python process started before pairctl: it waits (in-process, no
    /// process per poll) for StartDiscovery number `starts + 1`, then runs `code` (with `m`, the
    /// mock's interface): the scan is short, so no time goes to starting interpreters meanwhile.
    static func radio(_ host: MockedHost, afterDiscoveries starts: Int, _ code: String) -> MockedHost.Running {
        host.start("/usr/bin/python3", ["-c", """
            import dbus, sys, time
            b = dbus.SystemBus()
            m = 'org.freedesktop.DBus.Mock'
            a = b.get_object('org.bluez', '/org/bluez/hci0')
            end = time.monotonic() + 10
            while len(a.GetMethodCalls('StartDiscovery', dbus_interface=m)) <= \(starts):
                if time.monotonic() > end: sys.exit('no StartDiscovery from pairctl')
                time.sleep(0.02)
            """ + "\n" + code], timeout: 20)
    }

    @Test("scan --timeout 2 --json: only what advertised during the scan, strongest first, paird's marked; StopDiscovery called")
    func heardDuringTheScan() throws {
        let host = try MockedHost()
        try host.startPaird()
        try host.pairWatchOK()
        // BlueZ remembers two more: one advertises during the scan, one stays in its drawer (the
        // mock gives every added device an RSSI: one from before the scan, not heard in it).
        try host.addDevice(Self.strap, name: "Strap")
        try host.addDevice(Self.drawer, name: "Drawer")
        let starts = host.adapterCalls("StartDiscovery"), stops = host.adapterCalls("StopDiscovery")
        // The radio once the scan runs: the watch and the strap heard again, a new device found
        // (InterfacesAdded with its RSSI).
        let radio = Self.radio(host, afterDiscoveries: starts, """
            b.get_object('org.bluez', '\(host.devicePath(MockedHost.watch))').UpdateProperties('org.bluez.Device1', {'RSSI': dbus.Int16(-50), 'UUIDs': dbus.Array(['0000180d-0000-1000-8000-00805f9b34fb'], signature='s')}, dbus_interface=m)
            b.get_object('org.bluez', '\(host.devicePath(Self.strap))').UpdateProperties('org.bluez.Device1', {'RSSI': dbus.Int16(-70)}, dbus_interface=m)
            b.get_object('org.bluez', '/').AddDevice('hci0', '\(Self.newcomer)', 'Newcomer', dbus_interface='org.bluez.Mock')
            """)
        let scan = host.start(MockedHost.pairctlBin, ["scan", "--timeout", "2", "--json"], timeout: 20)
        try host.must(radio.finish(), "advertising")
        let r = scan.finish()
        #expect(r.status == 0, "\(r.err)")
        let lines = r.out.split(separator: "\n")
        #expect(lines.count == 1, "one compact object: \(r.out)")
        let o = try Self.object(r.out)
        #expect(o["schemaVersion"] as? Int == StatusDocument.schemaVersion)
        #expect(o["timeout"] as? Int == 2)
        #expect(o["pairdRunning"] as? Bool == true)
        let devices = try #require(o["devices"] as? [[String: Any]], "\(r.out)")
        #expect(devices.map { $0["address"] as? String } == [MockedHost.watch, Self.strap, Self.newcomer], "\(r.out)")
        #expect(devices.map { $0["rssi"] as? Int } == [-50, -70, -79])
        #expect(devices.map { $0["name"] as? String } == ["Watch", "Strap", "Newcomer"])
        #expect(devices.map { $0["known"] as? String } == ["paird", "bluez", "new"])
        #expect(devices.first?["pairdState"] as? String == "connected")
        #expect((devices.first?["services"] as? [String]) == ["0000180d-0000-1000-8000-00805f9b34fb"])
        #expect(!r.out.contains(Self.drawer), "a device BlueZ merely remembers is not advertising")
        // its own session, ended: one StopDiscovery, and the filter it asked for
        #expect(host.adapterCalls("StopDiscovery") == stops + 1)
        let filter = host.python("c = b.get_object('org.bluez', '/org/bluez/hci0').GetMethodCalls('SetDiscoveryFilter', dbus_interface='org.freedesktop.DBus.Mock')[-1][1][0]\nprint(str(c['Transport']), bool(c['DuplicateData']), 'UUIDs' in c)")
        #expect(filter.out.trimmingCharacters(in: .whitespacesAndNewlines) == "le True False", "\(filter.err)")

        // the text: a header, the same three in the same order
        let starts2 = host.adapterCalls("StartDiscovery")
        let radio2 = Self.radio(host, afterDiscoveries: starts2, """
            b.get_object('org.bluez', '\(host.devicePath(MockedHost.watch))').UpdateProperties('org.bluez.Device1', {'RSSI': dbus.Int16(-45)}, dbus_interface=m)
            b.get_object('org.bluez', '\(host.devicePath(Self.strap))').UpdateProperties('org.bluez.Device1', {'RSSI': dbus.Int16(-60)}, dbus_interface=m)
            """)
        let text = host.start(MockedHost.pairctlBin, ["scan", "--timeout", "2", "--service", "180d"], timeout: 20)
        try host.must(radio2.finish(), "advertising")
        let t = text.finish()
        #expect(t.status == 0, "\(t.err)")
        let tl = t.out.split(separator: "\n").map(String.init)
        #expect(tl.first?.hasPrefix("ADDRESS") == true, "\(t.out)")
        #expect(tl.count == 2, "--service 180d: only the watch advertises it: \(t.out)")
        #expect(tl.last?.hasPrefix("\(MockedHost.watch)  public   -45  paired in paird  Watch") == true, "\(t.out)")
    }

    @Test("SIGTERM ends the scan with StopDiscovery and the list so far; paird not running is said")
    func interrupted() throws {
        let host = try MockedHost()
        let scan = host.start(MockedHost.pairctlBin, ["scan", "--timeout", "60"], timeout: 20)
        try waitFor("pairctl's StartDiscovery", deadline: 10) { host.adapterCalls("StartDiscovery") == 1 }
        #expect(host.adapterCalls("StopDiscovery") == 0)
        kill(scan.process.processIdentifier, SIGTERM)
        let r = scan.finish()   // killed after 20 s (status 9) if SIGTERM did not end it
        #expect(r.status == 0, "\(r.status) \(r.err)")
        #expect(host.adapterCalls("StopDiscovery") == 1)
        #expect(r.out.contains("paird not running"), "\(r.out)")
        #expect(r.out.contains("interrupted before the 60 s were up"), "\(r.out)")
        #expect(r.out.contains("nothing heard advertising in 60 s"), "\(r.out)")
    }

    @Test("bad --timeout or --service: 64; powered off, no adapter, bluetoothd down: 9 with the reason")
    func errors() throws {
        let host = try MockedHost()
        for args in [["--timeout", "0"], ["--timeout", "61"], ["--timeout", "soon"], ["--timeout", "-1"], ["--service", "zz"]] {
            let r = host.run(MockedHost.pairctlBin, ["scan"] + args)
            #expect(r.status == 64, "\(args): \(r.err)")
            #expect(r.err.hasPrefix("pairctl: ") && r.err.contains("(see 'pairctl scan --help')"), "\(r.err)")
            #expect(r.err.split(separator: "\n").count == 1, "one line: \(r.err)")
        }
        #expect(host.adapterCalls("StartDiscovery") == 0, "bad arguments: no discovery")
        try host.must(host.python("b.get_object('org.bluez', '/org/bluez/hci0').UpdateProperties('org.bluez.Adapter1', {'Powered': False}, dbus_interface='org.freedesktop.DBus.Mock')"))
        let off = host.pairctl("scan", "--timeout", "1", "--json")
        #expect(off.status == 9)
        #expect(off.err.contains("powered off"), "\(off.err)")
        let o = try Self.object(off.out)
        #expect(o["exit"] as? Int == 9 && (o["devices"] as? [Any])?.isEmpty == true, "\(off.out)")
        #expect(host.adapterCalls("StartDiscovery") == 0, "no discovery on an adapter that is off")
        try host.must(host.python("b.get_object('org.bluez', '/').RemoveAdapter('hci0', dbus_interface='org.bluez.Mock')"))
        let none = host.pairctl("scan", "--timeout", "1")
        #expect(none.status == 9)
        #expect(none.err.contains("no Bluetooth adapter"), "\(none.err)")
        host.killBlueZ()
        try waitFor("org.bluez gone", deadline: 10) {
            host.python("import sys; sys.exit(0 if not b.name_has_owner('org.bluez') else 1)").status == 0
        }
        let down = host.pairctl("scan", "--timeout", "1")
        #expect(down.status == 9)
        #expect(down.err.contains("bluetoothd is not running"), "\(down.err)")
    }
}
