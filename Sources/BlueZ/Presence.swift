import PairingCore

/// Whether BlueZ, the adapter and paird's registrations with them are ready: one value, changed
/// only by `handle(_:)`, which returns what `BlueZClient` must do (calls to make, events to send,
/// state to forget). No D-Bus here: the client turns bus traffic into `Input`s and `Action`s into
/// bus traffic, and `PresenceTests` drives it without a bus.
///
/// The client still chooses the adapters (the choice reads the object cache and the configured
/// selectors) and hands the machine the result with each view of the adapters (`AdapterView`).
///
/// Several adapters (`[General] Adapter = hci0 hci1`): one `Slot` per configured selector, each
/// with its own adapter, application registration and verdict; bluetoothd, the agent (one per
/// bluetoothd) and the registration retry are shared. A slot never takes an adapter an earlier
/// slot holds.
public struct Presence: Sendable, Equatable {
    /// bluetoothd (`org.bluez`) on the system bus.
    public enum Bluetoothd: Sendable, Equatable {
        /// `GetNameOwner` has not answered yet.
        case unknown
        /// `GetNameOwner` said nobody owns `org.bluez`: bluetoothd is not running.
        case absent
        /// It left the bus (`NameOwnerChanged`); a new one may follow.
        case left
        /// It owns the name; its objects are being read (`GetManagedObjects`).
        case listing(owner: String)
        /// Its objects are in the cache and kept up to date by its signals.
        case listed(owner: String)

        public var owner: String? {
            switch self {
            case .listing(let o), .listed(let o): o
            case .unknown, .absent, .left: nil
            }
        }
    }

    /// paird's `Agent1` with `AgentManager1` (one per bluetoothd, not per adapter).
    public enum Agent: Sendable, Equatable {
        case unregistered
        case registering
        /// BlueZ holds it.
        case held
        /// `RegisterAgent` failed; tried again when the retry is due.
        case refused
        /// BlueZ called `Release`: it no longer holds it; registered again at the next retry.
        case released

        /// An attempt came to an end (held or not): the adapter may be declared ready.
        var settled: Bool { self != .unregistered && self != .registering }
    }

    /// paird's `GattProfile1` application with the adapter's `GattManager1`: what arms the
    /// kernel's LE auto-connect for the wanted service UUIDs.
    public enum Application: Sendable, Equatable {
        case unregistered
        case registering([String])
        /// `UnregisterApplication` sent; BlueZ holds these UUIDs until it answers.
        case unregistering([String])
        /// BlueZ holds it with these UUIDs.
        case held([String])
        /// `RegisterApplication` failed; tried again when the retry is due.
        case refused

        var busy: Bool {
            switch self {
            case .registering, .unregistering: true
            case .unregistered, .held, .refused: false
            }
        }

        /// The UUIDs BlueZ holds, nil when it holds none.
        public var heldUUIDs: [String]? {
            switch self {
            case .held(let u), .unregistering(let u): u
            case .unregistered, .registering, .refused: nil
            }
        }
    }

    /// The adapter paird uses.
    public enum Adapter: Sendable, Equatable {
        case none
        /// Chosen; the registrations have not all come to an end yet.
        case preparing(path: String, Application)
        /// Chosen, and the registrations came to an end once: ready whenever it is powered.
        /// (A registration tried again later does not take readiness away.)
        case serving(path: String, Application)

        public var path: String? {
            switch self {
            case .none: nil
            case .preparing(let p, _), .serving(let p, _): p
            }
        }

        public var application: Application {
            switch self {
            case .none: .unregistered
            case .preparing(_, let a), .serving(_, let a): a
            }
        }

        func with(_ app: Application) -> Adapter {
            switch self {
            case .none: .none
            case .preparing(let p, _): .preparing(path: p, app)
            case .serving(let p, _): .serving(path: p, app)
            }
        }
    }

    /// What the client's user was last told about the adapter.
    public enum Verdict: Sendable, Equatable {
        /// Nothing yet (paird starting).
        case none
        /// `adapterReady`.
        case ready
        /// `adapterGone` (after a ready period, or at the first settled view without a usable one).
        case unusable
    }

    /// One configured selector's adapter and what was said about it.
    public struct Slot: Sendable, Equatable {
        public var adapter = Adapter.none
        public var verdict = Verdict.none
        /// The reason of the last `adapterGone`, while unusable.
        public var goneReason: AdapterGoneReason?
        public init() {}
    }

    /// The adapters in BlueZ's object cache, and the ones the client's selection picks now.
    public struct AdapterView: Sendable, Equatable {
        /// Every adapter BlueZ shows, by path.
        public var adapters: [String: AdapterInfo]
        /// The adapter each configured selector picks now, in the selectors' order (nil: none fits).
        public var picks: [String?]
        /// Whether the machine may move to `best` from an adapter it chose earlier (no adapter
        /// configured and none bound by address: the first one seen may not sort first).
        public var mayReselect: Bool

