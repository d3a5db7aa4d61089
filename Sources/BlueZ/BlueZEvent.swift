import PairingCore

/// What the client reports, on the loop thread, through `BlueZClient.onEvent`.
public enum BlueZEvent: Sendable, Hashable {
    /// The selected adapter exists, is powered, and the agent and GATT profile registrations
    /// have been attempted (see `BlueZClient.Stats` for whether they succeeded).
    /// `selector`: the configured selector that chose it ("" for the first adapter).
    case adapterReady(AdapterInfo, selector: String = "")
    /// One adapter of several went ("removed", "powered-off" or "bluetoothd-gone"), the others
    /// are still ready. Emitted once per ready period, per adapter.
    case adapterGone(reason: AdapterGoneReason, address: DeviceAddress)
    /// No adapter paird uses is ready any more: the last one went (the same reasons; `address`
    /// nil when no adapter was found for the selector), or none was usable at the first settled
    /// view. Emitted once per ready period, per adapter.
    case adapterLost(reason: AdapterGoneReason, address: DeviceAddress? = nil)
    /// The devices BlueZ's auto-connect is armed for: bonded devices under the adapter whose
    /// services (`Device1.UUIDs`; 5.66 matches a profile against those) meet the UUIDs BlueZ holds
    /// in our GattProfile1 registration (bluez-notes §4). Empty when it holds none (unregistered,
    /// refused, adapter or bluetoothd gone). Emitted on every change, before the event that
    /// follows the change.
    case autoConnectArmed(Set<DeviceAddress>)
    /// A device under the adapter appeared, or (while our discovery runs) advertised new data.
    case deviceFound(DeviceInfo)
    /// `Connected` turned true.
    case linkUp(DeviceAddress)
    /// The link went down, with everything the disconnect classifier needs: the reason from
    /// `Device1.Disconnected` (BlueZ ≥ 5.83, which sends it just before `Connected` turns false;
    /// nil on older BlueZ), the bond and the adapter as BlueZ reports them at that moment.
    case linkDown(DeviceAddress, DisconnectClassifier.Evidence)
    /// `ServicesResolved` turned true.
    case servicesResolved(DeviceAddress)
    /// `ServicesResolved` turned false on a link that is still up: the wearable's GATT went while
    /// the link stayed (a link that goes down takes its services with it: `linkDown` only).
    case servicesLost(DeviceAddress)
    /// `Paired && (Bonded ?? true)` changed.
    case bondChanged(DeviceAddress, bonded: Bool)
    /// The device object vanished while the adapter stayed up (held back briefly, and dropped
    /// when the adapter goes away meanwhile: see `BlueZClient.init`'s `removalGrace`).
    case deviceRemoved(DeviceAddress)
    /// A new `Value` of a characteristic subscribed through `setUpLink`.
    case notification(DeviceAddress, characteristic: String, value: [UInt8])
    case battery(DeviceAddress, UInt8)
    /// `GattCharacteristic1.Notifying` of a characteristic subscribed through `setUpLink` turned
    /// false while the device's link is up and set up: BlueZ ended a subscription paird wants.
    case subscriptionEnded(DeviceAddress, characteristic: String)
    /// The wearable itself answered over the current link (a notification, or a characteristic
    /// read that succeeded): the link works end to end. Once per link. A link that resolved its
    /// services from BlueZ's cache proves nothing more (seen on 5.66 when the wearable forgot the
    /// bond: ServicesResolved, StartNotify accepted, ReadValue "Not connected", link gone 4 s later).
    case linkProven(DeviceAddress)
    /// BlueZ asked our agent a question about this device; answer with `BlueZClient.answerAgent`.
    case agentAsked(DeviceAddress, request: UInt64, AgentQuestion)
    /// BlueZ withdrew its question (`Agent1.Cancel`).
    case agentCanceled
    /// A device's `Address` changed: its private address resolved to its identity address (the
    /// object path keeps the address it was first seen with). Later events use the new one.
    case addressChanged(DeviceAddress, to: DeviceAddress, AddressType)
    /// After `setUpLink`: the wanted characteristics (`subscribe`, not Battery Level) BlueZ does
    /// not show under the device; empty when all are there.
    case characteristicsMissing(DeviceAddress, [String])
    /// A wanted characteristic appeared under a device whose link is set up, and was subscribed to.
    case characteristicAppeared(DeviceAddress, String)
}

/// Why an adapter is not usable (`adapterGone`, `adapterLost`); `token` is the word the journal
/// says, pinned by `PresenceTests`.
public enum AdapterGoneReason: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    case removed
    case poweredOff = "powered-off"
    /// Powered off and blocked by rfkill (a person, a key, a switch: `AdapterInfo.rfkillBlocked`).
    /// paird never lifts a block; `rfkill unblock bluetooth` does, and bluetoothd powers it again.
    case rfkillBlocked = "rfkill-blocked"
    case bluetoothdGone = "bluetoothd-gone"

    public var token: String { rawValue }
    public var description: String { token }
}
