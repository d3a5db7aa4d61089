import Foundation
import Testing
@testable import Paird
import PairingCore

@Suite("paird.conf [Alerts] and the alerts' journal entries")
struct AlertConfigTests {
    @Test("every [Alerts] key is read; times in seconds or with a unit; 0 turns an alert off")
    func keys() throws {
        let (c, warnings) = try DaemonConfig.parse("""
            [Alerts]
            BatteryLow = 20
            BatteryHysteresis = 10
            AwayLongerThan = 1.5min
            NoDataFor = 90
            DispatcherDir = /srv/hooks
            DispatcherTimeout = 30s
            """, file: "t.conf")
        #expect(warnings.isEmpty)
        #expect(c.alerts.thresholds.batteryLow == 20 && c.alerts.thresholds.batteryHysteresis == 10)
        #expect(c.alerts.thresholds.awayLongerThan == .seconds(90) && c.alerts.thresholds.noDataFor == .seconds(90))
        #expect(c.alerts.dispatcherDir == "/srv/hooks" && c.alerts.dispatcherTimeout == .seconds(30))
        let (off, _) = try DaemonConfig.parse("[Alerts]\nBatteryLow = 0\nAwayLongerThan = 0\nNoDataFor = 0s\nAwayLongerThan = 2h", file: "t.conf")
        #expect(off.alerts.thresholds.batteryLow == nil && off.alerts.thresholds.noDataFor == nil)
        #expect(off.alerts.thresholds.awayLongerThan == .seconds(7200))
    }

    @Test("bad [Alerts] values are refused with file, line and reason", arguments: [
        ("BatteryLow = 101", "BatteryLow must be a whole percentage in 0…100, got \"101\""),
        ("BatteryLow = low", "BatteryLow must be a whole percentage in 0…100, got \"low\""),
        ("BatteryHysteresis = 0", "BatteryHysteresis must be a whole percentage in 1…50, got \"0\""),
        ("AwayLongerThan = 5", "AwayLongerThan must be a time in 10s…168h (0 = off), in seconds or with a unit (s, min, h: 10min), got \"5\""),
        ("NoDataFor = 10 minutes", "NoDataFor must be a time in 10s…24h (0 = off), in seconds or with a unit (s, min, h: 10min), got \"10 minutes\""),
        ("DispatcherTimeout = 0", "DispatcherTimeout must be a time in 1s…10min, in seconds or with a unit (s, min, h: 10min), got \"0\""),
        ("DispatcherDir = etc/hooks", "DispatcherDir must be an absolute path, got \"etc/hooks\""),
    ])
    func badValues(line: String, reason: String) {
        let (_, _, errors) = DaemonConfig.parseAll("[Alerts]\n\(line)", file: "t.conf")
        #expect(errors == [DaemonConfig.Error(file: "t.conf", line: 2, problem: reason)])
    }

    @Test("BatteryLow + BatteryHysteresis above 100 would never re-arm: refused")
    func hysteresisTooHigh() {
        let (_, _, errors) = DaemonConfig.parseAll("[Alerts]\nBatteryLow = 60\nBatteryHysteresis = 45\n", file: "t.conf")
        #expect(errors.map(\.description) == ["t.conf:3: BatteryLow (60) + BatteryHysteresis (45) is above 100: the low-battery alert would never be re-armed"])
    }

    @Test("journal wording, MESSAGE_IDs and the scripts' environment")
    func journal() {
        let watch = DeviceAddress("00:AA:01:01:00:01")!
        let config = AlertConfig()
        let low = AlertJournal(Alert(kind: .batteryLow, device: watch, name: "Watch", battery: 14), config: config)
        #expect(low.message == "Watch (00:AA:01:01:00:01): battery low, 14 % (under 15 %)")
        #expect(low.messageID == Log.MessageID.alertBatteryLow && low.priority == .warning)
        let away = AlertJournal(Alert(kind: .awayTooLong, device: watch, name: "Watch", reason: "link-loss", duration: .seconds(610)), config: config)
        #expect(away.message == "Watch (00:AA:01:01:00:01): away for 10 min 10 s (link-loss); paird keeps waiting for it")
        let quiet = AlertJournal(Alert(kind: .noData, device: watch, duration: .seconds(300)), config: config)
        #expect(quiet.message == "00:AA:01:01:00:01: connected, but no data for 5 min" && quiet.messageID == Log.MessageID.alertNoData)
        #expect(AlertJournal(Alert(kind: .needsRepair, device: watch), config: config).messageID == nil, "the machine's report is its entry")
        let env = AlertJournal.environment(Alert(kind: .batteryLow, device: watch, name: "Watch", battery: 14), config: config,
                                           now: Moment(uptimeNanoseconds: 0, unixTime: 1_800_000_000.5))
        #expect(env == ["PAIRD_EVENT": "batteryLow", "PAIRD_DEVICE": "00:AA:01:01:00:01", "PAIRD_NAME": "Watch", "PAIRD_BATTERY": "14",
                        "PAIRD_REASON": "", "PAIRD_DURATION": "", "PAIRD_THRESHOLD": "15", "PAIRD_TIME": "1800000000"])
        let ids = [Log.MessageID.alertBatteryLow, Log.MessageID.alertAway, Log.MessageID.alertNoData, Log.MessageID.dispatcherScript]
        #expect(Set(ids).count == 4 && ids.allSatisfy { $0.count == 32 })
    }

    @Test("the catalog and docs/reference.md explain the alerts' MESSAGE_IDs")
    func catalog() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../..")
        let catalog = try String(contentsOf: root.appendingPathComponent("systemd/paird.catalog"), encoding: .utf8)
        let reference = try String(contentsOf: root.appendingPathComponent("docs/reference.md"), encoding: .utf8)
        for id in [Log.MessageID.alertBatteryLow, Log.MessageID.alertAway, Log.MessageID.alertNoData, Log.MessageID.dispatcherScript] {
            #expect(catalog.contains("-- \(id)\n"), "\(id) not in systemd/paird.catalog")
            #expect(reference.contains(id), "\(id) not in docs/reference.md")
        }
    }
}
