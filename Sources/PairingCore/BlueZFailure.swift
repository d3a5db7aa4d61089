/// A failed BlueZ call, reduced to what the state machine needs to decide. The BlueZ module maps
/// every D-Bus error it receives through `init(errorName:message:)`; the table follows BlueZ 5.66
/// `src/error.c`, `btd_error_le_conn_from_errno` and `new_authentication_return`
/// (see `bluez-notes.md` §2), plus the newer `…-key-missing` form.
public enum BlueZFailure: Sendable, Hashable {
    /// `Failed "le-connection-abort-by-local"`. On 5.66 every ATT-socket failure is rewritten to
    /// this, *including* the ~40 s timeout against an absent device: only elapsed time tells them apart.
    case abortedByLocal
    /// `le-connection-abort-by-remote`, `-refused`, `-link-layer-protocol-error`.
    case abortedByRemote
    /// `le-connection-timeout`, `ConnectionAttemptFailed "Page Timeout"` (even on LE).
    case connectTimeout
    /// `org.freedesktop.DBus.Error.NoReply` / `.TimedOut`: our own D-Bus timeout ran out first.
    case noReply
    /// `InProgress`, or `Failed "Operation already in progress"`, `le-connection-busy`, `already-connected`.
    case busy
    /// `Failed "br-connection-canceled"`: Disconnect() during Connect, or a link drop before the reply.
    case canceled
    /// `le-connection-adapter-not-powered`, `NotReady`, `org.freedesktop.DBus.Error.ServiceUnknown`
    /// (bluetoothd gone), or an adapter object that vanished.
    case adapterUnavailable
    /// `AuthenticationFailed`, `AuthenticationRejected`, `…-key-missing`, `NotPermitted "Not paired"`:
    /// the bond no longer works.
    case authentication
    /// `AuthenticationCanceled`, `AuthenticationTimeout`: pairing did not finish, the bond is not implied lost.
    case authenticationAborted
    /// `AlreadyExists` (Pair on a bonded device).
    case alreadyExists
    /// `DoesNotExist`, `org.freedesktop.DBus.Error.UnknownObject` / `UnknownMethod` on a device path:
    /// the device object is gone.
    case deviceGone
    /// `NotConnected`, `Failed "Not connected"`.
    case notConnected
    /// `le-connection-concurrent-connection-limit` (EMLINK): the controller holds as many LE
    /// connections as it can. BlueZ 5.66 never sends it (its ATT socket rewrites EMLINK to
    /// `abort-by-local`); later ones name it.
    case connectionLimit
    /// Anything else, verbatim.
    case other(name: String, message: String)

    public init(errorName: String, message: String) {
        let m = message.lowercased()
        switch errorName {
        case "org.bluez.Error.Failed":
            if m.hasSuffix("abort-by-local") || m == "software caused connection abort" { self = .abortedByLocal }
            else if m.hasSuffix("abort-by-remote") || m.hasSuffix("-refused") || m.hasSuffix("link-layer-protocol-error") { self = .abortedByRemote }
            else if m.hasSuffix("-timeout") || m.hasSuffix("page-timeout") { self = .connectTimeout }
            else if m.hasSuffix("-busy") || m.contains("already in progress") || m.hasSuffix("already-connected") { self = .busy }
            else if m.hasSuffix("-canceled") { self = .canceled }
            else if m.hasSuffix("adapter-not-powered") { self = .adapterUnavailable }
            else if m.hasSuffix("key-missing") { self = .authentication }
            else if m == "not connected" { self = .notConnected }
            else if m.hasSuffix("concurrent-connection-limit") { self = .connectionLimit }
            else { self = .other(name: errorName, message: message) }
        case "org.bluez.Error.InProgress": self = .busy
        case "org.bluez.Error.NotReady", "org.freedesktop.DBus.Error.ServiceUnknown",
             "org.freedesktop.DBus.Error.NameHasNoOwner": self = .adapterUnavailable
        case "org.bluez.Error.AuthenticationFailed", "org.bluez.Error.AuthenticationRejected":
            self = .authentication
        case "org.bluez.Error.NotPermitted":
            self = m == "not paired" ? .authentication : .other(name: errorName, message: message)
        case "org.bluez.Error.AuthenticationCanceled", "org.bluez.Error.AuthenticationTimeout":
            self = .authenticationAborted
        case "org.bluez.Error.ConnectionAttemptFailed": self = .connectTimeout
        case "org.bluez.Error.AlreadyExists": self = .alreadyExists
        case "org.bluez.Error.DoesNotExist", "org.freedesktop.DBus.Error.UnknownObject",
             "org.freedesktop.DBus.Error.UnknownMethod": self = .deviceGone
        case "org.bluez.Error.NotConnected": self = .notConnected
        case "org.bluez.Error.AlreadyConnected": self = .busy
        case "org.freedesktop.DBus.Error.NoReply", "org.freedesktop.DBus.Error.TimedOut",
             "org.freedesktop.DBus.Error.Timeout": self = .noReply
        default: self = .other(name: errorName, message: message)
        }
    }

    /// `Adapter1.Powered = true` refused because rfkill blocks the adapter: BlueZ 5.66 answers
    /// `org.bluez.Error.Blocked` (mgmt status RFKILLED; `src/adapter.c`, and `PowerState` becomes
    /// `off-blocked`). A block is a person's or a switch's: paird never lifts it.
    public var rfkillBlocked: Bool {
        if case .other(let name, _) = self { name == "org.bluez.Error.Blocked" } else { false }
    }

    /// A short token for logs, status and the journal's `PAIRD_REASON=`.
    public var token: String {
        switch self {
        case .abortedByLocal: "abort-by-local"
        case .abortedByRemote: "abort-by-remote"
        case .connectTimeout: "connect-timeout"
        case .noReply: "no-reply"
        case .busy: "busy"
        case .canceled: "canceled"
        case .adapterUnavailable: "adapter-unavailable"
        case .authentication: "authentication"
        case .authenticationAborted: "authentication-aborted"
        case .alreadyExists: "already-exists"
        case .deviceGone: "device-gone"
        case .notConnected: "not-connected"
        case .connectionLimit: "connection-limit"
        case .other(let name, let message): "\(name): \(message)"
        }
    }
}
