import Testing
import DBus
import EventLoop
import TestSupport

/// One loop, one private bus, and two connections on it: `server` exports, `client` calls.
/// Both connections run on the same loop, so async calls between them work; `callSync` between
/// them would deadlock (see `ServerThread` for that).
final class Fixture {
    let loop: EventLoop
    let bus: PrivateBus
    let server: DBusConnection
    let client: DBusConnection
    private var echoCount = 0

    init() throws {
        loop = try EventLoop()
        bus = try PrivateBus()
        server = try bus.connect(loop)
        client = try bus.connect(loop)
    }

    deinit {
        client.close()
        server.close()
        loop.shutdown()
    }

    var serverName: String { server.uniqueName }

    /// Sends `values` to an exported method declared with exactly their signature, which
    /// returns what it got: a round trip through libdbus's marshaller, the bus and back.
    func echo(_ values: [DBusValue]) throws -> [DBusValue] {
        echoCount += 1
        let path = "/echo/n\(echoCount)"
        let signature = values.signature
        try server.export(path: path, object: DBusObject([
            DBusInterface("org.paird.Test").method("Echo", in: signature, out: signature) { args, call in
                call.reply(args)
            },
        ]))
        defer { server.unexport(path: path) }
        return try client.callAndWait(loop, destination: serverName, path: path, interface: "org.paird.Test",
                                      method: "Echo", args: values).get()
    }

    /// Waits until the bus has processed everything `connection` sent before (a round trip).
    func sync(_ connection: DBusConnection) throws {
        _ = try connection.callAndWait(loop, destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                                       interface: "org.freedesktop.DBus", method: "GetId").get()
    }

    /// Subscribes and waits until the bus has the match rule.
    @discardableResult
    func subscribe(_ connection: DBusConnection, _ rule: MatchRule,
                   _ handler: @escaping (DBusMessage) -> Void) throws -> SignalSubscription {
        var ready: DBusError?? = .none
        let s = connection.subscribe(rule, ready: { ready = .some($0) }, handler)
        try runUntil(loop, "AddMatch") { ready != nil }
        if case .some(.some(let error)) = ready { throw error }
        return s
    }
}
