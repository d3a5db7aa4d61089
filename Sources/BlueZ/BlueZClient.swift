import DBus
import EventLoop
import PairingCore

/// A typed client of BlueZ (`org.bluez` on the system bus), driven by the connection's event loop.
///
/// It mirrors BlueZ's object tree (one `GetManagedObjects`, then `InterfacesAdded`/`Removed` and
/// `PropertiesChanged`, updated in place), follows bluetoothd across restarts (`NameOwnerChanged`),
/// keeps an `Agent1` (NoInputNoOutput, default agent) and a `GattProfile1` application (which
/// arms the kernel's LE auto-connect for the listed service UUIDs) registered, and turns what it
/// sees into `BlueZEvent`s. Requests (`connect`, `pair`, ...) answer with `BlueZFailure`s.
///
/// Everything happens on the loop thread: call it only from there; callbacks come from there.
/// Anything of an unexpected shape from the bus is logged and ignored.
public final class BlueZClient {
    /// Counters, for tests and benchmarks.
    public struct Stats: Sendable, Hashable {
        /// `Device1.Connect` calls issued, per device.
        public var connectCalls: [DeviceAddress: Int] = [:]
        /// `Device1.Pair` calls issued, per device.
        public var pairCalls: [DeviceAddress: Int] = [:]
        /// Successful `RegisterAgent` (+ `RequestDefaultAgent`) rounds.
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
        public init() {}
    }

    public static let agentPath = "/org/paird/agent"
    public static let applicationPath = "/org/paird/app"
    public static let profilePath = "/org/paird/app/profile0"

    public let connection: DBusConnection
    public let selector: String
    public var onEvent: ((BlueZEvent) -> Void)?
    /// Diagnostics (one line each); nil = silent.
    public var log: ((String) -> Void)?
    /// Things a user should hear about (a configured characteristic missing, a subscription that
    /// failed outside a `setUpLink`); nil = sent to `log`.
    public var warn: ((String) -> Void)?
    /// Noteworthy, not wrong (a subscription renewed after BlueZ re-read the services); nil = `log`.
    public var inform: ((String) -> Void)?
    public private(set) var stats = Stats()

    /// Timeouts for calls that BlueZ answers at once (Connect/Pair take the caller's).
    public var shortTimeout: Duration = .seconds(25)
    /// GATT reads and StartNotify: above the 30 s ATT timeout.
    public var gattTimeout: Duration = .seconds(35)
    /// Delay before a failed registration is tried again; it doubles with each failure in a row,
    /// up to `maxRetryDelay`, so a BlueZ that keeps refusing costs no steady wake-ups.
    public var retryDelay: Duration = .seconds(5)
    public var maxRetryDelay: Duration = .seconds(300)
    /// Failed registrations in a row (reset by a successful one).
    private var registrationRetries = 0
    private let removalGrace: Duration

    // MARK: State

    typealias Props = [String: DBusValue]
    /// bluetoothd's objects as last seen, updated in place.
    private var cache = ObjectCache()
    /// bluetoothd's unique name; nil while it is not on the bus.
    private var owner: String?
    /// Bumped whenever bluetoothd goes or comes: replies of an older generation are dropped.
    private var generation = 0
    /// The cache holds a `GetManagedObjects` of the current owner.
    private var synced = false
    private var started = false
    private var stopped = false
    private var subscriptions: [SignalSubscription] = []
    private var exported = false

    private var adapterPath: String?
    private var ready = false
    /// An adapterGone was emitted without a preceding adapterReady (start without a usable adapter).
    private var announcedAbsence = false
    /// GetNameOwner(org.bluez) said nobody owns it.
    private var bluetoothdKnownAbsent = false

    private enum Registration { case none, pending, settled }
    private var agentState = Registration.none
    private var agentRegistered = false
    /// The UUIDs the profile object shows; what BlueZ read at the last registration.
    private var exportedUUIDs: [String] = []
    private var wantedUUIDs: [String] = []
    /// UUIDs BlueZ holds for our application, nil when not registered. Every change is reported
    /// (`.autoConnectArmed`), from the loop's next turn: it changes inside reply handlers.
    private var registeredUUIDs: [String]? {
        didSet {
            guard registeredUUIDs != oldValue else { return }
            let now = registeredUUIDs ?? []
            loop.enqueue { [weak self] in self?.emit(.autoConnectArmed(now)) }
        }
    }
    private var appBusy = false
    private var appSettled = false
    private var retryTimer: TimerHandle?

    private var discoveryActive = false
    /// Characteristic UUIDs (128-bit) whose `Value` changes are reported, per device.
    private var notifyUUIDs: [DeviceAddress: Set<String>] = [:]
    /// Devices whose link was set up (`setUpLink`) and has not gone down since. A configured
    /// characteristic that appears under one of them — BlueZ re-discovered the services after a
    /// Service Changed indication (a firmware update; in the test bed, the wearable's GATT
    /// application registering again after a bluetoothd restart) — is subscribed to at once:
    /// the subscription made on the old object went with it, and nothing else would renew it.
    private var liveLinks: Set<DeviceAddress> = []
    /// Devices whose current link carried data from the wearable (`.linkProven` sent).
    private var provenLinks: Set<DeviceAddress> = []
    /// Last Battery Level characteristic value, per device path.
    private var pendingRemovals: [DeviceAddress] = []
    private var removalTimer: TimerHandle?

