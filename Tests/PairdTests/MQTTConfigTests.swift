import Foundation
import Testing
@testable import Paird
import PairingCore

@Suite("paird.conf [MQTT]")
struct MQTTConfigTests {
    func parse(_ body: String) -> (DaemonConfig, [DaemonConfig.Error]) {
        let (c, _, errors) = DaemonConfig.parseAll("[MQTT]\n" + body, file: "mqtt.conf")
        return (c, errors)
    }

    /// A fresh directory of the test's own (the caller removes it).
    func tempDir() throws -> URL {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("paird-mqtt-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        return dir
    }

    @Test("absent: off, with the documented defaults")
    func defaults() {
        let c = DaemonConfig()
        #expect(!c.mqtt.enabled)
        #expect(c.mqtt.port == 1883 && c.mqtt.discovery == "homeassistant" && c.mqtt.retain)
        let r = c.mqtt.resolved(hostname: "box")
        #expect(r.clientId == "paird-box" && r.topicPrefix == "paird/box")
    }

    @Test("Broker: mqtt://host, host:port, [IPv6]:port")
    func broker() {
        var (c, e) = parse("Broker = mqtt://broker.lan\n")
        #expect(e.isEmpty && c.mqtt.host == "broker.lan" && c.mqtt.port == 1883 && c.mqtt.enabled)
        (c, e) = parse("Broker = mqtt://127.0.0.1:1884\n")
        #expect(e.isEmpty && c.mqtt.host == "127.0.0.1" && c.mqtt.port == 1884)
        (c, e) = parse("Broker = mqtt://[::1]:1885\n")
        #expect(e.isEmpty && c.mqtt.host == "::1" && c.mqtt.port == 1885)
        (c, e) = parse("Broker = mqtts://broker.lan\n")
        #expect(e.isEmpty && c.mqtt.host == "broker.lan" && c.mqtt.port == 8883 && c.mqtt.tls)
        (c, e) = parse("Broker = mqtts://127.0.0.1:18883\nCAFile = /etc/paird/ca.pem\n")
        #expect(e.isEmpty && c.mqtt.port == 18883 && c.mqtt.tls && c.mqtt.caFile == "/etc/paird/ca.pem")
        #expect(!parse("Broker = mqtt://h\n").0.mqtt.tls)
        (c, e) = parse("Broker =\n")
        #expect(e.isEmpty && !c.mqtt.enabled)
    }

    @Test("bad values are refused, each with its line and why", arguments: [
        ("Broker = tcp://h:1883", "Broker must be mqtt://"),
        ("Broker = ssl://h:8883", "Broker must be mqtt://"),
        ("CAFile = ca.pem", "CAFile must be an absolute path"),
        ("Broker = mqtt://h:0", "port must be a number"),
        ("Broker = mqtt://h:99999", "port must be a number"),
        ("Broker = mqtt://", "host name or address"),
        ("Broker = mqtt://h x:1", "host name or address"),
        ("PasswordFile = secret", "absolute path"),
        ("TopicPrefix = paird/#", "TopicPrefix must be"),
        ("TopicPrefix = /paird", "TopicPrefix must be"),
        ("TopicPrefix = paird/", "TopicPrefix must be"),
        ("Discovery = home+assistant", "Discovery must be"),
        ("ClientId = a b", "ClientId must be"),
        ("Retain = maybe", "Retain must be yes or no"),
    ])
    func refused(_ line: String, _ why: String) {
        let (_, e) = parse(line + "\n")
        #expect(e.count == 1)
        #expect(e.first?.line == 2)
        #expect(e.first?.problem.contains(why) == true, "\(e)")
    }

    @Test("Username, ClientId, TopicPrefix, Discovery (empty: off), Retain")
    func keys() {
        let (c, e) = parse("Broker = mqtt://h\nUsername = paird\nClientId = box1\nTopicPrefix = home/paird\nDiscovery =\nRetain = no\n")
        #expect(e.isEmpty)
        #expect(c.mqtt.username == "paird" && c.mqtt.clientId == "box1" && c.mqtt.topicPrefix == "home/paird")
        #expect(c.mqtt.discovery == "" && !c.mqtt.retain)
        #expect(c.mqtt.resolved(hostname: "x").clientId == "box1")
    }

    @Test("PasswordFile: refused unless 0600 or 0640 and owned by root or paird's user; the password is its first line")
    func passwordFile() throws {
        let dir = try tempDir()
        defer { try? FileManager.default.removeItem(at: dir) }
        let pw = dir.appendingPathComponent("pw").path
        try "s3cret\nignored\n".write(toFile: pw, atomically: true, encoding: .utf8)
        for (mode, ok) in [(0o600, true), (0o640, true), (0o644, false), (0o660, false), (0o400, false)] {
            chmod(pw, mode_t(mode))
            #expect((MQTTSettings.passwordFileProblem(pw) == nil) == ok, "mode \(String(mode, radix: 8))")
        }
        chmod(pw, 0o644)
        #expect(MQTTSettings.passwordFileProblem(pw)?.contains("must be 0600 or 0640") == true)
        #expect(MQTTSettings.passwordFileProblem(dir.appendingPathComponent("none").path) != nil)
        chmod(pw, 0o600)
        var s = MQTTSettings()
        s.passwordFile = pw
        #expect(try s.readPassword() == "s3cret")

        // check() reports it against the PasswordFile line.
        let conf = dir.appendingPathComponent("paird.conf").path
        chmod(pw, 0o644)
        try "[MQTT]\nBroker = mqtt://127.0.0.1\nPasswordFile = \(pw)\n".write(toFile: conf, atomically: true, encoding: .utf8)
        let checked = DaemonConfig.check(path: conf)
        #expect(checked.errors.contains { $0.line == 3 && $0.problem.contains("PasswordFile") }, "\(checked.errors)")
    }

    @Test("the state payload is JSON; the reason null without one")
    func stateJSON() throws {
        #expect(Daemon.stateJSON("waitingForDevice", reason: "link-loss") == #"{"state":"waitingForDevice","reason":"link-loss"}"#)
        #expect(Daemon.stateJSON("connected", reason: nil) == #"{"state":"connected","reason":null}"#)
        let odd = Daemon.stateJSON("x", reason: "a\"b\\c\u{1}")
        let doc = try JSONSerialization.jsonObject(with: Data(odd.utf8)) as? [String: String]
        #expect(doc?["reason"] == "a\"b\\c\u{1}")
    }

    @Test("notifications: heart rate as its bpm (decoded as pairctl watch does), others and malformed heart rate as data/<uuid> in hex, Battery Level none")
    func notificationPayloads() {
        let hrm = ServiceUUID.heartRateMeasurement
        #expect(Daemon.notificationMessage(characteristic: hrm, value: [0x06, 0x48])! == ("heart_rate", "72"))
        // uint16 rate, contact, energy, RR: the bpm alone.
        #expect(Daemon.notificationMessage(characteristic: hrm, value: [0x1F, 0x2C, 0x01, 0x0C, 0x00, 0x40, 0x03])! == ("heart_rate", "300"))
        // Malformed (flags say uint16, one byte): not a bpm, its hex on the data topic.
        #expect(Daemon.notificationMessage(characteristic: hrm, value: [0x01, 0x48])! == ("data/\(hrm)", "0148"))
        let vendor = "6e400003-b5a3-f393-e0a9-e50e24dcca9e"
        #expect(Daemon.notificationMessage(characteristic: vendor, value: [0x00, 0xAB, 0xFF])! == ("data/\(vendor)", "00abff"))
        #expect(Daemon.notificationMessage(characteristic: vendor, value: [])! == ("data/\(vendor)", ""))
        #expect(Daemon.notificationMessage(characteristic: ServiceUUID.batteryLevel, value: [87]) == nil)
    }

    @Test("--check-config: CAFile must be readable, and only with mqtts://")
    func caFileChecked() throws {
        let dir = try tempDir()
        defer { try? FileManager.default.removeItem(at: dir) }
        let conf = dir.appendingPathComponent("paird.conf").path
        let ca = dir.appendingPathComponent("ca.pem").path
        func check(_ body: String) throws -> [DaemonConfig.Error] {
            try ("[MQTT]\n" + body).write(toFile: conf, atomically: true, encoding: .utf8)
            return DaemonConfig.check(path: conf).errors.filter { $0.problem.contains("CAFile") }
        }
        var e = try check("Broker = mqtts://127.0.0.1\nCAFile = \(ca)\n")
        #expect(e.count == 1 && e.first?.line == 3 && e.first?.problem.contains("No such file") == true, "\(e)")
        try "-----BEGIN CERTIFICATE-----\n".write(toFile: ca, atomically: true, encoding: .utf8)
        e = try check("Broker = mqtts://127.0.0.1\nCAFile = \(ca)\n")
        #expect(e.isEmpty, "\(e)")
        e = try check("Broker = mqtt://127.0.0.1\nCAFile = \(ca)\n")
        #expect(e.first?.problem.contains("use mqtts://") == true, "\(e)")
    }
}
