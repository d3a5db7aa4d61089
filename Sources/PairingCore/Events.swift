/// What BlueZ says about one known device at reconciliation time (start, or adapter back).
public struct BlueZDeviceView: Sendable, Hashable {
    public var exists: Bool
    public var bonded: Bool
    public var connected: Bool
    public var servicesResolved: Bool

    public init(exists: Bool = true, bonded: Bool = true, connected: Bool = false, servicesResolved: Bool = false) {
        self.exists = exists
        self.bonded = bonded
        self.connected = connected
        self.servicesResolved = servicesResolved
    }

    public static let absent = BlueZDeviceView(exists: false, bonded: false)
}

/// A device seen while scanning for pairing.
public struct Candidate: Sendable, Hashable {
    public var address: DeviceAddress
    public var addressType: AddressType
    public var name: String
    /// The signal strength BlueZ reported for an advertisement heard **during this scan**; nil for
    /// a device BlueZ merely remembers (an object from before the scan, a bond made with another
    /// tool). BlueZ sets `RSSI` only for what it hears while discovering and drops it when the
    /// discovery ends (doc/device-api.txt "inquiry or advertising"; 5.66 `discovery_cleanup`);
    /// the BlueZ client passes on only values that arrived during paird's own scan. Only a
    /// candidate with one is advertising now. 127 is HCI's "not available": heard, strength
    /// unknown (the bed's btvirt reports it for every advertisement).
    public var rssi: Int?
    public var serviceUUIDs: [String]
    /// BlueZ already holds a bond for it.
    public var bonded: Bool

    public init(address: DeviceAddress, addressType: AddressType = .public, name: String = "", rssi: Int? = nil,
                serviceUUIDs: [String] = [], bonded: Bool = false) {
        self.address = address
        self.addressType = addressType
        self.name = name
        self.rssi = rssi
        self.serviceUUIDs = serviceUUIDs
        self.bonded = bonded
    }
}

/// What `pairctl pair` asked for.
public struct PairRequest: Sendable, Hashable {
    public var address: DeviceAddress?
    /// 128-bit lower-case UUIDs; a candidate must advertise at least one (when non-empty).
    public var serviceUUIDs: [String]
    /// A candidate's name must contain this (case-insensitive), when set.
    public var nameContains: String?
    public var scanTimeout: Duration?
    /// How the wearable's questions (passkey, numeric comparison) get answered.
    public var answers: PairingAnswers
    /// The address of the adapter to pair on (`pairctl pair --adapter`, resolved by the daemon);
    /// nil: the adapter in use (`PairingMachine.adapterInUse`).
    public var adapter: DeviceAddress?

    public init(address: DeviceAddress? = nil, serviceUUIDs: [String] = [], nameContains: String? = nil, scanTimeout: Duration? = nil,
                answers: PairingAnswers = PairingAnswers(), adapter: DeviceAddress? = nil) {
        self.adapter = adapter
        self.address = address
        self.serviceUUIDs = serviceUUIDs
        self.nameContains = nameContains
        self.scanTimeout = scanTimeout
        self.answers = answers
    }

    public func matches(_ c: Candidate) -> Bool {
        if let a = address, a != c.address { return false }
        if !serviceUUIDs.isEmpty, !serviceUUIDs.contains(where: c.serviceUUIDs.contains) { return false }
        if let n = nameContains, !n.isEmpty, !c.name.lowercased().contains(n.lowercased()) { return false }
        return true
    }
}

/// Everything that can happen, as the machine sees it. Each becomes one `handle(_:now:)` call.
public enum Event: Sendable, Hashable {
    // Adapter and bluetoothd.
    /// Adapter present and powered, bluetoothd up, agent and profile registered; with what BlueZ
    /// knows of each managed device (missing entries count as `.absent`).
    case adapterReady([DeviceAddress: BlueZDeviceView])
    /// The adapter paird.conf names (`configured`: `hci0`, or "" for the first) has this address
    /// and kernel name: remembered in the state file at first sight (sent before `adapterReady`).
    case adapterIdentified(configured: String, address: DeviceAddress, name: String)
    /// The address of the adapter paird uses now (sent before each `adapterReady`): the wearables
    /// whose bond is on another adapter wait for theirs.
    case adapterInUse(DeviceAddress)
    /// Adapter removed or powered off, or bluetoothd left the bus: no adapter is usable.
    case adapterLost
    /// One of several adapters in use went (removed, powered off) while others stay ready: the
    /// wearables bonded on it wait for it, the others carry on.
    case adapterGone(DeviceAddress)
    /// The managed devices BlueZ has armed the kernel's auto-connect for now: our GattProfile1 is
    /// registered listing a service the device offers (5.66 probes the profile against the
    /// device's services, `device_probe_profile`). Sent whenever that set changes.
    case autoConnectArmed(Set<DeviceAddress>)
    /// `org.bluez` left the system bus (before the adapter's loss that follows).
    case bluetoothdLeft
    /// systemd's answer about `bluetooth.service` after `Action.queryBluetoothdUnit`; nil when
    /// there is no systemd on the bus or no such unit.
    case bluetoothdUnit(BluetoothdUnitState?)
    /// `StartServiceByName("org.bluez")` failed.
    case bluetoothdStartFailed
    /// `org.bluez` is on the system bus: again, or for the first time since paird started.
    case bluetoothdBack
    /// `org.bluez` had no owner when paird first asked (it has not been seen yet).
    case bluetoothdAbsent

