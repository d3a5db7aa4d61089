internal import CSystemd
import EventLoop
import PairingCore
#if canImport(Glibc)
import Glibc
#endif

/// sd_notify(3): READY, STATUS, WATCHDOG, STOPPING. Without NOTIFY_SOCKET every call is a no-op.
public enum SystemdNotifier {
    /// Sends one notification; returns sd_notify's result (>0 sent, 0 no socket, <0 -errno).
    @discardableResult
    public static func notify(_ assignments: String) -> Int32 { sd_notify(0, assignments) }

    /// Half of `WATCHDOG_USEC` when the watchdog is on for this process, else nil.
    public static func watchdogPingInterval() -> Duration? {
        var usec: UInt64 = 0
        guard sd_watchdog_enabled(0, &usec) > 0, usec > 0 else { return nil }
        return .microseconds(Int64(usec / 2))
    }
}

/// Journal priorities (syslog levels).
public enum Priority: Int32, Sendable {
    case error = 3, warning = 4, notice = 5, info = 6, debug = 7
}

/// Structured logging: native journal entries with `MESSAGE_ID` and `PAIRD_*` fields when stderr
/// is the journal (systemd sets `JOURNAL_STREAM`), readable lines on stderr otherwise (a
/// terminal, a test, a container).
public final class Log: @unchecked Sendable {
    public let toJournal: Bool
    public var minimumPriority: Priority = .info

    public init(forceStderr: Bool = false) {
        toJournal = !forceStderr && Log.stderrIsJournal()
    }

    /// `MESSAGE_ID`s, one per kind of happening (made with `systemd-id128 new`); listed in README.md.
    public enum MessageID {
        public static let started = "0e1c4f5ba0c84a2c8e6f2bd09ed7c4a1"
        public static let stateFileQuarantined = "fb4303ae5aee430ab58c2c6aea35f154"
        /// bluetoothd crashed (systemd's Result core-dump, signal, exit-code or watchdog).
        public static let bluetoothdCrashed = "d0a3d6329a8b43d596a93330a3ea7cba"
        /// bluetoothd left the bus and paird does not start it (stopped by an administrator, no
        /// systemd, another failure).
        public static let bluetoothdDown = "9fe0a6f8edf440708400f4e405af5550"
        /// The host is going to sleep (logind's PrepareForSleep(true)); and woke up.
        public static let hostSleeping = "5b8e2f4c1a3d4e6f9b0c7d2e8f1a4b63"
        public static let hostResumed = "8d4c2b1a0f9e4d3c8b7a6f5e4d3c2b1a"
        public static func forReport(_ kind: Report.Kind) -> String {
            switch kind {
            case .paired: "ab55ea673df149f5b792fb9662ee1185"
            case .connected: "abee842ca2994f9c8320d023b52878aa"
            case .reconnected: "e45ca7dc9e1944d78ad5fe457f1b403f"
            case .linkLost: "5c5a55419d41426389004542fbd35400"
            case .needsRepair: "b4521f6461444d9696f10abc5b8fc4cb"
            case .unpaired: "932b5bf6c5574962807fde294d519ade"
            case .userDisconnected: "468865d58689406b8d30e797756b2564"
            case .adapterLost: "dff6639b92654615a420d9efea2e3179"
            case .pairingFailed: "c0dba6b6672943d7b05d3d0e0f45d8ad"
            case .stateChanged: "fb277abbdc3641a2a37dc4287a3fa941"
            case .pairingRefused: "f004b59a35894a3a95581657a3104185"
            case .characteristicMissing: "7d1f0c5be8a54d37a9e2b3c16f4a0d92"
            case .hostAsleep: "3c1e5b0a9d7f4e2b8a6c4d1f0e9b7a52"
            case .resumeEscalation: "3e3069e18e6b4d7aaa0801041fc877cd"
            case .adapterWedged: "3f044b91c2474352a245329b3e2785a0"
            }
        }
    }

    public func log(_ priority: Priority, _ message: String, id: String? = nil, fields: KeyValuePairs<String, String> = [:]) {
        guard priority.rawValue <= minimumPriority.rawValue else { return }
        log(priority, message, id: id, fieldList: fields.map { ($0.key, $0.value) })
    }

