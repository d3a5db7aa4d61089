/// Typed decoders for the standard interfaces (Properties, ObjectManager) and call shortcuts,
/// used by the DBus tests as an independent client of exported objects. paird itself decodes
/// these signals in BlueZ's object cache (Sources/BlueZ); this copy lives with the tests that use it.
import DBus

/// `org.freedesktop.DBus.Properties.PropertiesChanged`, decoded.
public struct PropertiesChanged: Sendable, Hashable {
    public var path: String
    public var interface: String
    /// New values, variants unwrapped.
    public var changed: [String: DBusValue]
    public var invalidated: [String]

    /// Decodes a PropertiesChanged signal; throws `InvalidSignature` for any other shape.
    public init(_ message: DBusMessage) throws(DBusError) {
        let args = try message.arguments().expect("sa{sv}as")
        guard let interface = args[0].string, let changed = args[1].dictionary, let invalidated = args[2].stringArray else {
            throw DBusError.unexpectedSignature(expected: "sa{sv}as", got: args.signature)
        }
        self.path = message.path ?? ""
        self.interface = interface
        self.changed = changed
        self.invalidated = invalidated
    }
}

/// `org.freedesktop.DBus.ObjectManager` signals, decoded.
public enum ObjectManagerEvent: Sendable, Hashable {
    /// InterfacesAdded(o, a{sa{sv}}): interface → properties.
    case interfacesAdded(path: String, interfaces: [String: [String: DBusValue]])
    /// InterfacesRemoved(o, as).
    case interfacesRemoved(path: String, interfaces: [String])

    /// Decodes InterfacesAdded / InterfacesRemoved; throws `InvalidSignature` for anything else.
    public init(_ message: DBusMessage) throws(DBusError) {
        let args = try message.arguments()
        switch message.member {
        case "InterfacesAdded":
            try args.expect("oa{sa{sv}}")
            guard let path = args[0].objectPath, let interfaces = args[1].interfacesAndProperties else {
                throw DBusError.unexpectedSignature(expected: "oa{sa{sv}}", got: args.signature)
            }
            self = .interfacesAdded(path: path, interfaces: interfaces)
        case "InterfacesRemoved":
            try args.expect("oas")
            guard let path = args[0].objectPath, let interfaces = args[1].stringArray else {
                throw DBusError.unexpectedSignature(expected: "oas", got: args.signature)
            }
            self = .interfacesRemoved(path: path, interfaces: interfaces)
        default:
            throw DBusError(name: DBusError.Name.invalidSignature,
                            message: "\(message.member ?? "?") is not an ObjectManager signal")
        }
    }
}

extension DBusConnection {
    /// `GetManagedObjects` on `destination`'s object manager at `path`: path → interface → properties.
    @discardableResult
    public func getManagedObjects(destination: String, path: String = "/", timeout: Duration,
                                  reply: @escaping (Result<[String: [String: [String: DBusValue]]], DBusError>) -> Void) -> PendingCall {
        call(destination: destination, path: path, interface: "org.freedesktop.DBus.ObjectManager",
             method: "GetManagedObjects", timeout: timeout) { result in
            reply(result.flatMap { args in
                guard let objects = (try? args.expect("a{oa{sa{sv}}}"))?[0].managedObjects else {
                    return .failure(DBusError.unexpectedSignature(expected: "a{oa{sa{sv}}}", got: args.signature))
                }
                return .success(objects)
            })
        }
    }

    /// `Properties.Get`, the variant unwrapped.
    @discardableResult
    public func getProperty(destination: String, path: String, interface: String, name: String, timeout: Duration,
                            reply: @escaping (Result<DBusValue, DBusError>) -> Void) -> PendingCall {
        call(destination: destination, path: path, interface: "org.freedesktop.DBus.Properties", method: "Get",
             args: [.string(interface), .string(name)], timeout: timeout) { result in
            reply(result.flatMap { args in
                guard let value = (try? args.expect("v"))?[0].variantInner else {
                    return .failure(DBusError.unexpectedSignature(expected: "v", got: args.signature))
                }
                return .success(value)
            })
        }
    }

    /// `Properties.Set` (the value is wrapped in a variant here).
    @discardableResult
    public func setProperty(destination: String, path: String, interface: String, name: String, value: DBusValue,
                            timeout: Duration, reply: @escaping (Result<Void, DBusError>) -> Void) -> PendingCall {
        call(destination: destination, path: path, interface: "org.freedesktop.DBus.Properties", method: "Set",
             args: [.string(interface), .string(name), value.asVariant], timeout: timeout) { result in
            reply(result.map { _ in () })
        }
    }
}