        /// The first selector's pick.
        public var best: String? { picks.first ?? nil }

        public init(adapters: [String: AdapterInfo], picks: [String?], mayReselect: Bool) {
            self.adapters = adapters
            self.picks = picks
            self.mayReselect = mayReselect
        }

        /// One selector.
        public init(adapters: [String: AdapterInfo], best: String?, mayReselect: Bool) {
            self.init(adapters: adapters, picks: [best], mayReselect: mayReselect)
        }
    }

    public enum Input: Sendable, Equatable {
        /// `GetNameOwner(org.bluez)` failed: nobody owns it.
        case ownerAbsent
        /// `org.bluez` has this owner (`GetNameOwner`, `NameOwnerChanged`, or a listing tried again).
        case ownerAppeared(String)
        /// `NameOwnerChanged` with an old owner: bluetoothd left.
        case ownerLeft
        /// `GetManagedObjects` of this owner is in the cache.
        case listed(owner: String, AdapterView)
        /// `GetManagedObjects` of this owner failed (bluetoothd may be starting).
        case listFailed(owner: String)
        /// The cache changed (an adapter came, went or changed its properties).
        case viewChanged(AdapterView)
        /// The service UUIDs the application should list.
        case wantedUUIDs([String], AdapterView)
        case agentRegistered
        case agentRefused
        case agentReleased
        /// `RegisterApplication` on this adapter succeeded (or BlueZ already held it) for these UUIDs.
        case applicationRegistered(adapter: String, [String])
        case applicationRefused(adapter: String)
        /// `UnregisterApplication` on this adapter answered (either way: BlueZ holds it no longer,
        /// or never did).
        case applicationUnregistered(adapter: String)
        /// The registration retry is due.
        case retryDue(AdapterView)
        /// The client stops: unregister what BlueZ holds.
        case stop
    }

    public enum Action: Sendable, Equatable {
        /// Tell the user bluetoothd is on the bus (true) or left it (false), once per change.
        case announcePresence(Bool)
        /// Tell the user bluetoothd was not running at the first look.
        case announceAbsent
        /// Read the owner's objects (`GetManagedObjects`) into the cache.
        case list(owner: String)
        /// Read them again after a delay (the listing failed).
        case listLater(owner: String)
        /// bluetoothd left: forget its objects and everything tied to them (links, questions,
        /// the retry).
        case forgetBluetoothd
        /// paird stops using this adapter (vanished, replaced, bluetoothd gone): its discovery
        /// and anything else tied to it ends.
        case releaseAdapter(String)
        case registerAgent
        case unregisterAgent
        case registerApplication(adapter: String, uuids: [String])
        case unregisterApplication(adapter: String)
        /// Try the refused registrations again after the backoff's delay for this attempt (1…).
        case retryLater(attempt: Int)
        /// The UUIDs BlueZ holds in the application changed (empty: none).
        case armed([String])
        /// `slot`: the selector's index (0 with one selector).
        case adapterReady(AdapterInfo, slot: Int = 0)
        /// `wasReady`: it ends a ready period (not the first verdict). `slot`: the selector's index.
        case adapterGone(reason: AdapterGoneReason, wasReady: Bool, slot: Int = 0)
    }

    public private(set) var bluetoothd = Bluetoothd.unknown
    public private(set) var agent = Agent.unregistered
    /// One per configured selector (at least one).
    public private(set) var slots: [Slot]
    /// What `announcePresence` last said (nil: nothing yet).
    public private(set) var presenceAnnounced: Bool?
    public private(set) var wanted: [String] = []
    /// Refused registrations in a row (reset by a successful one, and by a new bluetoothd).
    public private(set) var retries = 0
    public private(set) var retryPending = false
    /// The adapters as last shown (inputs that change only registrations bring no view).
    private var lastView = AdapterView(adapters: [:], best: nil, mayReselect: false)

    public init(wanting wanted: [String] = [], slots: Int = 1) {
        self.wanted = wanted
        self.slots = Array(repeating: Slot(), count: max(1, slots))
    }

    /// The first selector's adapter and verdict (the only ones with one selector).
    public var adapter: Adapter { slots[0].adapter }
    public var verdict: Verdict { slots[0].verdict }
    /// Some adapter is ready.
    public var isReady: Bool { slots.contains { $0.verdict == .ready } }
    /// The paths of the ready adapters, in the selectors' order.
    public var readyPaths: [String] { slots.compactMap { $0.verdict == .ready ? $0.adapter.path : nil } }
    /// The slot holding the adapter at this path.
    public func slot(holding path: String) -> Int? { slots.firstIndex { $0.adapter.path == path } }
    public var listedOwner: String? {
        if case .listed(let o) = bluetoothd { return o }
        return nil
    }

