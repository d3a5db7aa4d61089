import Foundation
import Testing
import DBus
import PairingCore
@testable import Paird

/// `Pair(a{sv})`'s options are bounded (issue 43, item 8): anyone in the bluetooth group may call
/// it, and what it brings is kept for the pairing's length and logged.
@Suite("D-Bus Pair: Name, Services and Adapter bounded, InvalidArguments naming the limit")
struct PairOptionsTests {
    func refusal(_ options: [String: DBusValue]) -> DBusError? {
        do { _ = try ManagerAPI.pairRequest(options); return nil } catch let e as DBusError { return e } catch { return nil }
    }

    @Test("within the bounds: taken as they are")
    func within() throws {
        let name = String(repeating: "ü", count: 124)   // 248 bytes
        let services = (0..<16).map { String(format: "%04x", 0x1800 + $0) }
        let (r, adapter) = try ManagerAPI.pairRequest(["Name": .variant(.string(name)), "Services": .variant(.stringArray(services)),
                                                       "Adapter": .variant(.string("00:AA:01:00:00:00"))])
        #expect(r.nameContains == name)
        #expect(r.serviceUUIDs.count == 16)
        #expect(adapter == "00:AA:01:00:00:00", "an address, 17 characters, is an adapter")
        #expect(try ManagerAPI.pairRequest(["Adapter": .string("hci12")]).1 == "hci12")
    }

    @Test("Name over 248 bytes (BLE's longest device name), in UTF-8 bytes, not characters")
    func name() {
        let e = refusal(["Name": .variant(.string(String(repeating: "ü", count: 125)))])   // 125 characters, 250 bytes
        #expect(e?.name == PairdAPI.Error.invalidArguments)
        #expect(e?.message == "Name: at most 248 bytes (BLE's longest device name), got 250")
        #expect(refusal(["Name": .string(String(repeating: "a", count: 1_000_000))])?.message.contains("at most 248 bytes") == true)
    }

    @Test("Services: more than 16, or one that is no UUID")
    func services() {
        let seventeen = (0..<17).map { String(format: "%04x", 0x1800 + $0) }
        let e = refusal(["Services": .variant(.stringArray(seventeen))])
        #expect(e?.name == PairdAPI.Error.invalidArguments)
        #expect(e?.message == "Services: at most 16 UUIDs, got 17")
        #expect(refusal(["Services": .stringArray(["180d", "nope"])])?.message == "Services: \"nope\" is not a UUID")
    }

    @Test("Adapter over 17 characters (an address is 17)")
    func adapter() {
        let e = refusal(["Adapter": .variant(.string("hci" + String(repeating: "0", count: 20)))])
        #expect(e?.name == PairdAPI.Error.invalidArguments)
        #expect(e?.message.hasPrefix("Adapter: at most 17 characters") == true, "\(String(describing: e))")
        #expect(refusal(["Adapter": .string(String(repeating: "é", count: 9))]) != nil, "18 bytes")
    }
}
