import BlueZ
import DBus
import BuildInfo
import PairingCore
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// `org.paird1.Manager1` at `/org/paird1`: what pairctl talks to. Who may call what: the D-Bus
/// policy (etc/dbus-1/system.d/org.paird1.conf) and paird's own check of the caller (`CallerCheck`,
/// through `whenPrivileged`), so a permissive policy file alone opens nothing; this validates arguments, asks the machine
/// whether it takes the request (`PairingMachine.refusal(of:)`), and feeds it as a user event.
final class ManagerAPI {
    /// What the API needs of the daemon: a feed into the machine and sources for the status.
    struct PairingAdapterRefusal: Error, ExpressibleByStringLiteral {
        var text: String
        init(text: String) { self.text = text }
        init(stringLiteral value: String) { text = value }
    }

    struct Backend {
        var feed: (Event) -> Void
        var machine: () -> PairingMachine
        var adapter: () -> AdapterInfo?
        /// The ready adapter `pairctl pair --adapter` names ("" for the default), by address, or
        /// why none is.
        var pairingAdapter: (String) -> Result<DeviceAddress, PairingAdapterRefusal>
        var status: () -> StatusDocument
        /// Why the state file could not be written, if the last write failed.
        var unsaved: () -> String?
        /// `GetHistory() → h`: a read-only descriptor of the availability record.
        var history: () throws -> UnixFD
    }

    let object = DBusObject()
    private let bus: DBusConnection
    private let backend: Backend
    /// The `Pair` call waiting for its session to end.
    private var pendingPair: MethodContext?
    /// `Unpair` calls waiting for BlueZ's `RemoveDevice` to finish.
    private var pendingUnpairs: [DeviceAddress: [MethodContext]] = [:]
    /// Each caller's verdict (`CallerCheck`), by unique bus name; dropped when the name leaves the bus.
    private var callers: [String: Bool] = [:]
    /// The group that may do everything (tests name another through `PAIRD_TEST_PRIVILEGED_GROUP`).
    let privilegedGroup: String
    /// Tests only: the uid paird takes every caller to have (the tests run as paird's own user).
    private let testCallerUID: UInt32?

    /// BlueZ answered the `RemoveDevice` of an unpaired wearable (its object is gone, or BlueZ
    /// could not be asked): the `Unpair` calls for it are answered.
    func unpairFinished(_ a: DeviceAddress) {
        for call in pendingUnpairs.removeValue(forKey: a) ?? [] { call.reply() }
    }

    init(bus: DBusConnection, backend: Backend) {
        self.bus = bus
        self.backend = backend
        let env = ProcessInfo.processInfo.environment
        privilegedGroup = env["PAIRD_TEST_PRIVILEGED_GROUP"] ?? CallerCheck.defaultGroup
        testCallerUID = env["PAIRD_TEST_CALLER_UID"].flatMap { UInt32($0) }
        let i = DBusInterface(PairdAPI.interface)
        /// A method that changes something or reads wearable data: run only for a privileged caller.
        func guarded(_ name: String, in signature: String = "", out: String = "", _ what: String,
                     _ body: @escaping ([DBusValue], MethodContext) throws -> Void) {
            i.method(name, in: signature, out: out) { [unowned self] args, call in
                whenPrivileged(call, what) { ok in
                    guard ok else { throw CallerCheck.refusal(what, group: self.privilegedGroup) }
                    try body(args, call)
                }
            }
        }
        guarded("Pair", in: "a{sv}", out: "ss", "pairing") { [unowned self] args, call in try pair(args, call) }
        guarded("AnswerPasskey", in: "u", "answering a pairing") { [unowned self] args, call in
            guard let k = args.first?.uint32, k <= 999_999 else {
                throw DBusError(name: PairdAPI.Error.invalidArguments, message: "a passkey is 6 digits (0–999999)")
            }
            try answer(.passkey(k), call)
        }
        guarded("AnswerConfirmation", in: "b", "answering a pairing") { [unowned self] args, call in
            try answer(.confirm(args.first?.bool ?? false), call)
        }
        guarded("CancelPairing", "canceling a pairing") { [unowned self] _, call in
            try refuseIfNeeded(.userCancelPairing)
            backend.feed(.userCancelPairing)
            call.reply()
        }
        guarded("Unpair", in: "s", "unpairing") { [unowned self] args, call in
            // Answered once BlueZ has removed the device (`unpairFinished`): a `pairctl pair` of
            // the same wearable right after starts from nothing.
            let a = try address(args)
            try submit(.userUnpair(a))
            pendingUnpairs[a, default: []].append(call)
        }
        guarded("Connect", in: "s", "connecting a wearable") { [unowned self] args, call in
            try submit(.userConnect(try address(args)))
            call.reply()
        }
        guarded("Disconnect", in: "s", "disconnecting a wearable") { [unowned self] args, call in
            try submit(.userDisconnect(try address(args)))
            call.reply()
        }
        // Everyone gets the states; battery, last data and health checks only a privileged caller.
        i.method("GetStatus", out: "s") { [unowned self] _, call in
            whenPrivileged(call, "the full status") { ok in
                let status = backend.status()
                call.reply([.string((ok ? status : status.statesOnly()).json(pretty: false))])
            }
        }
        guarded("GetHistory", out: "h", "the availability record (GetHistory)") { [unowned self] _, call in
            do {
                call.reply([.unixFD(try backend.history())])
            } catch {
                throw DBusError(name: PairdAPI.Error.failed, message: "cannot open the availability record: \(error)")
            }
        }
        i.property("Version", signature: "s", emitsChange: false, get: { .string(BuildInfo.version) })
        for (name, signature) in Self.statusProperties {
            i.property(name, signature: signature, get: { [unowned self] in statusValues()[name]! })
        }
        i.signal("StateChanged", signature: "sss")
        i.signal("PairingProgress", signature: "sss")
        i.signal("Notification", signature: "ssay")
        i.signal("Battery", signature: "sy")
        object.add(i)
    }

