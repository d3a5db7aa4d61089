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
        /// Why the last write of the state file failed (nil while it is written): the intents
        /// since then are not on disk and would not survive a restart.
        public var stateFileError: String?
        /// The link to the MQTT broker (absent: `[MQTT]` is not set).
        public var mqtt: MQTTLink?
        public init(running: Bool, version: String? = nil, error: String? = nil, stateFileError: String? = nil, mqtt: MQTTLink? = nil) {
            self.running = running
            self.version = version
            self.error = error
            self.stateFileError = stateFileError
            self.mqtt = mqtt
        }
    }

    /// paird's link to the MQTT broker of `[MQTT]`.
    public struct MQTTLink: Codable, Sendable, Hashable {
        /// `connecting` (the first attempt since paird started), `connected`, `away` (lost,
        /// unreachable or refused: tried again with a backoff up to 60 s), `off` (set, but not
        /// started: `error` says why).
        public var state: String
        /// `host:port`.
        public var broker: String
        /// When it became `state` (null for `off`).
        public var since: Date?
        /// Why it is `away` or `off` (null otherwise).
        public var error: String?
        public init(state: String, broker: String, since: Date?, error: String?) {
            self.state = state
            self.broker = broker
            self.since = since
            self.error = error
        }
    }

    public struct Adapter: Codable, Sendable, Hashable {
        public var name: String?
        public var address: String?
        public var powered: Bool
        public var present: Bool
        /// In `adapters` only (several configured): paird uses it now (present, powered, registered).
        public var ready: Bool?
        /// In `adapters` only: the selector in paird.conf that names it.
        public var configured: String?
        public init(name: String?, address: String?, powered: Bool, present: Bool, ready: Bool? = nil, configured: String? = nil) {
            self.name = name
            self.address = address
            self.powered = powered
            self.present = present
            self.ready = ready
            self.configured = configured
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

    /// A link-health countdown running for a connected wearable (`LinkHealth`).
    public struct Health: Codable, Sendable, Hashable {
        /// `firstData` (the link's first notification awaited), `silence` (a characteristic that
        /// notifies periodically is watched for silence) or `probe` (a read in flight).
        public var check: String
        /// The characteristic watched or probed (128-bit UUID); null for `firstData`.
        public var characteristic: String?
        /// When it runs out (the link is made again, or for `silence`, the wearable is probed).
        public var deadline: Date
        public init(check: String, characteristic: String?, deadline: Date) {
            self.check = check
            self.characteristic = characteristic
            self.deadline = deadline
        }
    }

    public struct Device: Codable, Sendable, Hashable {
        /// The identity address: what BlueZ reports once bonded (for a wearable with a private
        /// address, the one it distributed with its IRK, not the one it advertises).
        public var address: String
        /// `public` or `random` (random static, or the identity behind resolvable private addresses).
        public var addressType: String
        public var name: String
        public var state: String
        public var wanted: String
        public var since: Date
        public var lastDisconnect: LastDisconnect?
        public var reconnectAttempts: Int
        public var battery: Int?
        public var services: [String]
        /// BlueZ holds paird's GattProfile1 with one of the wearable's services: the kernel's LE
        /// auto-connect brings it back when it advertises again.
        public var autoConnect: Bool
        /// When the state's countdown runs out (paird's next own `Connect()`, or the end of the wait
        /// for a `Connect()`'s answer or for service discovery); null when no timer runs for the
        /// device (connected, disconnected, or out of range with the auto-connect armed: paird
        /// waits on it alone).
        public var nextDeadline: Date?
        /// Why it needs pairing again (`RepairReason`'s token, e.g. `authentication`); null
        /// unless the state is `needsRepair`.
        public var repairReason: String?
        /// Configured characteristics the last set-up link did not show (UUIDs; empty: none).
        public var missingCharacteristics: [String]
        /// When a subscribed characteristic last delivered a notification (null: none since paird started).
        public var lastData: Date?
        /// The link-health countdown running, if any (null: none, as for a wearable that
        /// notifies only on change, or any state but connected).
        public var health: Health?
        /// The address of the adapter that holds its bond (null: not known yet). While another
        /// adapter is in use it waits for this one (`adapterUnavailable`).
        public var bondAdapter: String?

        public init(address: String, name: String, state: String, wanted: String, since: Date,
                    lastDisconnect: LastDisconnect?, reconnectAttempts: Int, battery: Int?, services: [String],
                    autoConnect: Bool = false, nextDeadline: Date? = nil, repairReason: String? = nil,
                    missingCharacteristics: [String] = [], lastData: Date? = nil, health: Health? = nil,
                    addressType: String = "public", bondAdapter: String? = nil) {
            self.address = address
            self.bondAdapter = bondAdapter
            self.addressType = addressType
            self.name = name
            self.state = state
            self.wanted = wanted
            self.since = since
            self.lastDisconnect = lastDisconnect
            self.reconnectAttempts = reconnectAttempts
            self.battery = battery
            self.services = services
            self.autoConnect = autoConnect
            self.nextDeadline = nextDeadline
            self.repairReason = repairReason
            self.missingCharacteristics = missingCharacteristics
            self.lastData = lastData
            self.health = health
        }

        enum CodingKeys: String, CodingKey {
            case address, addressType, name, state, wanted, since, lastDisconnect, reconnectAttempts, battery, services
            case autoConnect, nextDeadline, repairReason, missingCharacteristics, lastData, health, bondAdapter
        }

        // Decoded leniently: a status from a paird older than these two fields still reads.
        public init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            address = try c.decode(String.self, forKey: .address)
            addressType = try c.decodeIfPresent(String.self, forKey: .addressType) ?? "public"
            name = try c.decode(String.self, forKey: .name)
            state = try c.decode(String.self, forKey: .state)
            wanted = try c.decode(String.self, forKey: .wanted)
            since = try c.decode(Date.self, forKey: .since)
            lastDisconnect = try c.decodeIfPresent(LastDisconnect.self, forKey: .lastDisconnect)
            reconnectAttempts = try c.decode(Int.self, forKey: .reconnectAttempts)
            battery = try c.decodeIfPresent(Int.self, forKey: .battery)
            services = try c.decode([String].self, forKey: .services)
            autoConnect = try c.decodeIfPresent(Bool.self, forKey: .autoConnect) ?? false
            nextDeadline = try c.decodeIfPresent(Date.self, forKey: .nextDeadline)
            repairReason = try c.decodeIfPresent(String.self, forKey: .repairReason)
            missingCharacteristics = try c.decodeIfPresent([String].self, forKey: .missingCharacteristics) ?? []
            lastData = try c.decodeIfPresent(Date.self, forKey: .lastData)
            health = try c.decodeIfPresent(Health.self, forKey: .health)
            bondAdapter = try c.decodeIfPresent(String.self, forKey: .bondAdapter)
        }

        // Encode nulls explicitly: a consumer sees `"battery": null`, not a missing key.
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(address, forKey: .address)
            try c.encode(addressType, forKey: .addressType)
            try c.encode(name, forKey: .name)
            try c.encode(state, forKey: .state)
            try c.encode(wanted, forKey: .wanted)
            try c.encode(since, forKey: .since)
            try c.encode(lastDisconnect, forKey: .lastDisconnect)
            try c.encode(reconnectAttempts, forKey: .reconnectAttempts)
            try c.encode(battery, forKey: .battery)
            try c.encode(services, forKey: .services)
            try c.encode(autoConnect, forKey: .autoConnect)
            try c.encode(nextDeadline, forKey: .nextDeadline)
            try c.encode(repairReason, forKey: .repairReason)
            try c.encode(missingCharacteristics, forKey: .missingCharacteristics)
            try c.encode(lastData, forKey: .lastData)
            try c.encode(health, forKey: .health)
            try c.encode(bondAdapter, forKey: .bondAdapter)
        }
    }

    /// bluetoothd as paird follows it, and its last crash (null from a paird older than this).
    public struct Bluetoothd: Codable, Sendable, Hashable {
        /// `unknown` (paird has not yet seen whether `org.bluez` has an owner), `running`, `gone`
        /// (also: not on the bus when paird started), `restarting` (a start is due at
        /// `nextStartAt`), `starting`, `stopped` (by an administrator: paird waits), `gave-up`.
        public var state: String
        public var nextStartAt: Date?
        public var lastCrash: Crash?

        public struct Crash: Codable, Sendable, Hashable {
            public var at: Date
            /// `SIGSEGV`, `exit status 1`, or systemd's result.
            public var cause: String
            /// systemd's `Result` of bluetooth.service.
            public var result: String
            /// What paird did: `started again`, `start 3 in 4 s`, `gave up after 5 starts`, ….
            public var action: String
            /// Seconds from the crash until bluetoothd was on the bus again; null until then.
            public var backAfter: Double?
            /// Wearables linked when it crashed, how many are connected again, and the seconds
            /// from the crash until the last of them was (null until all are).
            public var wearables: Int
            public var wearablesBack: Int
            public var allBackAfter: Double?
            /// Wearables disarmed for it (`needsRepair`: it crashed twice on their link).
            public var disarmed: [String]

            public init(at: Date, cause: String, result: String, action: String, backAfter: Double?, wearables: Int,
                        wearablesBack: Int, allBackAfter: Double?, disarmed: [String]) {
                self.at = at
                self.cause = cause
                self.result = result
                self.action = action
                self.backAfter = backAfter
                self.wearables = wearables
                self.wearablesBack = wearablesBack
                self.allBackAfter = allBackAfter
                self.disarmed = disarmed
            }
        }

        public init(state: String, nextStartAt: Date?, lastCrash: Crash?) {
            self.state = state
            self.nextStartAt = nextStartAt
            self.lastCrash = lastCrash
        }
    }

    /// The host's sleeps as paird followed them (logind's PrepareForSleep; null from a paird older
    /// than this).
    public struct Host: Codable, Sendable, Hashable {
        public var asleep: Bool
        public var lastSleep: Sleep?

        public struct Sleep: Codable, Sendable, Hashable {
            public var at: Date
            public var resumedAt: Date?
            /// Per wanted wearable at the sleep: seconds from the resume until it was connected
            /// again; null while it is not.
            public var back: [Back]

            public struct Back: Codable, Sendable, Hashable {
                public var address: String
                public var after: Double?
                public init(address: String, after: Double?) { self.address = address; self.after = after }
            }

            public init(at: Date, resumedAt: Date?, back: [Back]) {
                self.at = at
                self.resumedAt = resumedAt
                self.back = back
            }
        }

        public init(asleep: Bool, lastSleep: Sleep?) {
            self.asleep = asleep
            self.lastSleep = lastSleep
        }
    }

    public var daemon: Daemon
    /// The default adapter (the first of several).
    public var adapter: Adapter?
    /// Every adapter paird.conf names, when it names several (nil: one).
    public var adapters: [Adapter]?
    public var pairing: Pairing?
    public var devices: [Device]
    public var bluetoothd: Bluetoothd?
    public var host: Host?

    public init(daemon: Daemon, adapter: Adapter?, pairing: Pairing?, devices: [Device], bluetoothd: Bluetoothd? = nil, host: Host? = nil) {
        self.daemon = daemon
        self.adapter = adapter
        self.pairing = pairing
        self.devices = devices
        self.bluetoothd = bluetoothd
        self.host = host
    }

    /// The version of this document's shape (`schemaVersion` in every JSON pairctl prints):
    /// raised when a key changes meaning or goes; new keys may appear without it.
    public static let schemaVersion = 1

    enum CodingKeys: String, CodingKey {
        case schemaVersion, daemon, adapter, adapters, pairing, devices, bluetoothd, host
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        daemon = try c.decode(Daemon.self, forKey: .daemon)
        adapter = try c.decodeIfPresent(Adapter.self, forKey: .adapter)
        adapters = try c.decodeIfPresent([Adapter].self, forKey: .adapters)
        pairing = try c.decodeIfPresent(Pairing.self, forKey: .pairing)
        devices = try c.decode([Device].self, forKey: .devices)
        bluetoothd = try c.decodeIfPresent(Bluetoothd.self, forKey: .bluetoothd)
        host = try c.decodeIfPresent(Host.self, forKey: .host)
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(Self.schemaVersion, forKey: .schemaVersion)
        try c.encode(daemon, forKey: .daemon)
        try c.encode(adapter, forKey: .adapter)
        try c.encodeIfPresent(adapters, forKey: .adapters)
        try c.encode(pairing, forKey: .pairing)
        try c.encode(devices, forKey: .devices)
        try c.encode(bluetoothd, forKey: .bluetoothd)
        try c.encode(host, forKey: .host)
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
