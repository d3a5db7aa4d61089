import Foundation
import Testing
import PairingCore
import TestSupport

/// Who receives paird's signals. Two honest halves, each with what it proves:
/// - paird's own behaviour (any user, an allow-all private bus): `PairingProgress` goes to the
///   caller of `Pair` only, so another connection with a match rule for every paird signal hears
///   the public `StateChanged` but no progress (no policy is involved: unicast alone does it);
/// - the real policy file (`etc/dbus-1/system.d/org.paird1.conf`) on a real dbus-daemon with the
///   system bus's default rules: only root can connect as other users (setpriv), so this half runs
///   as root only and is skipped otherwise. The sender is a stand-in owning `org.paird1` (the mock
///   BlueZ has no GATT, so the real paird would send no `Notification` here); the bed's
///   `paird_privacy.py` checks the real paird, the real policy and a real wearable together.
@Suite("who receives paird's signals", .serialized)
struct PrivacyTests {
    let watch = MockedHost.watch

    /// A python3-dbus listener: a match rule for every signal from org.paird1, one line per signal
    /// received (its member), READY once the rule is on the bus; exits after `seconds`.
    static let listener = #"""
    import sys, dbus
    from dbus.mainloop.glib import DBusGMainLoop
    from gi.repository import GLib
    DBusGMainLoop(set_as_default=True)
    bus = dbus.SystemBus()
    out = open(sys.argv[1], "a", buffering=1)
    def got(b, m):
        if m.get_type() == 4 and m.get_interface() == "org.paird1.Manager1":
            out.write(m.get_member() + "\n")
    bus.add_message_filter(got)
    bus.add_match_string("type='signal',sender='org.paird1'")
    out.write("READY\n")
    GLib.timeout_add(int(float(sys.argv[2]) * 1000), lambda: sys.exit(0))
    GLib.MainLoop().run()
    """#

    static func lines(_ path: String) -> [String] {
        ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    @Test("PairingProgress goes only to the caller of Pair: a second listener matching all of paird's signals hears StateChanged, never PairingProgress")
    func progressOnlyToCaller() throws {
        let host = try MockedHost()
        try host.startPaird()
        let file = host.dir.appendingPathComponent("listener.out").path
        let listening = host.start("/usr/bin/python3", ["-c", Self.listener, file, "40"], timeout: 60)
        try waitFor("the listener's match rule", deadline: 15) { Self.lines(file).contains("READY") }

        try host.addDevice(watch)
        let scans = host.adapterCalls("StartDiscovery")
        let pairing = host.start(MockedHost.pairctlBin, ["pair", watch, "--timeout", "5"])
        try host.advertise(watch, afterDiscoveries: scans) // paird takes only what its scan hears
        try waitFor("paird to call Connect after pairing", deadline: 20) { host.calls("Connect") >= 1 }
        try host.setDevice(watch, "'ServicesResolved': True")
        let r = pairing.finish()
        #expect(r.status == 0, "\(r.err)")
        let progress = r.out.split(separator: "\n").map(String.init)
        #expect(progress.first == "scanning…", "the caller got its progress (a unicast signal its match rule takes)")
        #expect(progress.contains("pairing…"))

        try waitFor("StateChanged (connected) at the listener", deadline: 10) { Self.lines(file).contains("StateChanged") }
        kill(listening.process.processIdentifier, SIGKILL)
        _ = listening.finish()
        let heard = Self.lines(file)
        #expect(!heard.contains("PairingProgress"), "heard: \(heard)")
    }

    /// Runs `listener` as `user` (nil: as the test's own user) with `groups` (nil: none).
    static func listen(on bus: PrivateDBusDaemon, file: String, user: String?, groups: String?, seconds: Double) throws -> Process {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: user == nil ? "/usr/bin/python3" : "/usr/bin/setpriv")
        let py = ["/usr/bin/python3", "-c", listener, file, String(seconds)]
        p.arguments = user.map { u in ["--reuid=\(u)", "--regid=nogroup", groups.map { "--groups=\($0)" } ?? "--clear-groups"] + py }
            ?? Array(py.dropFirst())
        var env = ProcessInfo.processInfo.environment
        env["DBUS_SYSTEM_BUS_ADDRESS"] = bus.address
        p.environment = env
        _ = FileManager.default.createFile(atPath: file, contents: nil, attributes: [.posixPermissions: 0o666])
        try p.run()
        return p
    }

    @Test("the real policy on a real dbus-daemon: Notification, Battery and PairingProgress reach root and the bluetooth group only; StateChanged everyone",
          .enabled(if: getuid() == 0, "needs root: the listeners run as other users (setpriv)"),
          .enabled(if: getgrnam("bluetooth") != nil, "needs a bluetooth group on this host"))
    func policyFile() throws {
        let repo = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let policy = repo.appendingPathComponent("etc/dbus-1/system.d/org.paird1.conf").path
        let bus = try PrivateDBusDaemon(kind: .system, prefix: "paird-policy", systemPolicy: [policy])
        let who: [(name: String, user: String?, groups: String?)] = [
            ("root", nil, nil), ("nobody", "nobody", nil), ("nobody+bluetooth", "nobody", "bluetooth"),
        ]
        var listeners: [(name: String, file: String, process: Process)] = []
        for w in who {
            let file = bus.directory.appendingPathComponent("\(w.name).out").path
            listeners.append((w.name, file, try Self.listen(on: bus, file: file, user: w.user, groups: w.groups, seconds: 20)))
        }
        defer { for l in listeners where l.process.isRunning { kill(l.process.processIdentifier, SIGKILL); l.process.waitUntilExit() } }
        try waitFor("every listener's match rule", deadline: 15) { listeners.allSatisfy { Self.lines($0.file).contains("READY") } }

        // The stand-in for paird (root may own org.paird1): each signal broadcast, StateChanged last;
        // PairingProgress also unicast to each listener, as if it had called Pair.
        let emitter = #"""
        import sys, dbus
        bus = dbus.SystemBus()
        assert bus.request_name("org.paird1") == 1
        def signal(member, sig, args, dest=None):
            m = dbus.lowlevel.SignalMessage("/org/paird1", "org.paird1.Manager1", member)
            m.append(*args, signature=sig)
            if dest: m.set_destination(dest)
            bus.send_message(m)
        signal("Notification", "ssay", ["00:AA:01:01:00:01", "00002a37-0000-1000-8000-00805f9b34fb", dbus.ByteArray(b"\x06\x48")])
        signal("Battery", "sy", ["00:AA:01:01:00:01", dbus.Byte(87)])
        signal("PairingProgress", "sss", ["confirm-passkey", "00:AA:01:01:00:01", "123456 Watch"])
        for name in sys.argv[1:]:
            signal("PairingProgress", "sss", ["confirm-passkey", "00:AA:01:01:00:01", "123456 Watch"], dest=name)
        signal("StateChanged", "sss", ["00:AA:01:01:00:01", "connected", ""])
        bus.flush()
        """#
        let names = bus.directory.appendingPathComponent("names").path
        // Each listener's unique name, from the bus: the connection of its pid (setpriv execs python).
        let list = Process()
        list.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        let pids = listeners.map { String($0.process.processIdentifier) }.joined(separator: ",")
        list.arguments = ["-c", """
            import dbus
            b = dbus.SystemBus(); d = dbus.Interface(b.get_object('org.freedesktop.DBus', '/org/freedesktop/DBus'), 'org.freedesktop.DBus')
            pids = set(int(p) for p in '\(pids)'.split(','))
            kids = {}
            for n in d.ListNames():
                if n.startswith(':'):
                    try: kids[n] = int(d.GetConnectionUnixProcessID(n))
                    except dbus.DBusException: pass
            open('\(names)', 'w').write(' '.join(n for n, p in kids.items() if p in pids))
            """]
        var env = ProcessInfo.processInfo.environment
        env["DBUS_SYSTEM_BUS_ADDRESS"] = bus.address
        list.environment = env
        try list.run()
        list.waitUntilExit()
        let unique = ((try? String(contentsOfFile: names, encoding: .utf8)) ?? "").split(separator: " ").map(String.init)
        #expect(unique.count == listeners.count, "one connection per listener: \(unique)")

        let emit = Process()
        emit.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        emit.arguments = ["-c", emitter] + unique
        emit.environment = env
        try emit.run()
        emit.waitUntilExit()
        #expect(emit.terminationStatus == 0)

        try waitFor("StateChanged at every listener", deadline: 10) { listeners.allSatisfy { Self.lines($0.file).contains("StateChanged") } }
        var heard: [String: Set<String>] = [:]
        for l in listeners { heard[l.name] = Set(Self.lines(l.file)).subtracting(["READY"]) }
        let all: Set = ["Notification", "Battery", "PairingProgress", "StateChanged"]
        #expect(heard["root"] == all)
        #expect(heard["nobody+bluetooth"] == all)
        #expect(heard["nobody"] == ["StateChanged"], "neither broadcast nor unicast: \(heard["nobody"] ?? [])")
    }
}