    public mutating func handle(_ input: Input) -> [Action] {
        var out: [Action] = []
        let armedBefore = slots.map { $0.adapter.application.heldUUIDs }
        switch input {
        case .ownerAbsent:
            guard bluetoothd == .unknown else { break }
            bluetoothd = .absent
            if presenceAnnounced == nil { out.append(.announceAbsent) }
            settle(nil, &out)
        case .ownerAppeared(let name):
            if bluetoothd == .listed(owner: name) { break }
            if let old = bluetoothd.owner, old != name { leave(&out) }
            if presenceAnnounced != true {
                presenceAnnounced = true
                out.append(.announcePresence(true))
            }
            bluetoothd = .listing(owner: name)
            out.append(.list(owner: name))
        case .ownerLeft:
            leave(&out)
        case .listed(let owner, let view):
            guard bluetoothd == .listing(owner: owner) else { break }
            bluetoothd = .listed(owner: owner)
            settle(view, &out)
        case .listFailed(let owner):
            guard bluetoothd == .listing(owner: owner) else { break }
            out.append(.listLater(owner: owner))
        case .viewChanged(let view):
            settle(view, &out)
        case .wantedUUIDs(let uuids, let view):
            wanted = uuids
            settle(view, &out)
        case .agentRegistered:
            guard agent == .registering else { break }
            agent = .held
            retries = 0
            settle(nil, &out)
        case .agentRefused:
            guard agent == .registering else { break }
            agent = .refused
            retry(&out)
            settle(nil, &out)
        case .agentReleased:
            if agent == .held { agent = .released }
        case .applicationRegistered(let path, let uuids):
            guard let k = slot(holding: path), case .registering = slots[k].adapter.application else { break }
            slots[k].adapter = slots[k].adapter.with(.held(uuids))
            retries = 0
            settle(nil, &out)
        case .applicationRefused(let path):
            guard let k = slot(holding: path), case .registering = slots[k].adapter.application else { break }
            slots[k].adapter = slots[k].adapter.with(.refused)
            retry(&out)
            settle(nil, &out)
        case .applicationUnregistered(let path):
            guard let k = slot(holding: path), case .unregistering = slots[k].adapter.application else { break }
            slots[k].adapter = slots[k].adapter.with(.unregistered)
            settle(nil, &out)
        case .retryDue(let view):
            guard retryPending else { break }
            retryPending = false
            if agent == .refused || agent == .released { agent = .unregistered }
            for k in slots.indices where slots[k].adapter.application == .refused {
                slots[k].adapter = slots[k].adapter.with(.unregistered)
            }
            settle(view, &out)
        case .stop:
            if bluetoothd.owner != nil {
                if agent == .held { out.append(.unregisterAgent) }
                for s in slots {
                    if let path = s.adapter.path, case .held = s.adapter.application {
                        out.append(.unregisterApplication(adapter: path))
                    }
                }
            }
            // Back to the start (a later `start()` looks for bluetoothd again), wanting the same.
            self = Presence(wanting: wanted, slots: slots.count)
        }
        let armedAfter = slots.map { $0.adapter.application.heldUUIDs }
        if armedAfter != armedBefore { out.append(.armed(Self.union(armedAfter))) }
        return out
    }

    /// The UUIDs held on any adapter, in first-seen order.
    static func union(_ held: [[String]?]) -> [String] {
        var seen = Set<String>()
        return held.compactMap { $0 }.flatMap { $0 }.filter { seen.insert($0).inserted }
    }

    /// bluetoothd left the bus: everything it held for us went with it.
    private mutating func leave(_ out: inout [Action]) {
        guard bluetoothd.owner != nil else { return }
        presenceAnnounced = false
        out.append(.announcePresence(false))
        bluetoothd = .left
        out.append(.forgetBluetoothd)
        agent = .unregistered
        retries = 0 // a new bluetoothd gets the short delay again
        retryPending = false
        for k in slots.indices {
            let path = slots[k].adapter.path
            slots[k].adapter = slots[k].adapter.with(.unregistered)
            judge(k, nil, &out)
            if let path { out.append(.releaseAdapter(path)) }
            slots[k].adapter = .none
        }
    }

    private mutating func retry(_ out: inout [Action]) {
        guard !retryPending else { return }
        retryPending = true
        retries += 1
        out.append(.retryLater(attempt: retries))
    }