    /// `selector`: "" for the first adapter, a name (`hci0`), a path, or an adapter address.
    /// `removalGrace`: how long a device's `InterfacesRemoved` is held back before it is
    /// reported; if the adapter goes away meanwhile (controller unplugged, bluetoothd stopping)
    /// it is dropped, since those removals say nothing about the bond.
    public init(connection: DBusConnection, adapter selector: String, removalGrace: Duration = .milliseconds(300)) {
        self.connection = connection
        self.selector = selector
        self.removalGrace = removalGrace
    }

    private var loop: EventLoop { connection.loop }

    // MARK: - Public view of the cache

    public var adapter: AdapterInfo? {
        guard let path = adapterPath, let props = cache[path]?[Iface.adapter] else { return nil }
        return AdapterInfo(path: path, name: String(path.split(separator: "/").last ?? ""),
                           address: props["Address"]?.string ?? "", powered: props["Powered"]?.bool ?? false)
    }

    /// True between `.adapterReady` and `.adapterGone`.
    public var isReady: Bool { ready }

    /// Whether BlueZ holds our agent / application now (for status and tests).
    public var agentIsRegistered: Bool { agentRegistered }
    public var registeredAutoConnectUUIDs: [String]? { registeredUUIDs }

    public func device(_ address: DeviceAddress) -> DeviceInfo? {
        guard let path = devicePath(address) else { return nil }
        return deviceInfo(path)
    }

