import EventLoop
internal import CDBus

/// Subscribing to signals: match rules, their dispatch, and the subscription handle.
extension DBusConnection {
    // MARK: - Signals

    /// Calls `handler` for every incoming signal matching `rule`, and adds the rule on the bus
    /// (reference-counted: equal rules are added once and removed with their last subscription).
    /// `ready` (optional) is called once the bus has the rule.
    ///
    /// A well-known `sender` (e.g. `org.bluez`) is matched by the bus only: messages carry the
    /// unique name, so locally only unique senders (`:1.7`) are compared.
    @discardableResult
    public func subscribe(_ rule: MatchRule, ready: ((DBusError?) -> Void)? = nil,
                          _ handler: @escaping (DBusMessage) -> Void) -> SignalSubscription {
        let subscription = SignalSubscription(rule: rule, connection: self, handler: handler)
        guard raw != nil else {
            subscription.connection = nil
            loop.enqueue { ready?(.disconnected()) }
            return subscription
        }
        subscriptions.append(subscription)
        let text = rule.text
        let count = matchRuleCounts[text, default: 0]
        matchRuleCounts[text] = count + 1
        if count == 0 {
            addMatch(text, completion: ready)
        } else if let ready {
            // Already on the bus, or about to be: a round trip after the first AddMatch proves it.
            call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                 method: "GetId", timeout: .seconds(25)) { result in
                switch result {
                case .success: ready(nil)
                case .failure(let error): ready(error)
                }
            }
        }
        return subscription
    }

    /// `subscribe` with the usual fields. Nil fields match anything.
    @discardableResult
    public func onSignal(interface: String?, member: String?, path: String? = nil, sender: String? = nil,
                         ready: ((DBusError?) -> Void)? = nil,
                         _ handler: @escaping (DBusMessage) -> Void) -> SignalSubscription {
        subscribe(MatchRule(sender: sender, interface: interface, member: member, path: path), ready: ready, handler)
    }

    func unsubscribe(_ subscription: SignalSubscription) {
        subscriptions.removeAll { $0 === subscription }
        let text = subscription.rule.text
        guard let count = matchRuleCounts[text] else { return }
        if count <= 1 {
            matchRuleCounts[text] = nil
            removeMatch(text)
        } else {
            matchRuleCounts[text] = count - 1
        }
    }

    /// Emits a signal.
    public func emitSignal(path: String, interface: String, member: String, args: [DBusValue] = [],
                           destination: String? = nil) throws(DBusError) {
        let message = try DBusMessage.signal(path: path, interface: interface, member: member)
        if let destination {
            try Syntax.require(Syntax.isValidBusName(destination), "invalid bus name '\(destination)'")
            guard dbus_message_set_destination(message.raw, destination) != 0 else { throw DBusError.noMemory }
        }
        try message.append(args)
        try send(message)
    }
}

/// What a signal subscription matches, rendered as a bus match rule (`type='signal',...`).
public struct MatchRule: Hashable, Sendable {
    public var sender: String?
    public var interface: String?
    public var member: String?
    public var path: String?
    /// Matches `pathNamespace` itself and every path below it.
    public var pathNamespace: String?
    /// Matches signals whose first argument is this string (e.g. a name in NameOwnerChanged).
    public var arg0: String?

    public init(sender: String? = nil, interface: String? = nil, member: String? = nil,
                path: String? = nil, pathNamespace: String? = nil, arg0: String? = nil) {
        self.sender = sender
        self.interface = interface
        self.member = member
        self.path = path
        self.pathNamespace = pathNamespace
        self.arg0 = arg0
    }

    /// The rule as the bus's AddMatch takes it.
    public var text: String {
        var parts = ["type='signal'"]
        func add(_ key: String, _ value: String?) {
            guard let value else { return }
            // Inside quotes only the apostrophe needs care: close, escaped apostrophe, reopen.
            parts.append("\(key)='" + value.split(separator: "'", omittingEmptySubsequences: false).joined(separator: "'\\''") + "'")
        }
        add("sender", sender)
        add("interface", interface)
        add("member", member)
        add("path", path)
        add("path_namespace", pathNamespace)
        add("arg0", arg0)
        return parts.joined(separator: ",")
    }

    func matches(_ header: SignalHeader) -> Bool {
        if let interface, interface != header.interface { return false }
        if let member, member != header.member { return false }
        if let path, path != header.path { return false }
        if let ns = pathNamespace, let p = header.path {
            if !(ns == "/" || p == ns || p.hasPrefix(ns + "/")) { return false }
        } else if pathNamespace != nil {
            return false
        }
        if let sender, sender.hasPrefix(":"), sender != header.sender { return false }
        if let arg0 {
            guard let first = header.firstStringArgument(), first == arg0 else { return false }
        }
        return true
    }
}

/// Header fields of a signal, read once per message for all subscriptions.
struct SignalHeader {
    let raw: OpaquePointer
    let interface: String?
    let member: String?
    let path: String?
    let sender: String?

    init(_ raw: OpaquePointer) {
        self.raw = raw
        interface = dbus_message_get_interface(raw).map { String(cString: $0) }
        member = dbus_message_get_member(raw).map { String(cString: $0) }
        path = dbus_message_get_path(raw).map { String(cString: $0) }
        sender = dbus_message_get_sender(raw).map { String(cString: $0) }
    }

    func firstStringArgument() -> String? {
        var iter = DBusMessageIter()
        guard dbus_message_iter_init(raw, &iter) != 0, dbus_message_iter_get_arg_type(&iter) == TypeCode.string else { return nil }
        var p: UnsafePointer<CChar>?
        dbus_message_iter_get_basic(&iter, &p)
        return p.map { String(cString: $0) }
    }
}

/// A signal subscription; `cancel()` stops delivery and drops the match rule when it was the
/// last one using it. Loop thread only.
public final class SignalSubscription {
    public let rule: MatchRule
    weak var connection: DBusConnection?
    var handler: ((DBusMessage) -> Void)?

    init(rule: MatchRule, connection: DBusConnection, handler: @escaping (DBusMessage) -> Void) {
        self.rule = rule
        self.connection = connection
        self.handler = handler
    }

    public var isActive: Bool { handler != nil }

    public func cancel() {
        guard handler != nil else { return }
        handler = nil
        connection?.unsubscribe(self)
        connection = nil
    }
}
