internal import CDBus

/// An object this process offers on the bus: a set of interfaces at one path.
/// Add interfaces before exporting it; the connection answers `Properties`, `Introspectable`
/// and (where asked) `ObjectManager` for it.
public final class DBusObject {
    public private(set) var interfaces: [DBusInterface]

    public init(_ interfaces: [DBusInterface] = []) {
        self.interfaces = interfaces
    }

    /// Adds (or replaces, by name) an interface. Do it before `export`.
    public func add(_ interface: DBusInterface) {
        interfaces.removeAll { $0.name == interface.name }
        interfaces.append(interface)
    }

    public func interface(named name: String) -> DBusInterface? {
        interfaces.first { $0.name == name }
    }
}

/// One interface of an exported object: methods, properties and (declared) signals.
/// Loop thread only; handlers run on the loop thread.
public final class DBusInterface {
    public typealias MethodHandler = (_ args: [DBusValue], _ call: MethodContext) throws -> Void

    struct Method {
        let name: String
        let inSignature: String
        let outSignature: String
        let handler: MethodHandler
    }

    struct Property {
        let name: String
        let signature: String
        let get: () throws -> DBusValue
        let set: ((DBusValue) throws -> Void)?
        let emitsChange: Bool
    }

    struct Signal {
        let name: String
        let signature: String
    }

    public let name: String
    private(set) var methods: [Method] = []
    private(set) var properties: [Property] = []
    private(set) var signals: [Signal] = []

    public init(_ name: String) {
        self.name = name
    }

    /// Declares a method. The connection checks the call's signature against `in` (a mismatch
    /// gets an `InvalidArgs` reply without calling `handler`). The handler answers through
    /// `call.reply(_:)` or `call.fail(_:)`, now or later; throwing a `DBusError` replies with it,
    /// any other error with `Failed`.
    @discardableResult
    public func method(_ name: String, in inSignature: String = "", out outSignature: String = "",
                       _ handler: @escaping MethodHandler) -> DBusInterface {
        methods.removeAll { $0.name == name }
        methods.append(Method(name: name, inSignature: inSignature, outSignature: outSignature, handler: handler))
        return self
    }

    /// Declares a property. Without `set` it is read-only. With `emitsChange`, a successful
    /// `Properties.Set` emits `PropertiesChanged` with the value read back through `get`.
    /// For changes made by the daemon itself call `DBusConnection.emitPropertiesChanged`.
    @discardableResult
    public func property(_ name: String, signature: String, emitsChange: Bool = true,
                         get: @escaping () throws -> DBusValue,
                         set: ((DBusValue) throws -> Void)? = nil) -> DBusInterface {
        properties.removeAll { $0.name == name }
        properties.append(Property(name: name, signature: signature, get: get, set: set, emitsChange: emitsChange))
        return self
    }

    /// Declares a signal (for introspection; emit it with `DBusConnection.emitSignal`).
    @discardableResult
    public func signal(_ name: String, signature: String = "") -> DBusInterface {
        signals.removeAll { $0.name == name }
        signals.append(Signal(name: name, signature: signature))
        return self
    }

    func method(named name: String) -> Method? { methods.first { $0.name == name } }
    func property(named name: String) -> Property? { properties.first { $0.name == name } }

    /// Current property values as `a{sv}` entries; properties whose getter fails are left out.
    func propertyValues() -> [String: DBusValue] {
        var values: [String: DBusValue] = [:]
        for p in properties {
            if let v = try? p.get(), v.hasSignature(p.signature) { values[p.name] = v }
        }
        return values
    }

    func validate() throws(DBusError) {
        try Syntax.require(Syntax.isValidInterfaceName(name), "invalid interface name '\(name)'")
        for m in methods {
            try Syntax.require(Syntax.isValidMemberName(m.name), "invalid method name '\(m.name)'")
            try Syntax.require(Syntax.isValidSignature(m.inSignature), "invalid in-signature of \(m.name)")
            try Syntax.require(Syntax.isValidSignature(m.outSignature), "invalid out-signature of \(m.name)")
        }
        for p in properties {
            try Syntax.require(Syntax.isValidMemberName(p.name), "invalid property name '\(p.name)'")
            try Syntax.require(Syntax.isSingleCompleteType(p.signature), "property \(p.name) needs one complete type")
        }
        for s in signals {
            try Syntax.require(Syntax.isValidMemberName(s.name), "invalid signal name '\(s.name)'")
            try Syntax.require(Syntax.isValidSignature(s.signature), "invalid signature of signal \(s.name)")
        }
    }
}

