import DBus
import EventLoop
import PairingCore

/// Requests: Connect, Pair, discovery, link set-up (subscriptions, battery), each answering
/// with a `BlueZFailure`; the calls carry explicit timeouts and drop replies of an older bluetoothd.
extension BlueZClient {
    // MARK: - Requests

    public func connect(_ address: DeviceAddress, timeout: Duration, reply: @escaping (BlueZFailure?) -> Void) {
        guard let path = targetPath(address, reply) else { return }
        stats.connectCalls[address, default: 0] += 1
        call(path, Iface.device, "Connect", timeout: timeout) { reply(Self.failure($0)) }
    }

    /// `Adapter1.Powered` (a power cycle's two halves) of the default adapter. BlueZ refuses
    /// `true` while rfkill blocks the adapter (`org.bluez.Error.Blocked`): paird never lifts a
    /// block a person set.
    /// `adapter`: the address of one of the adapters in use (nil: the default adapter).
    public func setAdapterPowered(_ on: Bool, adapter: DeviceAddress? = nil, reply: @escaping (BlueZFailure?) -> Void) {
        let chosen = adapter.map { a in presence.slots.lazy.compactMap(\.adapter.path).first { addressOf(adapter: $0) == a } } ?? adapterPath
        guard let adapterPath = chosen, cache[adapterPath] != nil else {
            loop.enqueue { reply(.adapterUnavailable) }
            return
        }
        call(adapterPath, "org.freedesktop.DBus.Properties", "Set",
             [.string(Iface.adapter), .string("Powered"), .variant(.bool(on))]) { reply(Self.failure($0)) }
    }

    public func disconnect(_ address: DeviceAddress, reply: @escaping (BlueZFailure?) -> Void) {
        guard let path = targetPath(address, reply) else { return }
        link(address) { $0.dropRequested = true }
        call(path, Iface.device, "Disconnect") { reply(Self.failure($0)) }
    }

    /// `Device1.Pair()`; the reply names the device by its address when the call ended (a private
    /// address may have resolved to the identity meanwhile: `BlueZEvent.addressChanged`).
    public func pair(_ address: DeviceAddress, timeout: Duration, reply: @escaping (BlueZFailure?, DeviceAddress) -> Void) {
        guard let path = targetPath(address, { reply($0, address) }) else { return }
        stats.pairCalls[address, default: 0] += 1
        call(path, Iface.device, "Pair", timeout: timeout) { [weak self] result in
            reply(Self.failure(result), self?.address(ofDevicePath: path) ?? address)
        }
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
        guard let adapterPath = adapterPath(for: address), cache[adapterPath] != nil else {
            loop.enqueue { reply?(.adapterUnavailable) }
            return
        }
        let path = devicePath(address) ?? adapterPath + "/" + address.pathComponent
        call(adapterPath, Iface.adapter, "RemoveDevice", [.objectPath(path)]) { reply?(Self.failure($0)) }
    }

    /// `SetDiscoveryFilter {Transport: le, DuplicateData: false, Pattern?}`, then
    /// `StartDiscovery` (unless our session already runs: then only the filter changes).
    ///
    /// No `UUIDs` in the filter: the machine matches each candidate's services itself
    /// (`PairRequest.matches`). BlueZ 5.87 segfaults on the first advertisement that meets a
    /// client's filter with UUIDs (bluez/bluez#2282, fixed after the release; reproduced on the
    /// bed with the bare 5.87), and a distribution shipping that release would lose bluetoothd at
    /// every `pairctl pair --service`. BlueZ filters UUIDs in bluetoothd, not in the controller,
    /// so leaving them out costs D-Bus traffic during a pairing scan only, not radio time.
    /// `adapter`: the address of the ready adapter to scan on; nil: the default adapter.
    public func startDiscovery(address: DeviceAddress?, adapter: DeviceAddress? = nil, reply: @escaping (BlueZFailure?) -> Void) {
        let chosen = adapter.map { a in presence.readyPaths.first { addressOf(adapter: $0) == a } } ?? adapterPath
        guard let adapterPath = chosen, cache[adapterPath] != nil else {
            loop.enqueue { reply(.adapterUnavailable) }
            return
        }
        if let running = discoveryAdapter, running != adapterPath { stopDiscovery() }
        var filter: [String: DBusValue] = [
            "Transport": .string("le"),
            "DuplicateData": .bool(false),
        ]
        if let address { filter["Pattern"] = .string(address.description) }
        let gen = generation
        eachLink { $0.scanRSSI = nil }
        call(adapterPath, Iface.adapter, "SetDiscoveryFilter", [.vardict(filter)]) { [weak self] result in
            guard let self else { return }
            if let failure = Self.failure(result) { reply(failure); return }
            guard gen == self.generation else { reply(.adapterUnavailable); return }
            if self.discoveryAdapter == adapterPath { reply(nil); return }
            self.call(adapterPath, Iface.adapter, "StartDiscovery") { [weak self] result in
                guard let self else { return }
                let failure = Self.failure(result)
                if failure == nil && gen == self.generation { self.discoveryAdapter = adapterPath }
                reply(failure)
            }
        }
    }

