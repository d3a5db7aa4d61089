import Foundation
import Testing
import PairingCore

/// The real paird and pairctl binaries against python-dbusmock's BlueZ on a private bus.
@Suite("paird + pairctl against a mocked BlueZ", .serialized)
struct IntegrationTests {
    let watch = MockedHost.watch

    @Test("status --json is valid JSON and exits 3 when paird is not running")
    func daemonNotRunning() throws {
        let host = try MockedHost()
        let r = host.pairctl("status", "--json")
        #expect(r.status == 3)
        let doc = try StatusDocument.decode(r.out)
        #expect(doc.daemon.running == false)
        #expect(doc.daemon.error?.contains("not running") == true)
        #expect(host.pairctl("list").status == 3)
    }

    @Test("pair by address: progress lines, exit 0, connected, persisted (0600), then disconnect/connect/unpair")
    func pairAndControl() throws {
        let host = try MockedHost()
        try host.startPaird()
        var doc = try host.status()
        #expect(doc.adapter == .init(name: "hci0", address: "00:01:02:03:04:05", powered: true, present: true))
        #expect(doc.devices.isEmpty && doc.pairing == nil)

        let r = try host.pairWatch()
        #expect(r.status == 0, "\(r.err)")
        let lines = r.out.split(separator: "\n").map(String.init)
        #expect(lines.first == "scanning…")
        #expect(lines.contains { $0.hasPrefix("found Watch (\(watch)") })
        #expect(lines.contains("pairing…"))
        #expect(lines.last?.hasPrefix("connected, services resolved") == true)
        #expect(host.calls("Pair") == 1)

        doc = try host.status()
        #expect(doc.devices.map(\.state) == ["connected"])
        #expect(doc.devices.first?.wanted == "connected")
        #expect(doc.devices.first?.lastDisconnect == nil)
        let attrs = try FileManager.default.attributesOfItem(atPath: host.statePath)
        #expect((attrs[.posixPermissions] as? NSNumber)?.intValue == 0o600)
        let saved = try PersistedState.decode(Data(contentsOf: URL(fileURLWithPath: host.statePath)))
        #expect(saved.devices.map(\.address.description) == [watch])

        // disconnect: stays down, intent persisted; the address may be left out with one device.
        #expect(host.pairctl("disconnect").status == 0)
        try waitFor("disconnected", deadline: 10) { host.state() == "disconnected" }
        #expect(host.calls("Disconnect") == 1)
        #expect(try PersistedState.decode(Data(contentsOf: URL(fileURLWithPath: host.statePath))).devices.first?.wanted == .disconnected)
        let connectsBefore = host.calls("Connect")
        try host.setDevice(watch, "'Connected': True") // something else brings the link up: paird drops it
        try waitFor("paird to drop an unwanted link", deadline: 10) { host.calls("Disconnect") == 2 }
        #expect(host.calls("Connect") == connectsBefore)

        #expect(host.pairctl("connect", "watch").status == 0, "by its name, as status shows it (any case)")
        // The mock has no kernel auto-connect: paird's own Connect() comes when the 5 s head start ends.
        try waitFor("a Connect after pairctl connect", deadline: 15) { host.calls("Connect") == connectsBefore + 1 }

        let u = host.pairctl("unpair", watch)
        #expect(u.status == 0)
        // Answered only once BlueZ removed the device: its object is gone when pairctl returns.
        #expect(host.calls("Pair") == -1, "the mock's device object is gone")
        #expect(try host.status().devices.isEmpty)
        #expect(try PersistedState.decode(Data(contentsOf: URL(fileURLWithPath: host.statePath))).devices.isEmpty)
        #expect(host.pairctl("connect", watch).status == 7, "unknown device after unpair")
        #expect(host.pairctl("connect", "Watch").status == 7, "no wearable of that name either")
    }

