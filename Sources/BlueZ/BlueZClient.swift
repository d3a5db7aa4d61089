import DBus
import EventLoop
import PairingCore

/// A typed client of BlueZ (`org.bluez` on the system bus), driven by the connection's event loop.
///
/// It mirrors BlueZ's object tree (one `GetManagedObjects`, then `InterfacesAdded`/`Removed` and
/// `PropertiesChanged`, updated in place), follows bluetoothd across restarts (`NameOwnerChanged`),
/// keeps an `Agent1` (KeyboardDisplay, never asked to be the default; its questions go to the
/// machine) and a `GattProfile1` application (which
/// arms the kernel's LE auto-connect for the listed service UUIDs) registered, and turns what it
/// sees into `BlueZEvent`s. Requests (`connect`, `pair`, ...) answer with `BlueZFailure`s.
///
/// Everything happens on the loop thread: call it only from there; callbacks come from there.
/// Anything of an unexpected shape from the bus is logged and ignored.
///
/// In parts: the object cache (`ObjectCache.swift`), bluetoothd presence and adapter readiness
/// (decided by `Presence.swift`, carried out by `+Presence`), the Agent1/GattProfile1
/// registrations (`+Registrations`), signal translation
/// (`+Signals`), requests and link set-up (`+Requests`). The state they share is here.
public final class BlueZClient {
    /// Counters, for tests and benchmarks.
    public struct Stats: Sendable, Hashable {
        /// `Device1.Connect` calls issued, per device.
        public var connectCalls: [DeviceAddress: Int] = [:]
        /// `Device1.Pair` calls issued, per device.
        public var pairCalls: [DeviceAddress: Int] = [:]
        /// Successful `RegisterAgent` rounds.
        public var agentRegistrations = 0
        /// Successful `GattManager1.RegisterApplication` calls.
        public var applicationRegistrations = 0
        /// Failed registration attempts (agent or application), retried later.
        public var registrationFailures = 0
        /// `GetManagedObjects` replies applied.
        public var cacheRebuilds = 0
        /// Signals applied to the cache.
        public var signalsHandled = 0
        /// Signals dropped: wrong shape, or not from bluetoothd.
        public var signalsIgnored = 0
        /// `StartNotify` calls issued.
        public var startNotifyCalls = 0
        /// Configured characteristics that appeared on a link already set up (BlueZ re-discovered
        /// the wearable's services) and were subscribed to without a new `setUpLink`.
        public var lateSubscriptions = 0
        /// `Notifying` turned false on a wanted characteristic of a set-up link (`subscriptionEnded`).
        public var subscriptionsEnded = 0
        /// Reads made to probe a silent wearable (`probe`).
        public var probes = 0
        public init() {}
    }

    public static let agentPath = "/org/paird/agent"
    public static let applicationPath = "/org/paird/app"
    public static let profilePath = "/org/paird/app/profile0"

    public let connection: DBusConnection
    /// The configured adapter selectors as given (`[General] Adapter`: "" for the first adapter,
    /// or names, paths and addresses separated by spaces or commas).
    public let selector: String
    /// One per adapter paird uses at once (`[""]` for the first adapter); the first is the
    /// default one (a pairing without `--adapter`, a device whose adapter is not known).
    public let selectors: [String]
    /// The address of the adapter a device belongs to (its bond's, or its pairing's); nil or
    /// unset: the default adapter. The client acts on a device, and hears it, only there.
    public var adapterOfDevice: ((DeviceAddress) -> DeviceAddress?)?
    public var onEvent: ((BlueZEvent) -> Void)?
    /// bluetoothd (`org.bluez`) left the bus (false: called before the `adapterGone` that follows)
    /// or has an owner (true: the first one seen since `start()`, or a new one after leaving).
    public var onPresence: ((Bool) -> Void)?
    /// `org.bluez` had no owner at the first look (`GetNameOwner` after `start()`): bluetoothd is
    /// not running yet. `onPresence(true)` follows when it appears.
    public var onAbsent: (() -> Void)?
    /// Diagnostics (one line each); nil = silent.
    public var log: ((String) -> Void)?
    /// Things a user should hear about (a configured characteristic missing, a subscription that
    /// failed outside a `setUpLink`); nil = sent to `log`.
    public var warn: ((String) -> Void)?
    /// Noteworthy, not wrong (a subscription renewed after BlueZ re-read the services); nil = `log`.
    public var inform: ((String) -> Void)?
    public internal(set) var stats = Stats()

