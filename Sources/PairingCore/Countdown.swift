/// Who a countdown belongs to: one device, or the pairing session.
public enum CountdownOwner: Sendable, Hashable, CustomStringConvertible {
    case device(DeviceAddress)
    case pairing
    /// bluetoothd's watch (`BluetoothdWatch`): asking systemd again, or starting it again.
    case bluetoothd
    /// The host's sleep (`HostWatch`): the deadline for the wearables' return after a resume.
    case host
    /// One adapter, by address (`WedgeWatch`): when to ask a wearable waiting on the auto-connect
    /// whether the adapter still makes links.
    case adapter(DeviceAddress)
    /// A power cycle's Powered=true, tried again (`PairingMachine+Power`): the adapter with this
    /// address, or (nil) the one in use.
    case adapterPower(DeviceAddress?)

    public var description: String {
        switch self {
        case .device(let a): "\(a)"
        case .pairing: "pairing"
        case .bluetoothd: "bluetoothd"
        case .host: "host"
        case .adapter(let a): "adapter \(a)"
        case .adapterPower(let a): "power of " + (a.map { "adapter \($0)" } ?? "the adapter")
        }
    }
}

/// What a countdown is for; shown in logs and status.
public enum CountdownPurpose: String, Sendable, Hashable, CaseIterable {
    case connectReply      // a Connect() in flight must answer by then
    case retryBackoff      // wait before retrying a transient connect failure
    case linkDown          // paird dropped an unusable link: connect again once it is down, at the latest then
    case discovery         // link up, services must resolve and notifications be set up by then
    case resolve           // link up but unresolved (e.g. adopted after bluetoothd returned): ServicesResolved by then, or drop and connect again
    case firstData         // connected: the first notification of the link must come by then, or the link is made again
    case silence           // connected: a characteristic that notifies periodically is silent past several of its periods by then: probe
    case probe             // connected: the probe (a read) must answer by then, or the link is made again
    case fallbackConnect   // waiting for the wearable: when to try one Connect() besides the kernel's auto-connect
    case scan              // pairing: how long to look for a matching wearable
    case scanRestart       // pairing: when to stop a scan that found nothing, or start it again
    case pair              // pairing: Pair() must finish by then
    case settle            // pairing: the paired wearable must reach `connected` by then
    case unitQuery         // bluetoothd left: ask systemd again (it had not settled the unit)
    case bluetoothdStart   // bluetoothd crashed: start it again (bus activation) then
    case sleepRelease      // the host is going to sleep: logind's inhibitor goes by then, whatever Disconnect() is still out
    case resumeDeadline    // the host woke up: a wearable linked at the sleep must be back by then, or the escalation goes on
    case powerOnRetry      // a power cycle's Powered=true failed: try it again then
    case wedgeProbe        // every wearable on an adapter waits on the auto-connect: one Connect() then, to see whether the adapter refuses it
}

/// A countdown is data carried by the timed state that armed it. The runtime arms a timer for it
/// and feeds `countdownFired(id)` back; the machine acts only if the id is the one its current
/// state carries, so a countdown that fires after its state was left (a cancel and a fire
/// crossing) is ignored.
public struct Countdown: Sendable, Hashable, CustomStringConvertible {
    public struct ID: Sendable, Hashable, CustomStringConvertible {
        public let owner: CountdownOwner
        public let purpose: CountdownPurpose
        /// Unique per machine: never reused, so stale ids never match.
        public let generation: UInt64
        public var description: String { "#\(generation) \(purpose.rawValue) (\(owner))" }

        public init(owner: CountdownOwner, purpose: CountdownPurpose, generation: UInt64) {
            self.owner = owner
            self.purpose = purpose
            self.generation = generation
        }
    }

    public let id: ID
    public let deadline: Moment

    public var description: String { "\(id) at \(deadline)" }

    public init(id: ID, deadline: Moment) {
        self.id = id
        self.deadline = deadline
    }
}
