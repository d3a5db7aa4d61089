#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import PairingCore
#if canImport(Glibc)
import Glibc
#endif

/// paird.conf: `[Section]` headers and `Key = value` lines, `#` comments, in the style of
/// BlueZ's main.conf. Unknown keys are warned about; bad values are refused with file, line and
/// reason. Every key and its default is listed in etc/paird/paird.conf.
public struct DaemonConfig: Sendable, Equatable {
    public var machine = MachineConfig()
    /// Adapter name (`hci0`) or address; empty = the first in order (hci0 before hci1). Several,
    /// separated by spaces, are used at once; the first is the default (`pairctl pair` without
    /// `--adapter`).
    public var adapter: String = ""
    /// Characteristics (128-bit UUIDs) subscribed to after every (re)connect.
    public var subscribe: [String] = [ServiceUUID.heartRateMeasurement]
    /// Read Battery Level after every (re)connect and subscribe to it.
    public var battery = true
    /// `[Health] FirstDataTimeout`: the machine's `firstDataTimeout`, given to it only when
    /// `Subscribe` names a characteristic (with nothing subscribed no data is awaited). 0 = off.
    public var firstDataTimeout: Duration = Self.defaultFirstDataTimeout
    public static let defaultFirstDataTimeout = Duration.seconds(5)
    /// `[History] MaxAgeDays`, `MaxRecords`: the availability record's cap (`HistoryStore.Cap`).
    public var history = HistoryStore.Cap()
    /// `[History] BatteryStep`, `BatteryInterval`: when a battery reading is recorded (Config+History.swift).
    public var historyBattery = HistoryRecorder.BatteryLimit()
    /// `[Metrics] Textfile`: the Prometheus textfile paird writes for node_exporter's textfile
    /// collector (an absolute path ending in `.prom`); empty, the default: no metrics written.
    public var metricsTextfile = ""
    /// `[Metrics] Interval`: the least time between two writes of the textfile.
    public var metricsInterval: Duration = Self.defaultMetricsInterval
    public static let defaultMetricsInterval = Duration.seconds(15)
    /// `[Metrics] TextfileMode` and `TextfileGroup` (Config+Metrics.swift).
    public var metricsTextfileMode: UInt32 = 0o640
    public var metricsTextfileGroup = ""
    /// `[Alerts]`: the host's own alerts and their dispatcher (Config+Alerts.swift).
    public var alerts = AlertSettings()
    /// `[MQTT]`: states and batteries published to a broker (Config+MQTT.swift); off by default.
    public var mqtt = MQTTSettings()
    /// The lines of `[MQTT] Broker` and `PasswordFile`, for what `check` finds on the host.
    var mqttLines = MQTTSettings.Lines()

    public init() {
        machine.firstDataTimeout = firstDataTimeout
    }

    public struct Error: Swift.Error, CustomStringConvertible, Equatable {
        public var file: String
        public var line: Int
        public var problem: String
        public var description: String { "\(file):\(line): \(problem)" }
    }

    /// Parses `text` (read from `file`, named in messages). Returns the config and warnings, or
    /// throws the first error.
    public static func parse(_ text: String, file: String) throws(Error) -> (DaemonConfig, [String]) {
        let (c, warnings, errors) = parseAll(text, file: file)
        if let first = errors.first { throw first }
        return (c, warnings)
    }

