#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The adapter and restoration: reconciling the state file with what BlueZ reports when the
/// adapter is (again) ready, the kernel's auto-connect, the adapter's loss.
extension PairingMachine {
    // MARK: Adapter

    mutating func adapterReady(_ views: [DeviceAddress: BlueZDeviceView], _ now: Moment, _ actions: inout [Action]) {
        adapterUp = true
        if let inUse = adapterInUse { upAdapters.insert(inUse) }
        // A ready adapter is bluetoothd's: it is on the bus, whether or not its owner was reported first.
        if bluetoothd.phase == .unknown { bluetoothd.phase = .present }
        for a in sortedAddresses {
            guard let i = slot[a] else { continue }
            let d = slots[i]
            if d.wanted == .connected, let bondOn = d.identity.adapterAddress, let inUse = adapterInUse, bondOn != inUse {
                // Its bond is on another adapter: it waits for that one, never tried here (and
                // never paired again here but by the user's `pairctl pair`).
                if case .restoring = d.state {
                    move(i, to: .adapterUnavailable, now, &actions, reason: .bondOnAdapter(bondOn))
                }
                continue
            }
            if d.identity.adapterAddress == nil, let inUse = adapterInUse, let v = views[a], v.exists, v.bonded {
                slots[i].identity.adapterAddress = inUse // known from now on (a state file from before)
                actions.append(.persist)
            }
            switch d.state {
            case .restoring, .adapterUnavailable:
                reconcile(i, view: views[a] ?? .absent, now, &actions)
            case .needsRepair(.bluetoothdCrashes), .needsRepair(.bluetoothdDiedOnLink):
                // Disarmed while bluetoothd was gone: the new one has it Trusted again and would
                // let the auto-connect bring up the link that kills it.
                actions.append(.setTrusted(a, false))
                actions.append(.disconnect(a))
            case .connecting, .discovering, .connected, .waitingForDevice, .disconnected, .needsRepair:
                break // already in step with BlueZ
            }
        }
        cleanUpLeftoverPairs(views, now, &actions)
        releaseOnTrial(now, &actions)
        bluetoothd.crashedSinceReady = false
        bluetoothd.leftSinceReady = false
        bluetoothd.starts = 0 // it served: a later crash is not one of a bluetoothd dying at each start
        // Sent even if unchanged: a bluetoothd that came back holds no registration of ours.
        actions.append(.updateAutoConnect(autoConnectUUIDs))
    }

    /// The configured adapter's address, remembered (and written) at first sight; a different
    /// address for the same configuration (the file edited, or `Adapter` set to an address since)
    /// replaces it.
    mutating func adapterIdentified(_ configured: String, _ address: DeviceAddress, _ name: String, _ now: Moment, _ actions: inout [Action]) {
        if let i = adapters.firstIndex(where: { $0.configured == configured }) {
            guard adapters[i].address != address || adapters[i].name != name else { return }
            adapters[i].address = address
            adapters[i].name = name
        } else {
            adapters.append(PersistedAdapter(configured: configured, address: address, name: name, firstSeen: now.unixTime))
        }
        actions.append(.persist)
    }

    /// Restoration: what the state file wants, against what BlueZ has now. A link that is up is
    /// adopted (no disconnect, no reconnect).
    mutating func reconcile(_ i: Int, view: BlueZDeviceView, _ now: Moment, _ actions: inout [Action]) {
        let a = slots[i].address
        let d = slots[i]
        if d.wanted == .disconnected {
            move(i, to: .disconnected, now, &actions)
        } else if !view.exists || !view.bonded {
            // After a crash the bond is what the crash took (a bond made just before it, not yet
            // stored): the reason says so. Either way the wearable waits for `pairctl pair`.
            let reason: RepairReason = bluetoothd.crashedSinceReady ? .bondLostInCrash : view.exists ? .bondRemoved : .deviceRemoved
            move(i, to: .needsRepair(reason: reason), now, &actions)
        } else if view.connected {
            slots[i].ownDrop = nil
            let link = Link(upAt: now, resolved: view.servicesResolved, adoptedUnresolved: !view.servicesResolved)
            if !view.servicesResolved, bluetoothd.leftSinceReady {
                // bluetoothd left the bus while paird watched and came back, and the kernel kept
                // the link: the new bluetoothd made no ATT channel on it and never resolves it
                // (bed run 1: 2 of 2), whatever the reason it left (a crash systemd reported, or
                // one nobody reported: no systemd, systemd silent, a stop). Drop it now, and
                // leave the new link to the auto-connect (head start, then Connect): a Connect()
                // while the old link is still up (it took 2.5 s to go on the bed) is answered at
                // once by it and only adds a round (BENCHMARKS.md §5).
                slots[i].ownDrop = Link(upAt: now)
                actions.append(.disconnect(a))
                return restoreConnect(i, now, &actions, reason: bluetoothd.crashedSinceReady ? .unresolvableAfterCrash : .unresolvableAfterBluetoothdLeft)
            }
            // Unresolved otherwise (a paird restart, bluetoothd seen for the first time), it gets
            // the short resolve countdown: such a link may have no ATT channel and would
            // otherwise wait out the discovery timeout.
            let c = view.servicesResolved ? discoveryCountdown(a, now) : resolveCountdown(a, now)
            move(i, to: .discovering(link, countdown: c), now, &actions)
            if view.servicesResolved { actions.append(.setUpLink(a)) }
        } else {
            restoreConnect(i, now, &actions)
        }
    }