    @Test("status properties: Get gives the devices' states; a change comes as PropertiesChanged")
    func statusProperties() throws {
        let host = try MockedHost()
        try host.startPaird()
        #expect(try host.pairWatch().status == 0)
        let get = host.python("""
            m = b.get_object('org.paird1', '/org/paird1')
            p = m.GetAll('org.paird1.Manager1', dbus_interface='org.freedesktop.DBus.Properties')
            print({str(k): str(v) for k, v in p['Devices'].items()}, bool(p['AdapterPresent']), bool(p['AdapterPowered']), repr(str(p['Pairing'])))
            """)
        #expect(get.out.trimmingCharacters(in: .whitespacesAndNewlines) == "{'\(watch)': 'connected'} True True ''", "\(get.err)")
        // A client that watches: subscribe, ask for the disconnect, wait (deadline 10 s) for the signal.
        let watched = host.python("""
            import sys
            from gi.repository import GLib
            from dbus.mainloop.glib import DBusGMainLoop
            w = dbus.SystemBus(private=True, mainloop=DBusGMainLoop())
            seen = []
            def changed(iface, props, invalidated):
                if 'Devices' in props:
                    seen.append(dict(props['Devices']))
                    if seen[-1].get('\(watch)') == 'disconnected': loop.quit()
            w.add_signal_receiver(changed, 'PropertiesChanged', 'org.freedesktop.DBus.Properties', path='/org/paird1')
            loop = GLib.MainLoop()
            w.get_object('org.paird1', '/org/paird1').Disconnect('\(watch)', dbus_interface='org.paird1.Manager1')
            GLib.timeout_add(10000, loop.quit)
            loop.run()
            print(seen)
            sys.exit(0 if seen and seen[-1].get('\(watch)') == 'disconnected' else 1)
            """)
        #expect(watched.status == 0, "\(watched.out) \(watched.err)")
    }

