/// paird's own D-Bus API on the system bus, shared by the daemon and pairctl.
///
/// - Bus name `org.paird1`, object `/org/paird1`, interface `org.paird1.Manager1`.
/// - Methods: `Pair(a{sv} options) → (s address, s name)` (answers when pairing ends; options
///   `Address` s, `Services` as, `Name` s, `Timeout` u seconds, `Passkey` u, `Confirm` b,
///   `Interactive` b), `AnswerPasskey(u)`, `AnswerConfirmation(b)` (only from the caller of the
///   running `Pair`), `CancelPairing()`,
///   `Unpair(s)`, `Connect(s)`, `Disconnect(s)`, `GetStatus() → s` (the `StatusDocument` JSON),
///   `GetHistory() → h` (a read-only descriptor of the availability record, JSON lines of
///   `HistoryRecord`: the caller reads and analyses it, `HistoryAnalysis`).
/// - Signals: `StateChanged(s address, s state, s reason)` (broadcast, public),
///   `PairingProgress(s kind, s address, s text)` (unicast to the caller of the running `Pair`: it
///   carries the passkey or the number to compare), `Notification(s address, s characteristic,
///   ay value)` and `Battery(s address, y percent)` (broadcast; the policy lets only root and the
///   `bluetooth` group receive them, and `PairingProgress` too).
/// - Property: `Version` s.
/// The D-Bus policy (etc/dbus-1/system.d/org.paird1.conf) lets everyone read status (GetStatus, GetHistory,
/// properties, StateChanged), and only root and the `bluetooth` group call Pair, CancelPairing,
/// Unpair, Connect, Disconnect and receive the wearables' data.
public enum PairdAPI {
    public static let busName = "org.paird1"
    public static let objectPath = "/org/paird1"
    public static let interface = "org.paird1.Manager1"
    public static let version = "0.1.0"

    /// Error names the daemon answers with; pairctl maps each to its own exit code.
    public enum Error {
        public static let invalidArguments = "org.paird1.Error.InvalidArguments"
        public static let unknownDevice = "org.paird1.Error.UnknownDevice"
        public static let busy = "org.paird1.Error.Busy"
        public static let noDeviceFound = "org.paird1.Error.NoDeviceFound"
        public static let authenticationFailed = "org.paird1.Error.AuthenticationFailed"
        public static let timeout = "org.paird1.Error.Timeout"
        public static let adapterUnavailable = "org.paird1.Error.AdapterUnavailable"
        /// `AdapterUnavailable`'s message when no adapter is usable as `Pair` arrives (nothing began):
        /// pairctl pair waits that one out (Bluetooth coming back), never a pairing that lost it.
        public static let noUsableAdapter = "no usable Bluetooth adapter"
        public static let canceled = "org.paird1.Error.Canceled"
        public static let needsRepair = "org.paird1.Error.NeedsRepair"
        /// The wearable asked a question nobody can answer (no answer in advance, no terminal).
        public static let needsInput = "org.paird1.Error.NeedsInput"
        /// The request was carried out but could not be written to the state file.
        public static let notSaved = "org.paird1.Error.NotSaved"
        /// An answer from someone other than the caller of the running `Pair`, or with no question waiting.
        public static let notAsked = "org.paird1.Error.NotAsked"
        public static let failed = "org.paird1.Error.Failed"
    }
}