    /// A wanted, bonded device that is not connected after a (re)start, the adapter's return or
    /// the user's `connect`: the kernel's auto-connect first (the wearable may be advertising right
    /// now), one Connect() of our own when `autoConnectHeadStart` runs out, as after any wait;
    /// 0 = Connect() at once.
    mutating func restoreConnect(_ i: Int, _ now: Moment, _ actions: inout [Action], reason: ReportReason? = nil, kind: Report.Kind? = nil) {
        guard headStartNanos > 0 else { return startConnect(i, attempt: 1, now, &actions) }
        let a = slots[i].address
        move(i, to: .waitingForDevice(.fallbackDue(countdown: countdown(.device(a), .fallbackConnect, now.advanced(byNanoseconds: headStartNanos)))),
             now, &actions, reason: reason, kind: kind)
    }

    /// BlueZ arms the kernel's auto-connect for a bonded device offering a service our registered
    /// GattProfile1 lists (bluez-notes §4; 5.66 `probe_service` → `device_set_auto_connect`).
    func autoConnectCovers(_ i: Int) -> Bool {
        autoConnectArmed.contains(slots[i].address)
    }

    /// What BlueZ arms changed. A device waiting on an auto-connect that is no longer armed for
    /// it gets its fallback Connect() timer back; one with a fallback already due keeps it.
    mutating func autoConnectArmed(_ devices: Set<DeviceAddress>, _ now: Moment, _ actions: inout [Action]) {
        autoConnectArmed = devices
        for a in sortedAddresses {
            guard let i = slot[a], slots[i].state == .waitingForDevice(.onAutoConnect), !autoConnectCovers(i) else { continue }
            waitPassively(i, now, &actions)
        }
    }

    /// The address of the adapter a device belongs to: its bond's; a device paird is pairing now,
    /// the pairing's; nil: not known (the adapter in use).
    public func adapterAddress(for a: DeviceAddress) -> DeviceAddress? {
        if let i = slot[a], let own = slots[i].identity.adapterAddress { return own }
        if let p = pairing { return p.request.adapter ?? adapterInUse }
        return nil
    }

    /// Whether the adapter device `i` belongs to is ready.
    func adapterUp(for i: Int) -> Bool {
        guard adapterUp else { return false }
        guard let own = slots[i].identity.adapterAddress, !upAdapters.isEmpty else { return true }
        return upAdapters.contains(own)
    }

    /// One of several adapters went; others are still ready. Only its wearables wait for it, and a
    /// pairing on it ends.
    mutating func adapterGone(_ gone: DeviceAddress, _ now: Moment, _ actions: inout [Action]) {
        upAdapters.remove(gone)
        guard !upAdapters.isEmpty else { return adapterLost(now, &actions) }
        if adapterInUse == gone { adapterInUse = upAdapters.sorted().first }
        loseAdapter(now, &actions) { ($0.identity.adapterAddress ?? gone) == gone }
        if let p = pairing, (p.request.adapter ?? gone) == gone { endPairing(.adapterLost, now, &actions) }
    }

    mutating func adapterLost(_ now: Moment, _ actions: inout [Action]) {
        adapterUp = false
        upAdapters = []
        loseAdapter(now, &actions) { _ in true }
        endPairing(.adapterLost, now, &actions)
    }

    /// The wearables `affected` picks wait for their adapter.
    mutating func loseAdapter(_ now: Moment, _ actions: inout [Action], _ affected: (ManagedDevice) -> Bool) {
        for a in sortedAddresses {
            guard let i = slot[a], affected(slots[i]) else { continue }
            let d = slots[i]
            switch d.state {
            case .restoring, .connecting, .discovering, .connected, .waitingForDevice:
                // A link lost moments ago was the adapter's (bluetoothd stopping drops the links
                // before it powers the adapter off): its last disconnect says so.
                if case .waitingForDevice = d.state, let last = d.lastDisconnect, last.reason != .adapterGone,
                   now.since(last.at) <= DisconnectClassifier.causeWindow {
                    slots[i].lastDisconnect = .init(reason: .adapterGone, at: last.at)
                }
                move(i, to: .adapterUnavailable, now, &actions, reason: .adapterGone)
            case .adapterUnavailable, .disconnected, .needsRepair:
                break
            }
        }
    }
}
