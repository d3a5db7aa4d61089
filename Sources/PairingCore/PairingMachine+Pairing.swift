#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The pairing session (`pairctl pair`): scanning → pairing → settling → the device joins.
extension PairingMachine {
    // MARK: Pairing

    mutating func userPair(_ request: PairRequest, _ now: Moment, _ actions: inout [Action]) {
        guard pairing == nil else { return } // refused before it gets here: refusal(of:) says .pairingBusy
        guard adapterUp, request.adapter.map(upAdapters.contains) ?? true else {
            actions.append(.pairingEnded(.adapterUnavailable))
            return
        }
        if let a = request.address, let i = slot[a] {
            switch slots[i].state {
            case .needsRepair:
                break // its old bond goes once it is heard advertising in this scan (`candidateFound`)
            case .restoring, .connecting, .discovering, .connected, .waitingForDevice, .disconnected, .adapterUnavailable:
                actions.append(.pairingEnded(.alreadyPaired(a)))
                return
            }
        }
        let c = countdown(.pairing, .scan, now + (request.scanTimeout ?? config.scanTimeout))
        let restart = countdown(.pairing, .scanRestart, now + PairingSession.ScanRestart.restartInterval)
        pairing = PairingSession(request: request, phase: .scanning(.running(restart)), countdown: c)
        actions.append(.arm(c))
        actions.append(.arm(restart))
        actions.append(.startDiscovery(request))
        actions.append(.pairingProgress(.scanning))
    }

    /// A device BlueZ reported while the scan runs. What may be taken (issue 30):
    /// - only what is advertising during this scan (`Candidate.rssi`, from this scan): a device
    ///   BlueZ merely remembers is no candidate for a service filter, a name or `--any`;
    /// - a bond made outside paird (BlueZ holds it, paird does not manage the wearable) only when
    ///   the user named its address: it is taken over, heard or not (a connected wearable does not
    ///   advertise);
    /// - a wearable that needs pairing again never by its old object (it still holds the dead
    ///   bond: `Pair()` would go to an object being removed). Named by address or name and heard
    ///   in this scan, that object is removed, and the scan goes on once BlueZ is done
    ///   (`removingBond`); its next advertisement brings a fresh object, which is paired. Not
    ///   named, its bond is left alone.
    ///
    /// A wearable paird already knows is matched by the services its bond had too, not only by
    /// the object's `UUIDs`: BlueZ 5.66 adds an advertisement's UUIDs to an object only until its
    /// services are resolved (`device_add_eir_uuids`), and marks them resolved even when the GATT
    /// browse failed (`device_svc_resolved`, err -5). A link that came back from a crash without
    /// its bond, dropped by paird as it entered needsRepair mid-browse, leaves an object with no
    /// UUIDs that never gains the advertised ones; `pairctl pair --service 180d` found no wearable
    /// while it advertised 180d (the clean-clone CI of 17aabae and 8305393, paird_bluetoothd_crash).
    mutating func candidateFound(_ found: Candidate, _ now: Moment, _ actions: inout [Action]) {
        var c = found
        if let i = slot[c.address] {
            let known = slots[i].identity
            c.serviceUUIDs = Array(Set(c.serviceUUIDs).union(known.serviceUUIDs)).sorted()
            if c.name.isEmpty { c.name = known.name }
        }
        guard var p = pairing, case .scanning(let restart) = p.phase, p.request.matches(c), !p.unreachable.contains(c.address) else { return }
        let a = c.address
        let heard = c.rssi != nil
        let byAddress = p.request.address == a
        let named = byAddress || !(p.request.nameContains ?? "").isEmpty
        if let i = slot[a] {
            switch slots[i].state {
            case .needsRepair:
                if c.bonded {
                    guard heard else { return }
                    guard named else {
                        skip(&p, c, .needsRepairNotNamed, &actions)
                        return
                    }
                    // Once per session: an object that keeps its bond after a removal is BlueZ's
                    // doing, and is never paired either.
                    guard p.removedForRepair.insert(a).inserted else { return }
                    p.phase = .removingBond(a)
                    pairing = p
                    actions.append(.cancel(restart.countdown.id))
                    actions.append(.stopDiscovery)
                    actions.append(.pairingProgress(.removingStaleBond(a)))
                    actions.append(.removeDevice(a))
                    return
                }
                guard heard else { return } // a fresh object, advertising now: paired below
            case .restoring, .connecting, .discovering, .connected, .waitingForDevice, .disconnected, .adapterUnavailable:
                return // already managed
            }
        } else if c.bonded {
            guard byAddress else {
                if heard { skip(&p, c, .bondedElsewhere, &actions) }
                return
            }
            actions.append(.pairingProgress(.adoptingBond(a, name: c.name)))
        } else {
            guard heard else { return }
        }
        let call = nextGeneration()
        let cd = countdown(.pairing, .pair, now + config.pairTimeout)
        actions.append(.cancel(p.countdown.id))
        actions.append(.cancel(restart.countdown.id))
        actions.append(.arm(cd))
        p.phase = .pairing(c, call: call, question: nil)
        p.countdown = cd
        pairing = p
        actions.append(.stopDiscovery)
        actions.append(.pairingProgress(.found(c)))
        actions.append(.pairingProgress(.pairing(a)))
        actions.append(.pair(a, call: call, timeout: config.pairTimeout))
    }

