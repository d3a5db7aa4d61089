import PairingCore

extension DaemonConfig {
    /// One of `[History]`'s battery keys (`HistoryRecorder.BatteryLimit`): `BatteryStep` (whole
    /// percent, 1…100) and `BatteryInterval` (0…1 day, seconds or with a unit: `10min`).
    mutating func parseHistoryBatteryKey(_ key: String, _ value: String, fail: (String) -> Error) throws(Error) {
        switch key {
        case "BatteryStep":
            guard let v = Int(value), (1...100).contains(v) else {
                throw fail("BatteryStep must be a whole percentage in 1…100, got \"\(value)\"")
            }
            historyBattery.step = v
        case "BatteryInterval":
            guard let s = Self.parseDuration(value), (0...86400).contains(s) else {
                throw fail("BatteryInterval must be a time in 0s…24h, in seconds or with a unit (s, min, h: 10min), got \"\(value)\"")
            }
            historyBattery.interval = .fractionalSeconds(s)
        default: break // not in `keys`: never reached
        }
    }
}
