import Testing
import BlueZ

/// The presence machine without a bus: each test feeds inputs as BlueZClient would, and compares
/// the whole list of actions that come out.
@Suite("Presence: bluetoothd, the adapter and the registrations")
struct PresenceTests {
    static let hr = "0000180d-0000-1000-8000-00805f9b34fb"
    static let bat = "0000180f-0000-1000-8000-00805f9b34fb"
    static let hci0 = "/org/bluez/hci0"
    static let hci1 = "/org/bluez/hci1"

    static func info(_ path: String, powered: Bool = true, address: String? = nil) -> AdapterInfo {
        let name = String(path.split(separator: "/").last!)
        return AdapterInfo(path: path, name: name, address: address ?? (path == hci0 ? "00:AA:01:00:00:00" : "00:AA:01:01:00:00"),
                           powered: powered)
    }

    /// A view of these adapters; the selection picks `best` (default: the first by name).
    static func view(_ adapters: [AdapterInfo], best: String?? = nil, mayReselect: Bool = true) -> Presence.AdapterView {
        Presence.AdapterView(adapters: Dictionary(uniqueKeysWithValues: adapters.map { ($0.path, $0) }),
                             best: best ?? adapters.map(\.path).sorted().first, mayReselect: mayReselect)
    }

    /// bluetoothd up, hci0 powered, the agent and the application held for Heart Rate: ready.
    static func ready() -> Presence {
        var p = Presence()
        _ = p.handle(.wantedUUIDs([hr], view([])))
        _ = p.handle(.ownerAppeared(":1.5"))
        _ = p.handle(.listed(owner: ":1.5", view([info(hci0)])))
        _ = p.handle(.agentRegistered)
        let out = p.handle(.applicationRegistered(adapter: hci0, [hr]))
        precondition(out == [.adapterReady(info(hci0)), .armed([hr])], "\(out)")
        return p
    }