    /// Every device under the selected adapter.
    public var devices: [DeviceInfo] {
        guard let adapterPath else { return [] }
        return cache.devices(under: adapterPath)
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

    private func watch(_ rule: MatchRule, _ handler: @escaping (BlueZClient, DBusMessage) -> Void) {
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
        if owner != nil {
            if discoveryActive, let adapterPath {
                outstanding += 1
                call(adapterPath, Iface.adapter, "StopDiscovery") { _ in finish() }
            }
            if agentRegistered {
                outstanding += 1
                call("/org/bluez", Iface.agentManager, "UnregisterAgent", [.objectPath(Self.agentPath)]) { _ in finish() }
            }
            if registeredUUIDs != nil, let adapterPath {
                outstanding += 1
                call(adapterPath, Iface.gattManager, "UnregisterApplication", [.objectPath(Self.applicationPath)]) { _ in finish() }
            }
        }
        discoveryActive = false
        agentRegistered = false
        registeredUUIDs = nil
        generation += 1
        ready = false
        loop.enqueue { finish() }
    }

    // MARK: - Requests

    public func connect(_ address: DeviceAddress, timeout: Duration, reply: @escaping (BlueZFailure?) -> Void) {
        guard let path = targetPath(address, reply) else { return }
        stats.connectCalls[address, default: 0] += 1
        call(path, Iface.device, "Connect", timeout: timeout) { reply(Self.failure($0)) }
    }

    public func disconnect(_ address: DeviceAddress, reply: @escaping (BlueZFailure?) -> Void) {
        guard let path = targetPath(address, reply) else { return }
        call(path, Iface.device, "Disconnect") { reply(Self.failure($0)) }
    }

    public func pair(_ address: DeviceAddress, timeout: Duration, reply: @escaping (BlueZFailure?) -> Void) {
        guard let path = targetPath(address, reply) else { return }
        stats.pairCalls[address, default: 0] += 1
        call(path, Iface.device, "Pair", timeout: timeout) { reply(Self.failure($0)) }
    }

    public func cancelPairing(_ address: DeviceAddress) {
        guard let path = targetPath(address, { _ in }) else { return }
        call(path, Iface.device, "CancelPairing") { [weak self] result in
            if case .failure(let e) = result { self?.note("CancelPairing \(address): \(e)") }
        }
    }

    public func setTrusted(_ address: DeviceAddress, _ trusted: Bool, reply: ((BlueZFailure?) -> Void)?) {
        guard let path = targetPath(address, { reply?($0) }) else { return }
        call(path, "org.freedesktop.DBus.Properties", "Set",
             [.string(Iface.device), .string("Trusted"), .variant(.bool(trusted))]) { reply?(Self.failure($0)) }
    }

    /// `Adapter1.RemoveDevice`: forgets the device and its keys.
    public func removeDevice(_ address: DeviceAddress, reply: ((BlueZFailure?) -> Void)?) {
        guard let adapterPath, cache[adapterPath] != nil else {
            loop.enqueue { reply?(.adapterUnavailable) }
            return
        }
        let path = devicePath(address) ?? adapterPath + "/" + address.pathComponent
        call(adapterPath, Iface.adapter, "RemoveDevice", [.objectPath(path)]) { reply?(Self.failure($0)) }
    }

    /// `SetDiscoveryFilter {UUIDs, Transport: le, DuplicateData: false, Pattern?}`, then
    /// `StartDiscovery` (unless our session already runs: then only the filter changes).
    public func startDiscovery(serviceUUIDs: [String], address: DeviceAddress?, reply: @escaping (BlueZFailure?) -> Void) {
        guard let adapterPath, cache[adapterPath] != nil else {
            loop.enqueue { reply(.adapterUnavailable) }
            return
        }
        var filter: [String: DBusValue] = [
            "UUIDs": .stringArray(serviceUUIDs.map { ServiceUUID.normalize($0) ?? $0.lowercased() }),
            "Transport": .string("le"),
            "DuplicateData": .bool(false),
        ]
        if let address { filter["Pattern"] = .string(address.description) }
        let gen = generation
        call(adapterPath, Iface.adapter, "SetDiscoveryFilter", [.vardict(filter)]) { [weak self] result in
            guard let self else { return }
            if let failure = Self.failure(result) { reply(failure); return }
            guard gen == self.generation else { reply(.adapterUnavailable); return }
            if self.discoveryActive { reply(nil); return }
            self.call(adapterPath, Iface.adapter, "StartDiscovery") { [weak self] result in
                guard let self else { return }
                let failure = Self.failure(result)
                if failure == nil && gen == self.generation { self.discoveryActive = true }
                reply(failure)
            }
        }
    }

    public func stopDiscovery() {
        guard discoveryActive else { return }
        discoveryActive = false
        guard let adapterPath else { return }
        call(adapterPath, Iface.adapter, "StopDiscovery") { [weak self] result in
            if case .failure(let e) = result { self?.note("StopDiscovery: \(e)") }
        }
    }

    /// The service UUIDs the `GattProfile1` lists (BlueZ arms LE auto-connect for bonded devices
    /// offering them). BlueZ reads them at registration, so a change re-registers.
    public func setAutoConnectUUIDs(_ uuids: [String]) {
        var seen = Set<String>()
        wantedUUIDs = uuids.compactMap { ServiceUUID.normalize($0) }.filter { seen.insert($0).inserted }
        reconcileApplication()
    }

    /// After `ServicesResolved`: finds the characteristics by UUID under the device (never by a
    /// remembered path), `StartNotify`s each one in `subscribe` that exists (missing ones are only
    /// logged), and with `battery` reads and subscribes Battery Level (0x2A19) and reports
    /// `Battery1.Percentage`. Replies nil when done, or the first failure of a wanted subscription.
    public func setUpLink(_ address: DeviceAddress, subscribe: [String], battery: Bool, reply: @escaping (BlueZFailure?) -> Void) {
        guard let devPath = devicePath(address) else {
            loop.enqueue { reply(.deviceGone) }
            return
        }
        let wanted = subscribe.compactMap { ServiceUUID.normalize($0) }
        var uuids = Set(wanted)
        if battery { uuids.insert(ServiceUUID.batteryLevel) }
        notifyUUIDs[address] = uuids
        liveLinks.insert(address)

        let chars = characteristics(under: devPath)
        var outcome: BlueZFailure?
        var outstanding = 1
        let done = {
            outstanding -= 1
            if outstanding == 0 { reply(outcome) }
        }
        for uuid in wanted {
            let paths = chars.filter { $0.uuid == uuid }.map(\.path)
            if paths.isEmpty { warning("\(address): no characteristic \(uuid) (yet); subscribed when BlueZ shows one") }
            for path in paths {
                outstanding += 1
                startNotify(path) { failure in
                    if let failure, outcome == nil { outcome = failure }
                    done()
                }
            }
        }
        if battery {
            if let pct = cache[devPath]?[Iface.battery]?["Percentage"]?.uint8 {
                emit(.battery(address, pct))
            }
            for path in chars.filter({ $0.uuid == ServiceUUID.batteryLevel }).map(\.path) {
                outstanding += 2
                readBattery(path, devPath, address) { done() }
                startNotify(path) { [weak self] failure in
                    if let failure { self?.note("\(address): Battery Level StartNotify: \(failure.token)") }
                    done()
                }
            }
        }
        loop.enqueue { done() }
    }

    private func readBattery(_ path: String, _ devPath: String, _ address: DeviceAddress, then: @escaping () -> Void) {
        let gen = generation
        call(path, Iface.characteristic, "ReadValue", [.vardict([String: DBusValue]())], timeout: gattTimeout) { [weak self] result in
            guard let self else { return }
            switch result {
            case .success(let values):
                if gen == self.generation, values.count == 1, let bytes = values[0].bytes, let level = bytes.first {
                    self.proven(address)
                    self.recordBattery(devPath, address, level)
                } else if gen == self.generation {
                    self.note("\(address): Battery Level read returned \(values.signature)")
                }
            case .failure(let e):
                self.note("\(address): Battery Level read: \(e)")
            }
            then()
        }
    }

    /// A configured characteristic appeared under a device whose link is set up: subscribe.
    private func lateSubscribe(_ path: String, _ props: Props) {
        guard let devPath = Self.devicePathPrefix(of: path), Self.parent(of: devPath) == adapterPath,
              let address = address(ofDevicePath: devPath), liveLinks.contains(address),
              let raw = props["UUID"]?.string, let uuid = ServiceUUID.normalize(raw),
              notifyUUIDs[address]?.contains(uuid) == true else { return }
        stats.lateSubscriptions += 1
        (inform ?? log)?("\(address): \(uuid) appeared at \(path) on a set-up link (BlueZ re-read the services); subscribing")
        if uuid == ServiceUUID.batteryLevel { readBattery(path, devPath, address) {} }
        let gen = generation
        startNotify(path) { [weak self] failure in
            guard let self, let failure, gen == self.generation else { return }
            self.warning("\(address): StartNotify \(uuid) at \(path): \(failure.token)")
        }
    }

    /// `Properties.Get(Device1, ServicesResolved)`: nil when it cannot be read. Updates the cache
    /// (without an event), because a reconnect made by Connect() often signals nothing.
    public func readServicesResolved(_ address: DeviceAddress, reply: @escaping (Bool?) -> Void) {
        guard let path = devicePath(address) else {
            loop.enqueue { reply(nil) }
            return
        }
        let gen = generation
        call(path, "org.freedesktop.DBus.Properties", "Get", [.string(Iface.device), .string("ServicesResolved")]) { [weak self] result in
            guard let self else { return }
            guard case .success(let values) = result, values.count == 1, let value = values[0].unwrapped.bool else {
                reply(nil)
                return
            }
            if gen == self.generation, self.cache[path]?[Iface.device] != nil {
                self.cache.set(path, Iface.device, "ServicesResolved", .bool(value))
            }
            reply(value)
        }
    }

    // MARK: - Calls

    private func call(_ path: String, _ interface: String, _ method: String, _ args: [DBusValue] = [],
                      timeout: Duration? = nil, reply: @escaping (Result<[DBusValue], DBusError>) -> Void) {
        connection.call(destination: Bus.name, path: path, interface: interface, method: method, args: args,
                        timeout: timeout ?? shortTimeout, reply: reply)
    }

    static func failure(_ result: Result<[DBusValue], DBusError>) -> BlueZFailure? {
        switch result {
        case .success: nil
        case .failure(let e): BlueZFailure(errorName: e.name, message: e.message)
        }
    }

    /// The device's object path for a request, or nil after answering `reply` with why not.
    private func targetPath(_ address: DeviceAddress, _ reply: @escaping (BlueZFailure?) -> Void) -> String? {
        if let path = devicePath(address) { return path }
        guard owner != nil, let adapterPath, cache[adapterPath] != nil else {
            loop.enqueue { reply(.adapterUnavailable) }
            return nil
        }
        // Not in the cache: BlueZ decides (a bonded device is always there; else UnknownObject).
        return adapterPath + "/" + address.pathComponent
    }

    private func startNotify(_ path: String, reply: @escaping (BlueZFailure?) -> Void) {
        stats.startNotifyCalls += 1
        call(path, Iface.characteristic, "StartNotify", timeout: gattTimeout) { result in
            // InProgress: our own earlier StartNotify is still being set up.
            if case .failure(let e) = result, e.name == "org.bluez.Error.InProgress" { reply(nil); return }
            reply(Self.failure(result))
        }
    }

    private func note(_ line: String) { log?(line) }

    private func warning(_ line: String) { (warn ?? log)?(line) }

    private func emit(_ event: BlueZEvent) { onEvent?(event) }

    // MARK: - bluetoothd presence

    private func resolveOwner() {
        let gen = generation
        connection.call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                        method: "GetNameOwner", args: [.string(Bus.name)], timeout: shortTimeout) { [weak self] result in
            guard let self, gen == self.generation, !self.stopped else { return }
            switch result {
            case .success(let values):
                guard values.count == 1, let name = values[0].string else { return }
                self.bluetoothdAppeared(name)
            case .failure(let e):
                // Not running: wait for NameOwnerChanged (never activate it ourselves).
                self.note("org.bluez not on the bus (\(e.name)); waiting for it")
                self.bluetoothdKnownAbsent = true
                self.evaluate()
            }
        }
    }

