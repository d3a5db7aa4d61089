internal import CDBus

/// An asynchronous method call in flight. Loop thread only.
public final class PendingCall {
    /// The libdbus pending call; this object owns one reference until the call ends.
    var raw: OpaquePointer?
    weak var connection: DBusConnection?
    var handler: ((Result<[DBusValue], DBusError>) -> Void)?

    init(handler: @escaping (Result<[DBusValue], DBusError>) -> Void) {
        self.handler = handler
    }

    /// True until the reply was delivered or the call cancelled.
    public var isPending: Bool { handler != nil }

    /// Forgets the call: the reply handler will not be called. Idempotent.
    public func cancel() {
        connection?.forget(self)
        _ = abandon()
    }

    /// Cancels in libdbus, drops our reference and hands back the handler (if not yet called).
    func abandon() -> ((Result<[DBusValue], DBusError>) -> Void)? {
        let h = handler
        handler = nil
        if let raw {
            self.raw = nil
            dbus_pending_call_cancel(raw)
            dbus_pending_call_unref(raw)   // may release self's libdbus retain; the caller holds self
        }
        return h
    }

    func replyArrived() {
        guard let raw, let handler else { return }
        let result: Result<[DBusValue], DBusError>
        if let reply = dbus_pending_call_steal_reply(raw) {
            let message = DBusMessage(owning: reply)
            if let error = message.error {
                result = .failure(error)
            } else {
                do throws(DBusError) { result = .success(try message.arguments()) } catch { result = .failure(error) }
            }
        } else {
            result = .failure(DBusError(name: DBusError.Name.noReply, message: "no reply"))
        }
        self.handler = nil
        self.raw = nil
        connection?.forget(self)
        // libdbus holds its own reference while notifying, so dropping ours here is safe.
        dbus_pending_call_unref(raw)
        handler(result)
    }
}
