import DBus
import EventLoop
import PairingCore

/// BlueZ's signals (ObjectManager, Properties, Device1.Disconnected) into the cache and into
/// `BlueZEvent`s; anything of an unexpected shape, or not from the current bluetoothd, is ignored.
extension BlueZClient {
    // MARK: - Signals

    func fromOwner(_ message: DBusMessage) -> Bool {
        guard synced, let owner, message.sender == owner else {
            stats.signalsIgnored += 1
            return false
        }
        return true
    }

    func onInterfacesAdded(_ message: DBusMessage) {
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
        let isOurDevice = ours(path) != nil
        if isOurDevice, added[Iface.device] != nil, var info = deviceInfo(path) {
            if !wasDevice {
                pendingRemovals.removeAll { $0 == address }
                info.rssi = heard(address, added[Iface.device]?["RSSI"])
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

    func onInterfacesRemoved(_ message: DBusMessage) {
        guard fromOwner(message) else { return }
        guard let args = try? message.arguments(), (try? args.expect("oas")) != nil,
              let path = args[0].objectPath, let names = args[1].stringArray else {
            stats.signalsIgnored += 1
            note("InterfacesRemoved of unexpected shape ignored")
            return
        }
        stats.signalsHandled += 1
        guard cache[path] != nil else { return }
        let address = ours(path)
        // A removed device takes its children (GATT objects) with it.
        cache.remove(path, names)
        if names.contains(Iface.device) {
            if let address {
                link(address) { $0.notifyUUIDs = nil; $0.ended() }
                if ready { holdRemoval(address) }
            }
        }
        if names.contains(Iface.adapter) {
            if presence.slot(holding: path) != nil {
                let gone = Set(cache.devices(under: path).map(\.address))
                cache.removeChildren(of: path)
                eachLink(where: gone.contains) { $0.ended() }
            }
            evaluate()
        }
    }

    func holdRemoval(_ address: DeviceAddress) {
        if !pendingRemovals.contains(address) { pendingRemovals.append(address) }
        guard removalTimer?.isPending != true else { return }
        removalTimer = loop.schedule(after: removalGrace) { [weak self] in
            guard let self else { return }
            let due = self.pendingRemovals
            self.pendingRemovals = []
            guard self.ready else { return }
            for a in due where self.adapterPath(for: a).map(self.presence.readyPaths.contains) == true {
                self.emit(.deviceRemoved(a))
            }
        }
    }

    func onPropertiesChanged(_ message: DBusMessage) {
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
            evaluate()
        case Iface.characteristic:
            let wasNotifying = cache[path]?[Iface.characteristic]?["Notifying"]?.bool
            apply(path, iface, changed, invalidated)
            if let value = changed["Value"] { characteristicValue(path, value) }
            if changed["Notifying"]?.bool == false, wasNotifying == true { notifyingEnded(path) }
        case Iface.battery:
            apply(path, iface, changed, invalidated)
            if ready, let pct = changed["Percentage"]?.uint8, let address = ours(path) {
                emit(.battery(address, pct))
            }
        default:
            apply(path, iface, changed, invalidated)
        }
    }

    /// Moves what the client keeps per address to the device's new one: its link facts whole
    /// (over any the new address already had), its place among the held-back removals.
    func rekey(_ old: DeviceAddress, to new: DeviceAddress) {
        if let l = links.removeValue(forKey: old) { links[new] = l.merged(over: links[new] ?? DeviceLink()) }
        pendingRemovals = pendingRemovals.map { $0 == old ? new : $0 }
    }

    func apply(_ path: String, _ iface: String, _ changed: Props, _ invalidated: [String]) {
        // A value whose type differs from the one BlueZ gave before is junk: the cache keeps the old one.
        for r in cache.apply(path, iface, changed, invalidated) {
            stats.signalsIgnored += 1
            note("\(path) \(iface).\(r.name): \(r.got) instead of \(r.had); ignored")
        }
    }

    func deviceChanged(_ path: String, _ changed: Props, _ invalidated: [String]) {
        let isOurs = ours(path) != nil
        let before = isOurs ? deviceInfo(path) : nil
        apply(path, Iface.device, changed, invalidated)
        guard isOurs, ready, let before, let after = deviceInfo(path) else { return }
        let a = after.address
        if before.address != a {
            // A private address resolved to the wearable's identity (BlueZ got its IRK while
            // pairing; the object path keeps the first address): what follows is the identity's.
            rekey(before.address, to: a)
            emit(.addressChanged(before.address, to: a, after.addressType))
        }
        // BlueZ 5.66 often emits no Connected=true for a link made by Device1.Connect (seen in the
        // test bed: only ServicesResolved=true), so the cache still says false when the link
        // drops; a resolved link counts as up, or that Connected=false would go unreported.
        // (Going up is judged on Connected alone: a stale ServicesResolved must not hide it.)
        let wasUp = after.connected ? before.connected : before.connected || before.servicesResolved
        // A link paird asked to drop that went down unseen (no Connected=false): BlueZ's
        // Connected=true is the next link's.
        let nextLink = after.connected && before.connected && changed["Connected"]?.bool == true && links[a]?.dropRequested == true
        if changed["Connected"] != nil { link(a) { $0.dropRequested = false } }
        if changed["Connected"] != nil, wasUp != after.connected || nextLink {
            if after.connected {
                emit(.linkUp(a))
            } else {
                var reason: DisconnectClassifier.Reason?
                link(a) { reason = $0.disconnectReason; $0.disconnectReason = nil; $0.ended() }
                emit(.linkDown(a, DisconnectClassifier.Evidence(
                    reason: reason, stillBonded: after.isBonded,
                    deviceExists: true, adapterUp: adapterInfo(Self.parent(of: path))?.powered ?? false)))
            }
        }
        if changed["ServicesResolved"] != nil, before.servicesResolved != after.servicesResolved {
            if !after.servicesResolved { link(a) { $0.ended() } }
            if after.servicesResolved {
                emit(.servicesResolved(a))
            } else if after.connected {
                emit(.servicesLost(a))
            }
        }
        if before.isBonded != after.isBonded { emit(.bondChanged(a, bonded: after.isBonded)) }
        if discoveryActive, ["RSSI", "ManufacturerData", "ServiceData", "UUIDs", "Name", "Alias"].contains(where: { changed[$0] != nil }) {
            var found = after
            found.rssi = heard(a, changed["RSSI"])
            emit(.deviceFound(found))
        }
    }

    /// Records an `RSSI` that arrived while our discovery runs; returns the device's RSSI from
    /// this scan, nil when it was not heard in it. 127 (HCI's "not available") is kept: BlueZ
    /// sent it because it heard an advertisement now (the bed's btvirt reports 127 for every
    /// one, as a controller may that does not measure it).
    func heard(_ a: DeviceAddress, _ rssi: DBusValue?) -> Int? {
        if discoveryActive, let r = rssi?.int16 { link(a) { $0.scanRSSI = Int(r) } }
        return links[a]?.scanRSSI
    }

    func characteristicValue(_ path: String, _ value: DBusValue) {
        guard ready, let devPath = Self.devicePathPrefix(of: path), let address = ours(devPath), let wanted = links[address]?.notifyUUIDs,
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

    /// `Notifying` turned false on a characteristic `setUpLink` subscribed, while its device's link
    /// is up and set up (a link going down ends its subscriptions too: `DeviceLink.live` says which).
    func notifyingEnded(_ path: String) {
        guard ready, !resubscribing.contains(path), let devPath = Self.devicePathPrefix(of: path),
              let address = ours(devPath), links[address]?.live == true,
              cache[devPath]?[Iface.device]?["Connected"]?.bool == true || cache[devPath]?[Iface.device]?["ServicesResolved"]?.bool == true,
              let wanted = links[address]?.notifyUUIDs,
              let raw = cache[path]?[Iface.characteristic]?["UUID"]?.string,
              let uuid = ServiceUUID.normalize(raw), wanted.contains(uuid) else { return }
        stats.subscriptionsEnded += 1
        note("\(address): BlueZ ended the subscription to \(uuid) (Notifying false) while the link is up")
        emit(.subscriptionEnded(address, characteristic: uuid))
    }

    func proven(_ address: DeviceAddress) {
        guard ready, links[address]?.proven != true else { return }
        link(address) { $0.proven = true }
        emit(.linkProven(address))
    }

    func recordBattery(_ devPath: String, _ address: DeviceAddress, _ level: UInt8) {
        cache.recordBattery(devPath, level)
        emit(.battery(address, level))
    }

    func onDisconnected(_ message: DBusMessage) {
        guard fromOwner(message) else { return }
        guard let path = message.path, let args = try? message.arguments(), (try? args.expect("ss")) != nil,
              let reason = args[0].string, let text = args[1].string else {
            stats.signalsIgnored += 1
            note("Device1.Disconnected of unexpected shape ignored")
            return
        }
        stats.signalsHandled += 1
        guard ready, let address = ours(path) else { return }
        // Kept for the `linkDown` that follows (BlueZ sends this just before Connected=false).
        note("\(address): Disconnected \(reason) (\(text))")
        link(address) { $0.disconnectReason = DisconnectClassifier.Reason(name: reason) }
    }
}