    private func onNameOwnerChanged(_ message: DBusMessage) {
        guard let args = try? message.arguments(), (try? args.expect("sss")) != nil,
              args[0].string == Bus.name, let old = args[1].string, let new = args[2].string else {
            stats.signalsIgnored += 1
            return
        }
        stats.signalsHandled += 1
        if !old.isEmpty || owner != nil { bluetoothdLeft() }
        if !new.isEmpty { bluetoothdAppeared(new) }
    }

    private func bluetoothdLeft() {
        guard owner != nil || synced else { return }
        note("bluetoothd left the bus")
        owner = nil
        generation += 1
        synced = false
        cache.clear()
        liveLinks = []
        provenLinks = []
        agentState = .none
        agentRegistered = false
        registeredUUIDs = nil
        appBusy = false
        appSettled = false
        discoveryActive = false
        retryTimer?.cancel()
        registrationRetries = 0 // a new bluetoothd gets the short delay again
        evaluate()
        adapterPath = nil
    }

    private func bluetoothdAppeared(_ name: String) {
        if owner == name && synced { return }
        if owner != nil && owner != name { bluetoothdLeft() }
        owner = name
        bluetoothdKnownAbsent = false
        generation += 1
        synced = false
        let gen = generation
        call("/", "org.freedesktop.DBus.ObjectManager", "GetManagedObjects") { [weak self] result in
            guard let self, gen == self.generation, !self.stopped else { return }
            switch result {
            case .success(let values):
                guard values.count == 1, let tree = values[0].managedObjects else {
                    self.note("GetManagedObjects returned \(values.signature); ignored")
                    return
                }
                self.cache.replace(with: tree)
                self.synced = true
                self.stats.cacheRebuilds += 1
                self.evaluate()
            case .failure(let e):
                self.note("GetManagedObjects: \(e)")
                // bluetoothd may be starting up: try again unless it left meanwhile.
                self.retryTimer?.cancel()
                self.retryTimer = self.loop.schedule(after: self.retryDelay) { [weak self] in
                    guard let self, gen == self.generation, let owner = self.owner else { return }
                    self.owner = nil
                    self.bluetoothdAppeared(owner)
                }
            }
        }
    }