    /// Re-checks each slot's adapter (gone, better one, first one), drives the registrations, and
    /// gives the verdicts. `view` nil: the last one given (only registrations changed).
    private mutating func settle(_ view: AdapterView?, _ out: inout [Action]) {
        if let view { lastView = view }
        let view = lastView
        if listedOwner != nil {
            for k in slots.indices {
                let pick = view.picks.indices.contains(k) ? view.picks[k] : nil
                // A slot never takes an adapter another slot holds (two selectors naming one adapter).
                let taken = Set(slots.indices.filter { $0 != k }.compactMap { slots[$0].adapter.path })
                let best = pick.flatMap { taken.contains($0) ? nil : $0 }
                if let path = slots[k].adapter.path, view.adapters[path] == nil {
                    // Its adapter vanished: its application registration went with it.
                    slots[k].adapter = .none
                    out.append(.releaseAdapter(path))
                }
                if k == 0, slots.count == 1, view.mayReselect, slots[k].verdict != .ready, !slots[k].adapter.application.busy,
                   let current = slots[k].adapter.path, let best, best != current {
                    if case .held = slots[k].adapter.application { out.append(.unregisterApplication(adapter: current)) }
                    out.append(.releaseAdapter(current))
                    slots[k].adapter = .preparing(path: best, .unregistered)
                }
                if slots[k].adapter.path == nil, let best { slots[k].adapter = .preparing(path: best, .unregistered) }
            }
            if slots.contains(where: { $0.adapter.path != nil }), agent == .unregistered {
                agent = .registering
                out.append(.registerAgent)
            }
            for k in slots.indices where slots[k].adapter.path != nil { reconcileApplication(k, &out) }
        }
        for k in slots.indices { judge(k, listedOwner != nil ? view : nil, &out) }
    }

    /// Brings BlueZ's registration of the application on slot `k`'s adapter in line with
    /// `wanted`, one call at a time.
    private mutating func reconcileApplication(_ k: Int, _ out: inout [Action]) {
        let adapter = slots[k].adapter
        guard let path = adapter.path else { return }
        switch adapter.application {
        case .registering, .unregistering, .refused:
            break // an answer, or the retry, comes first
        case .held(let uuids) where uuids != wanted:
            slots[k].adapter = adapter.with(.unregistering(uuids))
            out.append(.unregisterApplication(adapter: path))
        case .held:
            break
        case .unregistered:
            // An application with no UUIDs would be refused ("No valid service object found").
            guard !wanted.isEmpty else { break }
            slots[k].adapter = adapter.with(.registering(wanted))
            out.append(.registerApplication(adapter: path, uuids: wanted))
        }
        if case .preparing(let p, let app) = slots[k].adapter, agent.settled, Self.concluded(app, wanted: wanted) {
            slots[k].adapter = .serving(path: p, app)
        }
    }

    /// A registration attempt came to an end: held as wanted, refused, or none wanted.
    static func concluded(_ app: Application, wanted: [String]) -> Bool {
        switch app {
        case .held(let u): u == wanted
        case .refused: true
        case .unregistered: wanted.isEmpty
        case .registering, .unregistering: false
        }
    }

    /// Slot `k`'s verdict: `adapterReady` once its adapter serves and is powered, `adapterGone`
    /// when a ready period ends, or once at the first settled view without a usable adapter.
    /// `view` nil: bluetoothd's objects are not in the cache.
    private mutating func judge(_ k: Int, _ view: AdapterView?, _ out: inout [Action]) {
        let adapter = slots[k].adapter
        let info = adapter.path.flatMap { view?.adapters[$0] }
        var up = false
        if case .serving = adapter, info?.powered == true { up = true }
        if up, slots[k].verdict != .ready, let info {
            slots[k].verdict = .ready
            slots[k].goneReason = nil
            out.append(.adapterReady(info, slot: k))
            return
        }
        guard !up else { return }
        let reason: AdapterGoneReason = view == nil ? .bluetoothdGone : info == nil ? .removed
            : info?.rfkillBlocked == true ? .rfkillBlocked : .poweredOff
        if slots[k].verdict == .ready {
            slots[k].verdict = .unusable
            slots[k].goneReason = reason
            out.append(.adapterGone(reason: reason, wasReady: true, slot: k))
        } else if slots[k].verdict == .none, view != nil ? info?.powered != true : bluetoothd == .absent {
            // First settled view and no usable adapter (none, wrong selector, powered off, or no
            // bluetoothd at all): say so once, so the daemon can finish starting (READY=1).
            slots[k].verdict = .unusable
            slots[k].goneReason = reason
            out.append(.adapterGone(reason: reason, wasReady: false, slot: k))
        } else if slots[k].verdict == .unusable, reason == .rfkillBlocked, slots[k].goneReason == .poweredOff {
            // Found blocked after it was said powered off (5.66 -E: PowerState came after
            // Powered=false): the block is said once more.
            slots[k].goneReason = reason
            out.append(.adapterGone(reason: reason, wasReady: false, slot: k))
        }
    }
}
