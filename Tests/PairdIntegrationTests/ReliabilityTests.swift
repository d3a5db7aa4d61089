import Foundation
import Testing
import PairingCore

/// Survival under faults, short versions (the long ones: `make soak`, PAIRD_SOAK_KILLS=N).
@Suite("Reliability", .serialized)
struct ReliabilityTests {
    let watch = MockedHost.watch

    static var kills: Int { Int(ProcessInfo.processInfo.environment["PAIRD_SOAK_KILLS"] ?? "") ?? 20 }

    @Test("kill -9 at random moments: the state file is always whole and holds every acknowledged intent")
    func killNine() throws {
        let host = try MockedHost()
        try host.addDevice(watch)
        try host.startPaird()
        let pairing = host.start(MockedHost.pairctlBin, ["pair", watch, "--timeout", "5"])
        try host.advertise(watch, afterDiscoveries: 0)
        try waitFor("Connect after pairing", deadline: 20) { host.calls("Connect") >= 1 }
        try host.setDevice(watch, "'ServicesResolved': True")
        #expect(pairing.finish().status == 0)

        var rng = SplitMix64(seed: 0x50AC)
        var acknowledged: Wanted = .connected
        var survived = 0
        for round in 0..<Self.kills {
            // A user command in flight while paird is killed at a random moment (0–40 ms in).
            let verb = rng.next() % 2 == 0 ? "disconnect" : "connect"
            let command = host.start(MockedHost.pairctlBin, [verb, watch], timeout: 10)
            usleep(UInt32(rng.next() % 40_000))
            guard let p = host.paird else { Issue.record("no paird"); return }
            kill(p.processIdentifier, SIGKILL)
            p.waitUntilExit()
            let r = command.finish()
            if r.status == 0 { acknowledged = verb == "disconnect" ? .disconnected : .connected }

            // Never half-written; an acknowledged intent is on disk.
            let data = try Data(contentsOf: URL(fileURLWithPath: host.statePath))
            let doc = try PersistedState.decode(data)
            #expect(doc.devices.count == 1, "round \(round): device lost")
            if r.status == 0 {
                #expect(doc.devices.first?.wanted == acknowledged, "round \(round): acknowledged \(verb) not on disk")
            }
            // The restarted daemon comes back with the intent on disk, and clears any temporary
            // file a kill between create and rename left behind.
            try host.startPaird()
            let leftovers = try FileManager.default.contentsOfDirectory(atPath: host.dir.path).filter { $0.contains(".tmp-") }
            #expect(leftovers.isEmpty, "round \(round): \(leftovers)")
            let wanted = try host.status().devices.first?.wanted
            #expect(wanted == doc.devices.first?.wanted.rawValue, "round \(round): restarted with another intent")
            acknowledged = doc.devices.first?.wanted ?? acknowledged
            survived += 1
        }
        print("kill -9 soak: \(Self.kills) tried, \(survived) survived, nothing lost")
        #expect(survived == Self.kills)
    }

    @Test("the D-Bus API fed wrong signatures, wrong types, huge strings and unknown devices: errors only, no crash")
    func hostileCalls() throws {
        let host = try MockedHost()
        try host.startPaird()
        let results = host.python("""
            import dbus
            m = b.get_object('org.paird1', '/org/paird1')
            names = []
            def call(method, *args, sig=None):
                try:
                    m.get_dbus_method(method, 'org.paird1.Manager1')(*args, signature=sig)
                    names.append('ok')
                except dbus.exceptions.DBusException as e:
                    names.append(e.get_dbus_name())
            call('Pair', 42, sig='u')
            call('Pair', dbus.Dictionary({'Address': 'nope'}, signature='sv'))
            call('Pair', dbus.Dictionary({'Timeout': dbus.String('x')}, signature='sv'))
            call('Pair', dbus.Dictionary({'Services': dbus.Array([dbus.Int32(1)], signature='i')}, signature='sv'))
            call('Pair', dbus.Dictionary({'Bogus': 1}, signature='sv'))
            call('Unpair', 'A' * 1_000_000)
            call('Connect', 7, sig='i')
            call('Disconnect', 'C0:FF:EE:00:00:09')
            call('Connect', '')
            call('Frobnicate')
            call('GetStatus', 'extra', sig='s')
            print(' '.join(names))
            """)
        #expect(results.status == 0, "\(results.err)")
        let names = results.out.split(separator: " ").map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
        #expect(names == [
            "org.freedesktop.DBus.Error.InvalidArgs",
            "org.paird1.Error.InvalidArguments",
            "org.paird1.Error.InvalidArguments",
            "org.paird1.Error.InvalidArguments",
            "org.paird1.Error.InvalidArguments",
            "org.paird1.Error.InvalidArguments",
            "org.freedesktop.DBus.Error.InvalidArgs",
            "org.paird1.Error.UnknownDevice",
            "org.paird1.Error.InvalidArguments",
            "org.freedesktop.DBus.Error.UnknownMethod",
            "org.freedesktop.DBus.Error.InvalidArgs",
        ])
        #expect(host.paird?.isRunning == true)
        #expect(try host.status().daemon.running)
    }

    @Test("the state file fed random bytes, truncations and other versions: typed errors, never a crash")
    func stateFileFuzz() throws {
        var rng = SplitMix64(seed: 0xF022)
        let valid = PersistedState(devices: [PersistedDevice(identity: DeviceIdentity(address: DeviceAddress(value: 1)),
                                                             wanted: .connected, pairedAt: 0, updatedAt: 0)]).encoded()
        var rejected = 0
        for i in 0..<5_000 {
            var data: Data
            switch i % 3 {
            case 0: data = Data((0..<Int(rng.next() % 512)).map { _ in UInt8(truncatingIfNeeded: rng.next()) })
            case 1: data = valid.prefix(Int(rng.next() % UInt64(valid.count)))
            default:
                data = valid
                let at = Int(rng.next() % UInt64(data.count))
                data[at] = UInt8(truncatingIfNeeded: rng.next())
            }
            do { _ = try PersistedState.decode(data) } catch { rejected += 1 }
        }
        #expect(rejected > 4_000)
        for version in [-1, 0, 2, 99, Int.max] {
            let text = "{\"version\": \(version), \"devices\": []}"
            #expect(throws: StateFileError.self) { try PersistedState.decode(Data(text.utf8)) }
        }
    }
}
