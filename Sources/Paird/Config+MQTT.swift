#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import CMosquitto
#if canImport(Glibc)
import Glibc
#endif

/// `[MQTT]`: the wearables' states and batteries published to an MQTT broker (MQTT.swift). Off
/// unless the section sets `Broker`.
public struct MQTTSettings: Sendable, Equatable {
    /// `Broker = mqtt://host[:port]`; empty host: off (the default).
    public var host = ""
    public var port = 1883
    /// `Broker = mqtts://…`: TLS.
    public var tls = false
    /// The CA certificates (PEM) the broker's certificate is checked against; empty: the
    /// system's (/etc/ssl/certs).
    public var caFile = ""
    public var username = ""
    /// A file whose first line is the password (checked by `DaemonConfig.check`: 0600 or 0640,
    /// owned by root or paird's user).
    public var passwordFile = ""
    /// Empty: `paird-<hostname>`.
    public var clientId = ""
    /// Empty: `paird/<hostname>`.
    public var topicPrefix = ""
    /// Home Assistant's discovery prefix; empty: no discovery configs published.
    public var discovery = "homeassistant"
    public var retain = true
    public var enabled: Bool { !host.isEmpty }

    public init() {}

    /// Where the keys were in the file, not what they say: two configs that say the same are
    /// equal wherever their lines are.
    struct Lines: Sendable, Equatable {
        var broker = 0, passwordFile = 0, caFile = 0
        static func == (_: Lines, _: Lines) -> Bool { true }
    }

    /// The client id and topic prefix with the host's name where they were left empty.
    public func resolved(hostname: String = MQTTSettings.hostname()) -> MQTTSettings {
        var s = self
        if s.clientId.isEmpty { s.clientId = "paird-\(hostname)" }
        if s.topicPrefix.isEmpty { s.topicPrefix = "paird/\(hostname)" }
        return s
    }

    public static func hostname() -> String {
        var buf = [CChar](repeating: 0, count: 256)
        guard gethostname(&buf, buf.count - 1) == 0 else { return "localhost" }
        let name = String(decoding: buf.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return name.isEmpty ? "localhost" : name
    }

    /// Parses `mqtt://host[:port]` (port 1883) or `mqtts://host[:port]` (TLS, port 8883).
    static func parseBroker(_ value: String) -> Result<(host: String, port: Int, tls: Bool), Problem> {
        let tls = value.hasPrefix("mqtts://")
        guard tls || value.hasPrefix("mqtt://") else { return .failure(Problem(text: "Broker must be mqtt://host[:port] or mqtts://host[:port], got \"\(value)\"")) }
        var rest = Substring(value.dropFirst(tls ? "mqtts://".count : "mqtt://".count))
        if rest.hasSuffix("/") { rest = rest.dropLast() }
        var host = rest, port = tls ? 8883 : 1883
        if rest.hasPrefix("[") {   // [IPv6]:port
            guard let close = rest.firstIndex(of: "]") else { return .failure(Problem(text: "Broker: unclosed [ in \"\(value)\"")) }
            host = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":"), let p = Int(after.dropFirst()), (1...65535).contains(p) else {
                    return .failure(Problem(text: "Broker: bad port in \"\(value)\""))
                }
                port = p
            }
        } else if let colon = rest.lastIndex(of: ":") {
            guard let p = Int(rest[rest.index(after: colon)...]), (1...65535).contains(p) else {
                return .failure(Problem(text: "Broker: the port must be a number in 1…65535, got \"\(value)\""))
            }
            host = rest[..<colon]
            port = p
        }
        guard !host.isEmpty, host.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || ".-_:".contains($0)) }) else {
            return .failure(Problem(text: "Broker must be mqtt://host[:port] with a host name or address, got \"\(value)\""))
        }
        return .success((String(host), port, tls))
    }

    struct Problem: Swift.Error { var text: String }

    /// A topic prefix: no wildcards (`+`, `#`), no NUL, not starting or ending with `/`.
    static func validPrefix(_ v: String) -> Bool {
        !v.isEmpty && v.utf8.count <= 200 && !v.hasPrefix("/") && !v.hasSuffix("/") && !v.contains("//")
            && !v.unicodeScalars.contains { $0 == "+" || $0 == "#" || $0.properties.generalCategory == .control }
    }

    /// Why `passwordFile` may not be used (nil: it may): 0600 or 0640, a regular file, owned by
    /// root or the running user.
    static func passwordFileProblem(_ path: String) -> String? {
        var st = stat()
        guard stat(path, &st) == 0 else { return "PasswordFile \(path): \(String(cString: strerror(errno)))" }
        guard (st.st_mode & S_IFMT) == S_IFREG else { return "PasswordFile \(path) is not a regular file" }
        let mode = st.st_mode & 0o7777
        guard mode == 0o600 || mode == 0o640 else {
            return "PasswordFile \(path) has mode \(String(mode, radix: 8)); it must be 0600 or 0640 (chmod 600 \(path))"
        }
        guard st.st_uid == 0 || st.st_uid == getuid() else {
            return "PasswordFile \(path) must be owned by root or paird's user (uid \(getuid())), not uid \(st.st_uid)"
        }
        return nil
    }

    /// The password: the file's first line.
    func readPassword() throws -> String {
        guard let bytes = try readFile(passwordFile, limit: 4096) else { throw SystemError("PasswordFile \(passwordFile): no such file", ENOENT) }
        let text = String(decoding: bytes, as: UTF8.self)
        return String(text.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false).first ?? "")
    }
}

