import EventLoop
internal import CDBus

/// Flags of `RequestName` (`DBUS_NAME_FLAG_*`).
public struct RequestNameFlags: OptionSet, Sendable, Hashable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }
    public static let allowReplacement = RequestNameFlags(rawValue: 0x1)
    public static let replaceExisting = RequestNameFlags(rawValue: 0x2)
    public static let doNotQueue = RequestNameFlags(rawValue: 0x4)
}

/// The bus's answer to `RequestName` (`DBUS_REQUEST_NAME_REPLY_*`).
public enum RequestNameReply: Sendable, Hashable {
    case primaryOwner, inQueue, exists, alreadyOwner
}

/// A connection to a message bus, driven by an `EventLoop`.
///
/// libdbus is wired to the loop through its watch, timeout, dispatch-status and wake-up hooks:
/// its socket becomes an `IOWatch`, its timeouts (one per pending call) become loop timers, and
/// incoming messages are dispatched on the loop thread right after they are read. Nothing polls,
/// so an idle connection costs no wake-ups.
///
/// Every callback (replies, signals, exported methods) runs on the loop thread. The connection
/// is private (never shared with other libdbus users in the process) and is closed by `close()`
/// or when the object goes away.
public final class DBusConnection {
    public let loop: EventLoop
    /// The libdbus connection; nil once closed.
    var raw: OpaquePointer?

    // Loop integration state.
    var watches: [OpaquePointer: IOWatch] = [:]
    var timeouts: [OpaquePointer: TimeoutEntry] = [:]
    var dispatchScheduled = false
    private(set) var dispatching = false
    var closeRequested = false

    // Outstanding async calls, so that close() can cancel them (a pending call holds a reference
    // to the libdbus connection; left alone they would keep it alive forever).
    var pendingCalls: [ObjectIdentifier: PendingCall] = [:]

    var subscriptions: [SignalSubscription] = []
    var matchRuleCounts: [String: Int] = [:]

    // Exported objects (see ExportedObjects.swift).
    var objects: [String: DBusObject] = [:]
    var objectManagers: Set<String> = []

    /// Called on the loop thread when the bus connection drops (bus exit, socket error), not when
    /// `close()` is called. A daemon usually exits then and lets systemd restart it.
    public var onDisconnect: (() -> Void)?

    init(raw: OpaquePointer, loop: EventLoop) {
        self.raw = raw
        self.loop = loop
        // A daemon decides itself what a lost bus means; libdbus would call _exit(1).
        dbus_connection_set_exit_on_disconnect(raw, 0)
        install(raw)
    }

    /// A private connection to the system bus. libdbus honours `DBUS_SYSTEM_BUS_ADDRESS`, which
    /// is how tests and `pairctl` run against a private bus.
    public static func system(on loop: EventLoop) throws(DBusError) -> DBusConnection {
        var error = CDBus.DBusError()
        dbus_error_init(&error)
        guard let raw = dbus_bus_get_private(DBUS_BUS_SYSTEM, &error) else {
            throw takeError(&error, fallback: DBusError(name: DBusError.Name.noServer, message: "cannot connect to the system bus"))
        }
        return DBusConnection(raw: raw, loop: loop)
    }

    /// A private connection to the bus at `address` (e.g. a test's own dbus-daemon), registered
    /// with it (`Hello`), so it has a unique name and can own names.
    public convenience init(address: String, on loop: EventLoop) throws(DBusError) {
        try Syntax.require(!address.utf8.contains(0), "address contains a NUL character")
        var error = CDBus.DBusError()
        dbus_error_init(&error)
        guard let raw = dbus_connection_open_private(address, &error) else {
            throw Self.takeError(&error, fallback: DBusError(name: DBusError.Name.noServer, message: "cannot connect to \(address)"))
        }
        guard dbus_bus_register(raw, &error) != 0 else {
            let failure = Self.takeError(&error, fallback: DBusError.failed("Hello failed"))
            dbus_connection_close(raw)
            dbus_connection_unref(raw)
            throw failure
        }
        self.init(raw: raw, loop: loop)
    }

    deinit {
        if let raw { teardown(raw, notifyCallers: false) }
    }

    /// Converts and frees a libdbus error; the name stays exactly what the peer or libdbus said.
    static func takeError(_ error: inout CDBus.DBusError, fallback: DBusError) -> DBusError {
        defer { dbus_error_free(&error) }
        guard dbus_error_is_set(&error) != 0, let name = error.name else { return fallback }
        return DBusError(name: String(cString: name), message: error.message.map { String(cString: $0) } ?? "")
    }

