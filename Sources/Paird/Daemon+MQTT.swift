#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import PairingCore

/// `[MQTT]` at run time: the client started once paird owns its bus name, and each observation
/// turned into the wearable's topics (docs/reference.md, "MQTT topics"). The state and battery
/// are read from the machine (`WearableFacts`), not kept here; only the reason of the last state
/// change is, to send it again after a reconnect.
extension Daemon {
    func openMQTT() {
        guard config.mqtt.enabled else { return }
        let s = config.mqtt.resolved()
        do {
            let password = s.passwordFile.isEmpty ? nil : try s.readPassword()
            let client = try MQTTClient(settings: s, password: password, loop: loop, log: log, now: { [unowned self] in now() })
            client.onConnect = { [unowned self] in
                for a in machine.devices.keys.sorted(by: { $0.description < $1.description }) {
                    publishDiscovery(a)
                    publishWearable(a)
                }
            }
            client.onLink = { [unowned self] in metrics?.model.mqtt(connected: $0 == .connected) }
            metrics?.model.mqtt(connected: false)
            mqtt = client
            log.info("mqtt: broker \(s.host):\(s.port), client id \(s.clientId), topics under \(s.topicPrefix)/")
            client.start()
        } catch {
            log.error("[MQTT]: \(error); paird runs without MQTT")
            mqttOff = "\(error)"
        }
    }

    /// `daemon.mqtt` of `pairctl status` at `now`: nil without `[MQTT]`; `off` (and why) when
    /// it is set but could not be started.
    func mqttStatus(now: Moment) -> StatusDocument.MQTTLink? {
        guard config.mqtt.enabled else { return nil }
        let broker = config.mqtt.host.contains(":") ? "[\(config.mqtt.host)]:\(config.mqtt.port)" : "\(config.mqtt.host):\(config.mqtt.port)"
        guard let mqtt else { return .init(state: "off", broker: broker, since: nil, error: mqttOff) }
        let since = Date(timeIntervalSince1970: now.unixTime - Double(now.uptimeNanoseconds - mqtt.linkSince.uptimeNanoseconds) / 1e9)
        return .init(state: mqtt.link.rawValue, broker: broker, since: since, error: mqtt.awayWhy)
    }

    /// One observation, as the wearable's topics.
    func publishMQTT(_ o: Observation) {
        guard let mqtt else { return }
        switch o {
        case .report(let r):
            guard let a = r.device, r.to != nil || r.kind == .unpaired else { return }
            mqttReasons[a] = r.reasonToken
            if r.kind == .paired || r.kind == .unpaired { publishDiscovery(a) }
            publishWearable(a)
        case .battery(let a, _):
            if let level = machine.battery(of: a) { mqtt.publish("\(a)/battery", "\(level)") }
        case .addressChanged(let old, let new):
            mqttReasons[new] = mqttReasons.removeValue(forKey: old) ?? nil
            publishDiscovery(old, removed: true)
            publishDiscovery(new)
            publishWearable(new)
        case .pairdStarted, .pairdStopping, .alive, .bluetoothdLeft, .adapterReady, .hostSleeping, .hostResumed,
             .bluetoothdCrashed, .tick:
            break
        }
    }

    /// A notification of the wearable `a`, as its message (not retained; dropped while the
    /// broker is away, never queued): `notificationMessage`.
    func publishMQTT(notification a: DeviceAddress, characteristic: String, value: [UInt8]) {
        guard let mqtt, let (suffix, payload) = Self.notificationMessage(characteristic: characteristic, value: value) else { return }
        mqtt.publish("\(a)/\(suffix)", payload, retain: false)
    }

