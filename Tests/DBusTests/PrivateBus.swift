import Foundation
import Testing
import DBus
import EventLoop

/// A private `dbus-daemon` for one test: its own config in a temp dir, allow-all policy, killed
/// when the object goes away. Tests never touch the machine's real buses. The socket lives in
/// the same temp dir (not /tmp) so that the SIGKILLed daemon leaves nothing behind.
final class PrivateBus {
    let address: String
    private let process: Process
    private let directory: URL

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("paird-dbus-test-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let config = directory.appendingPathComponent("bus.conf")
        try """
        <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
        <busconfig>
          <type>session</type>
          <listen>unix:dir=\(directory.path)</listen>
          <policy context="default">
            <allow send_destination="*" eavesdrop="true"/>
            <allow eavesdrop="true"/>
            <allow own="*"/>
          </policy>
        </busconfig>
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
            throw DBusError.failed("dbus-daemon printed no address")
        }
        address = line
    }

    deinit {
        // SIGKILL, not terminate(): the daemon inherits the spawning thread's signal mask, and
        // test-runner (libdispatch) threads block SIGTERM, so it would never see a SIGTERM.
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        try? FileManager.default.removeItem(at: directory)
    }

    func connect(_ loop: EventLoop) throws -> DBusConnection {
        try DBusConnection(address: address, on: loop)
    }
}

struct TimedOut: Error, CustomStringConvertible {
    let what: String
    var description: String { "timed out waiting for \(what)" }
}

/// Runs `loop` until `condition` holds. `limit` is a safety net that fails the test instead of
/// hanging it; it is not a timing assertion.
func runUntil(_ loop: EventLoop, _ what: String, limit: Duration = .seconds(10),
              _ condition: () -> Bool) throws {
    var expired = false
    let guardTimer = loop.schedule(after: limit) { expired = true; loop.stop() }
    defer { guardTimer.cancel() }
    try loop.run(until: { condition() || expired })
    if !condition() { throw TimedOut(what: what) }
}

/// Runs `loop` until `body`'s callback delivers a value.
func waitFor<T>(_ loop: EventLoop, _ what: String, limit: Duration = .seconds(10),
              _ body: (@escaping (T) -> Void) -> Void) throws -> T {
    var result: T?
    body { result = $0 }
    try runUntil(loop, what, limit: limit) { result != nil }
    return result!
}

extension DBusConnection {
    /// An async call driven to completion on the loop (the test equivalent of awaiting it).
    func callAndWait(_ loop: EventLoop, destination: String?, path: String, interface: String?, method: String,
                     args: [DBusValue] = [], timeout: Duration = .seconds(5)) throws -> Result<[DBusValue], DBusError> {
        try waitFor(loop, "reply to \(method)") { done in
            call(destination: destination, path: path, interface: interface, method: method,
                 args: args, timeout: timeout, reply: done)
        }
    }
}