    /// The same, with fields built at run time (`JournalEntry`), in order.
    public func log(_ priority: Priority, _ message: String, id: String? = nil, fieldList fields: [(key: String, value: String)]) {
        guard priority.rawValue <= minimumPriority.rawValue else { return }
        if toJournal {
            var entries = ["MESSAGE=\(message)", "PRIORITY=\(priority.rawValue)", "SYSLOG_IDENTIFIER=paird"]
            if let id { entries.append("MESSAGE_ID=\(id)") }
            for (k, v) in fields { entries.append("\(k)=\(v)") }
            Log.sendv(entries)
        } else {
            let line = Self.plainLine(message, fields)
            let tag: String
            switch priority {
            case .error: tag = "error: "
            case .warning: tag = "warning: "
            case .notice, .info: tag = ""
            case .debug:
                // --verbose on a terminal: monotonic seconds, to line events up with other logs.
                var t = timespec()
                clock_gettime(CLOCK_BOOTTIME, &t)
                let ms = String(t.tv_nsec / 1_000_000)
                tag = "[\(t.tv_sec).\(String(repeating: "0", count: 3 - ms.count))\(ms)] "
            }
            writeAll(2, "paird: \(tag)\(line)\n")
        }
    }

    /// A readable line's text (after `paird: ` and the tag): the message, then the fields that
    /// have a value. Both may hold what paird does not control (a wearable's name, a BlueZ error
    /// message): `terminalSafe`, so the line is one line with no control character in it. The
    /// journal gets the exact text.
    static func plainLine(_ message: String, _ fields: [(key: String, value: String)]) -> String {
        var line = message.terminalSafe
        let extra = fields.filter { !$0.value.isEmpty }.map { "\($0.key)=\($0.value.terminalSafe)" }
        if !extra.isEmpty { line += "  [" + extra.joined(separator: " ") + "]" }
        return line
    }

    /// A line of a dispatcher script's output, at info, under its own `SYSLOG_IDENTIFIER`
    /// (`paird-dispatch-NAME`). The line must already be `terminalSafe` (`AlertScripts` makes it
    /// so; not escaped again here, or its backslashes would double): in the journal it is the
    /// MESSAGE field (a `<0>` in it is text), on stderr it follows the identifier, so it never
    /// starts a line (no priority prefix a reader could take for one).
    public func scriptOutput(identifier: String, _ line: String, fields: KeyValuePairs<String, String> = [:]) {
        guard Priority.info.rawValue <= minimumPriority.rawValue else { return }
        if toJournal {
            var entries = ["MESSAGE=\(line)", "PRIORITY=\(Priority.info.rawValue)", "SYSLOG_IDENTIFIER=\(identifier)"]
            for (k, v) in fields { entries.append("\(k)=\(v)") }
            Log.sendv(entries)
        } else {
            writeAll(2, "\(identifier): \(line)\n")
        }
    }

    /// `paird-dispatch-` and the script's name, with anything but letters, digits, `.`, `_` and
    /// `-` made `_` (an identifier is one word; at most 64 bytes).
    public static func scriptIdentifier(_ path: String) -> String {
        let name = path.split(separator: "/").last.map(String.init) ?? path
        let word = String(name.unicodeScalars.prefix(48).map { s -> Character in
            (s.isASCII && (s.properties.isAlphabetic || ("0"..."9").contains(s) || "._-".unicodeScalars.contains(s))) ? Character(s) : "_"
        })
        return "paird-dispatch-" + word
    }

    public func error(_ m: String) { log(.error, m) }
    public func warning(_ m: String) { log(.warning, m) }
    public func info(_ m: String) { log(.info, m) }
    public func debug(_ m: String) { log(.debug, m) }

    /// `sd_journal_sendv` with one iovec per `FIELD=value` (values may hold newlines).
    static func sendv(_ entries: [String]) {
        var buffer = [UInt8]()
        var ranges: [(Int, Int)] = []
        for e in entries {
            let start = buffer.count
            buffer += Array(e.utf8)
            ranges.append((start, buffer.count - start))
        }
        buffer.withUnsafeMutableBytes { raw in
            var iov = ranges.map { iovec(iov_base: raw.baseAddress! + $0.0, iov_len: $0.1) }
            _ = sd_journal_sendv(&iov, Int32(iov.count))
        }
    }

    /// systemd connects stderr to the journal and says so in `JOURNAL_STREAM=<dev>:<inode>`.
    static func stderrIsJournal() -> Bool {
        guard let env = getenv("JOURNAL_STREAM").map({ String(cString: $0) }) else { return false }
        let parts = env.split(separator: ":")
        guard parts.count == 2, let dev = UInt64(parts[0]), let ino = UInt64(parts[1]) else { return false }
        var st = stat()
        guard fstat(2, &st) == 0 else { return false }
        return UInt64(st.st_dev) == dev && UInt64(st.st_ino) == ino
    }
}