    public func stopDiscovery() {
        eachLink { $0.scanRSSI = nil }
        guard let adapterPath = discoveryAdapter else { return }
        discoveryAdapter = nil
        call(adapterPath, Iface.adapter, "StopDiscovery") { [weak self] result in
            if case .failure(let e) = result { self?.note("StopDiscovery: \(e)") }
        }
    }

    /// The service UUIDs the `GattProfile1` lists (BlueZ arms LE auto-connect for bonded devices
    /// offering them). BlueZ reads them at registration, so a change re-registers.
    public func setAutoConnectUUIDs(_ uuids: [String]) {
        var seen = Set<String>()
        present(.wantedUUIDs(uuids.compactMap { ServiceUUID.normalize($0) }.filter { seen.insert($0).inserted }, adapterView()))
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
        link(address) { $0.notifyUUIDs = uuids; $0.live = true }

        let chars = characteristics(under: devPath)
        var outcome: BlueZFailure?
        var outstanding = 1
        let done = {
            outstanding -= 1
            if outstanding == 0 { reply(outcome) }
        }
        var missing: [String] = []
        for uuid in wanted {
            let paths = chars.filter { $0.uuid == uuid }.map(\.path)
            if paths.isEmpty {
                log?("\(address): no characteristic \(uuid) (yet); subscribed when BlueZ shows one")
                missing.append(uuid)
            }
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
        loop.enqueue { [weak self] in
            self?.emit(.characteristicsMissing(address, missing))
            done()
        }
    }

    func readBattery(_ path: String, _ devPath: String, _ address: DeviceAddress, then: @escaping () -> Void) {
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
    func lateSubscribe(_ path: String, _ props: Props) {
        guard let devPath = Self.devicePathPrefix(of: path), let address = ours(devPath), let l = links[address], l.live,
              let raw = props["UUID"]?.string, let uuid = ServiceUUID.normalize(raw),
              l.notifyUUIDs?.contains(uuid) == true else { return }
        stats.lateSubscriptions += 1
        (inform ?? log)?("\(address): \(uuid) appeared at \(path) on a set-up link (BlueZ re-read the services); subscribing")
        if uuid == ServiceUUID.batteryLevel { readBattery(path, devPath, address) {} }
        loop.enqueue { [weak self] in self?.emit(.characteristicAppeared(address, uuid)) }
        let gen = generation
        startNotify(path) { [weak self] failure in
            guard let self, let failure, gen == self.generation else { return }
            self.warning("\(address): StartNotify \(uuid) at \(path): \(failure.token)")
        }
    }

    /// Subscribes again to `characteristic` (128-bit UUID) under the device: `StartNotify` on each
    /// such characteristic, after `StopNotify` where BlueZ still shows it notifying (its session
    /// may be gone inside BlueZ: BENCHMARKS.md finding 17). Replies nil when all succeeded, else
    /// the first failure (`.deviceGone` when the characteristic is not there).
    public func resubscribe(_ address: DeviceAddress, characteristic: String, reply: @escaping (BlueZFailure?) -> Void) {
        guard let devPath = devicePath(address) else {
            loop.enqueue { reply(.deviceGone) }
            return
        }
        let paths = characteristics(under: devPath).filter { $0.uuid == characteristic }.map(\.path)
        guard !paths.isEmpty else {
            loop.enqueue { reply(.deviceGone) }
            return
        }
        var outcome: BlueZFailure?
        var outstanding = paths.count
        let done: (BlueZFailure?) -> Void = { failure in
            if let failure, outcome == nil { outcome = failure }
            outstanding -= 1
            if outstanding == 0 { reply(outcome) }
        }
        for path in paths {
            if cache[path]?[Iface.characteristic]?["Notifying"]?.bool == true {
                resubscribing.insert(path)
                call(path, Iface.characteristic, "StopNotify", timeout: gattTimeout) { [weak self] _ in
                    guard let self else { return }
                    self.startNotify(path) { [weak self] failure in
                        self?.resubscribing.remove(path)
                        done(failure)
                    }
                }
            } else {
                startNotify(path, reply: done)
            }
        }
    }

    /// Probes a silent wearable: reads Battery Level (0x2A19) if the device has it, else
    /// `characteristic` itself if its `Flags` include `read`, with `timeout`. A successful read
    /// proves the link (`.linkProven`) and reports the battery.
    public func probe(_ address: DeviceAddress, characteristic: String, timeout: Duration, reply: @escaping (ProbeResult) -> Void) {
        guard let devPath = devicePath(address) else {
            loop.enqueue { reply(.failed(.deviceGone)) }
            return
        }
        let chars = characteristics(under: devPath)
        let readable = { (path: String) in
            self.cache[path]?[Iface.characteristic]?["Flags"]?.stringArray?.contains("read") ?? false
        }
        let target = chars.first { $0.uuid == ServiceUUID.batteryLevel }?.path
            ?? chars.first { $0.uuid == characteristic && readable($0.path) }?.path
        guard let path = target else {
            loop.enqueue { reply(.unavailable) }
            return
        }
        stats.probes += 1
        let gen = generation
        call(path, Iface.characteristic, "ReadValue", [.vardict([String: DBusValue]())], timeout: timeout) { [weak self] result in
            guard let self else { return }
            switch result {
            case .success(let values):
                if gen == self.generation {
                    self.proven(address)
                    if values.count == 1, let bytes = values[0].bytes, let level = bytes.first,
                       self.cache[path]?[Iface.characteristic]?["UUID"]?.string.flatMap(ServiceUUID.normalize) == ServiceUUID.batteryLevel {
                        self.recordBattery(devPath, address, level)
                    }
                }
                reply(.answered)
            case .failure(let e):
                reply(.failed(BlueZFailure(errorName: e.name, message: e.message)))
            }
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

    /// Every call to bluetoothd goes out with NO_AUTO_START. paird starts bluetoothd only with
    /// `StartServiceByName`, once systemd has said why it went. A call that reached the bus just
    /// after bluetoothd died used to have the bus start it again at once, behind systemd's
    /// verdict: the new start wiped the unit's result, paird never saw the crash, and its
    /// crash-loop guard could not act (seen on 6.1: `paird_bluetoothd_crash`, crash 2 of 3: the
    /// bus activated org.bluez for paird 28 ms before systemd's "Main process exited",
    /// 2026-11-30). Without
    /// bluetoothd such a call now fails at once (`NameHasNoOwner`), like any call to a bluetoothd
    /// that is not there.
    func call(_ path: String, _ interface: String, _ method: String, _ args: [DBusValue] = [],
                      timeout: Duration? = nil, reply: @escaping (Result<[DBusValue], DBusError>) -> Void) {
        connection.call(destination: Bus.name, path: path, interface: interface, method: method, args: args,
                        timeout: timeout ?? shortTimeout, autoStart: false, reply: reply)
    }

    static func failure(_ result: Result<[DBusValue], DBusError>) -> BlueZFailure? {
        switch result {
        case .success: nil
        case .failure(let e): BlueZFailure(errorName: e.name, message: e.message)
        }
    }

    /// The device's object path for a request, or nil after answering `reply` with why not.
    func targetPath(_ address: DeviceAddress, _ reply: @escaping (BlueZFailure?) -> Void) -> String? {
        if let path = devicePath(address) { return path }
        guard owner != nil, let adapterPath = adapterPath(for: address), cache[adapterPath] != nil else {
            loop.enqueue { reply(.adapterUnavailable) }
            return nil
        }
        // Not in the cache: BlueZ decides (a bonded device is always there; else UnknownObject).
        return adapterPath + "/" + address.pathComponent
    }

    func startNotify(_ path: String, reply: @escaping (BlueZFailure?) -> Void) {
        stats.startNotifyCalls += 1
        call(path, Iface.characteristic, "StartNotify", timeout: gattTimeout) { result in
            // InProgress: our own earlier StartNotify is still being set up.
            if case .failure(let e) = result, e.name == "org.bluez.Error.InProgress" { reply(nil); return }
            reply(Self.failure(result))
        }
    }

    func note(_ line: String) { log?(line) }

    func warning(_ line: String) { (warn ?? log)?(line) }

    /// Sends an event; a change of what the auto-connect is armed for goes first (a device's
    /// bond or services changed with the signal behind this event).
    func emit(_ event: BlueZEvent) {
        if case .notification = event {} else { reportArmed() }
        onEvent?(event)
    }

    /// `.autoConnectArmed` when the set of devices it covers changed since it was last sent.
    func reportArmed() {
        var armed = Set<DeviceAddress>()
        for slot in presence.slots {
            guard let path = slot.adapter.path, let held = slot.adapter.application.heldUUIDs, !held.isEmpty else { continue }
            let registered = Set(held)
            for d in cache.devices(under: path) where adapterPath(for: d.address) == path && d.isBonded
                && d.uuids.contains(where: { ServiceUUID.normalize($0).map(registered.contains) ?? false }) {
                armed.insert(d.address)
            }
        }
        guard armed != armedReported else { return }
        armedReported = armed
        onEvent?(.autoConnectArmed(armed))
    }
}