/// An incoming call to an exported method: who called, and the one way to answer.
///
/// Answer exactly once with `reply` or `fail`, now or later (keep the context). Later answers
/// after the first are ignored. A context dropped without an answer replies `Failed`, so a caller
/// never waits for its timeout because of a forgotten path.
public final class MethodContext {
    public let message: DBusMessage
    private weak var connection: DBusConnection?
    private let outSignature: String
    public private(set) var hasReplied = false

    init(message: DBusMessage, connection: DBusConnection, outSignature: String) {
        self.message = message
        self.connection = connection
        self.outSignature = outSignature
        hasReplied = message.noReplyExpected
    }

    deinit {
        if !hasReplied {
            send(error: DBusError.failed("the method handler did not reply"))
        }
    }

    /// The caller's unique bus name.
    public var sender: String { message.sender ?? "" }
    public var path: String { message.path ?? "" }
    public var interface: String? { message.interface }
    public var member: String { message.member ?? "" }

    /// Replies with `values`, which must match the declared out-signature (a mismatch is a bug in
    /// the handler; the caller then gets `Failed` naming it).
    public func reply(_ values: [DBusValue] = []) {
        guard !hasReplied else { return }
        hasReplied = true
        let actual = values.signature
        guard actual == outSignature else {
            send(error: DBusError.failed("handler of \(member) returned '\(actual)', declared '\(outSignature)'"))
            return
        }
        guard let connection else { return }
        do throws(DBusError) {
            let reply = try message.makeReturn()
            try reply.append(values)
            try connection.send(reply)
        } catch {
            send(error: error)
        }
    }

    /// Replies with an error; its name reaches the caller verbatim.
    public func fail(_ error: DBusError) {
        guard !hasReplied else { return }
        hasReplied = true
        send(error: error)
    }

    private func send(error: DBusError) {
        hasReplied = true
        guard let connection, let reply = try? message.makeError(error) else { return }
        try? connection.send(reply)
    }
}

enum Standard {
    static let properties = "org.freedesktop.DBus.Properties"
    static let introspectable = "org.freedesktop.DBus.Introspectable"
    static let objectManager = "org.freedesktop.DBus.ObjectManager"
    static let peer = "org.freedesktop.DBus.Peer"
}

extension DBusConnection {
    // MARK: - Exporting

    /// Offers `object` at `path`. If an object manager is registered at an ancestor path, it
    /// emits `InterfacesAdded` for it.
    public func export(path: String, object: DBusObject) throws(DBusError) {
        guard raw != nil else { throw .disconnected() }
        try Syntax.require(Syntax.isValidObjectPath(path), "invalid object path '\(path)'")
        try Syntax.require(objects[path] == nil, "an object is already exported at \(path)")
        for interface in object.interfaces {
            try interface.validate()
            try Syntax.require(![Standard.properties, Standard.introspectable, Standard.objectManager, Standard.peer].contains(interface.name),
                               "\(interface.name) is provided by the connection")
        }
        objects[path] = object
        if let manager = managerPath(for: path) {
            try? emitSignal(path: manager, interface: Standard.objectManager, member: "InterfacesAdded",
                            args: [.objectPath(path), interfacesAndProperties(of: object)])
        }
    }

    /// Withdraws the object at `path` (emitting `InterfacesRemoved` under an object manager).
    public func unexport(path: String) {
        guard let object = objects.removeValue(forKey: path) else { return }
        if let manager = managerPath(for: path) {
            try? emitSignal(path: manager, interface: Standard.objectManager, member: "InterfacesRemoved",
                            args: [.objectPath(path), .stringArray(object.interfaces.map(\.name))])
        }
    }

    /// Serves `org.freedesktop.DBus.ObjectManager` at `path` for every object exported below it
    /// (as BlueZ expects of a `GattManager1.RegisterApplication` root).
    public func exportObjectManager(at path: String) throws(DBusError) {
        try Syntax.require(Syntax.isValidObjectPath(path), "invalid object path '\(path)'")
        objectManagers.insert(path)
    }

    public func unexportObjectManager(at path: String) {
        objectManagers.remove(path)
    }

