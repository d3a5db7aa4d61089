/// A D-Bus error: a remote error reply, a local failure, or a value of the wrong shape.
///
/// The `name` of a remote error is kept exactly as the peer sent it (BlueZ's
/// `org.bluez.Error.Failed` with message `le-connection-abort-by-local` arrives verbatim), so
/// callers can classify errors by name. Local failures use the standard
/// `org.freedesktop.DBus.Error.*` names listed in `DBusError.Name`.
public struct DBusError: Error, Hashable, Sendable, CustomStringConvertible {
    public var name: String
    public var message: String

    public init(name: String, message: String = "") {
        self.name = name
        self.message = message
    }

    public var description: String { message.isEmpty ? name : "\(name): \(message)" }

    /// Well-known error names (`org.freedesktop.DBus.Error.*`), for comparing with `name`.
    public enum Name {
        public static let failed = "org.freedesktop.DBus.Error.Failed"
        public static let noMemory = "org.freedesktop.DBus.Error.NoMemory"
        public static let serviceUnknown = "org.freedesktop.DBus.Error.ServiceUnknown"
        public static let nameHasNoOwner = "org.freedesktop.DBus.Error.NameHasNoOwner"
        /// The reply did not come within the call's timeout (libdbus's name for a call timeout),
        /// or the peer left the bus before replying.
        public static let noReply = "org.freedesktop.DBus.Error.NoReply"
        public static let ioError = "org.freedesktop.DBus.Error.IOError"
        public static let badAddress = "org.freedesktop.DBus.Error.BadAddress"
        public static let notSupported = "org.freedesktop.DBus.Error.NotSupported"
        public static let limitsExceeded = "org.freedesktop.DBus.Error.LimitsExceeded"
        public static let accessDenied = "org.freedesktop.DBus.Error.AccessDenied"
        public static let authFailed = "org.freedesktop.DBus.Error.AuthFailed"
        public static let noServer = "org.freedesktop.DBus.Error.NoServer"
        public static let timeout = "org.freedesktop.DBus.Error.Timeout"
        public static let noNetwork = "org.freedesktop.DBus.Error.NoNetwork"
        public static let addressInUse = "org.freedesktop.DBus.Error.AddressInUse"
        /// The connection is closed (locally or by the bus).
        public static let disconnected = "org.freedesktop.DBus.Error.Disconnected"
        public static let invalidArgs = "org.freedesktop.DBus.Error.InvalidArgs"
        public static let fileNotFound = "org.freedesktop.DBus.Error.FileNotFound"
        public static let fileExists = "org.freedesktop.DBus.Error.FileExists"
        public static let unknownMethod = "org.freedesktop.DBus.Error.UnknownMethod"
        public static let unknownObject = "org.freedesktop.DBus.Error.UnknownObject"
        public static let unknownInterface = "org.freedesktop.DBus.Error.UnknownInterface"
        public static let unknownProperty = "org.freedesktop.DBus.Error.UnknownProperty"
        public static let propertyReadOnly = "org.freedesktop.DBus.Error.PropertyReadOnly"
        public static let timedOut = "org.freedesktop.DBus.Error.TimedOut"
        public static let matchRuleNotFound = "org.freedesktop.DBus.Error.MatchRuleNotFound"
        public static let matchRuleInvalid = "org.freedesktop.DBus.Error.MatchRuleInvalid"
        /// Also what decoding a value of an unexpected shape throws (see `expect(_:)`).
        public static let invalidSignature = "org.freedesktop.DBus.Error.InvalidSignature"
        public static let inconsistentMessage = "org.freedesktop.DBus.Error.InconsistentMessage"
    }

    public static func failed(_ message: String) -> DBusError { DBusError(name: Name.failed, message: message) }
    public static func invalidArgs(_ message: String) -> DBusError { DBusError(name: Name.invalidArgs, message: message) }
    public static func disconnected(_ message: String = "Connection is closed") -> DBusError {
        DBusError(name: Name.disconnected, message: message)
    }
    static let noMemory = DBusError(name: Name.noMemory, message: "libdbus ran out of memory")

    /// A value or message whose D-Bus type is not the one the caller expected.
    public static func unexpectedSignature(expected: String, got: String) -> DBusError {
        DBusError(name: Name.invalidSignature, message: "expected signature '\(expected)', got '\(got)'")
    }

    /// True for both ways a call can run out of time (libdbus reports its own timeout as NoReply).
    public var isTimeout: Bool { name == Name.noReply || name == Name.timeout || name == Name.timedOut }
}
