import Foundation
import Testing
import PairingCore
@testable import PairCtlCommands

@Suite("pairctl scan: what was heard, who knows it, 100 columns, JSON")
struct ScanReportTests {
    let now = Date(timeIntervalSince1970: 1_800_000_000)
    static let hr = "0000180d-0000-1000-8000-00805f9b34fb"
    static let battery = "0000180f-0000-1000-8000-00805f9b34fb"

    func pairdDevice(_ address: String, state: String = "connected") -> StatusDocument.Device {
        StatusDocument.Device(address: address, name: "Watch", state: state, wanted: "connected", since: now,
                              lastDisconnect: nil, reconnectAttempts: 0, battery: nil, services: [Self.hr], autoConnect: true,
                              nextDeadline: nil, repairReason: nil)
    }

    /// Four heard (one paird's, one bonded, one BlueZ knew, one new) and one stale object.
    func observed() -> [ScanObservation] {
        [
            ScanObservation(address: "C0:00:00:00:00:05", name: "Old strap", uuids: [Self.hr], bonded: true, knownBefore: true, heardRSSI: nil),
            ScanObservation(address: "c0:00:00:00:00:01", addressType: "random", name: "New", uuids: ["180D"], heardRSSI: -80),
            ScanObservation(address: "00:AA:01:01:00:01", name: "Watch", uuids: [Self.hr, Self.battery], bonded: true, knownBefore: true, heardRSSI: -40),
            ScanObservation(address: "C0:00:00:00:00:02", name: "Bonded", bonded: true, knownBefore: true, heardRSSI: -62),
            ScanObservation(address: "C0:00:00:00:00:03", name: nil, uuids: [Self.battery], knownBefore: true, heardRSSI: -62),
        ]
    }

    @Test("only devices heard in the scan, strongest RSSI first (ties by address), each marked with who knows it")
    func mergeAndSort() {
        let e = ScanReport.entries(observed(), paird: [pairdDevice("00:aa:01:01:00:01"), pairdDevice("C0:00:00:00:00:05")])
        #expect(e.map(\.address) == ["00:AA:01:01:00:01", "C0:00:00:00:00:02", "C0:00:00:00:00:03", "C0:00:00:00:00:01"])
        #expect(!e.contains { $0.address == "C0:00:00:00:00:05" }, "a stale object (no RSSI in this scan) is not advertising, even one paird has")
        #expect(e.map(\.known) == [.paird, .bonded, .bluez, .new])
        #expect(e.map(\.rssi) == [-40, -62, -62, -80])
        #expect(e[0].pairdState == "connected" && e[1].pairdState == nil)
        #expect(e[3].services == [Self.hr], "UUIDs normalized to 128 bits, lower case")
        #expect(e[3].addressType == "random")
        #expect(e[2].name == nil)
        // paird not running: nothing is "paired in paird", its wearable is still bonded in BlueZ
        #expect(ScanReport.entries(observed(), paird: nil).map(\.known) == [.bonded, .bonded, .bluez, .new])
    }

    @Test("--service keeps only devices advertising one of the services")
    func serviceFilter() {
        let e = ScanReport.entries(observed(), paird: [], services: ["180d"])
        #expect(e.map(\.address) == ["00:AA:01:01:00:01", "C0:00:00:00:00:01"])
        #expect(ScanReport.entries(observed(), paird: [], services: ["180d", "0000180F-0000-1000-8000-00805F9B34FB"]).count == 3)
        #expect(ScanReport.entries(observed(), paird: [], services: ["fe59"]).isEmpty)
    }

    func document(_ devices: [ScanReport.Entry], paird: Bool = true) -> ScanReport.Document {
        ScanReport.Document(timeout: 5, interrupted: false, services: [], pairdRunning: paird,
                            pairdError: paird ? nil : "paird is not running (ServiceUnknown)", devices: devices)
    }