    // MARK: - State

    /// This connection's unique name on the bus (`:1.42`), or "" when closed.
    public var uniqueName: String {
        guard let raw, let name = dbus_bus_get_unique_name(raw) else { return "" }
        return String(cString: name)
    }

    public var isConnected: Bool {
        guard let raw else { return false }
        return dbus_connection_get_is_connected(raw) != 0
    }

    /// Whether this connection can pass file descriptors (unix transport with fd passing).
    public var canPassUnixFDs: Bool {
        guard let raw else { return false }
        return dbus_connection_can_send_type(raw, TypeCode.unixFD) != 0
    }

    /// Bytes queued for sending; lets a producer pace itself.
    public var outgoingBytes: Int {
        guard let raw else { return 0 }
        return dbus_connection_get_outgoing_size(raw)
    }

    /// Closes the connection. Outstanding calls are answered with `Disconnected` (on a later loop
    /// iteration), subscriptions and exported objects are dropped. Idempotent. Safe to call from
    /// a handler: the close then happens as soon as the current dispatch returns.
    public func close() {
        guard let raw else { return }
        if dispatching {
            closeRequested = true
            return
        }
        teardown(raw, notifyCallers: true)
    }

    func teardown(_ conn: OpaquePointer, notifyCallers: Bool) {
        self.raw = nil
        let calls = Array(pendingCalls.values)
        pendingCalls.removeAll()
        var orphaned: [(Result<[DBusValue], DBusError>) -> Void] = []
        for call in calls {
            if let handler = call.abandon() { orphaned.append(handler) }
        }
        if notifyCallers && !orphaned.isEmpty {
            loop.enqueue {
                for handler in orphaned { handler(.failure(.disconnected())) }
            }
        }
        for subscription in subscriptions { subscription.connection = nil }
        subscriptions.removeAll()
        matchRuleCounts.removeAll()
        objects.removeAll()
        objectManagers.removeAll()

        // A private connection must be closed before its last reference goes.
        dbus_connection_close(conn)
        // Unhooking makes libdbus call our remove functions for what is left; after this libdbus
        // holds no pointer to self.
        dbus_connection_set_watch_functions(conn, nil, nil, nil, nil, nil)
        dbus_connection_set_timeout_functions(conn, nil, nil, nil, nil, nil)
        dbus_connection_set_dispatch_status_function(conn, nil, nil, nil)
        dbus_connection_set_wakeup_main_function(conn, nil, nil, nil)
        dbus_connection_remove_filter(conn, messageFilter, Unmanaged.passUnretained(self).toOpaque())
        for watch in watches.values { watch.cancel() }
        watches.removeAll()
        for entry in timeouts.values { entry.timer?.cancel() }
        timeouts.removeAll()
        dbus_connection_unref(conn)
    }

    // MARK: - Loop integration

    /// Installs the hooks. The context is `self`, unretained: `teardown` unhooks everything before
    /// `self` can go away, so libdbus never calls back into a freed object.
    func install(_ conn: OpaquePointer) {
        let context = Unmanaged.passUnretained(self).toOpaque()
        dbus_connection_set_watch_functions(conn, { watch, data in
            guard let watch, let data else { return 0 }
            DBusConnection.from(data).addWatch(watch)
            return 1
        }, { watch, data in
            guard let watch, let data else { return }
            DBusConnection.from(data).removeWatch(watch)
        }, { watch, data in
            guard let watch, let data else { return }
            DBusConnection.from(data).updateWatch(watch)
        }, context, nil)
        dbus_connection_set_timeout_functions(conn, { timeout, data in
            guard let timeout, let data else { return 0 }
            DBusConnection.from(data).addTimeout(timeout)
            return 1
        }, { timeout, data in
            guard let timeout, let data else { return }
            DBusConnection.from(data).removeTimeout(timeout)
        }, { timeout, data in
            guard let timeout, let data else { return }
            DBusConnection.from(data).updateTimeout(timeout)
        }, context, nil)
        // libdbus forbids dispatching from inside these two hooks, so they only schedule it.
        dbus_connection_set_dispatch_status_function(conn, { _, status, data in
            guard let data, status == DBUS_DISPATCH_DATA_REMAINS else { return }
            DBusConnection.from(data).scheduleDispatch()
        }, context, nil)
        dbus_connection_set_wakeup_main_function(conn, { data in
            guard let data else { return }
            DBusConnection.from(data).scheduleDispatch()
        }, context, nil)
        dbus_connection_add_filter(conn, messageFilter, context, nil)
        // Messages may already be queued (e.g. NameAcquired right after Hello).
        scheduleDispatch()
    }