    /// The topic (under `<prefix>/<address>/`) and payload of a notification of `characteristic`
    /// (128-bit UUID, lower case, as BlueZClient reports it): Heart Rate Measurement as
    /// `heart_rate` = its bpm (`72`), decoded as `pairctl watch` decodes it (`Characteristic`);
    /// any other characteristic, and a heart-rate value that does not decode, as `data/<uuid>` =
    /// the value in lower-case hex (`0648`). Battery Level: nil (its `battery` topic says it).
    static func notificationMessage(characteristic: String, value: [UInt8]) -> (suffix: String, payload: String)? {
        switch Characteristic.decode(characteristic, value) {
        case .heartRate(let hr): return ("heart_rate", "\(hr.bpm)")
        case .battery: return nil
        case nil:
            if characteristic == ServiceUUID.batteryLevel { return nil }
            let digits = Array("0123456789abcdef")
            return ("data/\(characteristic)", String(value.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 0xf)]] }))
        }
    }

    /// `state`, `available` and `battery` of `a`, as the machine has them now. An unpaired
    /// wearable: `state` unpaired, `available` offline, its `battery` cleared.
    func publishWearable(_ a: DeviceAddress) {
        guard let mqtt else { return }
        let reason = mqttReasons[a] ?? nil
        guard let d = machine.devices[a] else {
            mqtt.publish("\(a)/state", Self.stateJSON("unpaired", reason: reason))
            mqtt.publish("\(a)/available", "offline")
            mqtt.publish("\(a)/battery", "")
            mqttReasons[a] = nil
            return
        }
        let kind = d.state.kind
        mqtt.publish("\(a)/state", Self.stateJSON(kind.token, reason: reason))
        mqtt.publish("\(a)/available", kind == .connected ? "online" : "offline")
        if let level = machine.battery(of: a) { mqtt.publish("\(a)/battery", "\(level)") }
    }

    /// Home Assistant's discovery configs of `a` (`[MQTT] Discovery`; empty: none), retained:
    /// one device per wearable with a connectivity binary sensor, a battery sensor, a state
    /// sensor and a heart-rate sensor, each available while paird's `status` is `online`. An
    /// unpaired wearable's (or `removed`): empty retained messages, which remove them from Home
    /// Assistant.
    func publishDiscovery(_ a: DeviceAddress, removed: Bool = false) {
        guard let mqtt, !mqtt.settings.discovery.isEmpty else { return }
        let id = "paird_" + String(a.description.filter { $0 != ":" }).lowercased()
        func topic(_ component: String, _ object: String) -> String {
            "\(mqtt.settings.discovery)/\(component)/\(id)/\(object)/config"
        }
        let entities = [("binary_sensor", "connectivity"), ("sensor", "battery"), ("sensor", "state"), ("sensor", "heart_rate")]
        guard !removed, let d = machine.devices[a] else {
            for (c, o) in entities { mqtt.publish(topic: topic(c, o), "", retain: true) }
            return
        }
        let state = "\(mqtt.settings.topicPrefix)/\(a)"
        let name = d.identity.name.isEmpty ? a.description : d.identity.name
        let common = "\"availability_topic\":\(Self.jsonString(mqtt.statusTopic)),\"payload_available\":\"online\",\"payload_not_available\":\"offline\","
            + "\"device\":{\"identifiers\":[\(Self.jsonString(id))],\"name\":\(Self.jsonString(name)),\"connections\":[[\"bluetooth\",\(Self.jsonString(a.description))]],\"manufacturer\":\"paird\"}"
        let states = DeviceState.Kind.allCases.map { Self.jsonString($0.token) }.joined(separator: ",")
        mqtt.publish(topic: topic("binary_sensor", "connectivity"),
                     "{\"name\":\"Connected\",\"unique_id\":\"\(id)_connectivity\",\"device_class\":\"connectivity\",\"state_topic\":\(Self.jsonString(state + "/available")),"
                     + "\"payload_on\":\"online\",\"payload_off\":\"offline\",\(common)}", retain: true)
        mqtt.publish(topic: topic("sensor", "battery"),
                     "{\"name\":\"Battery\",\"unique_id\":\"\(id)_battery\",\"device_class\":\"battery\",\"unit_of_measurement\":\"%\",\"state_class\":\"measurement\","
                     + "\"state_topic\":\(Self.jsonString(state + "/battery")),\(common)}", retain: true)
        mqtt.publish(topic: topic("sensor", "state"),
                     "{\"name\":\"State\",\"unique_id\":\"\(id)_state\",\"device_class\":\"enum\",\"options\":[\(states),\"unpaired\"],"
                     + "\"state_topic\":\(Self.jsonString(state + "/state")),\"value_template\":\"{{ value_json.state }}\",\(common)}", retain: true)
        mqtt.publish(topic: topic("sensor", "heart_rate"),
                     "{\"name\":\"Heart rate\",\"unique_id\":\"\(id)_heart_rate\",\"unit_of_measurement\":\"bpm\",\"state_class\":\"measurement\",\"icon\":\"mdi:heart-pulse\","
                     + "\"state_topic\":\(Self.jsonString(state + "/heart_rate")),\(common)}", retain: true)
    }

    /// `{"state":"waitingForDevice","reason":"link-loss"}`; `"reason":null` without one.
    static func stateJSON(_ state: String, reason: String?) -> String {
        "{\"state\":\(jsonString(state)),\"reason\":\(reason.map(jsonString) ?? "null")}"
    }

    static func jsonString(_ s: String) -> String {
        var out = "\""
        for u in s.unicodeScalars {
            switch u {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                if u.value < 0x20 { out += "\\u" + String(repeating: "0", count: 4 - String(u.value, radix: 16).count) + String(u.value, radix: 16) } else { out.unicodeScalars.append(u) }
            }
        }
        return out + "\""
    }
}
