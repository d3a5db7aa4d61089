import Foundation
import PairingCore
import Testing

/// `[MQTT]` end to end: a real mosquitto broker on loopback (Debian's, unpacked by
/// Tests/install-build-deps.sh into .build/mosquitto; started here on a free port, no system
/// service), the real paird against the mocked BlueZ, and a real subscriber (mosquitto_sub,
/// package mosquitto-clients) whose lines are read from a file as they come.
@Suite("MQTT against a real mosquitto broker", .serialized)
struct MQTTIntegrationTests {
    let watch = MockedHost.watch
    static let mosquitto: String = {
        let unpacked = MetricsIntegrationTests.repo.appendingPathComponent(".build/mosquitto/usr/sbin/mosquitto").path
        return FileManager.default.isExecutableFile(atPath: unpacked) ? unpacked : "/usr/sbin/mosquitto"
    }()

    /// A broker on `port` (loopback, anonymous unless `settings` say otherwise, nothing
    /// persisted); killed by the caller. `settings`: more lines of mosquitto.conf; `probe`: the
    /// arguments mosquitto_pub needs to be let in (`-u`, `-P`), to see it listening.
    static func startBroker(_ host: MockedHost, port: Int, settings: String = "allow_anonymous true\n", probe: [String] = []) throws -> MockedHost.Running {
        let bin = try MetricsIntegrationTests.required(mosquitto)
        let conf = host.dir.appendingPathComponent("mosquitto.conf")
        try "listener \(port) 127.0.0.1\npersistence false\n\(settings)".write(to: conf, atomically: true, encoding: .utf8)
        // Its output (`log_dest stdout`) into mosquitto.log, line-buffered (stdbuf) so that each
        // line is there once it happened; not a `log_dest file` of its own, which it could not
        // write once it drops root for nobody.
        let log = host.dir.appendingPathComponent("mosquitto.log").path
        let broker = host.start("/bin/sh", ["-c", "exec /usr/bin/stdbuf -oL '\(bin)' -c '\(conf.path)' >> '\(log)' 2>&1"], timeout: 300)
        try waitFor("mosquitto listening on \(port)", deadline: 10) {
            host.run("/usr/bin/mosquitto_pub", ["-h", "127.0.0.1", "-p", "\(port)", "-t", "probe", "-m", "x"] + probe, timeout: 5).status == 0
        }
        return broker
    }

