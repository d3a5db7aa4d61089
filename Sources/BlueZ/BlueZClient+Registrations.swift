import DBus
import EventLoop
import PairingCore

/// The Agent1 and the GattProfile1 application: exported, and registered with bluetoothd when
/// `Presence` says so (it decides the retries after a failure and the registrations after every
/// bluetoothd restart).
extension BlueZClient {
    func registerAgent() {
        let gen = generation
        let path = DBusValue.objectPath(Self.agentPath)
        // Not RequestDefaultAgent: BlueZ hands our Pair() calls' questions to our agent anyway, and
        // a desktop's own agent (GNOME, blueman) stays the default. Where none is registered, 5.66
        // makes the first agent the default: questions about pairings nobody started then reach
        // us too, and the machine refuses them.
        call("/org/bluez", Iface.agentManager, "RegisterAgent", [path, .string("KeyboardDisplay")]) { [weak self] result in
            guard let self, gen == self.generation, !self.stopped else { return }
            if case .failure(let e) = result, e.name != "org.bluez.Error.AlreadyExists" {
                self.note("RegisterAgent: \(e)")
                self.stats.registrationFailures += 1
                self.present(.agentRefused)
                return
            }
            self.stats.agentRegistrations += 1
            self.present(.agentRegistered)
        }
    }

    /// The retry delays of a refused registration: PairingCore's `Backoff`, `base` doubled once
    /// per earlier failure in a row, at most `max`, without jitter (one daemon, one bluetoothd).
    public static func registrationBackoff(base: Duration, max: Duration) -> Backoff {
        Backoff(initial: base, maximum: Swift.max(base, max), multiplier: 2, jitter: 0)
    }

    /// `RegisterApplication` of our GattProfile1 application, listing `uuids`, on the adapter.
    func registerApplication(on adapterPath: String, _ uuids: [String]) {
        let gen = generation
        exportedUUIDs = uuids
        call(adapterPath, Iface.gattManager, "RegisterApplication",
             [.objectPath(Self.applicationPath), .vardict([String: DBusValue]())]) { [weak self] result in
            guard let self, gen == self.generation, !self.stopped else { return }
            switch result {
            case .success:
                self.stats.applicationRegistrations += 1
                self.note("GATT profile registered for \(uuids.joined(separator: ","))")
                self.present(.applicationRegistered(adapter: adapterPath, uuids))
            case .failure(let e) where e.name == "org.bluez.Error.AlreadyExists":
                self.present(.applicationRegistered(adapter: adapterPath, uuids))
            case .failure(let e):
                self.note("RegisterApplication: \(e)")
                self.stats.registrationFailures += 1
                self.present(.applicationRefused(adapter: adapterPath))
            }
        }
    }

    // MARK: - Exported objects: Agent1 and the GattProfile1 application

    func exportObjects() {
        guard !exported else { return }
        let agent = DBusInterface(Iface.agent)
            .method("Release") { [weak self] _, call in
                self?.note("agent released by BlueZ")
                self?.present(.agentReleased)
                call.reply()
            }
            .method("RequestPinCode", in: "o", out: "s") { [weak self] args, call in
                self?.agentAsked(args, call, .pinCode)
            }
            .method("DisplayPinCode", in: "os") { [weak self] args, call in
                self?.agentAsked(args, call, .pinCode)
            }
            .method("RequestPasskey", in: "o", out: "u") { [weak self] args, call in
                self?.agentAsked(args, call, .enterPasskey)
            }
            .method("DisplayPasskey", in: "ouq") { [weak self] args, call in
                guard args.count == 3, let passkey = args[1].uint32, let entered = args[2].uint16 else { return call.reply() }
                self?.agentAsked(args, call, .displayPasskey(passkey, entered: entered))
            }
            .method("RequestConfirmation", in: "ou") { [weak self] args, call in
                guard args.count == 2, let number = args[1].uint32 else { return call.reply() }
                self?.agentAsked(args, call, .confirmPasskey(number))
            }
            .method("RequestAuthorization", in: "o") { [weak self] args, call in
                self?.agentAsked(args, call, .authorizePairing)
            }
            .method("AuthorizeService", in: "os") { [weak self] args, call in
                self?.agentAsked(args, call, .authorizeService(args.count > 1 ? args[1].string ?? "" : ""))
            }
            .method("Cancel") { [weak self] _, call in
                guard let self, self.fromBluetoothd(call) else { return }
                call.reply()
                self.dropAgentCalls("canceled by BlueZ")
                self.emit(.agentCanceled)
            }
        let profile = DBusInterface(Iface.gattProfile)
            .method("Release") { [weak self] _, call in
                self?.note("GATT profile released by BlueZ")
                call.reply()
            }
            .property("UUIDs", signature: "as", emitsChange: false) { [weak self] in
                .stringArray(self?.exportedUUIDs ?? [])
            }
        do {
            try connection.export(path: Self.agentPath, object: DBusObject([agent]))
            try connection.exportObjectManager(at: Self.applicationPath)
            try connection.export(path: Self.profilePath, object: DBusObject([profile]))
            exported = true
        } catch {
            note("cannot export agent/profile: \(error)")
        }
    }

    func unexportObjects() {
        guard exported else { return }
        connection.unexport(path: Self.profilePath)
        connection.unexportObjectManager(at: Self.applicationPath)
        connection.unexport(path: Self.agentPath)
        exported = false
    }

    /// Only bluetoothd may drive our agent: anyone else on the system bus is refused.
    func fromBluetoothd(_ call: MethodContext) -> Bool {
        guard let owner, call.sender == owner else {
            call.fail(DBusError(name: "org.bluez.Error.Rejected", message: "not from bluetoothd"))
            return false
        }
        return true
    }

    /// A question from BlueZ: kept until `answerAgent` (the machine decides), or refused at once
    /// when its path names no device.
    func agentAsked(_ args: [DBusValue], _ call: MethodContext, _ question: AgentQuestion) {
        guard fromBluetoothd(call) else { return }
        guard let path = args.first?.objectPath, let address = address(ofDevicePath: path) else {
            call.fail(DBusError(name: "org.bluez.Error.Rejected", message: "unknown device"))
            return
        }
        nextAgentRequest &+= 1
        agentCalls[nextAgentRequest] = call
        emit(.agentAsked(address, request: nextAgentRequest, question))
    }

    /// Replies to a question `agentAsked` kept (nothing if BlueZ withdrew it meanwhile).
    public func answerAgent(_ request: UInt64, _ answer: AgentAnswer) {
        guard let call = agentCalls.removeValue(forKey: request) else { return }
        switch answer {
        case .passkey(let k): call.reply([.uint32(k)])
        case .accept: call.reply()
        case .reject(let why): call.fail(DBusError(name: "org.bluez.Error.Rejected", message: why))
        }
    }

    /// Every kept question is void (BlueZ's Cancel, or bluetoothd gone).
    func dropAgentCalls(_ why: String) {
        for (_, call) in agentCalls { call.fail(DBusError(name: "org.bluez.Error.Canceled", message: why)) }
        agentCalls.removeAll()
    }
}