    @Test("start with bluetoothd running: list its objects, register agent and application, then ready once both answered")
    func startRunning() {
        var p = Presence()
        #expect(p.handle(.wantedUUIDs([Self.hr], Self.view([]))) == [])
        #expect(p.handle(.ownerAppeared(":1.5")) == [.announcePresence(true), .list(owner: ":1.5")])
        #expect(p.handle(.listed(owner: ":1.5", Self.view([Self.info(Self.hci0)]))) == [
            .registerAgent, .registerApplication(adapter: Self.hci0, uuids: [Self.hr]),
        ])
        #expect(p.handle(.agentRegistered) == [])
        #expect(!p.isReady)
        #expect(p.handle(.applicationRegistered(adapter: Self.hci0, [Self.hr])) == [.adapterReady(Self.info(Self.hci0)), .armed([Self.hr])])
        #expect(p.isReady)
        // The same owner again (a NameOwnerChanged seen late) changes nothing.
        #expect(p.handle(.ownerAppeared(":1.5")) == [])
    }

    @Test("start without bluetoothd: said absent and unusable once; its arrival later makes the adapter ready")
    func startAbsent() {
        var p = Presence()
        _ = p.handle(.wantedUUIDs([Self.hr], Self.view([])))
        #expect(p.handle(.ownerAbsent) == [.announceAbsent, .adapterGone(reason: .bluetoothdGone, wasReady: false)])
        #expect(p.handle(.ownerAbsent) == [])
        #expect(p.handle(.ownerAppeared(":1.9")) == [.announcePresence(true), .list(owner: ":1.9")])
        #expect(p.handle(.listed(owner: ":1.9", Self.view([Self.info(Self.hci0)]))) == [
            .registerAgent, .registerApplication(adapter: Self.hci0, uuids: [Self.hr]),
        ])
        #expect(p.handle(.applicationRegistered(adapter: Self.hci0, [Self.hr])) == [.armed([Self.hr])])
        #expect(p.handle(.agentRegistered) == [.adapterReady(Self.info(Self.hci0))])
    }

    @Test("a failed listing is read again later; an answer for an owner that left is ignored")
    func listingRetried() {
        var p = Presence()
        _ = p.handle(.ownerAppeared(":1.5"))
        #expect(p.handle(.listFailed(owner: ":1.5")) == [.listLater(owner: ":1.5")])
        #expect(p.handle(.ownerAppeared(":1.5")) == [.list(owner: ":1.5")])
        #expect(p.handle(.ownerLeft) == [.announcePresence(false), .forgetBluetoothd])
        #expect(p.handle(.listed(owner: ":1.5", Self.view([Self.info(Self.hci0)]))) == [])
        #expect(p.bluetoothd == .left)
    }

    @Test("bluetoothd leaves while ready: presence said false first, everything forgotten, adapterGone(bluetoothd-gone), the armed UUIDs emptied")
    func bluetoothdLeaves() {
        var p = Self.ready()
        #expect(p.handle(.ownerLeft) == [
            .announcePresence(false), .forgetBluetoothd, .adapterGone(reason: .bluetoothdGone, wasReady: true),
            .releaseAdapter(Self.hci0), .armed([]),
        ])
        #expect(p.agent == .unregistered && p.adapter == .none && !p.isReady)
        // A new bluetoothd: everything registered again, ready again.
        #expect(p.handle(.ownerAppeared(":1.7")) == [.announcePresence(true), .list(owner: ":1.7")])
        #expect(p.handle(.listed(owner: ":1.7", Self.view([Self.info(Self.hci0)]))) == [
            .registerAgent, .registerApplication(adapter: Self.hci0, uuids: [Self.hr]),
        ])
        _ = p.handle(.agentRegistered)
        #expect(p.handle(.applicationRegistered(adapter: Self.hci0, [Self.hr])) == [.adapterReady(Self.info(Self.hci0)), .armed([Self.hr])])
    }

    @Test("a new owner without the old one leaving first (a restart seen as one NameOwnerChanged): the old one's state goes first")
    func ownerReplaced() {
        var p = Self.ready()
        #expect(p.handle(.ownerAppeared(":1.8")) == [
            .announcePresence(false), .forgetBluetoothd, .adapterGone(reason: .bluetoothdGone, wasReady: true),
            .releaseAdapter(Self.hci0), .announcePresence(true), .list(owner: ":1.8"), .armed([]),
        ])
    }

    @Test("powered off and on while ready: gone and ready again, nothing registered again")
    func poweredOffAndOn() {
        var p = Self.ready()
        #expect(p.handle(.viewChanged(Self.view([Self.info(Self.hci0, powered: false)]))) == [
            .adapterGone(reason: .poweredOff, wasReady: true),
        ])
        #expect(p.handle(.viewChanged(Self.view([Self.info(Self.hci0, powered: false)]))) == [])
        #expect(p.handle(.viewChanged(Self.view([Self.info(Self.hci0)]))) == [.adapterReady(Self.info(Self.hci0))])
    }

    @Test("rfkill: PowerState off-blocked says rfkill-blocked; shown after Powered=false, said once more; unblocked and powered: ready")
    func rfkillBlocked() {
        var blocked = Self.info(Self.hci0, powered: false)
        blocked.rfkillBlocked = true
        var p = Self.ready()
        #expect(p.handle(.viewChanged(Self.view([blocked]))) == [.adapterGone(reason: .rfkillBlocked, wasReady: true)])
        #expect(p.handle(.viewChanged(Self.view([Self.info(Self.hci0)]))) == [.adapterReady(Self.info(Self.hci0))])
        // BlueZ's order the other way round: Powered=false first, then PowerState.
        #expect(p.handle(.viewChanged(Self.view([Self.info(Self.hci0, powered: false)]))) == [
            .adapterGone(reason: .poweredOff, wasReady: true),
        ])
        #expect(p.handle(.viewChanged(Self.view([blocked]))) == [.adapterGone(reason: .rfkillBlocked, wasReady: false)])
        #expect(p.handle(.viewChanged(Self.view([blocked]))) == [])
        #expect(p.handle(.viewChanged(Self.view([Self.info(Self.hci0, powered: false)]))) == [], "unblocked, not yet powered")
        #expect(p.handle(.viewChanged(Self.view([Self.info(Self.hci0)]))) == [.adapterReady(Self.info(Self.hci0))])
    }

    @Test("the first view shows the adapter powered off: unusable said once, ready when it is powered")
    func firstViewPoweredOff() {
        var p = Presence()
        _ = p.handle(.wantedUUIDs([Self.hr], Self.view([])))
        _ = p.handle(.ownerAppeared(":1.5"))
        #expect(p.handle(.listed(owner: ":1.5", Self.view([Self.info(Self.hci0, powered: false)]))) == [
            .registerAgent, .registerApplication(adapter: Self.hci0, uuids: [Self.hr]),
            .adapterGone(reason: .poweredOff, wasReady: false),
        ])
        _ = p.handle(.agentRegistered)
        #expect(p.handle(.applicationRegistered(adapter: Self.hci0, [Self.hr])) == [.armed([Self.hr])])
        #expect(p.handle(.viewChanged(Self.view([Self.info(Self.hci0)]))) == [.adapterReady(Self.info(Self.hci0))])
    }

    @Test("no adapter at all: unusable (removed) once; a dongle plugged in later is used")
    func noAdapter() {
        var p = Presence()
        _ = p.handle(.wantedUUIDs([Self.hr], Self.view([])))
        _ = p.handle(.ownerAppeared(":1.5"))
        #expect(p.handle(.listed(owner: ":1.5", Self.view([]))) == [.adapterGone(reason: .removed, wasReady: false)])
        #expect(p.handle(.viewChanged(Self.view([]))) == [])
        #expect(p.handle(.viewChanged(Self.view([Self.info(Self.hci1)]))) == [
            .registerAgent, .registerApplication(adapter: Self.hci1, uuids: [Self.hr]),
        ])
    }

    @Test("dongle unplugged and back under another index: released, gone (removed), then registered on the new path and ready")
    func unplugAndReplug() {
        var p = Self.ready()
        #expect(p.handle(.viewChanged(Self.view([]))) == [
            .releaseAdapter(Self.hci0), .adapterGone(reason: .removed, wasReady: true), .armed([]),
        ])
        let back = Self.info(Self.hci1, address: "00:AA:01:00:00:00")
        // The agent belongs to bluetoothd, not to the adapter: only the application is registered again.
        #expect(p.handle(.viewChanged(Self.view([back]))) == [.registerApplication(adapter: Self.hci1, uuids: [Self.hr])])
        #expect(p.handle(.applicationRegistered(adapter: Self.hci1, [Self.hr])) == [.adapterReady(back), .armed([Self.hr])])
    }

    @Test("a refused application is retried with a growing attempt count; readiness does not wait for it, and a retry does not take it away")
    func applicationRefused() {
        var p = Presence()
        _ = p.handle(.wantedUUIDs([Self.hr], Self.view([])))
        _ = p.handle(.ownerAppeared(":1.5"))
        _ = p.handle(.listed(owner: ":1.5", Self.view([Self.info(Self.hci0)])))
        _ = p.handle(.agentRegistered)
        #expect(p.handle(.applicationRefused(adapter: Self.hci0)) == [.retryLater(attempt: 1), .adapterReady(Self.info(Self.hci0))])
        // A change of the wanted UUIDs waits for the retry.
        #expect(p.handle(.wantedUUIDs([Self.hr, Self.bat], Self.view([Self.info(Self.hci0)]))) == [])
        #expect(p.handle(.retryDue(Self.view([Self.info(Self.hci0)]))) == [
            .registerApplication(adapter: Self.hci0, uuids: [Self.hr, Self.bat]),
        ])
        #expect(p.handle(.applicationRefused(adapter: Self.hci0)) == [.retryLater(attempt: 2)])
        #expect(p.handle(.retryDue(Self.view([Self.info(Self.hci0)]))) == [
            .registerApplication(adapter: Self.hci0, uuids: [Self.hr, Self.bat]),
        ])
        #expect(p.handle(.applicationRegistered(adapter: Self.hci0, [Self.hr, Self.bat])) == [.armed([Self.hr, Self.bat])])
        #expect(p.isReady)
        // The count starts again after a success.
        #expect(p.retries == 0)
        // A retry nobody scheduled does nothing.
        #expect(p.handle(.retryDue(Self.view([Self.info(Self.hci0)]))) == [])
    }

    @Test("a refused agent is retried; one released by BlueZ is registered again at the next retry")
    func agentRefusedAndReleased() {
        var p = Presence()
        _ = p.handle(.ownerAppeared(":1.5"))
        #expect(p.handle(.listed(owner: ":1.5", Self.view([Self.info(Self.hci0)]))) == [.registerAgent])
        #expect(p.handle(.agentRefused) == [.retryLater(attempt: 1), .adapterReady(Self.info(Self.hci0))])
        #expect(p.handle(.retryDue(Self.view([Self.info(Self.hci0)]))) == [.registerAgent])
        #expect(p.handle(.agentRegistered) == [])
        #expect(p.handle(.agentReleased) == [])
        #expect(p.agent == .released)
        _ = p.handle(.wantedUUIDs([Self.hr], Self.view([Self.info(Self.hci0)])))
        #expect(p.handle(.applicationRefused(adapter: Self.hci0)) == [.retryLater(attempt: 1)])
        #expect(p.handle(.retryDue(Self.view([Self.info(Self.hci0)]))) == [
            .registerAgent, .registerApplication(adapter: Self.hci0, uuids: [Self.hr]),
        ])
        #expect(p.isReady)
    }

    @Test("the wanted UUIDs change while ready: unregister, register with the new list, one call at a time, ready throughout")
    func wantedChange() {
        var p = Self.ready()
        let v = Self.view([Self.info(Self.hci0)])
        #expect(p.handle(.wantedUUIDs([Self.hr, Self.bat], v)) == [.unregisterApplication(adapter: Self.hci0)])
        #expect(p.handle(.wantedUUIDs([Self.bat], v)) == [])
        #expect(p.handle(.applicationUnregistered(adapter: Self.hci0)) == [
            .registerApplication(adapter: Self.hci0, uuids: [Self.bat]), .armed([]),
        ])
        #expect(p.handle(.applicationRegistered(adapter: Self.hci0, [Self.bat])) == [.armed([Self.bat])])
        #expect(p.isReady)
        // No UUIDs wanted: nothing is registered (BlueZ refuses an empty application).
        #expect(p.handle(.wantedUUIDs([], v)) == [.unregisterApplication(adapter: Self.hci0)])
        #expect(p.handle(.applicationUnregistered(adapter: Self.hci0)) == [.armed([])])
    }

    @Test("no adapter configured: a better-sorting adapter seen after the first replaces it before ready, never after")
    func reselectBeforeReady() {
        var p = Presence()
        _ = p.handle(.wantedUUIDs([Self.hr], Self.view([])))
        _ = p.handle(.ownerAppeared(":1.5"))
        #expect(p.handle(.listed(owner: ":1.5", Self.view([Self.info(Self.hci1)]))) == [
            .registerAgent, .registerApplication(adapter: Self.hci1, uuids: [Self.hr]),
        ])
        #expect(p.handle(.applicationRegistered(adapter: Self.hci1, [Self.hr])) == [.armed([Self.hr])])
        let both = Self.view([Self.info(Self.hci0), Self.info(Self.hci1)])
        #expect(p.handle(.viewChanged(both)) == [
            .unregisterApplication(adapter: Self.hci1), .releaseAdapter(Self.hci1),
            .registerApplication(adapter: Self.hci0, uuids: [Self.hr]), .armed([]),
        ])
        // The old adapter's late answer is not taken for the new one's.
        #expect(p.handle(.applicationUnregistered(adapter: Self.hci1)) == [])
        #expect(p.handle(.applicationRegistered(adapter: Self.hci1, [Self.hr])) == [])
        _ = p.handle(.agentRegistered)
        #expect(p.handle(.applicationRegistered(adapter: Self.hci0, [Self.hr])) == [.adapterReady(Self.info(Self.hci0)), .armed([Self.hr])])
        // After ready the choice stands.
        let three = Self.view([Self.info("/org/bluez/hci"), Self.info(Self.hci0), Self.info(Self.hci1)], best: "/org/bluez/hci")
        #expect(p.handle(.viewChanged(three)) == [])
        #expect(p.adapter.path == Self.hci0)
    }

    @Test("an adapter bound by configuration is never swapped, even before ready")
    func noReselectWhenBound() {
        var p = Presence()
        _ = p.handle(.ownerAppeared(":1.5"))
        _ = p.handle(.listed(owner: ":1.5", Self.view([Self.info(Self.hci1)], best: Self.hci1, mayReselect: false)))
        #expect(p.handle(.viewChanged(Self.view([Self.info(Self.hci0), Self.info(Self.hci1)], best: Self.hci0, mayReselect: false))) == [])
        #expect(p.adapter.path == Self.hci1)
    }

    @Test("stop: unregister what BlueZ holds, back to the start with the same wanted UUIDs")
    func stop() {
        var p = Self.ready()
        #expect(p.handle(.stop) == [.unregisterAgent, .unregisterApplication(adapter: Self.hci0), .armed([])])
        #expect(p == Presence(wanting: [Self.hr]))
        var q = Presence()
        #expect(q.handle(.stop) == [])
    }

    // MARK: Several adapters at once (`[General] Adapter = hci0 hci1`)

    static let hci2 = "/org/bluez/hci2"

    /// Two selectors, each picking its own adapter (hci0, hci1), both ready.
    static func readyTwo() -> Presence {
        var p = Presence(slots: 2)
        let a = info(hci0), b = info(hci1)
        _ = p.handle(.wantedUUIDs([hr], Presence.AdapterView(adapters: [:], picks: [nil, nil], mayReselect: false)))
        _ = p.handle(.ownerAppeared(":1.5"))
        let out = p.handle(.listed(owner: ":1.5", Presence.AdapterView(adapters: [hci0: a, hci1: b], picks: [hci0, hci1], mayReselect: false)))
        precondition(out == [.registerAgent, .registerApplication(adapter: hci0, uuids: [hr]), .registerApplication(adapter: hci1, uuids: [hr])], "\(out)")
        _ = p.handle(.agentRegistered)
        _ = p.handle(.applicationRegistered(adapter: hci0, [hr]))
        _ = p.handle(.applicationRegistered(adapter: hci1, [hr]))
        precondition(p.readyPaths == [hci0, hci1])
        return p
    }

    @Test("two adapters: one agent, an application on each, each adapter ready on its own as its registration answers")
    func twoAdaptersStart() {
        var p = Presence(slots: 2)
        let a = Self.info(Self.hci0), b = Self.info(Self.hci1)
        let both = Presence.AdapterView(adapters: [Self.hci0: a, Self.hci1: b], picks: [Self.hci0, Self.hci1], mayReselect: false)
        _ = p.handle(.wantedUUIDs([Self.hr], Presence.AdapterView(adapters: [:], picks: [nil, nil], mayReselect: false)))
        _ = p.handle(.ownerAppeared(":1.5"))
        #expect(p.handle(.listed(owner: ":1.5", both)) == [
            .registerAgent, .registerApplication(adapter: Self.hci0, uuids: [Self.hr]), .registerApplication(adapter: Self.hci1, uuids: [Self.hr]),
        ])
        #expect(p.handle(.agentRegistered) == [])
        // hci1 answers first: it is ready first, as slot 1; hci0 is not waited for.
        #expect(p.handle(.applicationRegistered(adapter: Self.hci1, [Self.hr])) == [.adapterReady(b, slot: 1), .armed([Self.hr])])
        #expect(p.isReady && p.readyPaths == [Self.hci1])
        #expect(p.handle(.applicationRegistered(adapter: Self.hci0, [Self.hr])) == [.adapterReady(a, slot: 0), .armed([Self.hr])])
        #expect(p.readyPaths == [Self.hci0, Self.hci1])
    }

    @Test("two adapters: one unplugged goes alone (gone for its slot, released), the other stays ready; back under another index, its slot is ready again")
    func twoAdaptersOneUnplugged() {
        var p = Self.readyTwo()
        let b = Self.info(Self.hci1)
        #expect(p.handle(.viewChanged(Presence.AdapterView(adapters: [Self.hci1: b], picks: [nil, Self.hci1], mayReselect: false))) == [
            .releaseAdapter(Self.hci0), .adapterGone(reason: .removed, wasReady: true, slot: 0), .armed([Self.hr]),
        ])
        #expect(p.isReady && p.readyPaths == [Self.hci1])
        #expect(p.slots[1].adapter == .serving(path: Self.hci1, .held([Self.hr])))
        let back = Self.info(Self.hci2, address: "00:AA:01:00:00:00")
        let view = Presence.AdapterView(adapters: [Self.hci1: b, Self.hci2: back], picks: [Self.hci2, Self.hci1], mayReselect: false)
        #expect(p.handle(.viewChanged(view)) == [.registerApplication(adapter: Self.hci2, uuids: [Self.hr])])
        #expect(p.handle(.applicationRegistered(adapter: Self.hci2, [Self.hr])) == [.adapterReady(back, slot: 0), .armed([Self.hr])])
        #expect(p.readyPaths == [Self.hci2, Self.hci1])
    }

    @Test("two adapters: bluetoothd leaving ends both, slot by slot; stop unregisters the application on each")
    func twoAdaptersBluetoothdLeavesAndStop() {
        var p = Self.readyTwo()
        #expect(p.handle(.ownerLeft) == [
            .announcePresence(false), .forgetBluetoothd,
            .adapterGone(reason: .bluetoothdGone, wasReady: true, slot: 0), .releaseAdapter(Self.hci0),
            .adapterGone(reason: .bluetoothdGone, wasReady: true, slot: 1), .releaseAdapter(Self.hci1),
            .armed([]),
        ])
        #expect(!p.isReady)
        var q = Self.readyTwo()
        #expect(q.handle(.stop) == [
            .unregisterAgent, .unregisterApplication(adapter: Self.hci0), .unregisterApplication(adapter: Self.hci1), .armed([]),
        ])
        #expect(q.slots.count == 2)
    }

    @Test("two selectors naming one adapter: the second never takes it (one registration), and says it has none")
    func twoSelectorsOneAdapter() {
        var p = Presence(slots: 2)
        let a = Self.info(Self.hci0)
        let view = Presence.AdapterView(adapters: [Self.hci0: a], picks: [Self.hci0, Self.hci0], mayReselect: false)
        _ = p.handle(.wantedUUIDs([Self.hr], Presence.AdapterView(adapters: [:], picks: [nil, nil], mayReselect: false)))
        _ = p.handle(.ownerAppeared(":1.5"))
        #expect(p.handle(.listed(owner: ":1.5", view)) == [
            .registerAgent, .registerApplication(adapter: Self.hci0, uuids: [Self.hr]),
            .adapterGone(reason: .removed, wasReady: false, slot: 1),
        ])
        _ = p.handle(.agentRegistered)
        #expect(p.handle(.applicationRegistered(adapter: Self.hci0, [Self.hr])) == [.adapterReady(a, slot: 0), .armed([Self.hr])])
        #expect(p.slots[1].adapter == .none)
    }

    @Test("the reasons an adapter is gone keep their journal words (old journals and `PAIRD_*` queries read them)")
    func goneReasonTokens() {
        #expect(AdapterGoneReason.allCases.map(\.token) == ["removed", "powered-off", "rfkill-blocked", "bluetoothd-gone"])
        #expect(AdapterGoneReason.allCases.map { "\($0)" } == AdapterGoneReason.allCases.map(\.token), "logged as the token")
    }
}
