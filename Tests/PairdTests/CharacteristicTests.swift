import Foundation
import Testing
@testable import PairCtlCommands
import PairingCore

@Suite("pairctl watch: decoding Heart Rate Measurement and Battery Level")
struct CharacteristicTests {
    typealias HR = Characteristic.HeartRate
    static let hrm = Characteristic.heartRateMeasurement

    @Test("Heart Rate Measurement: each flag's field", arguments: [
        ([0x00, 72], HR(bpm: 72)),                                           // uint8, nothing else
        ([0x01, 0x2c, 0x01], HR(bpm: 300)),                                  // uint16 little-endian
        ([0x06, 60], HR(bpm: 60, sensorContact: true)),                     // contact supported, detected
        ([0x04, 60], HR(bpm: 60, sensorContact: false)),                    // supported, not detected
        ([0x02, 60], HR(bpm: 60)),                                           // bit 1 without bit 2: not supported
        ([0x08, 70, 0x10, 0x00], HR(bpm: 70, energyExpended: 16)),          // energy expended, kJ
        ([0x10, 70, 0x00, 0x04], HR(bpm: 70, rrIntervals: [1000])),         // 1024/1024 s
        ([0x10, 70, 0x40, 0x03, 0x00, 0x02], HR(bpm: 70, rrIntervals: [812.5, 500])),
        ([0x10, 70], HR(bpm: 70)),                                           // flag set, no interval in this one
        ([0x1f, 0x48, 0x00, 0x0a, 0x00, 0x00, 0x04], HR(bpm: 72, sensorContact: true, energyExpended: 10, rrIntervals: [1000])),
    ] as [([UInt8], HR)])
    func heartRate(value: [UInt8], expected: HR) {
        #expect(Characteristic.decode(Self.hrm, value) == .heartRate(expected))
        #expect(Characteristic.decode("2A37", value) == .heartRate(expected), "16-bit, any case")
    }

    @Test("malformed or short values are not decoded (hex only)", arguments: [
        [], [0x00], [0x01, 0x48], [0x08, 70, 0x10], [0x10, 70, 0x00], [0x00, 70, 0x99], [0x18, 70, 0x01],
        [0x11, 0x48], [0x10, 70, 0x00, 0x04, 0x01],
    ] as [[UInt8]])
    func malformedHeartRate(value: [UInt8]) {
        #expect(Characteristic.decode(Self.hrm, value) == nil, "\(value)")
        #expect(!Watch.notifyText("AA", Self.hrm, value).contains("bpm"))
        #expect(Watch.notifyText("AA", Self.hrm, value) == "AA notify \(Self.hrm) \(hex(value))")
    }

    @Test("Battery Level: one byte, 0...100 percent; anything else is hex only")
    func battery() {
        let uuid = Characteristic.batteryLevel
        #expect(Characteristic.decode(uuid, [87]) == .battery(87))
        #expect(Characteristic.decode(uuid, [0]) == .battery(0))
        #expect(Characteristic.decode(uuid, [100]) == .battery(100))
        #expect(Characteristic.decode(uuid, [101]) == nil)
        #expect(Characteristic.decode(uuid, []) == nil)
        #expect(Characteristic.decode(uuid, [50, 1]) == nil)
        #expect(Watch.notifyText("AA", uuid, [87]) == "AA notify \(uuid) (battery level: 87%) 57")
    }

    @Test("other characteristics are hex only, in text and JSON")
    func unknown() throws {
        let uuid = "00002a5b-0000-1000-8000-00805f9b34fb"
        #expect(Characteristic.decode(uuid, [0x00, 72]) == nil)
        #expect(Watch.notifyText("AA", uuid, [0x00, 72]) == "AA notify \(uuid) 0048")
        let o = try #require(try JSONSerialization.jsonObject(with: Data(Watch.notifyJSON("AA", uuid, [0x00, 72]).utf8)) as? [String: Any])
        #expect(o["hex"] as? String == "0048")
        #expect(o["heartRate"] == nil && o["batteryLevel"] == nil, "\(o)")
    }

    @Test("text and JSON of a decoded heart rate: the hex kept (the text's last field, as scripts read it), the fields added")
    func rendering() throws {
        let v: [UInt8] = [0x1e, 72, 0x0a, 0x00, 0x40, 0x03]
        #expect(Watch.notifyText("AA", Self.hrm, v) == "AA notify \(Self.hrm) (heart rate: 72 bpm, contact, energy 10 kJ, RR 812.5 ms) 1e480a004003")
        #expect(Watch.notifyText("AA", Self.hrm, v).split(separator: " ").last == "1e480a004003")
        let line = Watch.notifyJSON("AA", Self.hrm, v, time: Date(timeIntervalSince1970: 0))
        #expect(!line.contains("\n"))
        let o = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        #expect(o["event"] as? String == "notify" && o["hex"] as? String == "1e480a004003" && o["time"] as? String == "1970-01-01T00:00:00Z")
        let hr = try #require(o["heartRate"] as? [String: Any])
        #expect(hr["bpm"] as? Int == 72 && hr["sensorContact"] as? Bool == true && hr["energyExpended"] as? Int == 10)
        #expect(hr["rrIntervals"] as? [Double] == [812.5])
        // not reported: null, not absent
        let plain = try #require(try JSONSerialization.jsonObject(with: Data(Watch.notifyJSON("AA", Self.hrm, [0x00, 60]).utf8)) as? [String: Any])
        let p = try #require(plain["heartRate"] as? [String: Any])
        #expect(p["sensorContact"] is NSNull && p["energyExpended"] is NSNull && (p["rrIntervals"] as? [Any])?.isEmpty == true)
    }

    @Test("any bytes at all: never traps, and a decoded rate always comes from a well-formed value")
    func fuzz() {
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<20_000 {
            let n = Int.random(in: 0...12, using: &rng)
            let v = (0..<n).map { _ in UInt8.random(in: 0...255, using: &rng) }
            if case .heartRate(let hr)? = Characteristic.decode(Self.hrm, v) {
                let flags = v[0]
                let expected = 1 + (flags & 1 == 0 ? 1 : 2) + (flags & 8 == 0 ? 0 : 2) + hr.rrIntervals.count * 2
                #expect(v.count == expected, "\(v)")
            }
            _ = Characteristic.decode(Characteristic.batteryLevel, v)
        }
    }
}
