import DBus
import EventLoop
import PairingCore

/// bluetoothd on the bus (NameOwnerChanged, one GetManagedObjects per owner), the adapter's
/// choice, and the bridge to `Presence`: bus traffic in as `Presence.Input`s, its actions out as
/// calls, events and forgotten state. What is decided is decided there.
extension BlueZClient {
    // MARK: - Into the presence machine

    /// Hands the machine an input and carries out what it returns, in order. An input that
    /// arrives while actions run (an event's handler calling back into the client) is queued
    /// behind them.
    func present(_ input: Presence.Input) {
        pendingPresence.append(input)
        guard !drainingPresence else { return }
        drainingPresence = true
        defer { drainingPresence = false }
        while !pendingPresence.isEmpty {
            let next = pendingPresence.removeFirst()
            for action in presence.handle(next) { perform(action) }
        }
    }

    /// The adapters as the cache shows them, and the one each selector picks now.
    func adapterView() -> Presence.AdapterView {
        var adapters: [String: AdapterInfo] = [:]
        for path in cache.adapterPaths { adapters[path] = adapterInfo(path) }
        // (Before a listing the cache is empty: no adapter is picked.)
        return Presence.AdapterView(adapters: adapters, picks: selectors.indices.map(selectAdapter),
                                    mayReselect: selectors == [""] && knownAddress == nil)
    }

    /// The cache changed in a way that may matter to the adapter's choice or readiness.
    func evaluate() { present(.viewChanged(adapterView())) }

    func perform(_ action: Presence.Action) {
        switch action {
        case .announcePresence(let present):
            if !present { note("bluetoothd left the bus") }
            onPresence?(present)
        case .announceAbsent:
            onAbsent?()
        case .list(let owner):
            generation += 1
            listTimer?.cancel()
            list(owner)
        case .listLater(let owner):
            let gen = generation
            listTimer?.cancel()
            listTimer = loop.schedule(after: retryDelay) { [weak self] in
                guard let self, gen == self.generation, !self.stopped else { return }
                self.present(.ownerAppeared(owner))
            }
        case .forgetBluetoothd:
            generation += 1
            cache.clear()
            eachLink { $0.bluetoothdLeft() }
            dropAgentCalls("bluetoothd left the bus")
            retryTimer?.cancel()
            listTimer?.cancel()
        case .releaseAdapter(let path):
            note("no longer using adapter \(path)")
            if discoveryAdapter == path { discoveryAdapter = nil }
            eachLink(where: { adapterPath(for: $0) == path }) { $0.ended() }
        case .registerAgent:
            registerAgent()
        case .unregisterAgent:
            call("/org/bluez", Iface.agentManager, "UnregisterAgent", [.objectPath(Self.agentPath)]) { [weak self] result in
                if case .failure(let e) = result { self?.note("UnregisterAgent: \(e)") }
            }
        case .registerApplication(let adapter, let uuids):
            registerApplication(on: adapter, uuids)
        case .unregisterApplication(let adapter):
            let gen = generation
            call(adapter, Iface.gattManager, "UnregisterApplication", [.objectPath(Self.applicationPath)]) { [weak self] result in
                guard let self else { return }
                if case .failure(let e) = result { self.note("UnregisterApplication on \(adapter): \(e)") }
                guard gen == self.generation else { return }
                self.present(.applicationUnregistered(adapter: adapter))
            }
        case .retryLater(let attempt):
            let gen = generation
            let delay = Self.registrationBackoff(base: retryDelay, max: maxRetryDelay).delay(attempt: attempt, unit: 0)
            retryTimer?.cancel()
            retryTimer = loop.schedule(after: delay) { [weak self] in
                guard let self, gen == self.generation, !self.stopped else { return }
                self.present(.retryDue(self.adapterView()))
            }
        case .armed:
            // Judged from the loop's next turn: it changes inside reply handlers.
            loop.enqueue { [weak self] in self?.reportArmed() }
        case .adapterReady(let info, let k):
            namedOtherSaid[k] = nil
            let a = Self.parseAddress(info.address)
            if Self.bindsByAddress(selectors[k]), let a { knownAddresses[k] = a }
            readyAddresses[k] = a
            note("adapter \(info.name) ready")
            emit(.adapterReady(info, selector: selectors[k]))
        case .adapterGone(let reason, let wasReady, let k):
            let address = readyAddresses[k] ?? knownAddresses[k]
            readyAddresses[k] = nil
            if wasReady {
                // Removals held back for its devices say nothing about their bonds.
                pendingRemovals.removeAll { a in address == nil || adapterOfDevice?(a).map { $0 == address } ?? (k == 0) }
                if pendingRemovals.isEmpty { removalTimer?.cancel() }
                note("adapter gone: \(reason)")
            } else {
                note("no usable adapter: \(reason)")
            }
            // One of several, or the last: the machine's adapterGone(address) or adapterLost.
            if let address, presence.isReady {
                emit(.adapterGone(reason: reason, address: address))
            } else {
                emit(.adapterLost(reason: reason, address: address))
            }
        }
    }