    /// Says once per session why a matching wearable heard in the scan is not taken.
    mutating func skip(_ p: inout PairingSession, _ c: Candidate, _ why: SkipReason, _ actions: inout [Action]) {
        guard p.skipped.insert(c.address).inserted else { return }
        pairing = p
        actions.append(.pairingProgress(.skipped(c.address, name: c.name, why: why)))
    }

    /// The stale object of the wearable being paired again is gone (BlueZ answered `RemoveDevice`,
    /// or the object vanished): discovery starts again after the scan restart's pause (BlueZ
    /// refuses a StartDiscovery right after a StopDiscovery as busy), and the wearable's next
    /// advertisement brings a fresh object. A removal BlueZ refused ends the session: pairing
    /// that object would fail.
    mutating func staleBondRemoved(_ a: DeviceAddress, failure: BlueZFailure?, _ now: Moment, _ actions: inout [Action]) {
        guard var p = pairing, case .removingBond(a) = p.phase else { return }
        if let failure, failure != .deviceGone {
            endPairing(.failed("could not remove the old bond of \(a): \(failure.token)"), now, &actions)
            return
        }
        let pause = countdown(.pairing, .scanRestart, now + PairingSession.ScanRestart.restartPause)
        p.phase = .scanning(.stopped(pause))
        pairing = p
        actions.append(.arm(pause))
    }