    @Test("text: a header, one line per device in RSSI order, every line at most 100 columns")
    func text() {
        var obs = observed()
        obs.append(ScanObservation(address: "C0:00:00:00:00:04", name: "A name far longer than the column\u{1b}[2J",
                                   uuids: [Self.hr, Self.battery, "6e400001-b5a3-f393-e0a9-e50e24dcca9e", "fe59", "180a", "1812", "181c"],
                                   heardRSSI: -100))
        let lines = ScanReport.text(document(ScanReport.entries(obs, paird: [pairdDevice("00:AA:01:01:00:01")])))
        #expect(lines[0] == ScanReport.header)
        #expect(lines[0].hasPrefix("ADDRESS") && lines[0].hasSuffix("SERVICES"))
        #expect(lines[1] == "00:AA:01:01:00:01  public   -40  paired in paird  Watch                 180d 180f")
        #expect(lines[2].hasPrefix("C0:00:00:00:00:02  public   -62  bonded in BlueZ  Bonded"))
        #expect(lines[3].hasPrefix("C0:00:00:00:00:03  public   -62  known to BlueZ   (no name)             180f"))
        #expect(lines[4] == "C0:00:00:00:00:01  random   -80  new              New                   180d")
        #expect(lines[5].hasPrefix("C0:00:00:00:00:04  public  -100  new              A name far longer...  180a 180d 180f 1812 181c"), "services sorted")
        #expect(lines.count == 7, "the long UUID goes on an indented line: \(lines)")
        #expect(lines[6] == "  fe59 6e400001-b5a3-f393-e0a9-e50e24dcca9e", "\(lines)")
        for l in lines { #expect(l.count <= 100, "\(l.count): \(l)") }
        #expect(!lines.joined().contains("\u{1b}"), "a name from the air cannot send escape sequences to the terminal")
        #expect(ScanReport.text(document(ScanReport.entries(obs, paird: []))
            , legend: false).first?.hasPrefix("00:AA:01:01:00:01") == true, "--no-legend")
    }

    @Test("text: paird not running is said, the list still shown; nothing heard is said")
    func textNotes() {
        let lines = ScanReport.text(document(ScanReport.entries(observed(), paird: nil), paird: false))
        #expect(lines[0] == "paird not running: none can be marked \"paired in paird\"", "\(lines)")
        #expect(lines[1] == ScanReport.header)
        #expect(lines.count == 6)
        var stalled = document([], paird: false)
        stalled.pairdError = "paird did not answer in time (NoReply)"
        #expect(ScanReport.text(stalled).first == "paird did not answer: none can be marked \"paired in paird\"")
        var d = document([])
        d.services = [Self.hr]
        #expect(ScanReport.text(d) == ["nothing heard advertising with service 180d in 5 s"])
    }

    @Test("JSON: one compact object, schemaVersion, numeric rssi and timeout, null name and pairdState")
    func json() throws {
        let j = ScanReport.json(document(ScanReport.entries(observed(), paird: [pairdDevice("00:AA:01:01:00:01")])))
        #expect(!j.contains("\n"))
        let o = try #require(try JSONSerialization.jsonObject(with: Data(j.utf8)) as? [String: Any])
        #expect(o["schemaVersion"] as? Int == StatusDocument.schemaVersion)
        #expect(o["timeout"] as? Int == 5)
        #expect(o["interrupted"] as? Bool == false)
        #expect(o["pairdRunning"] as? Bool == true)
        #expect(o["pairdError"] is NSNull)
        #expect((o["services"] as? [String]) == [])
        let devices = try #require(o["devices"] as? [[String: Any]])
        #expect(devices.count == 4)
        let first = devices[0]
        #expect(Set(first.keys) == ["address", "addressType", "name", "rssi", "services", "known", "pairdState"])
        #expect(first["address"] as? String == "00:AA:01:01:00:01")
        #expect(first["rssi"] as? Int == -40)
        #expect(first["known"] as? String == "paird")
        #expect(first["pairdState"] as? String == "connected")
        #expect((first["services"] as? [String]) == [Self.hr, Self.battery])
        #expect(devices[2]["name"] is NSNull)
        #expect(devices.map { $0["known"] as? String } == ["paird", "bonded", "bluez", "new"])
    }
}