    /// Timeouts for calls that BlueZ answers at once (Connect/Pair take the caller's).
    public var shortTimeout: Duration = .seconds(25)
    /// GATT reads and StartNotify: above the 30 s ATT timeout.
    public var gattTimeout: Duration = .seconds(35)
    /// Delay before a failed registration is tried again; it doubles with each failure in a row,
    /// up to `maxRetryDelay`, so a BlueZ that keeps refusing costs no steady wake-ups.
    public var retryDelay: Duration = .seconds(5)
    public var maxRetryDelay: Duration = .seconds(300)
    let removalGrace: Duration

    // MARK: State

    typealias Props = [String: DBusValue]
    /// bluetoothd's objects as last seen, updated in place.
    var cache = ObjectCache()
    /// Each device's link facts (`DeviceLink`), changed only through `link(_:_:)`.
    var links: [DeviceAddress: DeviceLink] = [:]
    /// bluetoothd, the adapter, the registrations and what was said about them (`Presence.swift`).
    public internal(set) var presence = Presence()
    /// Inputs waiting while `present` carries out actions (`BlueZClient+Presence`).
    var pendingPresence: [Presence.Input] = []
    var drainingPresence = false
    /// bluetoothd's unique name; nil while it is not on the bus.
    var owner: String? { presence.bluetoothd.owner }
    /// Bumped whenever bluetoothd goes or comes: replies of an older generation are dropped.
    var generation = 0
    /// The cache holds a `GetManagedObjects` of the current owner.
    var synced: Bool { presence.listedOwner != nil }
    var started = false
    var stopped = false
    var subscriptions: [SignalSubscription] = []
    var exported = false

    /// The default adapter: the first ready one in the selectors' order, else the first chosen.
    var adapterPath: String? { presence.readyPaths.first ?? presence.slots.lazy.compactMap(\.adapter.path).first }
    /// The address of each selector's adapter, once seen (or remembered from the state file) when
    /// the selector is a name or empty: from then on the adapter is the one with this address,
    /// whatever its index (a dongle plugged back in as hci1 is still ours), and never another
    /// one that took its name (its bonds are not there). An address or path selector is used as is.
    public var knownAddresses: [DeviceAddress?]
    /// The first selector's (the only one's, usually).
    public var knownAddress: DeviceAddress? {
        get { knownAddresses[0] }
        set { knownAddresses[0] = newValue }
    }
    /// Whether the selector is a name or empty (bound to `knownAddress` once seen).
    public var bindsByAddress: Bool { Self.bindsByAddress(selectors[0]) }
    public static func bindsByAddress(_ selector: String) -> Bool { DeviceAddress(selector) == nil && !selector.hasPrefix("/") }
    /// The last adapter seen under a selector's name while paird waits for its known address
    /// (said once per such adapter), per selector.
    var namedOtherSaid: [String?]
    /// The address of each selector's adapter while it is ready (for its `adapterGone`).
    var readyAddresses: [DeviceAddress?]
    /// Between `.adapterReady` and `.adapterGone` of some adapter.
    var ready: Bool { presence.isReady }
    /// BlueZ's agent calls waiting for the machine's answer, by request id.
    var agentCalls: [UInt64: MethodContext] = [:]
    var nextAgentRequest: UInt64 = 0
    /// The UUIDs the profile object shows; what BlueZ read at the last registration.
    var exportedUUIDs: [String] = []
    /// UUIDs BlueZ holds for our application, nil when not registered.
    var registeredUUIDs: [String]? {
        let held = presence.slots.compactMap(\.adapter.application.heldUUIDs)
        return held.isEmpty ? nil : Presence.union(held)
    }
    /// The devices `.autoConnectArmed` last named (none before the first).
    var armedReported: Set<DeviceAddress> = []
    /// The registration retry (`Presence.Action.retryLater`) and the listing's (`listLater`).
    var retryTimer: TimerHandle?
    var listTimer: TimerHandle?