    /// Emits `PropertiesChanged` with explicit values.
    public func emitPropertiesChanged(path: String, interface: String, changed: [String: DBusValue],
                                      invalidated: [String] = []) throws(DBusError) {
        try emitSignal(path: path, interface: Standard.properties, member: "PropertiesChanged",
                       args: [.string(interface), .vardict(changed), .stringArray(invalidated)])
    }

    /// Emits `PropertiesChanged` for the named properties of an exported object, reading their
    /// current values through their getters.
    public func emitPropertiesChanged(path: String, interface: String, names: [String]) throws(DBusError) {
        guard let iface = objects[path]?.interface(named: interface) else {
            throw DBusError(name: DBusError.Name.unknownInterface, message: "\(interface) is not exported at \(path)")
        }
        var changed: [String: DBusValue] = [:]
        for name in names {
            guard let p = iface.property(named: name) else {
                throw DBusError(name: DBusError.Name.unknownProperty, message: "\(interface).\(name)")
            }
            let value: DBusValue
            do { value = try p.get() } catch { throw Self.asDBusError(error) }
            guard value.hasSignature(p.signature) else {
                throw DBusError.unexpectedSignature(expected: p.signature, got: value.signature)
            }
            changed[name] = value
        }
        try emitPropertiesChanged(path: path, interface: interface, changed: changed)
    }

    /// The nearest object manager strictly above `path`.
    private func managerPath(for path: String) -> String? {
        var best: String?
        for m in objectManagers where Self.isStrictDescendant(path, of: m) {
            if best == nil || m.utf8.count > best!.utf8.count { best = m }
        }
        return best
    }

    static func isStrictDescendant(_ path: String, of ancestor: String) -> Bool {
        guard path != ancestor else { return false }
        return ancestor == "/" ? path.hasPrefix("/") : path.hasPrefix(ancestor + "/")
    }

    private func interfacesAndProperties(of object: DBusObject) -> DBusValue {
        .dict(keySignature: "s", valueSignature: "a{sv}", object.interfaces.map {
            DBusDictEntry(key: .string($0.name), value: .vardict($0.propertyValues()))
        })
    }

    static func asDBusError(_ error: any Error) -> DBusError {
        (error as? DBusError) ?? DBusError.failed(String(describing: error))
    }

    // MARK: - Routing

    /// Answers a method call addressed to this connection. Always answers (returns true) so the
    /// caller never waits for a timeout: unknown paths get `UnknownObject`.
    func routeMethodCall(_ message: DBusMessage) -> Bool {
        guard let path = message.path, let member = message.member else { return false }
        let interface = message.interface

        func replyError(_ name: String, _ text: String) {
            if !message.noReplyExpected, let reply = try? message.makeError(DBusError(name: name, message: text)) {
                try? send(reply)
            }
        }
        func context(_ out: String) -> MethodContext { MethodContext(message: message, connection: self, outSignature: out) }

        if interface == Standard.introspectable || (interface == nil && member == "Introspect") {
            guard member == "Introspect" else {
                replyError(DBusError.Name.unknownMethod, "\(Standard.introspectable) has no method \(member)")
                return true
            }
            guard let xml = introspectionXML(for: path) else {
                replyError(DBusError.Name.unknownObject, "no object at \(path)")
                return true
            }
            context("s").reply([.string(xml)])
            return true
        }

        if objectManagers.contains(path) && (interface == Standard.objectManager || (interface == nil && member == "GetManagedObjects")) {
            guard member == "GetManagedObjects" else {
                replyError(DBusError.Name.unknownMethod, "\(Standard.objectManager) has no method \(member)")
                return true
            }
            guard message.signature.isEmpty else {
                replyError(DBusError.Name.invalidArgs, "GetManagedObjects takes no arguments")
                return true
            }
            let entries = objects.keys.sorted().filter { Self.isStrictDescendant($0, of: path) }.compactMap { p -> DBusDictEntry? in
                guard let object = objects[p] else { return nil }
                return DBusDictEntry(key: .objectPath(p), value: interfacesAndProperties(of: object))
            }
            context("a{oa{sa{sv}}}").reply([.dict(keySignature: "o", valueSignature: "a{sa{sv}}", entries)])
            return true
        }

        guard let object = objects[path] else {
            replyError(DBusError.Name.unknownObject, "no object at \(path)")
            return true
        }

        if interface == Standard.properties {
            handleProperties(message, member: member, path: path, object: object, replyError: replyError, context: context)
            return true
        }

        let target: (DBusInterface, DBusInterface.Method)?
        if let interface {
            guard let iface = object.interface(named: interface) else {
                replyError(DBusError.Name.unknownInterface, "\(path) has no interface \(interface)")
                return true
            }
            target = iface.method(named: member).map { (iface, $0) }
        } else {
            target = object.interfaces.lazy.compactMap { iface in iface.method(named: member).map { (iface, $0) } }.first
        }
        guard let (_, method) = target else {
            replyError(DBusError.Name.unknownMethod, "no method \(member) on \(interface ?? "any interface") at \(path)")
            return true
        }
        let signature = message.signature
        guard signature == method.inSignature else {
            replyError(DBusError.Name.invalidArgs, "\(member) takes '\(method.inSignature)', got '\(signature)'")
            return true
        }
        let args: [DBusValue]
        do { args = try message.arguments() } catch {
            replyError(DBusError.Name.invalidArgs, error.message)
            return true
        }
        let call = context(method.outSignature)
        do {
            try method.handler(args, call)
        } catch {
            call.fail(Self.asDBusError(error))
        }
        return true
    }