    // MARK: - Adapter selection, registrations, readiness

    private func selectAdapter() -> String? {
        let adapters = cache.adapterPaths.sorted { ($0.utf8.count, $0) < ($1.utf8.count, $1) }
        if selector.isEmpty { return adapters.first }
        if let address = DeviceAddress(selector) {
            return adapters.first { cache[$0]?[Iface.adapter]?["Address"]?.string.flatMap(Self.parseAddress) == address }
        }
        if selector.hasPrefix("/") { return adapters.first { $0 == selector } }
        return adapters.first { $0 == "/org/bluez/" + selector }
    }

    /// With no adapter configured we use the one that sorts first (hci0 before hci1). bluetoothd
    /// announces its adapters one by one as it starts, so the first one we saw may not be that
    /// one: until we are ready, a better one replaces it. (Seen in the test bed's soak: after a
    /// bluetoothd restart paird took hci1, the wearable's adapter, found its device missing
    /// there and marked it needsRepair.) After ready the choice stands: switching would drop
    /// live links.
    private func reselectIfBetter() {
        guard selector.isEmpty, !ready, !appBusy, let current = adapterPath,
              let best = selectAdapter(), best != current else { return }
        if registeredUUIDs != nil {
            call(current, Iface.gattManager, "UnregisterApplication", [.objectPath(Self.applicationPath)]) { [weak self] result in
                if case .failure(let e) = result { self?.note("UnregisterApplication on \(current): \(e)") }
            }
        }
        note("adapter \(best) sorts before \(current), which was seen first: using \(best)")
        adapterPath = best
        registeredUUIDs = nil
        appSettled = false
        discoveryActive = false
    }

    /// Re-checks which adapter we use, drives the registrations, and emits ready/gone.
    private func evaluate() {
        if synced {
            if let path = adapterPath, cache[path]?[Iface.adapter] == nil {
                // Our adapter vanished: its application registration went with it.
                adapterPath = nil
                registeredUUIDs = nil
                appSettled = false
                appBusy = false
                discoveryActive = false
            }
            reselectIfBetter()
            if adapterPath == nil { adapterPath = selectAdapter() }
            if adapterPath != nil {
                registerAgentIfNeeded()
                reconcileApplication()
            }
        }
        let info = synced ? adapter : nil
        let up = info?.powered == true && agentState == .settled && appSettled
        if up, !ready, let info {
            ready = true
            announcedAbsence = false
            note("adapter \(info.name) ready")
            emit(.adapterReady(info))
        } else if !up, !ready, !announcedAbsence, synced ? info?.powered != true : bluetoothdKnownAbsent {
            // First settled view and no usable adapter (none, wrong selector, powered off, or no
            // bluetoothd at all): say so once, so the daemon can finish starting (READY=1).
            announcedAbsence = true
            let reason = !synced ? AdapterGoneReason.bluetoothdGone : info == nil ? AdapterGoneReason.removed : AdapterGoneReason.poweredOff
            note("no usable adapter: \(reason)")
            emit(.adapterGone(reason: reason))
        } else if !up, ready {
            ready = false
            announcedAbsence = true
            pendingRemovals = []
            removalTimer?.cancel()
            let reason = !synced ? AdapterGoneReason.bluetoothdGone : info == nil ? AdapterGoneReason.removed : AdapterGoneReason.poweredOff
            note("adapter gone: \(reason)")
            emit(.adapterGone(reason: reason))
        }
    }

    private func registerAgentIfNeeded() {
        guard agentState == .none, !stopped else { return }
        agentState = .pending
        let gen = generation
        let path = DBusValue.objectPath(Self.agentPath)
        call("/org/bluez", Iface.agentManager, "RegisterAgent", [path, .string("NoInputNoOutput")]) { [weak self] result in
            guard let self, gen == self.generation else { return }
            if case .failure(let e) = result, e.name != "org.bluez.Error.AlreadyExists" {
                self.note("RegisterAgent: \(e)")
                self.registrationFailed()
                return
            }
            self.call("/org/bluez", Iface.agentManager, "RequestDefaultAgent", [path]) { [weak self] result in
                guard let self, gen == self.generation else { return }
                if case .failure(let e) = result { self.note("RequestDefaultAgent: \(e)") }
                self.agentRegistered = true
                self.registrationRetries = 0
                self.stats.agentRegistrations += 1
                self.agentState = .settled
                self.evaluate()
            }
        }
    }