    /// The adapter our discovery runs on (nil: none runs).
    var discoveryAdapter: String?
    var discoveryActive: Bool { discoveryAdapter != nil }
    /// Characteristics `resubscribe` is stopping and starting again: their own Notifying=false is
    /// no end of a subscription.
    var resubscribing: Set<String> = []
    /// Devices removed from BlueZ whose `.deviceRemoved` is held back (`holdRemoval`), in order.
    var pendingRemovals: [DeviceAddress] = []
    var removalTimer: TimerHandle?

    /// How long a device's removal is held back by default. An unplugged controller's devices
    /// go first, then the adapter: BlueZ 5.66 on the bed (`Tests/e2e/paird_replug.py`) sent the
    /// strap's `InterfacesRemoved` 0.19 s before the adapter's `Powered=false` (0.44 s before
    /// the adapter's removal), after 0.7 s of its GATT objects going one by one; with the
    /// earlier 300 ms paird marked the strap needsRepair (device-removed) on every unplug.
    /// A removal outside paird (`bluetoothctl remove`) is reported this much later.
    public static let defaultRemovalGrace: Duration = .seconds(2)

    /// Where the rfkill switches are read (tests point it elsewhere).
    public var rfkillDir = "/sys/class/rfkill"

    /// `selector`: "" for the first adapter, a name (`hci0`), a path, or an adapter address.
    /// `removalGrace`: how long a device's `InterfacesRemoved` is held back before it is
    /// reported; if the adapter goes away meanwhile (controller unplugged, bluetoothd stopping)
    /// it is dropped, since those removals say nothing about the bond.
    public init(connection: DBusConnection, adapter selector: String, removalGrace: Duration = BlueZClient.defaultRemovalGrace) {
        self.connection = connection
        self.selector = selector
        self.selectors = Self.selectors(selector)
        self.removalGrace = removalGrace
        presence = Presence(slots: selectors.count)
        knownAddresses = Array(repeating: nil, count: selectors.count)
        namedOtherSaid = Array(repeating: nil, count: selectors.count)
        readyAddresses = Array(repeating: nil, count: selectors.count)
    }

    /// `[General] Adapter`'s value as selectors: split at spaces and commas, each once; [""] when empty.
    public static func selectors(_ value: String) -> [String] {
        var seen = Set<String>()
        let parts = value.split(whereSeparator: { $0 == " " || $0 == "," || $0 == "\t" }).map(String.init).filter { seen.insert($0).inserted }
        return parts.isEmpty ? [""] : parts
    }

    var loop: EventLoop { connection.loop }

    // MARK: - Public view of the cache

    /// The default adapter (the first ready one in the selectors' order).
    public var adapter: AdapterInfo? { adapterPath.flatMap(adapterInfo) }

    /// Each selector's adapter as the cache shows it now (nil: none chosen or not there), and
    /// whether it is ready.
    public var adaptersInUse: [(selector: String, info: AdapterInfo?, ready: Bool, known: DeviceAddress?)] {
        selectors.indices.map { k in
            let s = presence.slots[k]
            return (selectors[k], s.adapter.path.flatMap(adapterInfo), s.verdict == .ready, knownAddresses[k] ?? readyAddresses[k])
        }
    }

    /// The ready adapter a `pairctl pair --adapter` names (a name, a path or an address); nil:
    /// none of the adapters in use is ready under it. "" names the default adapter.
    public func readyAdapter(named name: String) -> AdapterInfo? {
        let paths = presence.readyPaths
        let path: String?
        if name.isEmpty { path = paths.first }
        else if let a = DeviceAddress(name) { path = paths.first { addressOf(adapter: $0) == a } }
        else if name.hasPrefix("/") { path = paths.first { $0 == name } }
        else { path = paths.first { $0 == "/org/bluez/" + name } }
        return path.flatMap(adapterInfo)
    }