    /// `mosquitto_sub -v -t 'paird/#'` writing to a file: each line `topic payload`.
    final class Subscriber {
        let path: String
        let running: MockedHost.Running
        init(_ host: MockedHost, port: Int, name: String = "sub") throws {
            path = host.dir.appendingPathComponent("\(name).txt").path
            running = host.start("/bin/sh", ["-c", "exec /usr/bin/mosquitto_sub -h 127.0.0.1 -p \(port) -v -t 'paird/#' -t 'homeassistant/#' > '\(path)' 2>&1"], timeout: 300)
        }
        var lines: [String] { ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init) }
        /// The payloads of `topic`, in order.
        func payloads(_ topic: String) -> [String] {
            lines.compactMap { $0 == topic || $0 == topic + " (null)" ? "" : $0.hasPrefix(topic + " ") ? String($0.dropFirst(topic.count + 1)) : nil }
        }
        func stop() { kill(running.process.processIdentifier, SIGKILL) }
        /// `waitFor`, its failure showing what was received.
        func wait(_ what: String, deadline: Double, _ condition: () throws -> Bool) throws {
            do { try waitFor(what, deadline: deadline, condition) } catch {
                throw Failure("\(error); received:\n\(lines.joined(separator: "\n"))")
            }
        }
    }

    func config(_ host: MockedHost, port: Int) throws {
        try "[Health]\nFirstDataTimeout = 0\n[MQTT]\nBroker = mqtt://127.0.0.1:\(port)\nTopicPrefix = paird/test\n"
            .write(toFile: host.dir.appendingPathComponent("paird.conf").path, atomically: true, encoding: .utf8)
    }

    @Test("status online, the wearable's state connected then waitingForDevice (link-loss), available; kill -9: offline from the last will")
    func topicsAndWill() throws {
        let host = try MockedHost()
        let port = MetricsIntegrationTests.freePort()
        let broker = try Self.startBroker(host, port: port)
        defer { kill(broker.process.processIdentifier, SIGKILL) }
        let sub = try Subscriber(host, port: port)
        defer { sub.stop() }
        try config(host, port: port)
        try host.startPaird()
        try sub.wait("status online", deadline: 10) { sub.payloads("paird/test/status").last == "online" }

        try host.pairWatchOK()
        let t = "paird/test/\(watch)"
        try sub.wait("state connected", deadline: 10) { sub.payloads("\(t)/state").last?.hasPrefix(#"{"state":"connected","#) == true }
        try sub.wait("available online", deadline: 5) { sub.payloads("\(t)/available").last == "online" }

        // Home Assistant's discovery: one device, its connectivity tied to the wearable's
        // `available` and paird's `status`.
        let ha = "homeassistant/binary_sensor/paird_00aa01010001/connectivity/config"
        try sub.wait("the connectivity config", deadline: 5) { !(sub.payloads(ha).last ?? "").isEmpty }
        let config = try #require(try JSONSerialization.jsonObject(with: Data(sub.payloads(ha).last!.utf8)) as? [String: Any])
        #expect(config["state_topic"] as? String == "\(t)/available")
        #expect(config["availability_topic"] as? String == "paird/test/status")
        #expect(config["device_class"] as? String == "connectivity")
        #expect((config["device"] as? [String: Any])?["name"] as? String == "Watch")
        for entity in ["sensor/paird_00aa01010001/battery", "sensor/paird_00aa01010001/state"] {
            let c = sub.payloads("homeassistant/\(entity)/config").last ?? ""
            #expect((try? JSONSerialization.jsonObject(with: Data(c.utf8))) is [String: Any], "\(entity): \(c)")
        }

        try host.setDevice(watch, "'Connected': False, 'ServicesResolved': False") // link loss
        try sub.wait("state waitingForDevice, reason link-loss", deadline: 10) {
            sub.payloads("\(t)/state").last == #"{"state":"waitingForDevice","reason":"link-loss"}"#
        }
        #expect(sub.payloads("\(t)/available").last == "offline")

        // A subscriber that comes later gets what is retained.
        let late = try Subscriber(host, port: port, name: "late")
        defer { late.stop() }
        try waitFor("the retained state and status", deadline: 5) {
            late.payloads("\(t)/state").last == #"{"state":"waitingForDevice","reason":"link-loss"}"# && late.payloads("paird/test/status").last == "online"
        }

        let pid = try #require(host.paird?.processIdentifier)
        kill(pid, SIGKILL)
        try sub.wait("offline from the broker's last will", deadline: 10) { sub.payloads("paird/test/status").last == "offline" }
        #expect(!host.log().contains("error"), "\(host.log())")
    }

    @Test("a broker down at start: paird starts and answers pairctl status, and connects once the broker is up")
    func brokerDownAtStart() throws {
        let host = try MockedHost()
        let port = MetricsIntegrationTests.freePort()
        try config(host, port: port)
        try host.startPaird()   // waits for pairctl status to answer
        try waitFor("the broker said unreachable, once", deadline: 10) { host.log().contains("mqtt: broker 127.0.0.1:\(port) unreachable") }
        try host.pairWatchOK()
        try waitFor("connected without the broker", deadline: 10) { host.state() == "connected" }

        let broker = try Self.startBroker(host, port: port)
        defer { kill(broker.process.processIdentifier, SIGKILL) }
        let sub = try Subscriber(host, port: port)
        defer { sub.stop() }
        // Backoff 1, 2, 4, 8 s…: the next attempt is within 16 s.
        try sub.wait("status online", deadline: 20) { sub.payloads("paird/test/status").last == "online" }
        try sub.wait("the wearable's state sent on connect", deadline: 5) {
            sub.payloads("paird/test/\(watch)/state").last?.hasPrefix(#"{"state":"connected","#) == true
        }
        let log = host.log()
        #expect(log.components(separatedBy: "unreachable").count == 2, "said once, not per attempt: \(log)")
        #expect(log.contains("mqtt: connected to 127.0.0.1:\(port)"))
        #expect(host.pairctl("status").status == 0)

        // Unpaired: its discovery configs removed (empty retained messages), its state unpaired.
        try host.must(host.pairctl("unpair", watch), "pairctl unpair")
        try sub.wait("the discovery config removed", deadline: 10) {
            sub.payloads("homeassistant/binary_sensor/paird_00aa01010001/connectivity/config").last == ""
                && sub.payloads("paird/test/\(watch)/state").last?.hasPrefix(#"{"state":"unpaired""#) == true
        }

        try host.stopPaird()   // SIGTERM: paird says offline itself
        try sub.wait("offline when paird stops", deadline: 5) { sub.payloads("paird/test/status").last == "offline" }
    }

    @Test("the broker restarted (nothing retained): paird says the loss once, reconnects and sends status and the wearable's state again; the wearable is untouched")
    func brokerRestarted() throws {
        let host = try MockedHost()
        let port = MetricsIntegrationTests.freePort()
        var broker = try Self.startBroker(host, port: port)
        try config(host, port: port)
        try host.startPaird()
        try host.pairWatchOK()
        try waitFor("connected", deadline: 10) { host.state() == "connected" }
        try waitFor("mqtt connected", deadline: 10) { host.log().contains("mqtt: connected to") }
        let disconnects = host.calls("Disconnect"), connects = host.calls("Connect")

        kill(broker.process.processIdentifier, SIGKILL)
        broker.process.waitUntilExit()
        try waitFor("the loss said", deadline: 10) { host.log().contains("mqtt: lost the broker") }
        broker = try Self.startBroker(host, port: port)   // a new broker: no retained message
        defer { kill(broker.process.processIdentifier, SIGKILL) }
        let sub = try Subscriber(host, port: port)
        defer { sub.stop() }
        try sub.wait("status online and the state sent again", deadline: 20) {
            sub.payloads("paird/test/status").last == "online"
                && sub.payloads("paird/test/\(watch)/state").last?.hasPrefix(#"{"state":"connected","#) == true
                && sub.payloads("paird/test/\(watch)/available").last == "online"
        }
        #expect(host.state() == "connected")
        #expect(host.calls("Disconnect") == disconnects && host.calls("Connect") == connects, "the wearable's link untouched")
        let log = host.log()
        #expect(log.components(separatedBy: "mqtt: lost the broker").count == 2, "said once: \(log)")
        #expect(log.components(separatedBy: "mqtt: connected to").count == 3, "\(log)")
    }

    static let vendor = "6e400003-b5a3-f393-e0a9-e50e24dcca9e"

    /// How many times paird called `method` on the characteristic `object` of `addGatt`.
    static func charCalls(_ host: MockedHost, _ object: String, _ method: String) -> Int {
        let r = host.python("print(len(b.get_object('org.bluez', '\(host.devicePath(MockedHost.watch))/service0010/\(object)').GetMethodCalls('\(method)', dbus_interface='org.freedesktop.DBus.Mock')))")
        return Int(r.out.trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
    }

    @Test("notifications: heart rate's bpm on heart_rate in order, another characteristic's hex on data/<uuid>, neither retained; the heart-rate discovery config; what is notified while the broker is away is dropped")
    func heartRateAndData() throws {
        let host = try MockedHost()
        let port = MetricsIntegrationTests.freePort()
        var broker = try Self.startBroker(host, port: port)
        defer { kill(broker.process.processIdentifier, SIGKILL) }
        let sub = try Subscriber(host, port: port)
        defer { sub.stop() }
        try "[Health]\nFirstDataTimeout = 0\n[Notifications]\nSubscribe = \(ServiceUUID.heartRateMeasurement), \(Self.vendor)\nBattery = no\n[MQTT]\nBroker = mqtt://127.0.0.1:\(port)\nTopicPrefix = paird/test\n"
            .write(toFile: host.dir.appendingPathComponent("paird.conf").path, atomically: true, encoding: .utf8)
        try host.addDevice()
        try host.addGatt(characteristics: [(ServiceUUID.heartRateMeasurement, "char0011"), (Self.vendor, "char0014")])
        try host.startPaird()
        try host.must(host.pairWatch(added: true), "pairctl pair")
        try waitFor("connected", deadline: 10) { host.state() == "connected" }
        try waitFor("paird subscribed to both", deadline: 10) {
            Self.charCalls(host, "char0011", "StartNotify") >= 1 && Self.charCalls(host, "char0014", "StartNotify") >= 1
        }
        try sub.wait("status online", deadline: 10) { sub.payloads("paird/test/status").last == "online" }

        let t = "paird/test/\(watch)"
        try host.notifyValue("char0011", [0x00, 60])                  // uint8 rate
        try host.notifyValue("char0011", [0x16, 61, 0x40, 0x03])      // contact, one RR interval
        try host.notifyValue("char0011", [0x01, 0x3E, 0x00])          // uint16 rate
        try host.notifyValue("char0014", [0x00, 0xAB, 0xFF])
        try sub.wait("the three bpm values, in order, and the vendor's hex", deadline: 10) {
            sub.payloads("\(t)/heart_rate") == ["60", "61", "62"] && sub.payloads("\(t)/data/\(Self.vendor)") == ["00abff"]
        }

        let ha = "homeassistant/sensor/paird_00aa01010001/heart_rate/config"
        let config = try #require(try JSONSerialization.jsonObject(with: Data((sub.payloads(ha).last ?? "").utf8)) as? [String: Any])
        #expect(config["state_topic"] as? String == "\(t)/heart_rate")
        #expect(config["unit_of_measurement"] as? String == "bpm")
        #expect(config["state_class"] as? String == "measurement")
        #expect(config["availability_topic"] as? String == "paird/test/status")

        // Not retained: a later subscriber, once it has the retained discovery configs (sent
        // after those under paird/#), has no heart rate nor data.
        let late = try Subscriber(host, port: port, name: "late")
        defer { late.stop() }
        try late.wait("the retained configs", deadline: 5) { !(late.payloads(ha).last ?? "").isEmpty }
        #expect(late.payloads("\(t)/heart_rate").isEmpty && late.payloads("\(t)/data/\(Self.vendor)").isEmpty, "\(late.lines)")

        // The broker away: what is notified meanwhile is dropped, not sent on reconnect.
        kill(broker.process.processIdentifier, SIGKILL)
        broker.process.waitUntilExit()
        try waitFor("the loss said", deadline: 10) { host.log().contains("mqtt: lost the broker") }
        try host.notifyValue("char0011", [0x00, 99])
        broker = try Self.startBroker(host, port: port)
        let again = try Subscriber(host, port: port, name: "again")
        defer { again.stop() }
        try again.wait("status online again", deadline: 20) { again.payloads("paird/test/status").last == "online" }
        try host.notifyValue("char0011", [0x00, 70])
        try again.wait("the value after the reconnect", deadline: 10) { again.payloads("\(t)/heart_rate").contains("70") }
        #expect(again.payloads("\(t)/heart_rate") == ["70"], "the value notified while away is dropped: \(again.lines)")
        #expect(host.state() == "connected")
    }

    /// `paird_mqtt_connected` in the textfile, nil while it is not there.
    static func mqttMetric(_ prom: String) -> Double? {
        let text = (try? String(contentsOfFile: prom, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").first { $0.hasPrefix("paird_mqtt_connected ") }.flatMap { Double($0.split(separator: " ").last!) }
    }

    @Test("the link's state in pairctl status (text and JSON) and paird_mqtt_connected: connected, away once the broker is killed, connected again")
    func linkStateShown() throws {
        let host = try MockedHost()
        let port = MetricsIntegrationTests.freePort()
        var broker = try Self.startBroker(host, port: port)
        defer { kill(broker.process.processIdentifier, SIGKILL) }
        let prom = host.dir.appendingPathComponent("paird.prom").path
        try "[Metrics]\nTextfile = \(prom)\nInterval = 1\n[MQTT]\nBroker = mqtt://127.0.0.1:\(port)\nTopicPrefix = paird/test\n"
            .write(toFile: host.dir.appendingPathComponent("paird.conf").path, atomically: true, encoding: .utf8)
        try host.startPaird()
        try waitFor("status: mqtt connected", deadline: 10) { try host.status().daemon.mqtt?.state == "connected" }
        let link = try #require(try host.status().daemon.mqtt)
        #expect(link.broker == "127.0.0.1:\(port)" && link.since != nil && link.error == nil)
        #expect(host.pairctl("status").out.contains("mqtt: connected to 127.0.0.1:\(port)"))
        try waitFor("paird_mqtt_connected 1", deadline: 10) { Self.mqttMetric(prom) == 1 }

        kill(broker.process.processIdentifier, SIGKILL)
        broker.process.waitUntilExit()
        try waitFor("status: mqtt away", deadline: 10) { try host.status().daemon.mqtt?.state == "away" }
        #expect(try host.status().daemon.mqtt?.error != nil)
        #expect(host.pairctl("status").out.contains("mqtt: AWAY from 127.0.0.1:\(port)"), "\(host.pairctl("status").out)")
        try waitFor("paird_mqtt_connected 0", deadline: 10) { Self.mqttMetric(prom) == 0 }

        broker = try Self.startBroker(host, port: port)
        try waitFor("status: mqtt connected again", deadline: 20) { try host.status().daemon.mqtt?.state == "connected" }
        try waitFor("paird_mqtt_connected 1 again", deadline: 10) { Self.mqttMetric(prom) == 1 }
    }

    @Test("a wrong password: one clear line in paird's log, away (not authorised) in status, no retry storm (the broker's log over a 4 s window)")
    func wrongPassword() throws {
        let host = try MockedHost()
        let port = MetricsIntegrationTests.freePort()
        let users = host.dir.appendingPathComponent("users").path
        let passwd = MetricsIntegrationTests.repo.appendingPathComponent(".build/mosquitto/usr/bin/mosquitto_passwd").path
        try host.must(host.run(try MetricsIntegrationTests.required(passwd), ["-b", "-c", users, "paird", "right"]), "mosquitto_passwd")
        let brokerLog = host.dir.appendingPathComponent("mosquitto.log").path
        let broker = try Self.startBroker(host, port: port, settings: "allow_anonymous false\npassword_file \(users)\nlog_dest stdout\nlog_type all\n",
                                          probe: ["-u", "paird", "-P", "right"])
        defer { kill(broker.process.processIdentifier, SIGKILL) }
        /// The connections the broker accepted on its socket (each attempt of a client is one).
        func attempts() -> Int {
            ((try? String(contentsOfFile: brokerLog, encoding: .utf8)) ?? "").components(separatedBy: "New connection from").count - 1
        }
        let probes = attempts()
        let password = host.dir.appendingPathComponent("mqtt.password").path
        try "wrong\n".write(toFile: password, atomically: true, encoding: .utf8)
        chmod(password, 0o600)
        try "[MQTT]\nBroker = mqtt://127.0.0.1:\(port)\nUsername = paird\nPasswordFile = \(password)\nTopicPrefix = paird/test\n"
            .write(toFile: host.dir.appendingPathComponent("paird.conf").path, atomically: true, encoding: .utf8)
        try host.startPaird()
        try waitFor("the refusal said", deadline: 10) { host.log().contains("refused paird") }
        let link = try #require(try host.status().daemon.mqtt)
        #expect(link.state == "away" && link.error?.contains("not authorised") == true, "\(link)")

        // A storm would be an attempt every second or faster; the backoff after a refusal is
        // 60 s: over 4 s (a bound, not a wait for something to happen) no second attempt.
        let end = Date().addingTimeInterval(4)
        while Date() < end {
            #expect(attempts() - probes <= 1, "attempts: \(attempts() - probes)")
            if attempts() - probes > 1 { break }
            usleep(200_000)
        }
        #expect(attempts() - probes == 1)
        let lines = host.log().split(separator: "\n").filter { $0.contains("mqtt") && !$0.contains("mqtt: broker 127.0.0.1:\(port), client id") }
        #expect(lines.count == 1, "one line: \(lines)")
        #expect(lines.first?.contains("not authorised") == true && lines.first?.contains("PasswordFile") == true, "\(lines)")
        #expect(host.pairctl("status").out.contains("mqtt: AWAY from 127.0.0.1:\(port) (refused: Connection Refused: not authorised."), "\(host.pairctl("status").out)")
    }

    @Test("TLS (mqtts://, CAFile) with a throw-away CA: a CA that did not sign the broker's certificate is refused and said so; the right one connects")
    func tls() throws {
        let host = try MockedHost()
        let port = MetricsIntegrationTests.freePort()
        let d = host.dir.path
        // A CA, the broker's certificate for 127.0.0.1 signed by it, and another CA that signed nothing.
        let openssl = """
            set -e; cd '\(d)'
            openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 1 -subj '/CN=paird test CA'
            openssl req -x509 -newkey rsa:2048 -nodes -keyout other.key -out other.crt -days 1 -subj '/CN=another CA'
            openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj '/CN=127.0.0.1'
            printf 'subjectAltName=IP:127.0.0.1\\n' > ext
            openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 1 -extfile ext
            chmod 644 ca.crt other.crt server.crt server.key
            """
        try host.must(host.run("/bin/sh", ["-c", openssl]), "openssl")
        let broker = try Self.startBroker(host, port: port, settings: "allow_anonymous true\ncafile \(d)/ca.crt\ncertfile \(d)/server.crt\nkeyfile \(d)/server.key\n",
                                          probe: ["--cafile", "\(d)/ca.crt"])
        defer { kill(broker.process.processIdentifier, SIGKILL) }
        let conf = host.dir.appendingPathComponent("paird.conf").path
        func config(ca: String) throws {
            try "[MQTT]\nBroker = mqtts://127.0.0.1:\(port)\nCAFile = \(d)/\(ca)\nTopicPrefix = paird/test\n".write(toFile: conf, atomically: true, encoding: .utf8)
        }

        try config(ca: "other.crt")
        #expect(host.run(MockedHost.pairdBin, ["--check-config", "--config", conf]).status == 0)
        try host.startPaird()
        do { try waitFor("the TLS refusal said", deadline: 10) { host.log().contains("TLS handshake failed") } } catch {
            throw Failure("\(error); paird's log:\n\(host.log())")
        }
        let link = try #require(try host.status().daemon.mqtt)
        #expect(link.state == "away" && link.error?.contains("CAFile \(d)/other.crt") == true, "\(link)")
        #expect(!host.log().contains("mqtt: connected"))
        try host.stopPaird()

        try config(ca: "ca.crt")
        try host.startPaird()
        do { try waitFor("connected over TLS", deadline: 10) { try host.status().daemon.mqtt?.state == "connected" } } catch {
            throw Failure("\(error); paird's log:\n\(host.log())")
        }
        #expect(host.log().contains("mqtt: connected to 127.0.0.1:\(port)"))
        // What paird published is there, read back over TLS.
        let got = host.run("/usr/bin/mosquitto_sub", ["-h", "127.0.0.1", "-p", "\(port)", "--cafile", "\(d)/ca.crt", "-t", "paird/test/status", "-C", "1", "-W", "5"], timeout: 10)
        #expect(got.out == "online\n", "\(got)")
    }

    @Test("without [MQTT] paird loads no libmosquitto and says nothing of MQTT")
    func offByDefault() throws {
        let host = try MockedHost()
        try host.startPaird()
        let pid = try #require(host.paird?.processIdentifier)
        let maps = (try? String(contentsOfFile: "/proc/\(pid)/maps", encoding: .utf8)) ?? ""
        #expect(!maps.contains("libmosquitto"))
        #expect(!host.log().contains("mqtt"))
        #expect(try host.status().daemon.mqtt == nil)
        #expect(!host.pairctl("status").out.contains("mqtt"))
    }
}
