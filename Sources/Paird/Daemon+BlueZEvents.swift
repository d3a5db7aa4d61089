import BlueZ
import PairingCore

/// BlueZ's events, passed to the machine: most one to one; `adapterReady` reads the views of the
/// machine's devices from BlueZ's cache, and some never reach the machine (notifications and
/// battery levels go out as paird's own signals, and notifications to the metrics and MQTT).
extension Daemon {
    func handle(_ event: BlueZEvent) {
        if case .notification = event {} else if log.minimumPriority == .debug { log.debug("event: \(event)") }
        switch event {
        case .adapterReady(let info, let selector):
            if BlueZClient.bindsByAddress(selector), let a = DeviceAddress(info.address) {
                feed(.adapterIdentified(configured: selector, address: a, name: info.name))
            }
            if let a = DeviceAddress(info.address) { feed(.adapterInUse(a)) }
            // The views are of this adapter: each device's under the adapter it belongs to, and
            // those bonded on another adapter wait for theirs (`adapterReady` skips them).
            feed(.adapterReady(bluez.views(for: Array(machine.devices.keys) + machine.leftoverPairAddresses, on: info)))
            markReadyIfNeeded()
        case .adapterGone(let reason, let address):
            // One of several: the others stay ready.
            warnIfRfkill(reason, address)
            log.info("adapter \(address) unavailable: \(reason)")
            feed(.adapterGone(address))
            markReadyIfNeeded()
        case .adapterLost(let reason, let address):
            warnIfRfkill(reason, address)
            log.info("adapter unavailable: \(reason)")
            feed(.adapterLost)
            markReadyIfNeeded()
        case .autoConnectArmed(let armed):
            feed(.autoConnectArmed(armed))
        case .deviceFound(let info):
            for e in machine.events(forFound: info.candidate, info.view) { feed(e) }
        case .linkUp(let a):
            feed(.linkUp(a))
        case .linkDown(let a, let evidence):
            feed(.linkDown(a, evidence))
        case .servicesResolved(let a):
            feed(.servicesResolved(a))
        case .servicesLost(let a):
            feed(.servicesLost(a))
        case .bondChanged(let a, let bonded):
            if !bonded { feed(.bondLost(a)) }
        case .deviceRemoved(let a):
            feed(.deviceRemoved(a))
        case .notification(let a, let characteristic, let value):
            try? bus.emitSignal(path: PairdAPI.objectPath, interface: PairdAPI.interface, member: "Notification",
                                args: [.string(a.description), .string(characteristic), .bytes(value)])
            metrics?.model.notification(a.description, name: machine.device(a)?.identity.name ?? "", characteristic: characteristic,
                                        at: now().unixTime)
            publishMQTT(notification: a, characteristic: characteristic, value: value)
            // Battery Level notifies on change: it is no sign of the data flow's health.
            if characteristic != ServiceUUID.batteryLevel { feed(.dataReceived(a, characteristic: characteristic)) }
        case .subscriptionEnded(let a, let characteristic):
            feed(.subscriptionEnded(a, characteristic: characteristic))
        case .battery(let a, let level):
            metrics?.model.battery(a.description, name: machine.device(a)?.identity.name ?? "", level: Int(level))
            feed(.batteryRead(a, level: level))
        case .linkProven(let a):
            feed(.linkProven(a))
        case .agentAsked(let a, let request, let question):
            feed(.agentAsked(a, request: request, question))
        case .agentCanceled:
            feed(.agentCanceled)
        case .addressChanged(let old, let new, let type):
            log.info("\(old) is \(new) (\(type.rawValue)): its private address resolved to its identity")
            metrics?.model.addressChanged(old.description, to: new.description)
            feed(.addressChanged(old, to: new, type))
        case .characteristicsMissing(let a, let uuids):
            feed(.characteristicsMissing(a, uuids))
        case .characteristicAppeared(let a, let uuid):
            feed(.characteristicAppeared(a, uuid))
        }
    }

    private func warnIfRfkill(_ reason: AdapterGoneReason, _ address: DeviceAddress?) {
        guard reason == .rfkillBlocked else { return }
        log.warning("adapter\(address.map { " \($0)" } ?? ""): rfkill blocks it (a person, a key or a switch): paird does not lift a block; "
                    + "`rfkill unblock bluetooth` brings it back, and the wearables with it")
    }
}