    /// The path of the adapter a device belongs to, if chosen now.
    func adapterPath(for address: DeviceAddress) -> String? {
        guard let want = adapterOfDevice?(address) else { return adapterPath }
        return presence.slots.lazy.compactMap(\.adapter.path).first { self.addressOf(adapter: $0) == want }
    }

    /// The device whose object is at `devPath`, if the object is under the adapter the device
    /// belongs to and that adapter is ready.
    func ours(_ devPath: String) -> DeviceAddress? {
        let parent = Self.parent(of: devPath)
        guard presence.readyPaths.contains(parent), let a = address(ofDevicePath: devPath), adapterPath(for: a) == parent else { return nil }
        return a
    }

    /// The adapter a device belongs to, as the cache shows it.
    func adapterInfo(for address: DeviceAddress) -> AdapterInfo? { adapterPath(for: address).flatMap(adapterInfo) }

    /// The adapter at this path as the cache shows it.
    func adapterInfo(_ path: String) -> AdapterInfo? {
        guard let props = cache[path]?[Iface.adapter] else { return nil }
        let name = String(path.split(separator: "/").last ?? "")
        let powered = props["Powered"]?.bool ?? false
        // PowerState is experimental in 5.66 (bluetoothd -E): sysfs says it for an unpowered adapter.
        let blocked = props["PowerState"]?.string == "off-blocked"
            || (!powered && !RfkillSwitch.blocking(RfkillSwitch.read(dir: rfkillDir), adapter: name).isEmpty)
        return AdapterInfo(path: path, name: name, address: props["Address"]?.string ?? "", powered: powered, rfkillBlocked: blocked)
    }

    /// True between `.adapterReady` and `.adapterGone`.
    public var isReady: Bool { ready }

    /// Whether BlueZ holds our agent / application now (for status and tests).
    public var agentIsRegistered: Bool { presence.agent == .held }
    public var registeredAutoConnectUUIDs: [String]? { registeredUUIDs }

    public func device(_ address: DeviceAddress) -> DeviceInfo? {
        guard let path = devicePath(address) else { return nil }
        return deviceInfo(path)
    }

    /// Every device under the adapters in use, each only under the adapter it belongs to.
    public var devices: [DeviceInfo] {
        presence.slots.compactMap(\.adapter.path).flatMap { path in
            cache.devices(under: path).filter { adapterPath(for: $0.address) == path }
        }
    }

    /// Objects in the cache (all of bluetoothd's, every adapter): for leak and storm checks.
    public var cachedObjectCount: Int { cache.count }

    /// The device's GATT characteristics as now known (path, 128-bit UUID), sorted by path.
    /// Paths change across firmware updates: look them up again after every reconnect.
    public func characteristics(of address: DeviceAddress) -> [(path: String, uuid: String)] {
        guard let devPath = devicePath(address) else { return [] }
        return characteristics(under: devPath).map { ($0.path, $0.uuid) }
    }

    public func views(for addresses: [DeviceAddress]) -> [DeviceAddress: BlueZDeviceView] {
        var result: [DeviceAddress: BlueZDeviceView] = [:]
        for a in addresses { result[a] = device(a)?.view ?? .absent }
        return result
    }

    /// What this adapter's objects say of each address (another adapter's object for the same
    /// address is not looked at: its bond is not this adapter's).
    public func views(for addresses: [DeviceAddress], on adapter: AdapterInfo) -> [DeviceAddress: BlueZDeviceView] {
        var result: [DeviceAddress: BlueZDeviceView] = [:]
        for a in addresses { result[a] = cache.devicePath(a, under: adapter.path).flatMap(deviceInfo)?.view ?? .absent }
        return result
    }

    // MARK: - Lifecycle