    mutating func pairAnswered(_ a: DeviceAddress, _ call: UInt64, failure: BlueZFailure?, _ now: Moment, _ actions: inout [Action]) {
        if failure == .noReply, abandonedPairs[a] == call || isPairing(a, call) {
            leftoverPairs[a] = now // bluetoothd died with the Pair() in flight, or will not answer
        }
        if abandonedPairs[a] == call {
            cleanUpAbandonedPair(a, now, &actions)
            return
        }
        guard var p = pairing, case .pairing(let c, call, let question) = p.phase, c.address == a else { return }
        if let failure, [.connectTimeout, .abortedByLocal, .deviceGone].contains(failure), question == nil,
           c.addressType == .random, a.isResolvablePrivate, !c.bonded, slot[a] == nil, p.unreachable.count < PairingSession.maxRescans {
            rescan(p, c, failure, now, &actions)
            return
        }
        if let failure, failure != .alreadyExists { // endPairing refuses a question still open
            switch failure {
            case .authentication, .authenticationAborted:
                endPairing(.authenticationFailed(failure.token), now, &actions)
            case .connectionLimit:
                let n = linksUp(onAdapterOf: p)
                endPairing(.failed("connection-limit: the adapter's controller holds as many LE connections as it can (\(n) wearable(s) "
                                   + "connected on it); disconnect one (pairctl disconnect) or pair on another adapter (pairctl pair --adapter)"),
                           now, &actions)
            case .abortedByLocal where linksUp(onAdapterOf: p) > 0:
                // BlueZ 5.66 reports a controller at its connection limit so too (EMLINK rewritten by
                // its ATT socket), and neither it nor the kernel says what the limit is.
                let n = linksUp(onAdapterOf: p)
                endPairing(.failed("abort-by-local: the connection to the wearable failed; with \(n) wearable(s) already connected on "
                                   + "this adapter, its controller may be at its limit of LE connections (BlueZ and the kernel do not "
                                   + "say what it is): disconnect one (pairctl disconnect) and try again"), now, &actions)
            case .abortedByLocal, .abortedByRemote, .connectTimeout, .noReply, .busy, .canceled, .adapterUnavailable,
                 .alreadyExists, .deviceGone, .notConnected, .other:
                endPairing(.failed(failure.token), now, &actions)
            }
            if abandonedPairs[a] == call { cleanUpAbandonedPair(a, now, &actions) } // BlueZ is done now
            return
        }
        if let q = question { actions.append(.answerAgent(request: q.request, .reject("pairing ended"))) }
        // Bonded. Record identity and intent, trust it, and bring the link to `connected`.
        var uuids = Set(p.request.serviceUUIDs)
        uuids.formUnion(c.serviceUUIDs)
        let identity = DeviceIdentity(address: a, addressType: c.addressType, name: c.name,
                                      adapter: config.adapter, serviceUUIDs: uuids.sorted(), adapterAddress: p.request.adapter ?? adapterInUse)
        if let i = slot[a] {
            slots[i].identity = identity
            slots[i].wanted = .connected
            slots[i].pairedAt = now.unixTime
            slots[i].updatedAt = now.unixTime
            slots[i].setupFailures = 0
            slots[i].missingCharacteristics = []
            slots[i].deathsOnLink = DeathsOnLink() // a new bond: bluetoothd's deaths on the old one say nothing of it
            slots[i].linkUpAt = nil
        } else {
            slot[a] = slots.count
            slots.append(ManagedDevice(identity: identity, wanted: .connected, state: .restoring, since: now,
                                       pairedAt: now.unixTime, updatedAt: now.unixTime, lastDisconnect: nil,
                                       reconnectAttempts: 0, setupFailures: 0, hasBeenConnected: false))
        }
        let settle = countdown(.pairing, .settle, now + config.connectTimeout + config.discoveryTimeout)
        actions.append(.cancel(p.countdown.id))
        actions.append(.arm(settle))
        p.phase = .settling(a)
        p.countdown = settle
        pairing = p
        actions.append(.persist)
        actions.append(.report(Report(kind: .paired, device: a, name: c.name, to: .paired)))
        actions.append(.pairingProgress(.paired(a)))
        actions.append(.setTrusted(a, true))
        if let i = slot[a] { startConnect(i, attempt: 1, now, &actions) }
    }