    // MARK: - bluetoothd presence

    func resolveOwner() {
        let gen = generation
        connection.call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                        method: "GetNameOwner", args: [.string(Bus.name)], timeout: shortTimeout) { [weak self] result in
            guard let self, gen == self.generation, !self.stopped else { return }
            switch result {
            case .success(let values):
                guard values.count == 1, let name = values[0].string else { return }
                self.present(.ownerAppeared(name))
            case .failure(let e):
                // Not running: wait for NameOwnerChanged (never activate it ourselves).
                self.note("org.bluez not on the bus (\(e.name)); waiting for it")
                self.present(.ownerAbsent)
            }
        }
    }

    func onNameOwnerChanged(_ message: DBusMessage) {
        guard let args = try? message.arguments(), (try? args.expect("sss")) != nil,
              args[0].string == Bus.name, let old = args[1].string, let new = args[2].string else {
            stats.signalsIgnored += 1
            return
        }
        stats.signalsHandled += 1
        if !old.isEmpty || owner != nil { present(.ownerLeft) }
        if !new.isEmpty { present(.ownerAppeared(new)) }
    }

    /// `GetManagedObjects` of this owner into the cache.
    func list(_ owner: String) {
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
                self.stats.cacheRebuilds += 1
                self.present(.listed(owner: owner, self.adapterView()))
            case .failure(let e):
                self.note("GetManagedObjects: \(e)")
                // bluetoothd may be starting up: try again unless it left meanwhile.
                self.present(.listFailed(owner: owner))
            }
        }
    }

    // MARK: - Adapter selection

    /// The adapter selector `k` picks now.
    func selectAdapter(_ k: Int) -> String? {
        let selector = selectors[k]
        let adapters = cache.adapterPaths.sorted { ($0.utf8.count, $0) < ($1.utf8.count, $1) }
        if Self.bindsByAddress(selector), let known = knownAddresses[k] {
            if let bound = adapters.first(where: { addressOf(adapter: $0) == known }) { return bound }
            let named = selector.isEmpty ? adapters.first : adapters.first { $0 == "/org/bluez/" + selector }
            if let named, namedOtherSaid[k] != named {
                namedOtherSaid[k] = named
                warn?("waiting for adapter \(known): \(named) is another adapter (\(addressOf(adapter: named).map { "\($0)" } ?? "?")), "
                     + "without the wearables' bonds; to use it, set [General] Adapter to its address and pair them again")
            }
            return nil
        }
        if selector.isEmpty { return adapters.first }
        if let address = DeviceAddress(selector) {
            return adapters.first { addressOf(adapter: $0) == address }
        }
        if selector.hasPrefix("/") { return adapters.first { $0 == selector } }
        return adapters.first { $0 == "/org/bluez/" + selector }
    }

    func addressOf(adapter path: String) -> DeviceAddress? {
        cache[path]?[Iface.adapter]?["Address"]?.string.flatMap(Self.parseAddress)
    }
}
