import Foundation
import Testing
import DBus
import EventLoop
import TestSupport

/// The DBus tests' bus: a private session-type `dbus-daemon` (TestSupport).
typealias PrivateBus = PrivateDBusDaemon

extension PrivateDBusDaemon {
    convenience init() throws { try self.init(kind: .session, prefix: "paird-dbus-test") }
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
