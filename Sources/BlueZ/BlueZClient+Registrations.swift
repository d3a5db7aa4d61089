import DBus
import EventLoop
import PairingCore

/// The Agent1 and the GattProfile1 application: exported, registered with bluetoothd, retried
/// with backoff after a failure, registered again after every bluetoothd restart.
extension BlueZClient {
    func registerAgentIfNeeded() {
        guard agentState == .none, !stopped else { return }
        agentState = .pending
        let gen = generation
        let path = DBusValue.objectPath(Self.agentPath)
        call("/org/bluez", Iface.agentManager, "RegisterAgent", [path, .string("NoInputNoOutput")]) { [weak self] result in
            guard let self, gen == self.generation else { return }
            if case .failure(let e) = result, e.name != "org.bluez.Error.AlreadyExists" {
                self.note("RegisterAgent: \(e)")
                self.registrationFailed()
                return
            }
            self.call("/org/bluez", Iface.agentManager, "RequestDefaultAgent", [path]) { [weak self] result in
                guard let self, gen == self.generation else { return }
                if case .failure(let e) = result { self.note("RequestDefaultAgent: \(e)") }
                self.agentRegistered = true
                self.registrationRetries = 0
                self.stats.agentRegistrations += 1
                self.agentState = .settled
                self.evaluate()
            }
        }
    }

    func registrationFailed() {
        stats.registrationFailures += 1
        if agentState == .pending { agentState = .settled }
        scheduleRetry()
        evaluate()
    }

    func scheduleRetry() {
        guard retryTimer?.isPending != true else { return }
        let gen = generation
        let delay = Self.registrationBackoff(base: retryDelay, max: maxRetryDelay).delay(attempt: registrationRetries + 1, unit: 0)
        registrationRetries += 1
        retryTimer = loop.schedule(after: delay) { [weak self] in
            guard let self, gen == self.generation, !self.stopped else { return }
            if !self.agentRegistered { self.agentState = .none }
            self.evaluate()
        }
    }

    /// The retry delays of a refused registration: PairingCore's `Backoff`, `base` doubled once
    /// per earlier failure in a row, at most `max`, without jitter (one daemon, one bluetoothd).
    public static func registrationBackoff(base: Duration, max: Duration) -> Backoff {
        Backoff(initial: base, maximum: Swift.max(base, max), multiplier: 2, jitter: 0)
    }

    /// Brings BlueZ's registration of our application in line with `wantedUUIDs`, one call at a time.
    func reconcileApplication() {
        guard synced, !appBusy, !stopped, let adapterPath else { return }
        let gen = generation
        if let registered = registeredUUIDs, registered != wantedUUIDs {
            appBusy = true
            call(adapterPath, Iface.gattManager, "UnregisterApplication", [.objectPath(Self.applicationPath)]) { [weak self] result in
                guard let self, gen == self.generation else { return }
                if case .failure(let e) = result { self.note("UnregisterApplication: \(e)") }
                self.appBusy = false
                self.registeredUUIDs = nil
                self.reconcileApplication()
            }
            return
        }
        guard registeredUUIDs == nil else {
            if !appSettled { appSettled = true; evaluate() }
            return
        }
        guard !wantedUUIDs.isEmpty else {
            // An application with no UUIDs would be refused ("No valid service object found").
            if !appSettled { appSettled = true; evaluate() }
            return
        }
        // After a failure, wait for the retry timer.
        guard !(appSettled && retryTimer?.isPending == true) else { return }
        appBusy = true
        let uuids = wantedUUIDs
        exportedUUIDs = uuids
        call(adapterPath, Iface.gattManager, "RegisterApplication",
             [.objectPath(Self.applicationPath), .vardict([String: DBusValue]())]) { [weak self] result in
            guard let self, gen == self.generation else { return }
            self.appBusy = false
            switch result {
            case .success:
                self.registeredUUIDs = uuids
                self.registrationRetries = 0
                self.stats.applicationRegistrations += 1
                self.note("GATT profile registered for \(uuids.joined(separator: ","))")
            case .failure(let e) where e.name == "org.bluez.Error.AlreadyExists":
                self.registeredUUIDs = uuids
            case .failure(let e):
                self.note("RegisterApplication: \(e)")
                self.appSettled = true
                self.stats.registrationFailures += 1
                self.scheduleRetry()
                self.evaluate()
                return
            }
            self.appSettled = true
            if self.registeredUUIDs != self.wantedUUIDs {
                self.reconcileApplication()
            } else {
                self.evaluate()
            }
        }
    }

    // MARK: - Exported objects: Agent1 and the GattProfile1 application

    func exportObjects() {
        guard !exported else { return }
        let agent = DBusInterface(Iface.agent)
            .method("Release") { [weak self] _, call in
                self?.note("agent released by BlueZ")
                self?.agentRegistered = false
                call.reply()
            }
            .method("RequestPinCode", in: "o", out: "s") { [weak self] args, call in
                self?.rejectPasskey(args, call)
            }
            .method("RequestPasskey", in: "o", out: "u") { [weak self] args, call in
                self?.rejectPasskey(args, call)
            }
            .method("DisplayPinCode", in: "os") { [weak self] args, call in
                guard self?.fromBluetoothd(call) == true else { return }
                call.reply()
            }
            .method("DisplayPasskey", in: "ouq") { [weak self] _, call in
                guard self?.fromBluetoothd(call) == true else { return }
                call.reply()
            }
            .method("RequestConfirmation", in: "ou") { [weak self] _, call in
                guard self?.fromBluetoothd(call) == true else { return }
                call.reply()
            }
            .method("RequestAuthorization", in: "o") { [weak self] _, call in
                guard self?.fromBluetoothd(call) == true else { return }
                call.reply()
            }
            .method("AuthorizeService", in: "os") { [weak self] _, call in
                guard self?.fromBluetoothd(call) == true else { return }
                call.reply()
            }
            .method("Cancel") { _, call in call.reply() }
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

    func rejectPasskey(_ args: [DBusValue], _ call: MethodContext) {
        guard fromBluetoothd(call) else { return }
        call.fail(DBusError(name: "org.bluez.Error.Rejected", message: "paird pairs with Just Works only"))
        if let path = args.first?.objectPath, let address = address(ofDevicePath: path) {
            note("\(address): BlueZ asked for a passkey; rejected")
            emit(.passkeyRequested(address))
        }
    }
}
