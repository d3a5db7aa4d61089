#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import BlueZ
import Testing

/// rfkill's sysfs switches (what BlueZ 5.66 does not show on D-Bus without -E): read from a
/// directory laid out as /sys/class/rfkill is.
@Suite("rfkill switches")
struct RfkillTests {
    func dir(_ switches: [(entry: String, type: String, name: String, soft: String, hard: String)]) throws -> String {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("rfkill-\(UUID().uuidString)").path
        for s in switches {
            let d = "\(root)/\(s.entry)"
            try FileManager.default.createDirectory(atPath: d, withIntermediateDirectories: true)
            for (f, v) in [("type", s.type), ("name", s.name), ("soft", s.soft), ("hard", s.hard)] {
                try (v + "\n").write(toFile: "\(d)/\(f)", atomically: true, encoding: .utf8)
            }
        }
        return root
    }

    @Test("only type bluetooth is read; soft and hard as written; the adapter's own and platform switches block it, another controller's does not")
    func readAndBlocking() throws {
        let root = try dir([("rfkill0", "wlan", "phy0", "1", "0"), ("rfkill1", "bluetooth", "hci0", "1", "0"),
                            ("rfkill2", "bluetooth", "hci1", "0", "0"), ("rfkill3", "bluetooth", "tpacpi_bluetooth_sw", "0", "1")])
        defer { try? FileManager.default.removeItem(atPath: root) }
        let all = RfkillSwitch.read(dir: root)
        #expect(all == [RfkillSwitch(name: "hci0", soft: true, hard: false), RfkillSwitch(name: "hci1", soft: false, hard: false),
                        RfkillSwitch(name: "tpacpi_bluetooth_sw", soft: false, hard: true)])
        #expect(RfkillSwitch.blocking(all, adapter: "hci0").map(\.name) == ["hci0", "tpacpi_bluetooth_sw"])
        #expect(RfkillSwitch.blocking(all, adapter: "hci1").map(\.name) == ["tpacpi_bluetooth_sw"])
        let own = all.filter { $0.name.hasPrefix("hci") }
        #expect(RfkillSwitch.blocking(own, adapter: "hci1").isEmpty, "hci0's block is not hci1's")
        #expect(RfkillSwitch.read(dir: root + "/nothing").isEmpty)
    }
}
