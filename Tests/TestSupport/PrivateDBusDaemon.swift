import DBus
import EventLoop
import Foundation
import Glibc

/// A private `dbus-daemon` for one test: its own config and socket in a temp dir, an allow-all
/// policy, SIGKILLed and its directory removed when the object goes away. Tests never touch the
/// machine's real buses. `kind` only sets `<type>` (a "system" bus is what BlueZ and paird expect
/// to find through `DBUS_SYSTEM_BUS_ADDRESS`); the policy is the same allow-all for both, so
/// nothing of the real system bus's policy (`etc/dbus-1/system.d/`) is checked here, unless
/// `systemPolicy` names policy files: then the bus has the stock system bus's default rules
/// (Debian's system.conf: no name ownership, no method calls, signals and replies allowed, every
/// message receivable) followed by those files, as `/usr/share/dbus-1/system.d/` would add them.
public final class PrivateDBusDaemon {
    public enum Kind: String, Sendable { case session, system }

    /// The address the daemon printed (with its guid), for libdbus and child processes.
    public let address: String
    public let directory: URL
    private let process: Process

    /// `services`: activatable services (bus name → its `Exec=` line), in a `<servicedir>` of the
    /// bus's own, which the bus starts itself (no systemd).
    public init(kind: Kind = .session, prefix: String = "paird-dbus", systemPolicy: [String]? = nil,
                services: [String: String] = [:]) throws {
        directory = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("\(prefix)-\(UUID().uuidString.prefix(8))")
        // World-searchable: a test may connect as another user (setpriv) to check a policy.
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o755])
        let config = directory.appendingPathComponent("bus.conf")
        let policy = systemPolicy.map { files in
            """
              <auth>EXTERNAL</auth>
              <policy context="default">
                <allow user="*"/>
                <deny own="*"/>
                <deny send_type="method_call"/>
                <allow send_type="signal"/>
                <allow send_requested_reply="true" send_type="method_return"/>
                <allow send_requested_reply="true" send_type="error"/>
                <allow receive_type="method_call"/>
                <allow receive_type="method_return"/>
                <allow receive_type="error"/>
                <allow receive_type="signal"/>
                <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus"/>
                <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Introspectable"/>
                <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Properties"/>
              </policy>
            """ + files.map { "  <include>\($0)</include>\n" }.joined()
        } ?? """
              <policy context="default">
                <allow send_destination="*" eavesdrop="true"/>
                <allow eavesdrop="true"/>
                <allow own="*"/>
              </policy>
            """
        var serviceDir = ""
        if !services.isEmpty {
            let dir = directory.appendingPathComponent("services")
            try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
            for (name, exec) in services {
                try "[D-BUS Service]\nName=\(name)\nExec=\(exec)\n"
                    .write(to: dir.appendingPathComponent("\(name).service"), atomically: true, encoding: .utf8)
            }
            serviceDir = "  <servicedir>\(dir.path)</servicedir>\n"
        }
        try """
        <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
        <busconfig>
          <type>\(kind.rawValue)</type>
          <listen>unix:path=\(directory.path)/bus</listen>
        \(serviceDir)\(policy)</busconfig>
        """.write(to: config, atomically: true, encoding: .utf8)

        let stdout = Pipe()
        process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/dbus-daemon")
        process.arguments = ["--config-file=\(config.path)", "--print-address=1", "--nofork"]
        process.standardOutput = stdout
        try process.run()

        // The daemon prints its address followed by a newline once it listens.
        var data = Data()
        let handle = stdout.fileHandleForReading
        while !data.contains(UInt8(ascii: "\n")) {
            let chunk = handle.availableData
            if chunk.isEmpty { break }
            data.append(chunk)
        }
        let line = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard !line.isEmpty else {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            try? FileManager.default.removeItem(at: directory)
            throw DBusError.failed("dbus-daemon printed no address")
        }
        address = line
    }

    deinit {
        // SIGKILL, not terminate(): the daemon inherits the spawning thread's signal mask, and
        // Swift Testing's worker (libdispatch) threads block SIGTERM, so it would never see one.
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        try? FileManager.default.removeItem(at: directory)
    }

    /// A connection to this bus, driven by `loop`.
    public func connect(_ loop: EventLoop) throws -> DBusConnection {
        try DBusConnection(address: address, on: loop)
    }
}

public struct TimedOut: Error, CustomStringConvertible {
    public let what: String
    public init(what: String) { self.what = what }
    public var description: String { "timed out waiting for \(what)" }
}

/// Runs `loop` until `condition` holds. `limit` is a safety net that turns a hang into a
/// failure; it is not a timing assertion.
public func runUntil(_ loop: EventLoop, _ what: String, limit: Duration = .seconds(10),
                     _ condition: () -> Bool) throws {
    var expired = false
    let guardTimer = loop.schedule(after: limit) { expired = true; loop.stop() }
    defer { guardTimer.cancel() }
    try loop.run(until: { condition() || expired })
    if !condition() { throw TimedOut(what: what) }
}