    private func registrationFailed() {
        stats.registrationFailures += 1
        if agentState == .pending { agentState = .settled }
        scheduleRetry()
        evaluate()
    }

    private func scheduleRetry() {
        guard retryTimer?.isPending != true else { return }
        let gen = generation
        let delay = Self.backoff(base: retryDelay, max: maxRetryDelay, failures: registrationRetries)
        registrationRetries += 1
        retryTimer = loop.schedule(after: delay) { [weak self] in
            guard let self, gen == self.generation, !self.stopped else { return }
            if !self.agentRegistered { self.agentState = .none }
            self.evaluate()
        }
    }

    /// `base` doubled once per earlier failure in a row, at most `max`.
    public static func backoff(base: Duration, max: Duration, failures: Int) -> Duration {
        var delay = base
        for _ in 0..<Swift.max(0, failures) where delay < max { delay *= 2 }
        return Swift.min(delay, max)
    }

    /// Brings BlueZ's registration of our application in line with `wantedUUIDs`, one call at a time.
    private func reconcileApplication() {
        guard synced, !appBusy, !stopped, let adapterPath else { return }
        let gen = generation
        if let registered = registeredUUIDs, registered != wantedUUIDs {
            appBusy = true
            call(adapterPath, Iface.gattManager, "UnregisterApplication", [.objectPath(Self.applicationPath)]) { [weak self] result in
                guard let self, gen == self.generation else { return }
                if case .failure(let e) = result { self.note("UnregisterApplication: \(e)") }
                self.appBusy = false
                self.registeredUUIDs = nil
                self.reconcileApplication()
            }
            return
        }
        guard registeredUUIDs == nil else {
            if !appSettled { appSettled = true; evaluate() }
            return
        }
        guard !wantedUUIDs.isEmpty else {
            // An application with no UUIDs would be refused ("No valid service object found").
            if !appSettled { appSettled = true; evaluate() }
            return
        }
        // After a failure, wait for the retry timer.
        guard !(appSettled && retryTimer?.isPending == true) else { return }
        appBusy = true
        let uuids = wantedUUIDs
        exportedUUIDs = uuids
        call(adapterPath, Iface.gattManager, "RegisterApplication",
             [.objectPath(Self.applicationPath), .vardict([String: DBusValue]())]) { [weak self] result in
            guard let self, gen == self.generation else { return }
            self.appBusy = false
            switch result {
            case .success:
                self.registeredUUIDs = uuids
                self.registrationRetries = 0
                self.stats.applicationRegistrations += 1
                self.note("GATT profile registered for \(uuids.joined(separator: ","))")
            case .failure(let e) where e.name == "org.bluez.Error.AlreadyExists":
                self.registeredUUIDs = uuids
            case .failure(let e):
                self.note("RegisterApplication: \(e)")
                self.appSettled = true
                self.stats.registrationFailures += 1
                self.scheduleRetry()
                self.evaluate()
                return
            }
            self.appSettled = true
            if self.registeredUUIDs != self.wantedUUIDs {
                self.reconcileApplication()
            } else {
                self.evaluate()
            }
        }
    }

    // MARK: - Exported objects: Agent1 and the GattProfile1 application

    private func exportObjects() {
        guard !exported else { return }
        let agent = DBusInterface(Iface.agent)
            .method("Release") { [weak self] _, call in
                self?.note("agent released by BlueZ")
                self?.agentRegistered = false
                call.reply()
            }
            .method("RequestPinCode", in: "o", out: "s") { [weak self] args, call in
                self?.rejectPasskey(args, call)
            }
            .method("RequestPasskey", in: "o", out: "u") { [weak self] args, call in
                self?.rejectPasskey(args, call)
            }
            .method("DisplayPinCode", in: "os") { [weak self] args, call in
                guard self?.fromBluetoothd(call) == true else { return }
                call.reply()
            }
            .method("DisplayPasskey", in: "ouq") { [weak self] _, call in
                guard self?.fromBluetoothd(call) == true else { return }
                call.reply()
            }
            .method("RequestConfirmation", in: "ou") { [weak self] _, call in
                guard self?.fromBluetoothd(call) == true else { return }
                call.reply()
            }
            .method("RequestAuthorization", in: "o") { [weak self] _, call in
                guard self?.fromBluetoothd(call) == true else { return }
                call.reply()
            }
            .method("AuthorizeService", in: "os") { [weak self] _, call in
                guard self?.fromBluetoothd(call) == true else { return }
                call.reply()
            }
            .method("Cancel") { _, call in call.reply() }
        let profile = DBusInterface(Iface.gattProfile)
            .method("Release") { [weak self] _, call in
                self?.note("GATT profile released by BlueZ")
                call.reply()
            }
            .property("UUIDs", signature: "as", emitsChange: false) { [weak self] in
                .stringArray(self?.exportedUUIDs ?? [])
            }
        do {
            try connection.export(path: Self.agentPath, object: DBusObject([agent]))
            try connection.exportObjectManager(at: Self.applicationPath)
            try connection.export(path: Self.profilePath, object: DBusObject([profile]))
            exported = true
        } catch {
            note("cannot export agent/profile: \(error)")
        }
    }