extension DaemonConfig {
    mutating func parseMQTTKey(_ key: String, _ value: String, fail: (String) -> Error) throws(Error) {
        switch key {
        case "Broker":
            if value.isEmpty { mqtt.host = ""; return }
            switch MQTTSettings.parseBroker(value) {
            case .success(let b): mqtt.host = b.host; mqtt.port = b.port; mqtt.tls = b.tls
            case .failure(let why): throw fail(why.text)
            }
        case "Username":
            guard !value.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else { throw fail("Username must not contain control characters") }
            mqtt.username = value
        case "PasswordFile":
            guard value.isEmpty || value.hasPrefix("/") else { throw fail("PasswordFile must be an absolute path, got \"\(value)\"") }
            mqtt.passwordFile = value
        case "CAFile":
            guard value.isEmpty || value.hasPrefix("/") else { throw fail("CAFile must be an absolute path, got \"\(value)\"") }
            mqtt.caFile = value
        case "ClientId":
            guard value.utf8.count <= 23 * 8, !value.unicodeScalars.contains(where: { $0.properties.generalCategory == .control || $0 == " " }) else {
                throw fail("ClientId must be a word without spaces or control characters, got \"\(value)\"")
            }
            mqtt.clientId = value
        case "TopicPrefix":
            guard value.isEmpty || MQTTSettings.validPrefix(value) else {
                throw fail("TopicPrefix must be a topic without +, #, a leading or trailing /, or empty levels, got \"\(value)\"")
            }
            mqtt.topicPrefix = value
        case "Discovery":
            guard value.isEmpty || MQTTSettings.validPrefix(value) else { throw fail("Discovery must be a topic prefix (homeassistant) or empty, got \"\(value)\"") }
            mqtt.discovery = value
        default: // Retain
            switch value.lowercased() {
            case "yes", "true", "on", "1": mqtt.retain = true
            case "no", "false", "off", "0": mqtt.retain = false
            default: throw fail("Retain must be yes or no, got \"\(value)\"")
            }
        }
    }

    /// What of `[MQTT]` is checked against the host (`check`): the password file's owner and
    /// mode, and that libmosquitto can be loaded.
    func mqttHostProblems() -> [String] {
        guard mqtt.enabled else { return [] }
        var problems: [String] = []
        if !mqtt.passwordFile.isEmpty, let p = MQTTSettings.passwordFileProblem(mqtt.passwordFile) { problems.append("[MQTT] \(p)") }
        if !mqtt.caFile.isEmpty {
            if !mqtt.tls {
                problems.append("[MQTT] CAFile is set but Broker is mqtt:// (no TLS): use mqtts://")
            } else if access(mqtt.caFile, R_OK) != 0 {
                problems.append("[MQTT] CAFile \(mqtt.caFile): \(String(cString: strerror(errno)))")
            }
        }
        if let why = MQTTClient.loadLibrary() {
            problems.append("[MQTT] is set but libmosquitto cannot be loaded (\(why)): install libmosquitto1")
        }
        return problems
    }
}