    /// One line for a diagnostic dump: what libdbus holds (dispatch status, unsent bytes) and
    /// what this side has scheduled.
    public var debugSummary: String {
        guard let conn = raw else { return "dbus: closed" }
        let status = switch dbus_connection_get_dispatch_status(conn) {
        case DBUS_DISPATCH_DATA_REMAINS: "data-remains"
        case DBUS_DISPATCH_COMPLETE: "complete"
        default: "need-memory"
        }
        let ws = watches.keys.map { w in
            "fd \(dbus_watch_get_unix_fd(w)) \(dbus_watch_get_flags(w) & DBUS_WATCH_READABLE.rawValue != 0 ? "r" : "w")"
                + (dbus_watch_get_enabled(w) != 0 ? " on" : " off")
        }.sorted()
        let ts = timeouts.keys.filter { dbus_timeout_get_enabled($0) != 0 }.count
        return "dbus: dispatch \(status), scheduled \(dispatchScheduled), dispatching \(dispatching), "
            + "outgoing \(dbus_connection_get_outgoing_size(conn)) bytes (has \(dbus_connection_has_messages_to_send(conn) != 0)), "
            + "watches [\(ws.joined(separator: ", "))], timeouts \(timeouts.count) (\(ts) enabled), pending calls \(pendingCalls.count), "
            + "signal subscriptions \(subscriptions.count) (\(matchRuleCounts.count) match rules), exported objects \(objects.count)"
    }

    static func from(_ context: UnsafeMutableRawPointer) -> DBusConnection {
        Unmanaged<DBusConnection>.fromOpaque(context).takeUnretainedValue()
    }

    static func ioEvents(of watch: OpaquePointer) -> IOEvents {
        guard dbus_watch_get_enabled(watch) != 0 else { return [] }
        let flags = dbus_watch_get_flags(watch)
        var events = IOEvents()
        if flags & DBUS_WATCH_READABLE.rawValue != 0 { events.insert(.read) }
        if flags & DBUS_WATCH_WRITABLE.rawValue != 0 { events.insert(.write) }
        return events
    }

    func addWatch(_ watch: OpaquePointer) {
        watches[watch]?.cancel()
        let fd = dbus_watch_get_unix_fd(watch)
        watches[watch] = loop.watch(fd: fd, events: Self.ioEvents(of: watch)) { [weak self] ready in
            self?.handleWatch(watch, ready)
        }
    }

    func updateWatch(_ watch: OpaquePointer) {
        watches[watch]?.update(events: Self.ioEvents(of: watch))
    }

    func removeWatch(_ watch: OpaquePointer) {
        watches.removeValue(forKey: watch)?.cancel()
    }

    func handleWatch(_ watch: OpaquePointer, _ ready: IOEvents) {
        guard raw != nil, watches[watch] != nil else { return }
        var flags: UInt32 = 0
        if ready.contains(.read) { flags |= DBUS_WATCH_READABLE.rawValue }
        if ready.contains(.write) { flags |= DBUS_WATCH_WRITABLE.rawValue }
        if ready.contains(.hangup) { flags |= DBUS_WATCH_HANGUP.rawValue }
        if ready.contains(.error) { flags |= DBUS_WATCH_ERROR.rawValue }
        dbus_watch_handle(watch, flags)
        dispatchNow()
    }

    func addTimeout(_ timeout: OpaquePointer) {
        timeouts[timeout]?.timer?.cancel()
        let entry = TimeoutEntry()
        timeouts[timeout] = entry
        arm(timeout, entry)
    }

    func updateTimeout(_ timeout: OpaquePointer) {
        guard let entry = timeouts[timeout] else { return }
        entry.timer?.cancel()
        entry.timer = nil
        arm(timeout, entry)
    }

    func removeTimeout(_ timeout: OpaquePointer) {
        timeouts.removeValue(forKey: timeout)?.timer?.cancel()
    }

