internal import CDBus

/// The bus daemon's own methods (names, match rules).
extension DBusConnection {
    // MARK: - Bus methods

    /// Asks the bus for a well-known name (synchronously: a startup step).
    public func requestName(_ name: String, flags: RequestNameFlags = [.doNotQueue]) throws(DBusError) -> RequestNameReply {
        try Syntax.require(Syntax.isValidBusName(name) && !name.hasPrefix(":"), "invalid well-known name '\(name)'")
        let reply = try callSync(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                                 interface: "org.freedesktop.DBus", method: "RequestName",
                                 args: [.string(name), .uint32(flags.rawValue)], timeout: .seconds(25))
        switch try reply.expect("u")[0].uint32 {
        case 1: return .primaryOwner
        case 2: return .inQueue
        case 3: return .exists
        case 4: return .alreadyOwner
        case let other: throw DBusError.failed("RequestName returned unknown code \(other.map(String.init) ?? "?")")
        }
    }

    /// Gives a well-known name back (asynchronously, errors ignored).
    public func releaseName(_ name: String) {
        call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
             method: "ReleaseName", args: [.string(name)], timeout: .seconds(25)) { _ in }
    }

    /// Adds a match rule on the bus, asynchronously. `completion` (optional) learns whether the
    /// bus accepted it; signals matching it may arrive any time after that.
    public func addMatch(_ rule: String, completion: ((DBusError?) -> Void)? = nil) {
        call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
             method: "AddMatch", args: [.string(rule)], timeout: .seconds(25)) { result in
            switch result {
            case .success: completion?(nil)
            case .failure(let error): completion?(error)
            }
        }
    }

    /// Removes a match rule added with `addMatch` (asynchronously, errors ignored).
    public func removeMatch(_ rule: String) {
        call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
             method: "RemoveMatch", args: [.string(rule)], timeout: .seconds(25)) { _ in }
    }
}