    /// Parses `text` to its end: the config (a bad line leaves its key at the default), the
    /// warnings, and every error, in the order of the lines (`paird --check-config` lists them all).
    public static func parseAll(_ text: String, file: String) -> (DaemonConfig, [String], [Error]) {
        var c = DaemonConfig()
        var warnings: [String] = []
        var errors: [Error] = []
        var section = ""
        var backoffMaxLine = 0, backoffInitialLine = 0, batteryLine = 0, resumeLine = 0
        for (n, raw) in text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline).enumerated() { // "\r\n" is one Character
          do throws(Error) {
            let lineNo = n + 1
            let line = raw.trimmed
            if line.isEmpty || line.hasPrefix("#") || line.hasPrefix(";") { continue }
            func fail(_ why: String) -> Error { Error(file: file, line: lineNo, problem: why) }
            if line.hasPrefix("[") {
                guard line.hasSuffix("]"), line.count > 2 else { throw fail("malformed section header \(line)") }
                section = String(line.dropFirst().dropLast()).trimmed
                if !Self.keys.keys.contains(section) { warnings.append("\(file):\(lineNo): unknown section [\(section)]") }
                continue
            }
            guard let eq = line.firstIndex(of: "=") else { throw fail("expected Key = value, got \(line)") }
            let key = line[..<eq].trimmed
            let value = line[line.index(after: eq)...].trimmed
            guard let known = Self.keys[section], known.contains(key) else {
                warnings.append("\(file):\(lineNo): unknown key \(key) in [\(section)], ignored")
                continue
            }
            func seconds(_ range: ClosedRange<Double>) throws(Error) -> Duration {
                guard let v = Double(value), v.isFinite, range.contains(v) else {
                    throw fail("\(key) must be a number of seconds in \(range.lowerBound)…\(range.upperBound), got \"\(value)\"")
                }
                return .fractionalSeconds(v)
            }
            switch (section, key) {
            case ("General", "Adapter"):
                // One adapter, or several used at once: names or addresses, separated by spaces or commas.
                let parts = value.split(whereSeparator: { $0 == " " || $0 == "," || $0 == "\t" }).map(String.init)
                if let bad = parts.first(where: { !Self.isAdapterName($0) && DeviceAddress($0) == nil }) {
                    throw fail("Adapter must be adapter names like hci0 or addresses (several separated by spaces), got \"\(bad)\"")
                }
                c.adapter = parts.joined(separator: " ")
            case ("Pairing", "ScanTimeout"): c.machine.scanTimeout = try seconds(1...600)
            case ("Pairing", "PairTimeout"): c.machine.pairTimeout = try seconds(5...300)
            case ("Connection", "ConnectTimeout"): c.machine.connectTimeout = try seconds(5...300)
            case ("Connection", "DiscoveryTimeout"): c.machine.discoveryTimeout = try seconds(5...300)
            case ("Connection", "ResolveTimeout"): c.machine.resolveTimeout = try seconds(1...300)
            case ("Connection", "LinkDownWait"): c.machine.linkDownWait = try seconds(0...60)
            case ("Connection", "ResolveFloor"): c.machine.resolveFloor = try seconds(0...300)
            case ("Connection", "BackoffInitial"): c.machine.backoff.initial = try seconds(0.1...60); backoffInitialLine = lineNo
            case ("Connection", "BackoffMax"): c.machine.backoff.maximum = try seconds(1...3600); backoffMaxLine = lineNo
            case ("Connection", "FallbackInterval"): c.machine.fallbackInterval = try seconds(5...86400)
            case ("Connection", "AbsentAfter"): c.machine.absentAfter = try seconds(1...300)
            case ("Connection", "AutoConnectHeadStart"): c.machine.autoConnectHeadStart = try seconds(0...300)
            case ("Connection", "ProofWindow"): c.machine.proofWindow = try seconds(1...3600)
            case ("Sleep", "ResumeDeadlineFloor"): c.machine.resumeDeadlineFloor = try seconds(1...3600); resumeLine = lineNo
            case ("Sleep", "ResumeDeadlineCeiling"): c.machine.resumeDeadlineCeiling = try seconds(1...3600); resumeLine = lineNo
            case ("Connection", "WedgePowerCycles"):
                guard let v = Int(value), (0...100).contains(v) else { throw fail("WedgePowerCycles must be a whole number in 0…100, got \"\(value)\"") }
                c.machine.wedgePowerCycles = v
            case ("Connection", "WedgeProbeInterval"):
                // 0: never; otherwise at least 5 s.
                let d = try seconds(0...86400)
                guard d == .zero || d >= .seconds(5) else { throw fail("WedgeProbeInterval must be 0 (never) or a number of seconds in 5…86400, got \"\(value)\"") }
                c.machine.wedgeProbeInterval = d
            case ("Sleep", "ResumePowerCycles"):
                guard let v = Int(value), (0...100).contains(v) else { throw fail("ResumePowerCycles must be a whole number in 0…100, got \"\(value)\"") }
                c.machine.resumePowerCycles = v
            case ("Connection", "SetupFailuresBeforeRepair"):
                guard let v = Int(value), (1...100).contains(v) else { throw fail("SetupFailuresBeforeRepair must be a whole number in 1…100, got \"\(value)\"") }
                c.machine.setupFailuresBeforeRepair = v
            case ("Connection", "FastAttempts"):
                guard let v = Int(value), (1...100).contains(v) else { throw fail("FastAttempts must be a whole number in 1…100, got \"\(value)\"") }
                c.machine.fastAttempts = v
            case ("Notifications", "Subscribe"):
                var uuids: [String] = []
                for part in value.split(separator: ",") {
                    let p = part.trimmed
                    guard let u = ServiceUUID.normalize(p) else { throw fail("Subscribe: \"\(p)\" is not a UUID") }
                    uuids.append(u)
                }
                c.subscribe = uuids
            case ("Notifications", "Battery"):
                switch value.lowercased() {
                case "yes", "true", "on", "1": c.battery = true
                case "no", "false", "off", "0": c.battery = false
                default: throw fail("Battery must be yes or no, got \"\(value)\"")
                }
            case ("Health", "FirstDataTimeout"): c.firstDataTimeout = try seconds(0...300)
            case ("Health", "SilencePeriods"):
                guard let v = Int(value), (2...1000).contains(v) else { throw fail("SilencePeriods must be a whole number in 2…1000, got \"\(value)\"") }
                c.machine.silencePeriods = v
            case ("Health", "SilenceMinimum"): c.machine.silenceMinimum = try seconds(0.5...3600)
            case ("Health", "ProbeTimeout"): c.machine.probeTimeout = try seconds(1...120)
            case ("Health", "ResubscribesPerLink"):
                guard let v = Int(value), (0...100).contains(v) else { throw fail("ResubscribesPerLink must be a whole number in 0…100, got \"\(value)\"") }
                c.machine.resubscribesPerLink = v
            case ("History", "MaxAgeDays"):
                guard let v = Double(value), v.isFinite, (1...3650).contains(v) else { throw fail("MaxAgeDays must be a number of days in 1…3650, got \"\(value)\"") }
                c.history.maxAge = .fractionalSeconds(v * 86400)
            case ("History", "MaxRecords"):
                guard let v = Int(value), (100...10_000_000).contains(v) else { throw fail("MaxRecords must be a whole number in 100…10000000, got \"\(value)\"") }
                c.history.maxRecords = v
            case ("History", "BatteryStep"), ("History", "BatteryInterval"):
                try c.parseHistoryBatteryKey(key, value, fail: fail)
            case ("Metrics", "Textfile"):
                if !value.isEmpty {
                    guard value.hasPrefix("/") else { throw fail("Textfile must be an absolute path, got \"\(value)\"") }
                    guard value.hasSuffix(".prom"), !value.hasSuffix("/.prom") else {
                        throw fail("Textfile must end in .prom (node_exporter's textfile collector reads only those), got \"\(value)\"")
                    }
                    guard !value.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
                        throw fail("Textfile must not contain control characters")
                    }
                }
                c.metricsTextfile = value
            case ("Metrics", "Interval"): c.metricsInterval = try seconds(1...3600)
            case ("Metrics", "TextfileMode"), ("Metrics", "TextfileGroup"): try c.parseTextfileKey(key, value, fail: fail)
            case ("MQTT", _):
                try c.parseMQTTKey(key, value, fail: fail)
                if key == "Broker" { c.mqttLines.broker = lineNo } else if key == "PasswordFile" { c.mqttLines.passwordFile = lineNo } else if key == "CAFile" { c.mqttLines.caFile = lineNo }
            case ("Alerts", _):
                try c.parseAlertKey(key, value, fail: fail)
                if key == "BatteryLow" || key == "BatteryHysteresis" { batteryLine = lineNo }
            default:
                warnings.append("\(file):\(lineNo): unknown key \(key) in [\(section)], ignored")
            }
          } catch {
            errors.append(error)   // and on to the next line: every error is reported
          }
        }
        c.machine.firstDataTimeout = c.subscribe.isEmpty || c.firstDataTimeout == .zero ? nil : c.firstDataTimeout
        if c.machine.backoff.maximum < c.machine.backoff.initial {
            // the later of the two keys set is the one that made the pair inconsistent
            errors.append(Error(file: file, line: max(backoffMaxLine, backoffInitialLine), problem: "BackoffMax (\(c.machine.backoff.maximum)) is below BackoffInitial (\(c.machine.backoff.initial))"))
        }
        if c.machine.resumeDeadlineCeiling < c.machine.resumeDeadlineFloor {
            errors.append(Error(file: file, line: resumeLine, problem: "ResumeDeadlineCeiling (\(c.machine.resumeDeadlineCeiling)) is below ResumeDeadlineFloor (\(c.machine.resumeDeadlineFloor))"))
        }
        if let low = c.alerts.thresholds.batteryLow, low + c.alerts.thresholds.batteryHysteresis > 100 {
            errors.append(Error(file: file, line: batteryLine, problem: "BatteryLow (\(low)) + BatteryHysteresis (\(c.alerts.thresholds.batteryHysteresis)) is above 100: the low-battery alert would never be re-armed"))
        }
        c.machine.adapter = c.adapter.isEmpty ? "hci0" : c.adapter
        return (c, warnings, errors)
    }

    static let keys: [String: Set<String>] = [
        "General": ["Adapter"],
        "Pairing": ["ScanTimeout", "PairTimeout"],
        "Connection": ["ConnectTimeout", "DiscoveryTimeout", "ResolveTimeout", "ResolveFloor", "LinkDownWait", "BackoffInitial", "BackoffMax", "FallbackInterval",
                       "AutoConnectHeadStart", "AbsentAfter", "FastAttempts", "SetupFailuresBeforeRepair", "ProofWindow", "WedgePowerCycles", "WedgeProbeInterval"],
        "Notifications": ["Subscribe", "Battery"],
        "Health": ["FirstDataTimeout", "SilencePeriods", "SilenceMinimum", "ProbeTimeout", "ResubscribesPerLink"],
        "Sleep": ["ResumeDeadlineFloor", "ResumeDeadlineCeiling", "ResumePowerCycles"],
        "History": ["MaxAgeDays", "MaxRecords", "BatteryStep", "BatteryInterval"],
        "Metrics": ["Textfile", "Interval", "TextfileMode", "TextfileGroup"],
        "MQTT": ["Broker", "Username", "PasswordFile", "CAFile", "ClientId", "TopicPrefix", "Discovery", "Retain"],
        "Alerts": ["BatteryLow", "BatteryHysteresis", "AwayLongerThan", "NoDataFor", "DispatcherDir", "DispatcherTimeout"],
    ]

    /// Reads `path`. A missing file means all defaults, unless `mustExist` (paird's `--config`
    /// given explicitly: a mistyped path must not silently run on defaults).
    public static func load(path: String, mustExist: Bool = false) throws(Error) -> (DaemonConfig, [String]) {
        let checked = check(path: path, mustExist: mustExist)
        if let first = checked.errors.first { throw first }
        return (checked.config, checked.warnings)
    }

    /// What `paird --check-config` reports: whether the file exists (a missing one, when allowed,
    /// is all defaults), the config, its warnings and every error.
    public struct Checked: Sendable {
        public var fileExists: Bool
        public var config: DaemonConfig
        public var warnings: [String]
        public var errors: [Error]
    }

    public static func check(path: String, mustExist: Bool = false) -> Checked {
        let bytes: [UInt8]?
        do { bytes = try readFile(path, limit: 1 << 20) } catch {
            return Checked(fileExists: true, config: DaemonConfig(), warnings: [], errors: [Error(file: path, line: 0, problem: "cannot read: \(error)")])
        }
        guard let bytes else {
            let errors = mustExist ? [Error(file: path, line: 0, problem: "cannot read: no such file")] : []
            return Checked(fileExists: false, config: DaemonConfig(), warnings: [], errors: errors)
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            return Checked(fileExists: true, config: DaemonConfig(), warnings: [], errors: [Error(file: path, line: 0, problem: "not UTF-8 text")])
        }
        var (c, warnings, errors) = parseAll(text, file: path)
        if !c.metricsTextfile.isEmpty {
            // Not an error: node_exporter may be installed later. paird logs each failed write.
            let dir = HistoryStore.directory(of: c.metricsTextfile)
            var st = stat()
            if stat(dir, &st) != 0 || (st.st_mode & S_IFMT) != S_IFDIR {
                warnings.append("\(path): [Metrics] Textfile: no directory \(dir) (is prometheus-node-exporter installed?); paird writes no metrics until it exists")
            }
        }
        for p in c.mqttHostProblems() {
            errors.append(Error(file: path, line: p.contains("PasswordFile") ? c.mqttLines.passwordFile : p.contains("CAFile") ? c.mqttLines.caFile : c.mqttLines.broker, problem: p))
        }
        return Checked(fileExists: true, config: c, warnings: warnings, errors: errors)
    }
}

extension DaemonConfig {
    /// `hci` followed by decimal digits.
    public static func isAdapterName(_ s: String) -> Bool {
        s.hasPrefix("hci") && s.count > 3 && s.dropFirst(3).allSatisfy { $0.isASCII && $0.isNumber }
    }
}

private extension StringProtocol {
    /// Without leading and trailing white space (a CR of a CRLF file included).
    var trimmed: String {
        guard let first = firstIndex(where: { !$0.isWhitespace }),
              let last = lastIndex(where: { !$0.isWhitespace }) else { return "" }
        return String(self[first...last])
    }
}