    func arm(_ timeout: OpaquePointer, _ entry: TimeoutEntry) {
        guard dbus_timeout_get_enabled(timeout) != 0 else { return }
        let interval = Duration.milliseconds(Int64(dbus_timeout_get_interval(timeout)))
        entry.timer = loop.schedule(after: interval) { [weak self, weak entry] in
            guard let self, let entry else { return }
            self.fireTimeout(timeout, entry)
        }
    }

    func fireTimeout(_ timeout: OpaquePointer, _ entry: TimeoutEntry) {
        // The identity check guards against a timeout freed and another allocated at its address.
        guard raw != nil, timeouts[timeout] === entry else { return }
        entry.timer = nil
        dbus_timeout_handle(timeout)
        // libdbus timeouts repeat until removed or disabled.
        if timeouts[timeout] === entry, entry.timer == nil {
            arm(timeout, entry)
        }
        dispatchNow()
    }

    func scheduleDispatch() {
        guard !dispatchScheduled else { return }
        dispatchScheduled = true
        loop.enqueue { [weak self] in
            guard let self else { return }
            self.dispatchScheduled = false
            self.dispatchNow()
        }
    }

    /// Dispatches queued incoming messages. Bounded per call so that a message storm on one
    /// connection cannot starve the rest of the loop; the remainder goes to the next iteration.
    func dispatchNow() {
        guard !dispatching, let conn = raw else { return }
        dispatching = true
        var budget = 256
        while budget > 0, dbus_connection_get_dispatch_status(conn) == DBUS_DISPATCH_DATA_REMAINS {
            dbus_connection_dispatch(conn)
            budget -= 1
            if closeRequested { break }
        }
        dispatching = false
        if closeRequested {
            closeRequested = false
            close()
            return
        }
        if budget == 0 { scheduleDispatch() }
    }

    // MARK: - Incoming messages

    /// Every incoming message not consumed by libdbus itself (replies to pending calls are) comes
    /// here: signals go to subscriptions, method calls to exported objects.
    func handle(_ raw: OpaquePointer) -> Bool {
        switch dbus_message_get_type(raw) {
        case 4: // signal
            deliverSignal(raw)
            return false
        case 1: // method call
            return routeMethodCall(DBusMessage(retaining: raw))
        default:
            return false
        }
    }

    func deliverSignal(_ raw: OpaquePointer) {
        let header = SignalHeader(raw)
        if header.interface == "org.freedesktop.DBus.Local" && header.member == "Disconnected" {
            onDisconnect?()
            return
        }
        guard !subscriptions.isEmpty else { return }
        var message: DBusMessage?
        for subscription in subscriptions where subscription.isActive && subscription.rule.matches(header) {
            if message == nil { message = DBusMessage(retaining: raw) }
            if let message { subscription.handler?(message) }
            if self.raw == nil { return }
        }
    }

    // MARK: - Sending

    /// Sends a message without waiting for anything (signals, replies, no-reply calls).
    public func send(_ message: DBusMessage) throws(DBusError) {
        guard let raw, dbus_connection_get_is_connected(raw) != 0 else { throw .disconnected() }
        try checkFDs(message, raw)
        guard dbus_connection_send(raw, message.raw, nil) != 0 else { throw DBusError.noMemory }
    }

    func checkFDs(_ message: DBusMessage, _ raw: OpaquePointer) throws(DBusError) {
        if dbus_message_contains_unix_fds(message.raw) != 0 && dbus_connection_can_send_type(raw, TypeCode.unixFD) == 0 {
            throw DBusError(name: DBusError.Name.notSupported, message: "this connection cannot pass file descriptors")
        }
    }

    /// libdbus takes milliseconds; `DBUS_TIMEOUT_INFINITE` is `INT32_MAX`.
    static func milliseconds(_ timeout: Duration) -> Int32 {
        let (seconds, attoseconds) = timeout.components
        if seconds < 0 || (seconds == 0 && attoseconds <= 0) { return 1 }
        if seconds >= Int64(Int32.max / 1000) { return Int32.max }
        let ms = seconds * 1000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000
        return Int32(clamping: max(1, ms))
    }