    public func start() {
        guard !started else { return }
        started = true
        stopped = false
        exportObjects()
        let om = "org.freedesktop.DBus.ObjectManager"
        watch(MatchRule(sender: Bus.name, interface: om, member: "InterfacesAdded", path: "/")) { $0.onInterfacesAdded($1) }
        watch(MatchRule(sender: Bus.name, interface: om, member: "InterfacesRemoved", path: "/")) { $0.onInterfacesRemoved($1) }
        watch(MatchRule(sender: Bus.name, interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged",
                        pathNamespace: "/org/bluez")) { $0.onPropertiesChanged($1) }
        watch(MatchRule(sender: Bus.name, interface: Iface.device, member: "Disconnected", pathNamespace: "/org/bluez")) {
            $0.onDisconnected($1)
        }
        watch(MatchRule(sender: "org.freedesktop.DBus", interface: "org.freedesktop.DBus", member: "NameOwnerChanged",
                        path: "/org/freedesktop/DBus", arg0: Bus.name)) { $0.onNameOwnerChanged($1) }
        // The AddMatch calls above go out first, so nothing emitted after our snapshot is missed.
        resolveOwner()
    }

    func watch(_ rule: MatchRule, _ handler: @escaping (BlueZClient, DBusMessage) -> Void) {
        let s = connection.subscribe(rule, ready: { [weak self] error in
            if let error { self?.note("AddMatch \(rule.text): \(error)") }
        }) { [weak self] message in
            if let self { handler(self, message) }
        }
        subscriptions.append(s)
    }

    /// Unregisters the agent and the application, stops our discovery, drops subscriptions and
    /// exported objects. `completion` runs once BlueZ answered (or could not).
    public func stop(completion: (() -> Void)? = nil) {
        guard started else { completion?(); return }
        started = false
        stopped = true
        for s in subscriptions { s.cancel() }
        subscriptions = []
        retryTimer?.cancel()
        listTimer?.cancel()
        removalTimer?.cancel()
        pendingRemovals = []
        var outstanding = 1
        let finish = { [weak self] in
            outstanding -= 1
            if outstanding == 0 {
                self?.unexportObjects()
                completion?()
            }
        }
        if owner != nil, let path = discoveryAdapter {
            outstanding += 1
            call(path, Iface.adapter, "StopDiscovery") { _ in finish() }
        }
        discoveryAdapter = nil
        generation += 1
        for action in presence.handle(.stop) {
            switch action {
            case .unregisterAgent:
                outstanding += 1
                call("/org/bluez", Iface.agentManager, "UnregisterAgent", [.objectPath(Self.agentPath)]) { _ in finish() }
            case .unregisterApplication(let adapter):
                outstanding += 1
                call(adapter, Iface.gattManager, "UnregisterApplication", [.objectPath(Self.applicationPath)]) { _ in finish() }
            default:
                perform(action) // the armed UUIDs going empty
            }
        }
        loop.enqueue { finish() }
    }

    // MARK: - Cache questions (ObjectCache answers them)

    func deviceInfo(_ path: String) -> DeviceInfo? { cache.deviceInfo(path) }

    /// The path of the device with this address under the adapter it belongs to.
    func devicePath(_ address: DeviceAddress) -> String? {
        adapterPath(for: address).flatMap { cache.devicePath(address, under: $0) }
    }

    func address(ofDevicePath path: String) -> DeviceAddress? { cache.address(ofDevicePath: path) }

    func deviceAddressForChild(_ path: String) -> DeviceAddress? { cache.deviceAddressForChild(path) }

    func characteristics(under devPath: String) -> [ObjectCache.Characteristic] { cache.characteristics(under: devPath) }

    static func parseAddress(_ text: String) -> DeviceAddress? { ObjectCache.parseAddress(text) }
    static func parent(of path: String) -> String { ObjectCache.parent(of: path) }
    static func devicePathPrefix(of path: String) -> String? { ObjectCache.devicePathPrefix(of: path) }
}

enum Bus {
    static let name = "org.bluez"
}

enum Iface {
    static let adapter = "org.bluez.Adapter1"
    static let device = "org.bluez.Device1"
    static let battery = "org.bluez.Battery1"
    static let characteristic = "org.bluez.GattCharacteristic1"
    static let agentManager = "org.bluez.AgentManager1"
    static let agent = "org.bluez.Agent1"
    static let gattManager = "org.bluez.GattManager1"
    static let gattProfile = "org.bluez.GattProfile1"
}