    private func handleProperties(_ message: DBusMessage, member: String, path: String, object: DBusObject,
                                  replyError: (String, String) -> Void, context: (String) -> MethodContext) {
        let args: [DBusValue]
        do { args = try message.arguments() } catch {
            replyError(DBusError.Name.invalidArgs, error.message)
            return
        }
        func lookup(_ interfaceName: String) -> DBusInterface? {
            guard let iface = object.interface(named: interfaceName) else {
                replyError(DBusError.Name.unknownInterface, "\(path) has no interface \(interfaceName)")
                return nil
            }
            return iface
        }
        switch member {
        case "Get":
            guard (try? args.expect("ss")) != nil, let ifaceName = args[0].string, let name = args[1].string else {
                replyError(DBusError.Name.invalidArgs, "Get takes 'ss', got '\(args.signature)'")
                return
            }
            guard let iface = lookup(ifaceName) else { return }
            guard let property = iface.property(named: name) else {
                replyError(DBusError.Name.unknownProperty, "\(ifaceName) has no property \(name)")
                return
            }
            do {
                let value = try property.get()
                guard value.hasSignature(property.signature) else {
                    replyError(DBusError.Name.failed, "getter of \(name) returned '\(value.signature)', declared '\(property.signature)'")
                    return
                }
                context("v").reply([.variant(value)])
            } catch {
                let e = Self.asDBusError(error)
                replyError(e.name, e.message)
            }
        case "GetAll":
            guard (try? args.expect("s")) != nil, let ifaceName = args[0].string else {
                replyError(DBusError.Name.invalidArgs, "GetAll takes 's', got '\(args.signature)'")
                return
            }
            guard let iface = lookup(ifaceName) else { return }
            context("a{sv}").reply([.vardict(iface.propertyValues())])
        case "Set":
            guard (try? args.expect("ssv")) != nil, let ifaceName = args[0].string, let name = args[1].string,
                  let value = args[2].variantInner else {
                replyError(DBusError.Name.invalidArgs, "Set takes 'ssv', got '\(args.signature)'")
                return
            }
            guard let iface = lookup(ifaceName) else { return }
            guard let property = iface.property(named: name) else {
                replyError(DBusError.Name.unknownProperty, "\(ifaceName) has no property \(name)")
                return
            }
            guard let setter = property.set else {
                replyError(DBusError.Name.propertyReadOnly, "\(ifaceName).\(name) is read-only")
                return
            }
            guard value.hasSignature(property.signature) else {
                replyError(DBusError.Name.invalidArgs, "\(name) is '\(property.signature)', got '\(value.signature)'")
                return
            }
            do {
                try setter(value)
            } catch {
                let e = Self.asDBusError(error)
                replyError(e.name, e.message)
                return
            }
            context("").reply()
            if property.emitsChange {
                try? emitPropertiesChanged(path: path, interface: ifaceName, names: [name])
            }
        default:
            replyError(DBusError.Name.unknownMethod, "\(Standard.properties) has no method \(member)")
        }
    }

}
