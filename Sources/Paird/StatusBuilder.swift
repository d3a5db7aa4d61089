#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import BuildInfo
import PairingCore

extension StatusDocument {
    /// The document `pairctl status` shows, from the machine and what the runtime adds (the
    /// adapter BlueZ reports), at `now`. Monotonic moments become wall-clock
    /// times through `now`, read once for the whole document.
    init(machine: PairingMachine, adapter: Adapter?, configuredAdapter: String, now: Moment,
         stateFileError: String? = nil) {
        func wall(_ m: Moment) -> Date {
            Date(timeIntervalSince1970: now.unixTime - Double(now.uptimeNanoseconds - m.uptimeNanoseconds) / 1e9)
        }
        // Absent: the one paird waits for, by its remembered address when it has one.
        let known = machine.adapters.first { $0.configured == configuredAdapter }
        let adapter = adapter ?? Adapter(name: known?.name ?? (configuredAdapter.isEmpty ? nil : configuredAdapter),
                                         address: known?.address.description, powered: false, present: false)
        let pairing = machine.pairing.map { p -> Pairing in
            let device: String?
            switch p.phase {
            case .scanning: device = nil
            case .pairing(let c, _, _): device = c.address.description
            case .removingBond(let a), .settling(let a): device = a.description
            }
            return Pairing(phase: p.phase.name, deadline: wall(p.countdown.deadline), device: device)
        }
        let devices = machine.devices.values.sorted { $0.address < $1.address }.map { d in
            let watch = machine.healthWatch(d.address)
            return Device(
                address: d.address.description, name: d.identity.name, state: d.state.name, wanted: d.wanted.rawValue,
                since: wall(d.since),
                lastDisconnect: d.lastDisconnect.map { .init(reason: $0.reason.token, at: wall($0.at)) },
                reconnectAttempts: d.reconnectAttempts, battery: d.battery.map(Int.init),
                services: d.identity.serviceUUIDs, autoConnect: machine.autoConnectArmed.contains(d.address),
                nextDeadline: (watch?.deadline ?? d.state.countdown?.deadline).map(wall),
                repairReason: { if case .needsRepair(let r) = d.state { r.token } else { nil } }(),
                missingCharacteristics: d.missingCharacteristics.sorted(),
                lastData: d.lastDataAt.map(wall),
                health: watch.map { Health(check: $0.purpose.rawValue, characteristic: $0.characteristic, deadline: wall($0.deadline)) },
                addressType: d.identity.addressType.rawValue, bondAdapter: d.identity.adapterAddress?.description)
        }
        let w = machine.bluetoothd
        let crash = w.lastCrash.map { c -> Bluetoothd.Crash in
            func after(_ m: Moment?) -> Double? { m.map { $0.since(c.at).seconds } }
            let allBack = c.awaited.allSatisfy { c.backTimes[$0] != nil } ? c.backTimes.values.max() : nil
            return .init(at: wall(c.at), cause: c.cause, result: c.unit.result, action: c.action, backAfter: after(c.backAt),
                         wearables: c.awaited.count, wearablesBack: c.awaited.filter { c.backTimes[$0] != nil }.count,
                         allBackAfter: c.awaited.isEmpty ? nil : after(allBack), disarmed: c.disarmed.map(\.description))
        }
        let sleep = machine.host.lastSleep.map { s in
            Host.Sleep(at: wall(s.at), resumedAt: s.resumedAt.map(wall), back: s.awaited.map { a in
                .init(address: a.description, after: s.resumedAt.flatMap { r in s.backTimes[a].map { $0.since(r).seconds } })
            })
        }
        self.init(daemon: .init(running: true, version: BuildInfo.version, stateFileError: stateFileError), adapter: adapter, pairing: pairing, devices: devices,
                  bluetoothd: .init(state: w.phase.name, nextStartAt: w.phase.countdown.flatMap { $0.id.purpose == .bluetoothdStart ? wall($0.deadline) : nil },
                                    lastCrash: crash),
                  host: .init(asleep: machine.host.asleep, lastSleep: sleep))
    }
}

extension StatusDocument {
    /// What a caller who is neither root nor in the privileged group sees (issue 43): the states,
    /// without the wearables' data (battery, last data, the link-health check that follows it).
    func statesOnly() -> StatusDocument {
        var d = self
        for k in d.devices.indices {
            d.devices[k].battery = nil
            d.devices[k].lastData = nil
            d.devices[k].health = nil
        }
        return d
    }
}
