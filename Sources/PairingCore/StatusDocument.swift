#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// What `pairctl status --json` prints and the daemon's `GetStatus()` returns: one JSON object.
/// Dates are ISO 8601 (UTC); keys are sorted so output is stable.
public struct StatusDocument: Codable, Sendable, Hashable {
    public struct Daemon: Codable, Sendable, Hashable {
        public var running: Bool
        public var version: String?
        public var error: String?
        public init(running: Bool, version: String? = nil, error: String? = nil) {
            self.running = running
            self.version = version
            self.error = error
        }
    }

    public struct Adapter: Codable, Sendable, Hashable {
        public var name: String?
        public var address: String?
        public var powered: Bool
        public var present: Bool
        public init(name: String?, address: String?, powered: Bool, present: Bool) {
            self.name = name
            self.address = address
            self.powered = powered
            self.present = present
        }
    }

    public struct Pairing: Codable, Sendable, Hashable {
        public var phase: String
        public var deadline: Date
        public var device: String?
        public init(phase: String, deadline: Date, device: String?) {
            self.phase = phase
            self.deadline = deadline
            self.device = device
        }
    }

    public struct LastDisconnect: Codable, Sendable, Hashable {
        public var reason: String
        public var at: Date
        public init(reason: String, at: Date) { self.reason = reason; self.at = at }
    }

    public struct Device: Codable, Sendable, Hashable {
        public var address: String
        public var name: String
        public var state: String
        public var wanted: String
        public var since: Date
        public var lastDisconnect: LastDisconnect?
        public var reconnectAttempts: Int
        public var battery: Int?
        public var services: [String]

        public init(address: String, name: String, state: String, wanted: String, since: Date,
                    lastDisconnect: LastDisconnect?, reconnectAttempts: Int, battery: Int?, services: [String]) {
            self.address = address
            self.name = name
            self.state = state
            self.wanted = wanted
            self.since = since
            self.lastDisconnect = lastDisconnect
            self.reconnectAttempts = reconnectAttempts
            self.battery = battery
            self.services = services
        }

        // Encode nulls explicitly: a consumer sees `"battery": null`, not a missing key.
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(address, forKey: .address)
            try c.encode(name, forKey: .name)
            try c.encode(state, forKey: .state)
            try c.encode(wanted, forKey: .wanted)
            try c.encode(since, forKey: .since)
            try c.encode(lastDisconnect, forKey: .lastDisconnect)
            try c.encode(reconnectAttempts, forKey: .reconnectAttempts)
            try c.encode(battery, forKey: .battery)
            try c.encode(services, forKey: .services)
        }
    }

    public var daemon: Daemon
    public var adapter: Adapter?
    public var pairing: Pairing?
    public var devices: [Device]

    public init(daemon: Daemon, adapter: Adapter?, pairing: Pairing?, devices: [Device]) {
        self.daemon = daemon
        self.adapter = adapter
        self.pairing = pairing
        self.devices = devices
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(daemon, forKey: .daemon)
        try c.encode(adapter, forKey: .adapter)
        try c.encode(pairing, forKey: .pairing)
        try c.encode(devices, forKey: .devices)
    }

    public func json(pretty: Bool = true) -> String {
        let e = JSONEncoder()
        e.outputFormatting = pretty ? [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes] : [.sortedKeys, .withoutEscapingSlashes]
        e.dateEncodingStrategy = .iso8601
        return (try? e.encode(self)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
    }

    public static func decode(_ json: String) throws -> StatusDocument {
        let d = JSONDecoder()
        d.dateDecodingStrategy = .iso8601
        return try d.decode(StatusDocument.self, from: Data(json.utf8))
    }
}
