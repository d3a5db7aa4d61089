import PairingCore

/// paird.conf `[Alerts]`: the thresholds of the host's own alerts (`AlertDecider`) and the
/// dispatcher's directory and time limit (`AlertScripts`).
public struct AlertSettings: Sendable, Equatable {
    public var thresholds = AlertConfig()
    /// `[Alerts] DispatcherDir`: the directory of executables run for each alert.
    public var dispatcherDir = "/etc/paird/dispatcher.d"
    /// `[Alerts] DispatcherTimeout`: a script still running after this is killed, and everything it started (`AlertScripts`).
    public var dispatcherTimeout: Duration = .seconds(10)
    public init() {}
}

extension DaemonConfig {
    /// One `[Alerts]` key. Durations are seconds, or a number with a unit: `90`, `90s`, `10min`, `2h`.
    mutating func parseAlertKey(_ key: String, _ value: String, fail: (String) -> Error) throws(Error) {
        func percent(_ range: ClosedRange<Int>) throws(Error) -> Int {
            guard let v = Int(value), range.contains(v) else {
                throw fail("\(key) must be a whole percentage in \(range.lowerBound)…\(range.upperBound), got \"\(value)\"")
            }
            return v
        }
        func duration(_ range: ClosedRange<Double>, zeroIsOff: Bool) throws(Error) -> Duration {
            guard let s = Self.parseDuration(value), (zeroIsOff && s == 0) || range.contains(s) else {
                let off = zeroIsOff ? " (0 = off)" : ""
                throw fail("\(key) must be a time in \(Self.show(range.lowerBound))…\(Self.show(range.upperBound))\(off), "
                    + "in seconds or with a unit (s, min, h: 10min), got \"\(value)\"")
            }
            return .fractionalSeconds(s)
        }
        switch key {
        case "BatteryLow":
            let v = try percent(0...100)
            alerts.thresholds.batteryLow = v == 0 ? nil : v
        case "BatteryHysteresis": alerts.thresholds.batteryHysteresis = try percent(1...50)
        case "AwayLongerThan":
            let d = try duration(10...7 * 86400, zeroIsOff: true)
            alerts.thresholds.awayLongerThan = d == .zero ? nil : d
        case "NoDataFor":
            let d = try duration(10...86400, zeroIsOff: true)
            alerts.thresholds.noDataFor = d == .zero ? nil : d
        case "DispatcherDir":
            guard value.hasPrefix("/") else { throw fail("DispatcherDir must be an absolute path, got \"\(value)\"") }
            guard !value.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
                throw fail("DispatcherDir must not contain control characters")
            }
            alerts.dispatcherDir = value
        case "DispatcherTimeout": alerts.dispatcherTimeout = try duration(1...600, zeroIsOff: false)
        default: break // not in `keys`: never reached
        }
    }

    /// `90`, `90s`, `1.5min`, `2h` → seconds; nil if malformed.
    static func parseDuration(_ text: String) -> Double? {
        let units: [(String, Double)] = [("min", 60), ("sec", 1), ("s", 1), ("m", 60), ("h", 3600)]
        var number = Substring(text)
        var factor = 1.0
        for (u, f) in units where text.hasSuffix(u) {
            number = text.dropLast(u.count)
            factor = f
            break
        }
        guard let v = Double(number.trimmingSpaces), v.isFinite, v >= 0 else { return nil }
        return v * factor
    }

    static func show(_ seconds: Double) -> String {
        if seconds >= 3600, seconds.truncatingRemainder(dividingBy: 3600) == 0 { return "\(Int(seconds / 3600))h" }
        if seconds >= 60, seconds.truncatingRemainder(dividingBy: 60) == 0 { return "\(Int(seconds / 60))min" }
        return "\(Int(seconds))s"
    }
}

private extension Substring {
    var trimmingSpaces: Substring {
        var s = self
        while s.last == " " || s.last == "\t" { s = s.dropLast() }
        return s
    }
}