    @Test("status --json, read as plain JSON: the documented keys and shapes (pairing, since, lastDisconnect, adapter)")
    func statusSchema() throws {
        let host = try MockedHost()
        try host.startPaird()
        func doc() throws -> [String: Any] {
            let r = host.pairctl("status", "--json")
            guard let o = try JSONSerialization.jsonObject(with: Data(r.out.utf8)) as? [String: Any] else {
                throw Failure("status --json is not a JSON object: \(r.out)")
            }
            return o
        }
        func iso8601(_ v: Any?) -> Bool {
            guard let s = v as? String else { return false }
            return s.wholeMatch(of: /\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})/) != nil
        }
        var o = try doc()
        #expect(o["pairing"] is NSNull, "no pairing: null")
        let adapter = try #require(o["adapter"] as? [String: Any])
        #expect(Set(adapter.keys).isSuperset(of: ["name", "address", "powered", "present"]), "\(adapter)")

        // While a pairing scans: {phase, deadline}.
        let scan = host.start(MockedHost.pairctlBin, ["pair", "--service", "180d", "--timeout", "3"])
        try waitFor("a pairing in the status", deadline: 10) { o = try doc(); return o["pairing"] is [String: Any] }
        let pairing = try #require(o["pairing"] as? [String: Any])
        #expect(pairing["phase"] as? String == "scanning")
        #expect(iso8601(pairing["deadline"]), "deadline \(String(describing: pairing["deadline"]))")
        #expect(scan.finish().status == 5)

        // A paired device after a link loss.
        #expect(try host.pairWatch().status == 0)
        try host.setDevice(watch, "'Connected': False, 'ServicesResolved': False")
        try waitFor("waitingForDevice", deadline: 10) { host.state() == "waitingForDevice" }
        o = try doc()
        let d = try #require((o["devices"] as? [[String: Any]])?.first)
        #expect(Set(d.keys).isSuperset(of: ["address", "name", "state", "wanted", "since", "lastDisconnect",
                                             "reconnectAttempts", "battery", "services", "autoConnect",
                                             "nextDeadline", "addressType"]), "\(d.keys.sorted())")
        #expect(["public", "random"].contains(d["addressType"] as? String ?? ""), "addressType \(String(describing: d["addressType"]))")
        #expect(d["address"] as? String == watch)
        #expect(d["state"] as? String == "waitingForDevice")
        #expect(d["wanted"] as? String == "connected")
        #expect(iso8601(d["since"]), "since \(String(describing: d["since"]))")
        #expect(d["reconnectAttempts"] is Int)
        #expect(d["battery"] is NSNull || d["battery"] is Int)
        #expect(d["autoConnect"] is Bool)
        // the mock has no GattManager1: not armed, so paird's fallback Connect() timer runs
        #expect(d["autoConnect"] as? Bool == false)
        #expect(iso8601(d["nextDeadline"]), "nextDeadline \(String(describing: d["nextDeadline"]))")
        let last = try #require(d["lastDisconnect"] as? [String: Any])
        #expect(Set(last.keys) == ["reason", "at"], "\(last)")
        #expect(last["reason"] is String)
        #expect(iso8601(last["at"]), "at \(String(describing: last["at"]))")
    }

    @Test("restart with the link up: adopted — no Connect, no Disconnect")
    func adoptionAfterRestart() throws {
        let host = try MockedHost()
        try host.startPaird()
        #expect(try host.pairWatch().status == 0)
        let connects = host.calls("Connect"), disconnects = host.calls("Disconnect")
        try host.stopPaird()
        // The mock keeps the link up; its Get("Connected") would say false (template quirk), so
        // mark it connected the way bluetoothd reports it.
        try host.setDevice(watch, "'Connected': True, 'ServicesResolved': True")
        try host.startPaird()
        try waitFor("connected after restart", deadline: 10) { host.state() == "connected" }
        #expect(host.calls("Connect") == connects)
        #expect(host.calls("Disconnect") == disconnects)
    }

    @Test("out of range: no timer while BlueZ holds our profile for the wearable's service; a fallback Connect() when it refuses it",
          arguments: [true, false])
    func waitOnAutoConnect(registrationAccepted: Bool) throws {
        let host = try MockedHost()
        if registrationAccepted {
            // The bluez5 template has no GattManager1; bluetoothd's accepts our application.
            try host.must(host.python("""
                b.get_object('org.bluez', '/org/bluez/hci0').AddMethods('org.bluez.GattManager1', \
                [('RegisterApplication', 'oa{sv}', '', ''), ('UnregisterApplication', 'o', '', '')], \
                dbus_interface='org.freedesktop.DBus.Mock')
                """), "GattManager1")
        }
        try "[Connection]\nFallbackInterval = 5\n".write(toFile: host.dir.appendingPathComponent("paird.conf").path, atomically: true, encoding: .utf8)
        try host.startPaird(["--verbose"])
        try host.addDevice(watch)
        try host.setDevice(watch, "'UUIDs': dbus.Array(['\(ServiceUUID.heartRate)'], signature='s')") // advertised
        #expect(try host.pairWatch(added: true, gattServices: [ServiceUUID.heartRate]).status == 0)
        try waitFor("connected", deadline: 10) { host.state() == "connected" }
        if registrationAccepted {
            try waitFor("the machine told the auto-connect is armed for it", deadline: 10) {
                host.log().contains("machine: autoConnectArmed(Set([\(watch)]))")
            }
        }
        let logBefore = host.log().count
        let connects = host.calls("Connect")
        try host.setDevice(watch, "'Connected': False, 'ServicesResolved': False") // link loss
        try waitFor("waitingForDevice", deadline: 10) { host.state() == "waitingForDevice" }
        // The countdowns are armed in the same batch as the move, so the log has them by now.
        let after = String(host.log().dropFirst(logBefore))
        let fallbackArmed = after.split(separator: "\n").contains { $0.contains("action: arm(") && $0.contains("fallbackConnect") }
        let d = try #require(try host.status().devices.first)
        let text = host.pairctl("status").out
        if registrationAccepted {
            #expect(!fallbackArmed, "no timer while the kernel's auto-connect waits")
            #expect(d.autoConnect && d.nextDeadline == nil, "status: \(d)")
            #expect(text.contains("waiting on BlueZ's auto-connect (no timer)"), "\(text)")
        } else {
            #expect(fallbackArmed)
            #expect(!d.autoConnect && d.nextDeadline != nil, "status: \(d)")
            #expect(text.contains("next connect attempt in "), "\(text)")
            try waitFor("the fallback Connect()", deadline: 15) { host.calls("Connect") == connects + 1 }
        }
    }

    @Test("bad input: exit codes 64 and 7, nothing changes")
    func badInput() throws {
        let host = try MockedHost()
        try host.startPaird()
        #expect(host.pairctl("pair", "not-an-address").status == 64)
        #expect(host.pairctl("pair", "--service", "zz").status == 64)
        #expect(host.pairctl("pair", "--timeout", "0").status == 64)
        #expect(host.pairctl("frobnicate").status == 64)
        let unknown = host.pairctl("disconnect", "C0:FF:EE:00:00:01")
        #expect(unknown.status == 7)
        #expect(unknown.err.contains("not paired"))
        #expect(host.pairctl("unpair").status == 7, "no device paired at all")
        #expect(try host.status().devices.isEmpty)
    }

    @Test("no matching wearable before the timeout: exit 5, discovery stopped")
    func noDeviceFound() throws {
        let host = try MockedHost()
        try host.startPaird()
        let r = host.pairctl("pair", "--service", "180d", "--timeout", "1")
        #expect(r.status == 5)
        #expect(r.err.contains("no matching wearable"))
        #expect(try host.status().pairing == nil)
    }

    @Test("a scan takes only what advertises in it: a bond made outside paird is left alone by --service and taken over by its address, which pairctl says")
    func onlyWhatAdvertises() throws {
        let host = try MockedHost()
        try host.startPaird()
        try host.addDevice(watch)
        // Paired with another tool (the mock's PairDevice), offering heart rate, not advertising.
        try host.must(host.python("b.get_object('org.bluez', '/').PairDevice('hci0', '\(watch)', 0, dbus_interface='org.bluez.Mock')"), "PairDevice")
        try host.setDevice(watch, "'UUIDs': dbus.Array(['\(ServiceUUID.heartRate)'], signature='s')")
        let scan = host.pairctl("pair", "--service", "180d", "--timeout", "2")
        #expect(scan.status == 5, "nothing advertising: no device found (\(scan.err))")
        #expect(host.calls("Pair") == 0, "the remembered bond is not taken")
        #expect(host.adapterCalls("RemoveDevice") == 0, "nor removed")
        #expect(try host.status().devices.isEmpty)

        // By address: taken over (Pair answers AlreadyExists), without hearing it.
        let pairing = host.start(MockedHost.pairctlBin, ["pair", watch, "--timeout", "5"])
        try waitFor("paird to call Connect after adopting", deadline: 20) { host.calls("Connect") >= 1 }
        try host.setDevice(watch, "'ServicesResolved': True")
        let r = pairing.finish()
        #expect(r.status == 0, "\(r.err)")
        #expect(r.out.contains("is already bonded in BlueZ (paired outside paird): taking that bond over"), "\(r.out)")
        #expect(host.adapterCalls("RemoveDevice") == 0)
        #expect(host.state() == "connected")
    }

    @Test("authentication failure while pairing: exit 6, one line, nothing kept")
    func authenticationFailed() throws {
        let host = try MockedHost()
        try host.startPaird()
        try host.addDevice(watch)
        // BlueZ's answer when SMP fails (src/device.c: btd_error_auth_failed → "Authentication Failed");
        // the mock raises it instead of bonding.
        try host.must(host.python("""
            b.get_object('org.bluez', '\(host.devicePath(watch))').AddMethod('org.bluez.Device1', 'Pair', '', '',
                'raise dbus.exceptions.DBusException("Authentication Failed", name="org.bluez.Error.AuthenticationFailed")',
                dbus_interface='org.freedesktop.DBus.Mock')
            """), "override Pair")
        let scans = host.adapterCalls("StartDiscovery")
        let pairing = host.start(MockedHost.pairctlBin, ["pair", watch, "--timeout", "5"])
        try host.advertise(watch, afterDiscoveries: scans)
        let r = pairing.finish()
        #expect(r.status == 6, "\(r.err)")
        #expect(r.err.hasPrefix("pairctl: ") && r.err.lowercased().contains("authentication"), "\(r.err)")
        #expect(r.err.split(separator: "\n").count == 1, "\(r.err)")
        // BlueZ keeps nothing either: the half-made device is removed once Pair() answered (which
        // also rules out a retry loop: there is nothing left to call Pair() on).
        let removed = host.python("print(len(b.get_object('org.bluez', '/org/bluez/hci0').GetMethodCalls('RemoveDevice', dbus_interface='org.freedesktop.DBus.Mock')))")
        #expect(removed.out.trimmingCharacters(in: .whitespacesAndNewlines) == "1", "RemoveDevice once: \(removed.out) \(removed.err)")
        #expect(host.calls("Pair") == -1, "the device object is gone")
        let doc = try host.status()
        #expect(doc.pairing == nil)
        #expect(doc.devices.isEmpty, "a failed pairing keeps nothing: \(doc.devices)")
        let saved = try? PersistedState.decode(Data(contentsOf: URL(fileURLWithPath: host.statePath)))
        #expect(saved?.devices.isEmpty ?? true)
    }

    @Test("a state file that cannot be written: the intent takes effect but is not acknowledged as saved (exit 11), status says so")
    func unsavedIntent() throws {
        let host = try MockedHost()
        let stateDir = host.dir.appendingPathComponent("state").path
        try FileManager.default.createDirectory(atPath: stateDir, withIntermediateDirectories: false)
        host.statePath = stateDir + "/state.json"
        try host.startPaird()
        #expect(try host.pairWatch().status == 0)
        try FileManager.default.removeItem(atPath: stateDir) // as root, only a missing directory stops a write

        let r = host.pairctl("disconnect")
        #expect(r.status == 11, "\(r.err)")
        #expect(r.err.contains("not saved") && r.err.contains("restart"), "\(r.err)")
        let doc = try host.status()
        #expect(doc.devices.first?.wanted == "disconnected", "it took effect")
        #expect(doc.daemon.stateFileError != nil)
        #expect(host.pairctl("status").out.contains("state file: NOT WRITABLE"))

        // Writable again: the next change is saved and acknowledged, and status clears.
        try FileManager.default.createDirectory(atPath: stateDir, withIntermediateDirectories: false)
        #expect(host.pairctl("connect").status == 0)
        #expect(try host.status().daemon.stateFileError == nil)
        let saved = try PersistedState.decode(Data(contentsOf: URL(fileURLWithPath: host.statePath)))
        #expect(saved.devices.map(\.wanted) == [.connected])
    }

    @Test("a newer paird's state file: paird refuses to start (78) and leaves it as it is; a directory as state path: 78")
    func unusableStateFile() throws {
        let host = try MockedHost()
        let newer = "{\"version\": 9, \"devices\": []}"
        try newer.write(toFile: host.statePath, atomically: false, encoding: .utf8)
        let conf = host.dir.appendingPathComponent("empty.conf").path
        _ = FileManager.default.createFile(atPath: conf, contents: Data())
        let r = host.run(MockedHost.pairdBin, ["--config", conf, "--state-file", host.statePath])
        #expect(r.status == 78, "\(r.err)")
        #expect(r.err.contains("newer paird"), "\(r.err)")
        #expect(try String(contentsOfFile: host.statePath, encoding: .utf8) == newer)
        let asDir = host.dir.appendingPathComponent("state-dir").path
        try FileManager.default.createDirectory(atPath: asDir, withIntermediateDirectories: false)
        let d = host.run(MockedHost.pairdBin, ["--config", conf, "--state-file", asDir])
        #expect(d.status == 78, "\(d.err)")
        #expect(d.err.contains("not a regular file"), "\(d.err)")
    }

    @Test("status --watch: the status, then one timestamped line per change in words; paird going away and coming back is said")
    func statusWatch() throws {
        let host = try MockedHost()
        try host.startPaird()
        #expect(try host.pairWatch().status == 0)
        let file = host.dir.appendingPathComponent("watch.out").path
        let watching = host.start("/bin/sh", ["-c", "exec \(MockedHost.pairctlBin) status --watch > \(file) 2>&1"])
        defer { kill(watching.process.processIdentifier, SIGTERM); _ = watching.finish() }
        func text() -> String { (try? String(contentsOfFile: file, encoding: .utf8)) ?? "" }
        try waitFor("the first status block", deadline: 10) { text().contains("Watch \(watch): connected") }

        try host.setDevice(watch, "'Connected': False, 'ServicesResolved': False") // link loss
        let stamp = #/\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d Watch 00:AA:01:01:00:01: out of range/#
        try waitFor("a timestamped line in words", deadline: 10) { text().contains(stamp) }

        try host.stopPaird()
        try waitFor("paird stopped said", deadline: 10) { text().contains("paird stopped") }
        try host.startPaird()
        try waitFor("paird is back said", deadline: 15) { text().contains("paird is back") }
        #expect(!text().contains("waitingForDevice"), "words, not the machine's names: \(text())")
    }

    @Test("an answer nobody asked for, or during another caller's pairing, is refused (NotAsked)")
    func answersOnlyFromThePairCaller() throws {
        let host = try MockedHost()
        try host.startPaird()
        func answer(_ method: String, _ arg: String) -> String {
            host.python("""
                try:
                    b.call_blocking('org.paird1', '/org/paird1', 'org.paird1.Manager1', '\(method)', \(arg))
                    print('ok')
                except dbus.exceptions.DBusException as e:
                    print(e.get_dbus_name())
                """).out.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        // No pairing at all.
        #expect(answer("AnswerPasskey", "'u', [123456]") == "org.paird1.Error.NotAsked")
        #expect(answer("AnswerConfirmation", "'b', [True]") == "org.paird1.Error.NotAsked")
        #expect(answer("AnswerPasskey", "'u', [1234567]") == "org.paird1.Error.InvalidArguments")
        // A pairing started by another caller (pairctl). The mock asks no agent questions, so this
        // shows the refusal, not which check made it (the sender's or "no question waiting").
        try host.addDevice(watch)
        let pairing = host.start(MockedHost.pairctlBin, ["pair", watch, "--timeout", "5"])
        try waitFor("the pairing running", deadline: 10) { (try? host.status().pairing) != nil }
        #expect(answer("AnswerPasskey", "'u', [123456]") == "org.paird1.Error.NotAsked")
        kill(pairing.process.processIdentifier, SIGINT)
        _ = pairing.finish()
    }
}
