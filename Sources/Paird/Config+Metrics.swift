extension DaemonConfig {
    /// `[Metrics] TextfileMode` (octal, 0600…0644: never writable by others, as it holds battery
    /// levels) and `TextfileGroup` (a group node_exporter's user can join; empty: paird's own).
    mutating func parseTextfileKey(_ key: String, _ value: String, fail: (String) -> Error) throws(Error) {
        switch key {
        case "TextfileMode":
            guard let m = UInt32(value, radix: 8), m & ~0o644 == 0, m & 0o600 == 0o600 else {
                throw fail("TextfileMode must be an octal mode from 0600 to 0644 (owner read-write; group and others at most read), got \"\(value)\"")
            }
            metricsTextfileMode = m
        default:
            guard !value.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }), !value.contains(" ") else {
                throw fail("TextfileGroup must be a group name, got \"\(value)\"")
            }
            metricsTextfileGroup = value
        }
    }
}