    /// `Pair()` could not reach the resolvable private address it was found at: it did not connect
    /// (connect-timeout, le-connection-abort-by-local: the wearable rotated it before the
    /// connection), or BlueZ had already dropped the device object (device-gone: BlueZ 5.66 drops
    /// a device found only by non-connectable advertisements when discovery stops, seen on the
    /// bed). Back to scanning for the wearable's next address, within a fresh scan timeout
    /// (`PairingSession.unreachable`). BlueZ is done with the failed call, so its device object goes.
    mutating func rescan(_ session: PairingSession, _ c: Candidate, _ failure: BlueZFailure, _ now: Moment, _ actions: inout [Action]) {
        var p = session
        let scan = countdown(.pairing, .scan, now + (p.request.scanTimeout ?? config.scanTimeout))
        let restart = countdown(.pairing, .scanRestart, now + PairingSession.ScanRestart.restartInterval)
        actions.append(.cancel(p.countdown.id))
        actions.append(.disconnect(c.address))
        actions.append(.removeDevice(c.address))
        p.unreachable.insert(c.address)
        p.rescanAfter = failure
        p.phase = .scanning(.running(restart))
        p.countdown = scan
        pairing = p
        actions.append(.arm(scan))
        actions.append(.arm(restart))
        // Said as a pairing-session step (the pairing goes on), not as a failed pairing.
        actions.append(.report(Report(kind: .stateChanged, device: c.address, name: c.name, from: .pairing(.pairing), to: .pairing(.scanning),
                                      reason: .rescan(failure, rescan: p.unreachable.count, of: PairingSession.maxRescans))))
        actions.append(.pairingProgress(.rescanning(c.address, reason: failure.token)))
        actions.append(.startDiscovery(p.request))
    }

    /// A scan that found nothing is stopped, then started again (`PairingSession.ScanRestart`).
    mutating func scanRestartDue(_ restart: PairingSession.ScanRestart, _ now: Moment, _ actions: inout [Action]) {
        guard var p = pairing else { return }
        switch restart {
        case .running:
            let c = countdown(.pairing, .scanRestart, now + PairingSession.ScanRestart.restartPause)
            p.phase = .scanning(.stopped(c))
            actions.append(.arm(c))
            actions.append(.stopDiscovery)
        case .stopped:
            let c = countdown(.pairing, .scanRestart, now + PairingSession.ScanRestart.restartInterval)
            p.phase = .scanning(.running(c))
            actions.append(.arm(c))
            actions.append(.restartDiscovery(p.request))
        }
        pairing = p
    }

    /// Wearables with a link up on the adapter a pairing runs on.
    func linksUp(onAdapterOf p: PairingSession) -> Int {
        let on = p.request.adapter ?? adapterInUse
        return slots.filter { d in
            switch d.state {
            case .connected, .discovering: (d.identity.adapterAddress ?? on) == on
            default: false
            }
        }.count
    }

    /// The answer to the `Pair()` of a session that already ended (canceled, timed out, nobody to
    /// answer its question): BlueZ is done with it, so its link and device object can go. One that
    /// bonded after all (its answer crossed our cancel) goes too: nobody asked to keep it.
    mutating func cleanUpAbandonedPair(_ a: DeviceAddress, _ now: Moment, _ actions: inout [Action]) {
        abandonedPairs[a] = nil
        guard slot[a] == nil else { return }
        if !adapterUp { leftoverPairs[a] = now }
        actions.append(.disconnect(a))
        actions.append(.removeDevice(a))
    }

    /// The adapter is back: what abandoned pairs may have left on the new bluetoothd (see
    /// `leftoverPairs`) goes. A device paired meanwhile (managed again) is left alone. The new
    /// bluetoothd may show the kernel's kept link only after its adapter (its device object made
    /// from the kernel's connection list, when the crash took the bond before it was stored): a
    /// leftover without an object yet waits for it, within its window (`leftoverLinkUp`).
    mutating func cleanUpLeftoverPairs(_ views: [DeviceAddress: BlueZDeviceView], _ now: Moment, _ actions: inout [Action]) {
        for (a, at) in leftoverPairs.sorted(by: { $0.key < $1.key }) {
            guard slot[a] == nil, now.since(at) < Self.leftoverPairWindow else {
                leftoverPairs[a] = nil
                continue
            }
            if views[a]?.exists == true { removeLeftover(a, &actions) }
        }
    }

