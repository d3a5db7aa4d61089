#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// One rfkill switch of type `bluetooth` (`/sys/class/rfkill/rfkillN/{type,name,soft,hard}`):
/// a controller's own (`hci0`), or a platform's (`tpacpi_bluetooth_sw`, …), which blocks every
/// controller. BlueZ 5.66 shows a block on D-Bus only as `Adapter1.PowerState` `off-blocked`, an
/// experimental property (bluetoothd without `-E`, as Debian starts it, does not have it): sysfs
/// is where a block can be read by anyone.
public struct RfkillSwitch: Sendable, Hashable {
    public var name: String
    public var soft: Bool
    public var hard: Bool
    public init(name: String, soft: Bool, hard: Bool) { self.name = name; self.soft = soft; self.hard = hard }

    /// The switches of type bluetooth under `dir`, by entry name.
    public static func read(dir: String = "/sys/class/rfkill") -> [RfkillSwitch] {
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: dir) else { return [] }
        func value(_ e: String, _ f: String) -> String? {
            (try? String(contentsOfFile: "\(dir)/\(e)/\(f)", encoding: .utf8)).map { String($0.filter { !$0.isWhitespace }) }
        }
        return entries.sorted().compactMap { e in
            guard value(e, "type") == "bluetooth" else { return nil }
            return RfkillSwitch(name: value(e, "name") ?? e, soft: value(e, "soft") == "1", hard: value(e, "hard") == "1")
        }
    }

    /// The switches that bear on adapter `name`: its own, and any platform switch, which blocks
    /// every controller (another controller's is not its).
    public static func relevant(_ switches: [RfkillSwitch], adapter name: String?) -> [RfkillSwitch] {
        switches.filter { $0.name == name || !$0.name.hasPrefix("hci") }
    }

    /// Those of them that block it now.
    public static func blocking(_ switches: [RfkillSwitch], adapter name: String?) -> [RfkillSwitch] {
        relevant(switches, adapter: name).filter { $0.soft || $0.hard }
    }
}