    private func unexportObjects() {
        guard exported else { return }
        connection.unexport(path: Self.profilePath)
        connection.unexportObjectManager(at: Self.applicationPath)
        connection.unexport(path: Self.agentPath)
        exported = false
    }

    /// Only bluetoothd may drive our agent: anyone else on the system bus is refused.
    private func fromBluetoothd(_ call: MethodContext) -> Bool {
        guard let owner, call.sender == owner else {
            call.fail(DBusError(name: "org.bluez.Error.Rejected", message: "not from bluetoothd"))
            return false
        }
        return true
    }

    private func rejectPasskey(_ args: [DBusValue], _ call: MethodContext) {
        guard fromBluetoothd(call) else { return }
        call.fail(DBusError(name: "org.bluez.Error.Rejected", message: "paird pairs with Just Works only"))
        if let path = args.first?.objectPath, let address = address(ofDevicePath: path) {
            note("\(address): BlueZ asked for a passkey; rejected")
            emit(.passkeyRequested(address))
        }
    }

    // MARK: - Signals

    private func fromOwner(_ message: DBusMessage) -> Bool {
        guard synced, let owner, message.sender == owner else {
            stats.signalsIgnored += 1
            return false
        }
        return true
    }

    private func onInterfacesAdded(_ message: DBusMessage) {
        guard fromOwner(message) else { return }
        guard let args = try? message.arguments(), (try? args.expect("oa{sa{sv}}")) != nil,
              let path = args[0].objectPath, let added = args[1].interfacesAndProperties else {
            stats.signalsIgnored += 1
            note("InterfacesAdded of unexpected shape ignored")
            return
        }
        guard path.hasPrefix("/org/bluez") else { stats.signalsIgnored += 1; return }
        stats.signalsHandled += 1
        let wasDevice = cache[path]?[Iface.device] != nil
        let bondedBefore = deviceInfo(path)?.isBonded
        cache.add(path, added)

        if added[Iface.adapter] != nil {
            evaluate()
            return
        }
        guard ready, let address = address(ofDevicePath: path) ?? deviceAddressForChild(path) else { return }
        let isOurDevice = Self.parent(of: path) == adapterPath
        if isOurDevice, added[Iface.device] != nil, let info = deviceInfo(path) {
            if !wasDevice {
                pendingRemovals.removeAll { $0 == address }
                emit(.deviceFound(info))
            } else if let before = bondedBefore, before != info.isBonded {
                emit(.bondChanged(address, bonded: info.isBonded))
            }
        }
        if isOurDevice, let pct = added[Iface.battery]?["Percentage"]?.uint8 {
            emit(.battery(address, pct))
        }
        if let props = added[Iface.characteristic] { lateSubscribe(path, props) }
    }

    private func onInterfacesRemoved(_ message: DBusMessage) {
        guard fromOwner(message) else { return }
        guard let args = try? message.arguments(), (try? args.expect("oas")) != nil,
              let path = args[0].objectPath, let names = args[1].stringArray else {
            stats.signalsIgnored += 1
            note("InterfacesRemoved of unexpected shape ignored")
            return
        }
        stats.signalsHandled += 1
        guard cache[path] != nil else { return }
        let address = Self.parent(of: path) == adapterPath ? self.address(ofDevicePath: path) : nil
        // A removed device takes its children (GATT objects) with it.
        cache.remove(path, names)
        if names.contains(Iface.device) {
            if let address {
                notifyUUIDs[address] = nil
                liveLinks.remove(address)
                provenLinks.remove(address)
                if ready { holdRemoval(address) }
            }
        }
        if names.contains(Iface.adapter) {
            if path == adapterPath {
                cache.removeChildren(of: path)
                liveLinks = []
                provenLinks = []
            }
            evaluate()
        }
    }

    private func holdRemoval(_ address: DeviceAddress) {
        if !pendingRemovals.contains(address) { pendingRemovals.append(address) }
        guard removalTimer?.isPending != true else { return }
        removalTimer = loop.schedule(after: removalGrace) { [weak self] in
            guard let self else { return }
            let due = self.pendingRemovals
            self.pendingRemovals = []
            guard self.ready else { return }
            for a in due where self.ready { self.emit(.deviceRemoved(a)) }
        }
    }