    /// Calls a method asynchronously.
    ///
    /// `reply` is called exactly once on the loop thread, never before `call` returns: with the
    /// reply's arguments, or with the error (a remote error's name and message verbatim;
    /// `NoReply` when `timeout` passes first; `Disconnected`; `InvalidArgs` for arguments that
    /// cannot be sent). It is not called after `PendingCall.cancel()`.
    /// Pass an explicit `timeout`: libdbus's default of 25 s is shorter than BlueZ's Connect.
    /// `autoStart: false`: if nobody owns `destination`, the call fails (`NameHasNoOwner`) instead
    /// of having the bus start its service.
    @discardableResult
    public func call(destination: String?, path: String, interface: String?, method: String,
                     args: [DBusValue] = [], timeout: Duration, autoStart: Bool = true,
                     reply: @escaping (Result<[DBusValue], DBusError>) -> Void) -> PendingCall {
        let call = PendingCall(handler: reply)
        do throws(DBusError) {
            let message = try DBusMessage.methodCall(destination: destination, path: path, interface: interface, method: method,
                                                     autoStart: autoStart)
            try message.append(args)
            try start(call, message, timeout: timeout)
        } catch {
            pendingCalls[ObjectIdentifier(call)] = nil
            let handler = call.abandon()
            loop.enqueue { handler?(.failure(error)) }
        }
        return call
    }

    func start(_ call: PendingCall, _ message: DBusMessage, timeout: Duration) throws(DBusError) {
        guard let raw, dbus_connection_get_is_connected(raw) != 0 else { throw .disconnected() }
        try checkFDs(message, raw)
        var pending: OpaquePointer?
        guard dbus_connection_send_with_reply(raw, message.raw, &pending, Self.milliseconds(timeout)) != 0 else {
            throw DBusError.noMemory
        }
        guard let pending else { throw .disconnected() }
        call.raw = pending
        call.connection = self
        // libdbus keeps one retain of the PendingCall as its user data, released by the free
        // function when the C pending call goes away.
        let context = Unmanaged.passRetained(call).toOpaque()
        guard dbus_pending_call_set_notify(pending, { pending, data in
            guard let data else { return }
            Unmanaged<PendingCall>.fromOpaque(data).takeUnretainedValue().replyArrived()
        }, context, { data in
            guard let data else { return }
            Unmanaged<PendingCall>.fromOpaque(data).release()
        }) != 0 else {
            Unmanaged<PendingCall>.fromOpaque(context).release()
            throw DBusError.noMemory
        }
        pendingCalls[ObjectIdentifier(call)] = call
        // set_notify does not call back for a call that completed before it was set.
        if dbus_pending_call_get_completed(pending) != 0 {
            loop.enqueue { [call] in call.replyArrived() }
        }
    }

    func forget(_ call: PendingCall) {
        pendingCalls[ObjectIdentifier(call)] = nil
    }

    /// Calls a method and blocks the calling thread (and so the loop) until the reply or the
    /// timeout. For startup and for `pairctl`, never from the running daemon's handlers.
    /// Messages arriving meanwhile are queued and dispatched on the next loop iteration.
    public func callSync(destination: String?, path: String, interface: String?, method: String,
                         args: [DBusValue] = [], timeout: Duration) throws(DBusError) -> [DBusValue] {
        let message = try DBusMessage.methodCall(destination: destination, path: path, interface: interface, method: method)
        try message.append(args)
        guard let raw, dbus_connection_get_is_connected(raw) != 0 else { throw .disconnected() }
        try checkFDs(message, raw)
        var error = CDBus.DBusError()
        dbus_error_init(&error)
        guard let reply = dbus_connection_send_with_reply_and_block(raw, message.raw, Self.milliseconds(timeout), &error) else {
            throw Self.takeError(&error, fallback: DBusError(name: DBusError.Name.noReply, message: "no reply"))
        }
        let replyMessage = DBusMessage(owning: reply)
        if let failure = replyMessage.error { throw failure }
        return try replyMessage.arguments()
    }

}

/// A libdbus timeout's loop timer. A class so a fired timer can tell whether the timeout it was
/// armed for is still the one registered at that address.
final class TimeoutEntry {
    var timer: TimerHandle?
}

/// The filter every incoming message passes through. One stored function pointer, because
/// `dbus_connection_remove_filter` needs the same pointer that was added.
private let messageFilter: DBusHandleMessageFunction = { _, message, data in
    guard let message, let data else { return DBUS_HANDLER_RESULT_NOT_YET_HANDLED }
    return DBusConnection.from(data).handle(message) ? DBUS_HANDLER_RESULT_HANDLED : DBUS_HANDLER_RESULT_NOT_YET_HANDLED
}