    /// Runs `body` with the caller's verdict (`CallerCheck`), now when it is known, else once the
    /// bus has given the caller's credentials. What `body` throws is the caller's answer.
    func whenPrivileged(_ call: MethodContext, _ what: String, _ body: @escaping (Bool) throws -> Void) {
        func run(_ ok: Bool) {
            do { try body(ok) } catch let e as DBusError { call.fail(e) } catch { call.fail(DBusError.failed("\(error)")) }
        }
        let sender = call.sender
        if let known = callers[sender] { return run(known) }
        bus.call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                 method: "GetConnectionCredentials", args: [.string(sender)], timeout: .seconds(5)) { [weak self] result in
            guard let self else { return }
            guard case .success(let values) = result, let found = values.first?.dictionary.flatMap({ CallerCheck.credentials($0) }) else {
                return run(false)   // no credentials: not privileged (and not cached)
            }
            let uid = testCallerUID ?? found.uid
            let groups = testCallerUID == nil ? (found.groups ?? CallerCheck.groups(of: uid)) : CallerCheck.groups(of: uid)
            let ok = CallerCheck.isPrivileged(uid: uid, groups: groups, ownUID: UInt32(getuid()),
                                              privilegedGID: CallerCheck.gid(of: privilegedGroup))
            if callers.isEmpty { watchCallers() }
            callers[sender] = ok
            run(ok)
        }
    }

    private var callersWatch: SignalSubscription?
    /// Verdicts are dropped when their unique name leaves the bus (unique names are never reused).
    private func watchCallers() {
        guard callersWatch == nil else { return }
        callersWatch = bus.onSignal(interface: "org.freedesktop.DBus", member: "NameOwnerChanged", path: "/org/freedesktop/DBus",
                                    sender: "org.freedesktop.DBus") { [weak self] message in
            guard let args = try? message.arguments(), args.count == 3, let name = args[0].string, args[2].string == "" else { return }
            self?.callers[name] = nil
        }
    }

    /// The status as properties, for D-Bus clients that watch rather than poll (`GetStatus` has
    /// the whole document): `PropertiesChanged` is emitted whenever one of them changes.
    static let statusProperties = [("AdapterPresent", "b"), ("AdapterPowered", "b"), ("Pairing", "s"), ("Devices", "a{ss}")]
    /// What `PropertiesChanged` last said (or the first `Get` would have).
    private var published: [String: DBusValue] = [:]

    func statusValues() -> [String: DBusValue] {
        let adapter = backend.adapter()
        let machine = backend.machine()
        let devices = machine.devices.values.sorted { $0.address < $1.address }.map {
            DBusDictEntry(key: .string($0.address.description), value: .string($0.state.name))
        }
        return ["AdapterPresent": .bool(adapter != nil),
                "AdapterPowered": .bool(adapter?.powered ?? false),
                "Pairing": .string(machine.pairing?.phase.name ?? ""),
                "Devices": .dict(keySignature: "s", valueSignature: "s", devices)]
    }

    /// After each batch of machine events: `PropertiesChanged` with the status properties that changed.
    func publishStatus() {
        let now = statusValues()
        let changed = now.filter { published[$0.key] != $0.value }
        published = now
        guard !changed.isEmpty else { return }
        try? bus.emitPropertiesChanged(path: PairdAPI.objectPath, interface: PairdAPI.interface, changed: changed)
    }

    func address(_ args: [DBusValue]) throws -> DeviceAddress {
        guard let text = args.first?.string, let a = DeviceAddress(text) else {
            throw DBusError(name: PairdAPI.Error.invalidArguments,
                            message: "\"\(args.first?.string ?? "")\" is not a Bluetooth address (AA:BB:CC:DD:EE:FF)")
        }
        return a
    }

    /// Throws the machine's refusal of `event` as the D-Bus error pairctl maps to its exit code.
    func refuseIfNeeded(_ event: Event) throws {
        guard let refusal = backend.machine().refusal(of: event) else { return }
        switch refusal {
        case .pairingBusy: throw DBusError(name: PairdAPI.Error.busy, message: "a pairing is already in progress (paird pairs one wearable at a time; `pairctl status` shows it): try again once it ends")
        case .noPairing: throw DBusError(name: PairdAPI.Error.failed, message: "no pairing in progress")
        case .noQuestion: throw DBusError(name: PairdAPI.Error.notAsked, message: "no question of that kind is waiting for an answer")
        case .unknownDevice(let a): throw DBusError(name: PairdAPI.Error.unknownDevice, message: "\(a) is not paired with paird")
        case .needsRepair(let a, let why):
            throw DBusError(name: PairdAPI.Error.needsRepair, message: "\(a) needs re-pairing (\(why.token)): run pairctl pair \(a)")
        }
    }

    /// A user request the machine takes: fed to it; one it refuses: the caller gets the error.
    /// A change of intent is acknowledged only once it is on disk: if the state file could not be
    /// written, the caller hears so (NotSaved) instead of a promise that will not survive a restart.
    func submit(_ event: Event) throws {
        try refuseIfNeeded(event)
        backend.feed(event)
        try ensureSaved()
    }

    func ensureSaved() throws {
        guard let why = backend.unsaved() else { return }
        throw DBusError(name: PairdAPI.Error.notSaved,
                        message: "done for now, but not saved: the state file cannot be written (\(why)); it will not survive a restart of paird")
    }

    func pair(_ args: [DBusValue], _ call: MethodContext) throws {
        try refuseIfNeeded(.userPair(PairRequest()))   // busy before the options are even read
        var (request, adapterName) = try Self.pairRequest(args.first?.dictionary ?? [:])
        switch backend.pairingAdapter(adapterName) {
        case .success(let a): request.adapter = a
        case .failure(let why):
            // No adapter named: the machine says the adapter is unavailable, as before.
            if !adapterName.isEmpty { throw DBusError(name: PairdAPI.Error.adapterUnavailable, message: why.text) }
        }
        pendingPair = call
        backend.feed(.userPair(request))
    }

    /// The bounds of `Pair`'s options: anyone in the bluetooth group may call it, and what it
    /// brings is kept for the pairing's length and logged. Name: BLE's longest device name
    /// (Core spec, GAP Device Name: 248 octets), in UTF-8 bytes. Services: 16 UUIDs. Adapter: an
    /// adapter name (hciN) or an address, 17 characters at most.
    static let maxNameBytes = 248
    static let maxServices = 16
    static let maxAdapterLength = 17

    /// `Pair`'s options as a request and the adapter asked for ("": the default); a wrong type,
    /// value or size is `InvalidArguments` naming the option and its limit. Pure.
    static func pairRequest(_ options: [String: DBusValue]) throws -> (PairRequest, String) {
        var request = PairRequest()
        var adapterName = ""
        for (key, value) in options {
            let v = value.unwrapped
            switch key {
            case "Address":
                guard let s = v.string, let a = DeviceAddress(s) else {
                    throw DBusError(name: PairdAPI.Error.invalidArguments, message: "Address: not a Bluetooth address")
                }
                request.address = a
            case "Services":
                guard let list = v.stringArray else { throw DBusError(name: PairdAPI.Error.invalidArguments, message: "Services: expected as") }
                guard list.count <= maxServices else {
                    throw DBusError(name: PairdAPI.Error.invalidArguments, message: "Services: at most \(maxServices) UUIDs, got \(list.count)")
                }
                request.serviceUUIDs = try list.map { s in
                    guard let u = ServiceUUID.normalize(s) else {
                        throw DBusError(name: PairdAPI.Error.invalidArguments, message: "Services: \"\(s)\" is not a UUID")
                    }
                    return u
                }
            case "Name":
                guard let s = v.string else { throw DBusError(name: PairdAPI.Error.invalidArguments, message: "Name: expected s") }
                guard s.utf8.count <= maxNameBytes else {
                    throw DBusError(name: PairdAPI.Error.invalidArguments,
                                    message: "Name: at most \(maxNameBytes) bytes (BLE's longest device name), got \(s.utf8.count)")
                }
                request.nameContains = s
            case "Passkey":
                guard let k = v.uint32, k <= 999_999 else {
                    throw DBusError(name: PairdAPI.Error.invalidArguments, message: "Passkey: expected 0…999999 (u)")
                }
                request.answers.passkey = k
            case "Confirm":
                guard let b = v.bool else { throw DBusError(name: PairdAPI.Error.invalidArguments, message: "Confirm: expected b") }
                request.answers.confirm = b
            case "Interactive":
                guard let b = v.bool else { throw DBusError(name: PairdAPI.Error.invalidArguments, message: "Interactive: expected b") }
                request.answers.interactive = b
            case "Adapter":
                guard let s = v.string, !s.isEmpty else { throw DBusError(name: PairdAPI.Error.invalidArguments, message: "Adapter: expected a name or address (s)") }
                guard s.count <= maxAdapterLength, s.utf8.count <= maxAdapterLength else {
                    throw DBusError(name: PairdAPI.Error.invalidArguments,
                                    message: "Adapter: at most \(maxAdapterLength) characters (an adapter name like hci0 or an address), got \(s.utf8.count) bytes")
                }
                adapterName = s
            case "Timeout":
                guard let t = v.uint32, (1...600).contains(t) else {
                    throw DBusError(name: PairdAPI.Error.invalidArguments, message: "Timeout: expected 1…600 seconds (u)")
                }
                request.scanTimeout = .seconds(Int64(t))
            default:
                throw DBusError(name: PairdAPI.Error.invalidArguments, message: "unknown option \(key)")
            }
        }
        return (request, adapterName)
    }

    /// A pairing's progress, as a `PairingProgress` signal to the caller of the running `Pair`.
    func pairingProgress(_ p: PairingProgress) {
        let (kind, address, text): (String, String, String)
        switch p {
        case .scanning: (kind, address, text) = ("scanning", "", "scanning…")
        case .found(let c):
            let rssi = c.rssi.flatMap { $0 == 127 ? nil : ", \($0) dBm" } ?? "" // 127: not available
            (kind, address, text) = ("found", "\(c.address)", "found \(c.name.isEmpty ? "(no name)" : c.name) (\(c.address)\(rssi))")
        case .pairing(let a): (kind, address, text) = ("pairing", "\(a)", "pairing…")
        case .removingStaleBond(let a): (kind, address, text) = ("removing-stale-bond", "\(a)", "removing the old bond of \(a)…")
        case .adoptingBond(let a, let name):
            (kind, address, text) = ("adopting-bond", "\(a)", "\(name.isEmpty ? "\(a)" : "\(name) (\(a))") is already bonded in BlueZ (paired outside paird): taking that bond over…")
        case .skipped(let a, let name, let why):
            let who = name.isEmpty ? "\(a)" : "\(name) (\(a))"
            let line = switch why {
            case .needsRepairNotNamed: "skipping \(who): it needs pairing again; its old bond is removed only when you name it: pairctl pair \(a)"
            case .bondedElsewhere: "skipping \(who): already bonded in BlueZ outside paird; to take that bond over: pairctl pair \(a)"
            }
            (kind, address, text) = ("skipped-\(why.rawValue)", "\(a)", line)
        case .rescanning(let a, let reason):
            (kind, address, text) = ("rescanning", "\(a)", "could not reach \(a) (\(reason)); its private address may have changed: scanning again…")
        case .paired(let a): (kind, address, text) = ("paired", "\(a)", "paired, connecting…")
        // The prompts' kinds carry what pairctl needs in `text`: the wearable's name, or the six
        // digits, a space and the name.
        case .passkeyRequested(let a, let name): (kind, address, text) = ("enter-passkey", "\(a)", name)
        case .confirmationRequested(let a, let name, let n): (kind, address, text) = ("confirm-passkey", "\(a)", "\(Self.sixDigits(n)) \(name)")
        case .displayPasskey(let a, let name, let n): (kind, address, text) = ("display-passkey", "\(a)", "\(Self.sixDigits(n)) \(name)")
        case .answered(let a): (kind, address, text) = ("answered", "\(a)", "answered, pairing…")
        case .questionCanceled(let a): (kind, address, text) = ("question-canceled", "\(a)", "the wearable withdrew its question")
        }
        // Only to the caller of `Pair`, never broadcast: it carries the passkey or the number to
        // compare (the policy also denies its reception to anyone but root and the bluetooth group).
        guard let caller = pendingPair?.sender, !caller.isEmpty else { return }
        try? bus.emitSignal(path: PairdAPI.objectPath, interface: PairdAPI.interface, member: "PairingProgress",
                            args: [.string(kind), .string(address), .string(text)], destination: caller)
    }

    func pairingEnded(_ outcome: PairingOutcome) {
        guard let call = pendingPair else { return }
        pendingPair = nil
        switch outcome {
        case .success(let a, let name):
            if let why = backend.unsaved() {
                call.fail(DBusError(name: PairdAPI.Error.notSaved, message: "\(name.isEmpty ? a.description : name) is paired and connected, but not saved: the state file cannot be written (\(why)); paird will forget it at its next restart"))
            } else {
                call.reply([.string(a.description), .string(name)])
            }
        case .alreadyPaired(let a): call.reply([.string(a.description), .string(backend.machine().device(a)?.identity.name ?? "")])
        case .noDeviceFound: call.fail(DBusError(name: PairdAPI.Error.noDeviceFound, message: "no matching wearable found before the timeout"))
        case .authenticationFailed(let why): call.fail(DBusError(name: PairdAPI.Error.authenticationFailed, message: "authentication failed (\(why))"))
        case .timedOut(let phase): call.fail(DBusError(name: PairdAPI.Error.timeout, message: "timed out while \(phase)"))
        case .canceled: call.fail(DBusError(name: PairdAPI.Error.canceled, message: "pairing canceled"))
        case .adapterUnavailable: call.fail(DBusError(name: PairdAPI.Error.adapterUnavailable, message: PairdAPI.Error.noUsableAdapter))
        case .adapterLost:
            call.fail(DBusError(name: PairdAPI.Error.adapterUnavailable,
                                message: "Bluetooth went away during the pairing (bluetoothd stopped or crashed, or the adapter was removed): the wearable is not paired; pair again once `pairctl status` shows the adapter back"))
        case .needsUserInput(let why): call.fail(DBusError(name: PairdAPI.Error.needsInput, message: why))
        case .failed(let why): call.fail(DBusError(name: PairdAPI.Error.failed, message: why))
        }
    }

    /// An answer at the prompt: only the caller of the running `Pair` may give it (the D-Bus
    /// policy lets the whole `bluetooth` group call us; the passkey is that caller's alone).
    func answer(_ answer: UserAnswer, _ call: MethodContext) throws {
        guard let pair = pendingPair, pair.sender == call.sender else {
            throw DBusError(name: PairdAPI.Error.notAsked, message: "only the pairctl pair that started this pairing may answer")
        }
        try refuseIfNeeded(.userAnswer(answer))
        backend.feed(.userAnswer(answer))
        call.reply()
    }

    static func sixDigits(_ n: UInt32) -> String {
        let s = String(n)
        return String(repeating: "0", count: max(0, 6 - s.count)) + s
    }
}