    private func onPropertiesChanged(_ message: DBusMessage) {
        guard fromOwner(message) else { return }
        guard let path = message.path, let args = try? message.arguments(), (try? args.expect("sa{sv}as")) != nil,
              let iface = args[0].string, let changed = args[1].dictionary, let invalidated = args[2].stringArray else {
            stats.signalsIgnored += 1
            note("PropertiesChanged of unexpected shape ignored")
            return
        }
        // Only objects we know (from the snapshot or InterfacesAdded) are tracked.
        guard cache[path]?[iface] != nil else { return }
        stats.signalsHandled += 1
        switch iface {
        case Iface.device: deviceChanged(path, changed, invalidated)
        case Iface.adapter:
            apply(path, iface, changed, invalidated)
            if path == adapterPath || adapterPath == nil { evaluate() }
        case Iface.characteristic:
            apply(path, iface, changed, invalidated)
            if let value = changed["Value"] { characteristicValue(path, value) }
        case Iface.battery:
            apply(path, iface, changed, invalidated)
            if ready, Self.parent(of: path) == adapterPath, let pct = changed["Percentage"]?.uint8,
               let address = address(ofDevicePath: path) {
                emit(.battery(address, pct))
            }
        default:
            apply(path, iface, changed, invalidated)
        }
    }

    private func apply(_ path: String, _ iface: String, _ changed: Props, _ invalidated: [String]) {
        // A value whose type differs from the one BlueZ gave before is junk: the cache keeps the old one.
        for r in cache.apply(path, iface, changed, invalidated) {
            stats.signalsIgnored += 1
            note("\(path) \(iface).\(r.name): \(r.got) instead of \(r.had); ignored")
        }
    }

    private func deviceChanged(_ path: String, _ changed: Props, _ invalidated: [String]) {
        let isOurs = Self.parent(of: path) == adapterPath
        let before = isOurs ? deviceInfo(path) : nil
        apply(path, Iface.device, changed, invalidated)
        guard isOurs, ready, let before, let after = deviceInfo(path) else { return }
        let a = after.address
        // BlueZ 5.66 often emits no Connected=true for a link made by Device1.Connect (seen in the
        // test bed: only ServicesResolved=true), so the cache still says false when the link
        // drops; a resolved link counts as up, or that Connected=false would go unreported.
        // (Going up is judged on Connected alone: a stale ServicesResolved must not hide it.)
        let wasUp = after.connected ? before.connected : before.connected || before.servicesResolved
        if changed["Connected"] != nil, wasUp != after.connected {
            if !after.connected { liveLinks.remove(a); provenLinks.remove(a) }
            emit(.connectedChanged(a, after.connected))
        }
        if changed["ServicesResolved"] != nil, before.servicesResolved != after.servicesResolved {
            if !after.servicesResolved { liveLinks.remove(a); provenLinks.remove(a) }
            emit(.servicesResolvedChanged(a, after.servicesResolved))
        }
        if before.isBonded != after.isBonded { emit(.bondChanged(a, bonded: after.isBonded)) }
        if discoveryActive, ["RSSI", "ManufacturerData", "ServiceData", "UUIDs", "Name", "Alias"].contains(where: { changed[$0] != nil }) {
            emit(.deviceFound(after))
        }
    }

    private func characteristicValue(_ path: String, _ value: DBusValue) {
        guard ready, let devPath = Self.devicePathPrefix(of: path), Self.parent(of: devPath) == adapterPath,
              let address = address(ofDevicePath: devPath), let wanted = notifyUUIDs[address],
              let raw = cache[path]?[Iface.characteristic]?["UUID"]?.string,
              let uuid = ServiceUUID.normalize(raw), wanted.contains(uuid) else { return }
        guard let bytes = value.bytes else {
            note("\(address): Value of \(uuid) is \(value.signature), not ay; ignored")
            return
        }
        proven(address)
        if uuid == ServiceUUID.batteryLevel, let level = bytes.first {
            recordBattery(devPath, address, level)
        }
        emit(.notification(address, characteristic: uuid, value: bytes))
    }

    private func proven(_ address: DeviceAddress) {
        guard ready, provenLinks.insert(address).inserted else { return }
        emit(.linkProven(address))
    }

    private func recordBattery(_ devPath: String, _ address: DeviceAddress, _ level: UInt8) {
        cache.recordBattery(devPath, level)
        emit(.battery(address, level))
    }

    private func onDisconnected(_ message: DBusMessage) {
        guard fromOwner(message) else { return }
        guard let path = message.path, let args = try? message.arguments(), (try? args.expect("ss")) != nil,
              let reason = args[0].string, let text = args[1].string else {
            stats.signalsIgnored += 1
            note("Device1.Disconnected of unexpected shape ignored")
            return
        }
        stats.signalsHandled += 1
        guard ready, Self.parent(of: path) == adapterPath, let address = address(ofDevicePath: path) else { return }
        emit(.disconnectReason(address, reason: reason, message: text))
    }

    // MARK: - Cache questions (ObjectCache answers them)

    private func deviceInfo(_ path: String) -> DeviceInfo? { cache.deviceInfo(path) }

    /// The path of the device with this address under the selected adapter.
    private func devicePath(_ address: DeviceAddress) -> String? {
        adapterPath.flatMap { cache.devicePath(address, under: $0) }
    }

    private func address(ofDevicePath path: String) -> DeviceAddress? { cache.address(ofDevicePath: path) }

    private func deviceAddressForChild(_ path: String) -> DeviceAddress? { cache.deviceAddressForChild(path) }

    private func characteristics(under devPath: String) -> [ObjectCache.Characteristic] { cache.characteristics(under: devPath) }

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