    // The host (logind's `PrepareForSleep`).
    /// The host is about to sleep (`PrepareForSleep(true)`; paird holds a delay inhibitor meanwhile).
    case hostSleeping
    /// The host woke up (`PrepareForSleep(false)`).
    case hostResumed
    /// BlueZ answered a `Disconnect()` of paird's (done or failed: either way the call is over).
    /// A Battery Level (0x2A19) reading of a wearable's, from BlueZ (read at set-up, or notified).
    case batteryRead(DeviceAddress, level: UInt8)
    case disconnectAnswered(DeviceAddress)
    /// A power cycle's Powered=true (try `attempt`; the runtime's first, with the cycle) failed on
    /// the adapter with this address, or (nil) the one in use.
    case powerOnFailed(adapter: DeviceAddress?, attempt: Int, BlueZFailure)

    // Device signals from BlueZ.
    case linkUp(DeviceAddress)
    case servicesResolved(DeviceAddress)
    /// `ServicesResolved` turned false while `Connected` stayed true: the link is up but GATT is
    /// gone (seen on 5.66 when the wearable forgot its bond).
    case servicesLost(DeviceAddress)
    /// The wearable answered over the current link (a notification or a successful read): the
    /// bond works. Resolved services alone do not show it (BlueZ may resolve from its cache).
    case linkProven(DeviceAddress)
    case linkDown(DeviceAddress, DisconnectClassifier.Evidence)
    /// `Paired`/`Bonded` turned false.
    case bondLost(DeviceAddress)
    /// The device object vanished while the adapter stayed.
    case deviceRemoved(DeviceAddress)
    /// A bonded device object (re)appeared in BlueZ: after a bluetoothd restart the stored
    /// devices can show up only after the adapter does.
    case bondedDeviceAppeared(DeviceAddress)

    // Link health (`LinkHealth`).
    /// A subscribed characteristic (128-bit UUID; not Battery Level, which notifies on change)
    /// delivered a notification.
    case dataReceived(DeviceAddress, characteristic: String)
    /// BlueZ ended a subscription paird wants (`GattCharacteristic1.Notifying` turned false) while
    /// the link stayed up, or the `StartNotify` of `Action.resubscribe` failed.
    case subscriptionEnded(DeviceAddress, characteristic: String)
    /// The answer to `Action.probe`.
    case probeFinished(DeviceAddress, call: UInt64, ProbeResult)

    // Replies to our actions.
    case connectSucceeded(DeviceAddress, call: UInt64)
    case connectFailed(DeviceAddress, call: UInt64, BlueZFailure)
    /// The answer to `Action.setUpLink`: the runtime found the characteristics, subscribed and read
    /// the battery (`nil`), or failed.
    case setUpLinkFinished(DeviceAddress, failure: BlueZFailure?)
    /// After a link's set-up: the configured characteristics BlueZ does not show on it (empty:
    /// all there). A firmware update may have dropped one, or BlueZ lost it (5.66 keeps a broken
    /// GATT cache after an update made while the wearable was away).
    case characteristicsMissing(DeviceAddress, [String])
    /// A configured characteristic appeared on a set-up link (BlueZ re-read the services) and
    /// was subscribed to.
    case characteristicAppeared(DeviceAddress, String)
    case pairSucceeded(DeviceAddress, call: UInt64)
    case pairFailed(DeviceAddress, call: UInt64, BlueZFailure)
    /// BlueZ answered `Action.removeDevice` (nil: removed). `deviceGone`: there was no such
    /// object (already removed).
    case removeDeviceAnswered(DeviceAddress, BlueZFailure?)
    case candidateFound(Candidate)
    case discoveryFailed(BlueZFailure)
    /// BlueZ called our `Agent1` about this device; `request` names the pending call for
    /// `Action.answerAgent`.
    case agentAsked(DeviceAddress, request: UInt64, AgentQuestion)
    /// BlueZ called `Agent1.Cancel`: its pending question is void (the runtime dropped the call).
    case agentCanceled
    /// A device's private address resolved to its identity address (BlueZ received its IRK while
    /// pairing): the device, or the session's candidate, is known by the new address from now on.
    case addressChanged(DeviceAddress, to: DeviceAddress, AddressType)

    // Time.
    case countdownFired(Countdown.ID)

    // The user (through pairctl / the D-Bus API).
    case userPair(PairRequest)
    case userCancelPairing
    /// The answer typed at the prompt of the `pairctl pair` that started the session.
    case userAnswer(UserAnswer)
    case userConnect(DeviceAddress)
    case userDisconnect(DeviceAddress)
    case userUnpair(DeviceAddress)
}