    /// A link up to an address paird does not manage: a leftover pair's link that the new
    /// bluetoothd reported after its adapter goes, unless a pairing is at that address now.
    mutating func leftoverLinkUp(_ a: DeviceAddress, _ now: Moment, _ actions: inout [Action]) {
        guard adapterUp, slot[a] == nil, let at = leftoverPairs[a] else { return }
        guard now.since(at) < Self.leftoverPairWindow else {
            leftoverPairs[a] = nil
            return
        }
        if let p = pairing, p.phase.address == a { return }
        removeLeftover(a, &actions)
    }

    private mutating func removeLeftover(_ a: DeviceAddress, _ actions: inout [Action]) {
        leftoverPairs[a] = nil
        actions.append(.disconnect(a))
        actions.append(.removeDevice(a))
    }

    /// What a device BlueZ shows (an object that appeared, or one heard advertising while paird
    /// scans) means to the machine, by its own state, in the order to feed them:
    /// - bonded again while it needs re-pairing (a bond restored from a backup, made with
    ///   another tool): `bondedDeviceAppeared`;
    /// - connected and not paird's: a link up (after a crash the new bluetoothd makes an object for
    ///   each link the kernel kept, a leftover pairing's among them);
    /// - while a pairing scans: a candidate.
    /// The three do not act on each other (the first needs a device of paird's, the second one
    /// that is not; neither touches the pairing), so all are chosen on the state before the first.
    public func events(forFound candidate: Candidate, _ view: BlueZDeviceView) -> [Event] {
        var events: [Event] = []
        let a = candidate.address
        if view.bonded, case .needsRepair? = device(a)?.state { events.append(.bondedDeviceAppeared(a)) }
        if view.connected, device(a) == nil { events.append(.linkUp(a)) }
        if let p = pairing, case .scanning = p.phase { events.append(.candidateFound(candidate)) }
        return events
    }

    /// Leftover pairs still waiting for the next bluetoothd to show their link (the daemon
    /// includes them in `adapterReady`'s views).
    public var leftoverPairAddresses: [DeviceAddress] { leftoverPairs.keys.sorted() }

    func isPairing(_ a: DeviceAddress, _ call: UInt64) -> Bool {
        if let p = pairing, case .pairing(let c, call, _) = p.phase, c.address == a { true } else { false }
    }

    mutating func discoveryFailed(_ f: BlueZFailure, _ now: Moment, _ actions: inout [Action]) {
        guard let p = pairing, case .scanning = p.phase else { return }
        endPairing(.failed(f.token), now, &actions)
    }

    mutating func endPairing(_ outcome: PairingOutcome, _ now: Moment, _ actions: inout [Action]) {
        guard let p = pairing else { return }
        pairing = nil
        actions.append(.cancel(p.countdown.id))
        switch p.phase {
        case .scanning(let restart):
            actions.append(.cancel(restart.countdown.id))
            actions.append(.stopDiscovery)
        case .pairing(let c, let call, let question):
            // The question goes first: BlueZ answers CancelPairing only once its agent call is done.
            if let q = question { actions.append(.answerAgent(request: q.request, .reject("pairing ended"))) }
            actions.append(.cancelPairing(c.address))
            if !outcome.succeeded, !c.bonded, slot[c.address] == nil {
                // Nothing half-paired stays behind, and no link, once BlueZ has answered the
                // Pair() (`cleanUpAbandonedPair`): a link left up after a failed pairing makes
                // BlueZ, reading a protected characteristic, start a pairing of its own that
                // nobody answers (seen on the bed with a passkey watch).
                abandonedPairs[c.address] = call
                if outcome == .adapterLost { leftoverPairs[c.address] = now }
            }
        case .removingBond, .settling: break
        }
        if !outcome.succeeded {
            actions.append(.report(Report(kind: .pairingFailed, device: nil, to: .pairing(p.phase.step), reason: .pairing(outcome))))
        }
        actions.append(.pairingEnded(outcome))
    }
}
