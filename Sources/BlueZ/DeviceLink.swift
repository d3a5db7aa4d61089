import PairingCore

/// What `BlueZClient` keeps about one device's link, in one value (`BlueZClient.links`): made on
/// first use and dropped once nothing is left in it, both in `BlueZClient.link(_:_:)`, and moved
/// whole when BlueZ resolves the device's address (`BlueZClient.rekey`).
struct DeviceLink: Hashable, Sendable {
    /// `Device1.Disconnected`'s reason (BlueZ ≥ 5.83), until the `Connected=false` that follows.
    var disconnectReason: DisconnectClassifier.Reason?
    /// Characteristic UUIDs (128-bit) whose `Value` changes are reported (`setUpLink`).
    var notifyUUIDs: Set<String>?
    /// The link was set up (`setUpLink`) and has not gone down since. A configured characteristic
    /// that appears under the device then — BlueZ re-discovered the services after a Service
    /// Changed indication (a firmware update; in the test bed, the wearable's GATT application
    /// registering again after a bluetoothd restart) — is subscribed to at once: the subscription
    /// made on the old object went with it, and nothing else would renew it.
    var live = false
    /// The current link carried data from the wearable (`.linkProven` sent).
    var proven = false
    /// paird asked BlueZ to drop the link (`disconnect`) since its last up or down: a
    /// `Connected=true` while the cache still says up is then a new link. BlueZ 5.66 sends no
    /// `Connected=false` for a link it found up at its start when that link drops (bed,
    /// paird_bluetoothd_segv_plain: the kept link dropped, then `Connected=true` for the
    /// auto-connect's new one and nothing in between).
    var dropRequested = false
    /// The RSSI heard since our discovery last started: BlueZ sends `RSSI` (InterfacesAdded of a
    /// new object, or PropertiesChanged of a known one) for what it hears while discovering, and
    /// invalidates it when the discovery ends (5.66 `discovery_cleanup`); a value still in the
    /// cache may be from an earlier scan or another client's. `.deviceFound` carries only these
    /// (`DeviceInfo.rssi` nil otherwise), so a pairing scan's candidates are what is advertising now.
    var scanRSSI: Int?

    var isEmpty: Bool { self == DeviceLink() }

    /// The link went down (or its services went away): no late subscriptions, not proven.
    mutating func ended() {
        live = false
        proven = false
    }

    /// bluetoothd left the bus: its links and what it said about them went with it. What paird
    /// asked to subscribe to and the scan's RSSI stay (the next bluetoothd's link is set up again).
    mutating func bluetoothdLeft() {
        ended()
        disconnectReason = nil
        dropRequested = false
    }

    /// This value moved onto `other`, the entry already under the address it moves to: what this
    /// one holds wins, what only `other` holds stays.
    func merged(over other: DeviceLink) -> DeviceLink {
        DeviceLink(disconnectReason: disconnectReason ?? other.disconnectReason,
                   notifyUUIDs: notifyUUIDs ?? other.notifyUUIDs,
                   live: live || other.live, proven: proven || other.proven,
                   dropRequested: dropRequested || other.dropRequested,
                   scanRSSI: scanRSSI ?? other.scanRSSI)
    }
}

extension BlueZClient {
    /// Changes one device's link facts: the one place an entry is made (on first use) and dropped
    /// (once nothing is left in it).
    func link(_ address: DeviceAddress, _ change: (inout DeviceLink) -> Void) {
        var l = links[address] ?? DeviceLink()
        change(&l)
        links[address] = l.isEmpty ? nil : l
    }

    /// `change` on the facts of every device `which` selects.
    func eachLink(where which: (DeviceAddress) -> Bool = { _ in true }, _ change: (inout DeviceLink) -> Void) {
        for a in Array(links.keys) where which(a) { link(a, change) }
    }
}
