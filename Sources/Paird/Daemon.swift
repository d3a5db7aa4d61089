import BlueZ
import DBus
import EventLoop
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import BuildInfo
import PairingCore
#if canImport(Glibc)
import Glibc
#endif

/// The runtime: the one impure owner of the `PairingMachine`. Everything happens on one
/// `EventLoop` thread: BlueZ signals and replies, countdown timers, pairctl's calls, signals,
/// and the watchdog ping. Each becomes an `Event` fed to the machine with `now`; the machine's
/// actions are performed here, in order. Idle (connected and quiet, or waiting for an absent
/// wearable) the loop sleeps in epoll_wait: the only periodic wake-up is the watchdog ping.
public final class Daemon {
    public struct Options: Sendable {
        public var configPath: String
        /// The path was given explicitly (`--config`): a missing file is an error, not the defaults.
        public var configRequired: Bool
        public var stateFilePath: String
        public var adapter: String?
        /// A bus other than the system bus (a test's own dbus-daemon); nil: the system bus.
        public var busAddress: String?
        public init(configPath: String, configRequired: Bool = false, stateFilePath: String, adapter: String?, busAddress: String? = nil) {
            self.configPath = configPath
            self.configRequired = configRequired
            self.stateFilePath = stateFilePath
            self.adapter = adapter
            self.busAddress = busAddress
        }
    }

    let loop: EventLoop
    let log: Log
    let config: DaemonConfig
    let stateFile: StateFile
    var machine: PairingMachine
    var bus: DBusConnection!
    var bluez: BlueZClient!
    var api: ManagerAPI!

    /// Live timers, one per armed countdown. A timer that fires after its countdown was
    /// cancelled is not in here any more and does nothing; the machine ignores stale ids anyway.
    var timers: [Countdown.ID: TimerHandle] = [:]
    var actions: [Action] = []
    var lastStatus = ""
    /// Why the last state-file write failed; nil once one succeeds.
    var stateFileError: String?
    var ready = false
    /// The availability record: the pure recorder and its file. nil when the file could not be
    /// opened (paird runs on without it, and says so).
    var history: HistoryStore?
    var recorder = HistoryRecorder()
    /// Why the record could not be written (logged once until a write succeeds again).
    var historyError: String?
    /// When a record was last appended (uptime nanoseconds), for the hourly `alive` line.
    var lastHistoryWrite: Int64 = 0
    /// The wall clock against the monotonic one: a jump is a `clock` line, and the age cap waits
    /// for both to agree.
    var clockWatch = ClockWatch()
    /// A retry of the not-recorded span is scheduled (`retryHistoryLater`).
    var historyRetryPending = false
    /// logind's delay inhibitor for sleep (closing it releases it), and why the last try failed.
    var sleepInhibitor: UnixFD?
    var sleepInhibitorError: String?
    /// The Prometheus textfile (`[Metrics] Textfile`); nil when off (the default).
    var metrics: MetricsExporter?
    /// The host's own alerts and their dispatcher (`[Alerts]`, Daemon+Alerts.swift).
    var alerting: AlertRuntime?
    /// The MQTT broker's link (`[MQTT]`, Daemon+MQTT.swift); nil when off (the default).
    var mqtt: MQTTClient?
    /// The reason of each wearable's last state change, sent again with its state after a reconnect.
    var mqttReasons: [DeviceAddress: String?] = [:]
    /// Why `[MQTT]` is set but not running (libmosquitto missing, the password file unreadable).
    var mqttOff: String?

    let busAddress: String?

    /// `loop`: the loop to run on (a test's, whose clock it moves on); nil: a new one.
    public init(options: Options, log: Log, loop: EventLoop? = nil) throws {
        self.log = log
        var (config, warnings) = try DaemonConfig.load(path: options.configPath, mustExist: options.configRequired)
        if let a = options.adapter { config.adapter = a; config.machine.adapter = a }
        self.config = config
        for w in warnings { log.warning(w) }
        let loop = try loop ?? EventLoop()
        self.loop = loop
        busAddress = options.busAddress
        stateFile = StateFile(path: options.stateFilePath)

        var restored: PersistedState?
        switch try stateFile.load() {
        case .missing:
            log.info("no state file at \(options.stateFilePath): first start")
        case .loaded(let s):
            restored = s
            log.info("restored \(s.devices.count) device(s) from \(options.stateFilePath)")
        case .quarantined(let error, let aside):
            log.log(.error, "state file \(options.stateFilePath) unusable (\(error)); moved to \(aside), starting empty",
                    id: Log.MessageID.stateFileQuarantined, fields: ["PAIRD_STATE_FILE": aside])
        }
        machine = PairingMachine(config: config.machine, restoring: restored, now: Self.now(skew: loop.clockSkew))
        historyPath = HistoryStore.path(besideStateFile: options.stateFilePath)
    }

    let historyPath: String

    /// Monotonic (boottime, as ContinuousClock on Linux) and wall clock, read together, both
    /// moved on by the loop's skew (zero, unless a test moved the loop's clock on).
    func now() -> Moment { Self.now(skew: loop.clockSkew) }

    static func now(skew: Duration) -> Moment {
        var mono = timespec()
        var wall = timespec()
        clock_gettime(CLOCK_BOOTTIME, &mono)
        clock_gettime(CLOCK_REALTIME, &wall)
        let (seconds, attoseconds) = skew.components
        let skewNanoseconds = seconds * 1_000_000_000 + attoseconds / 1_000_000_000
        return Moment(uptimeNanoseconds: Int64(mono.tv_sec) * 1_000_000_000 + Int64(mono.tv_nsec) + skewNanoseconds,
                      unixTime: Double(wall.tv_sec) + Double(wall.tv_nsec) / 1e9 + Double(skewNanoseconds) / 1e9)
    }

    /// Connects, owns the bus name, starts the BlueZ client, and runs until SIGTERM/SIGINT.
    public func run() throws {
        try start()
        try loop.run()
        stop()
    }

    /// After the loop: the BlueZ client stops and the bus closes.
    public func stop() {
        bluez?.stop()
        bus?.close()
    }

    /// Everything `run()` does before it runs the loop. A test calls it, then runs the loop
    /// itself (`handlingSignals: false`: a test process keeps its signals).
    public func start(handlingSignals: Bool = true) throws {
        SystemdNotifier.notify("STATUS=Starting up")
        bus = try busAddress.map { try DBusConnection(address: $0, on: loop) } ?? DBusConnection.system(on: loop)
        bus.onDisconnect = { [unowned self] in
            log.error("lost the system bus; exiting so systemd restarts us")
            loop.stop()
        }
        api = ManagerAPI(bus: bus, backend: .init(
            feed: { [unowned self] in feed($0) },
            machine: { [unowned self] in machine },
            adapter: { [unowned self] in bluez?.adapter },
            pairingAdapter: { [unowned self] name in
                guard let bluez else { return .failure("paird has no BlueZ client yet") }
                if let info = bluez.readyAdapter(named: name), let a = DeviceAddress(info.address) { return .success(a) }
                if name.isEmpty { return .failure("no adapter is ready") }
                let inUse = bluez.adaptersInUse.map { $0.info?.name ?? ($0.selector.isEmpty ? "(first)" : $0.selector) }
                return .failure(.init(text: "adapter \(name) is not one paird uses now (in use: \(inUse.joined(separator: " "))); "
                                      + "[General] Adapter in paird.conf lists those it may use"))
            },
            status: { [unowned self] in status() },
            unsaved: { [unowned self] in stateFileError },
            history: { [unowned self] in try historyFile() }))
        try bus.export(path: PairdAPI.objectPath, object: api.object)
        switch try bus.requestName(PairdAPI.busName) {
        case .primaryOwner, .alreadyOwner: break
        case .inQueue, .exists:
            throw DBusError(name: DBusError.Name.failed, message: "\(PairdAPI.busName) is already owned: is another paird running?")
        }
        openHistory()
        openMetrics()
        openAlerts()
        openMQTT()

        bluez = BlueZClient(connection: bus, adapter: config.adapter)
        for (k, selector) in bluez.selectors.enumerated() where BlueZClient.bindsByAddress(selector) {
            guard let known = machine.adapters.first(where: { $0.configured == selector }) else { continue }
            bluez.knownAddresses[k] = known.address
            log.info("adapter: \(known.address) (\(known.name) when last seen), as remembered for Adapter=\(selector.isEmpty ? "(first)" : selector)")
        }
        bluez.adapterOfDevice = { [unowned self] a in machine.adapterAddress(for: a) }
        bluez.onEvent = { [unowned self] event in handle(event) }
        bluez.onPresence = { [unowned self] present in feed(present ? .bluetoothdBack : .bluetoothdLeft) }
        bluez.onAbsent = { [unowned self] in feed(.bluetoothdAbsent) }
        bluez.warn = { [unowned self] line in log.warning(line) }
        bluez.inform = { [unowned self] line in log.info(line) }
        if log.minimumPriority == .debug {
            bluez.log = { [unowned self] line in log.debug("bluez: \(line)") }
        }
        bluez.start()
        followSleep()

        if handlingSignals {
            try loop.onSignal(SIGTERM) { [unowned self] in shutDown("SIGTERM") }
            try loop.onSignal(SIGINT) { [unowned self] in shutDown("SIGINT") }
            try loop.onSignal(SIGUSR1) { [unowned self] in
                // A diagnostic dump (README: "When something looks stuck").
                log.info("SIGUSR1: \(machine.statusLine(now: now()))")
                log.info("SIGUSR1: \(loop.debugSummary)")
                log.info("SIGUSR1: \(bus.debugSummary)")
            }
            try loop.onSignal(SIGHUP) { [unowned self] in log.info("SIGHUP: configuration is read at start only; restart paird to apply changes") }
        }
        if let interval = SystemdNotifier.watchdogPingInterval() { scheduleWatchdog(every: interval) }
        scheduleHistoryAlive()
        scheduleTextRelease(after: .seconds(60))

        log.log(.info, "paird \(BuildInfo.version) started, \(machine.devices.count) device(s) known",
                id: Log.MessageID.started)
    }

    func shutDown(_ why: String) {
        log.info("\(why): stopping")
        SystemdNotifier.notify("STOPPING=1\nSTATUS=Shutting down")
        record(.pairdStopping, now: now())
        if metrics?.writePending == true { metrics?.writeNow() }
        mqtt?.stop()
        loop.stop()
    }

    /// The watchdog ping comes from the loop that runs the machine, so a stalled loop is caught.
    func scheduleWatchdog(every interval: Duration) {
        loop.schedule(after: interval) { [unowned self] in
            SystemdNotifier.notify("WATCHDOG=1")
            scheduleWatchdog(every: interval)
        }
    }

    /// Gives back the code and read-only pages that start-up mapped (`MappedText`), a minute after
    /// the start and then every hour: what ran since (a pairing, a bluetoothd return) is given back
    /// the same way. (`madvise` is in systemd's `@system-service`, the unit's syscall filter.)
    func scheduleTextRelease(after delay: Duration) {
        loop.schedule(after: delay) { [unowned self] in
            do {
                let r = try MappedText.release()
                log.debug("gave back the pages of \(r.mappings) read-only file mappings (\(r.bytes / 1024) kB of address space): "
                          + "VmRSS \(r.rssBeforeKB.map(String.init) ?? "?") → \(r.rssAfterKB.map(String.init) ?? "?") kB")
            } catch {
                log.warning("could not give back start-up pages: \(error)")
            }
            scheduleTextRelease(after: .seconds(3600))
        }
    }

    /// READY=1 once the bus name is owned and the first reconciliation is done (adapter ready
    /// and the state file reconciled, or no adapter found).
    func markReadyIfNeeded() {
        guard !ready else { return }
        ready = true
        SystemdNotifier.notify("READY=1\nSTATUS=\(machine.statusLine(now: now()))")
    }

    // MARK: Events in (BlueZ's: Daemon+BlueZEvents.swift)

    /// Events that arrived while an earlier one's actions were being performed.
    var queued: [Event] = []
    var feeding = false

    /// Feeds one event to the machine and performs what it asks, in order. An event raised while
    /// performing those actions (e.g. a device BlueZ already lists when discovery starts) waits
    /// until the current batch is done, so the machine never sees events out of order.
    func feed(_ event: Event) {
        queued.append(event)
        guard !feeding else { return }
        feeding = true
        defer { feeding = false }
        while !queued.isEmpty {
            process(queued.removeFirst())
        }
        api?.publishStatus()
    }

    /// One observation, to every observer: the record (and the metrics, which read its lines),
    /// then the subscribers that read the machine (`tell`).
    func observe(_ o: Observation, now: Moment) {
        record(o, now: now)
        tell(o, now: now)
    }

    /// The observers told after the record: the alerts, then MQTT. For an action's observation,
    /// after the action is performed, as the machine then has it (`process`). A new subscriber
    /// goes here, once.
    func tell(_ o: Observation, now: Moment) {
        alert(o, now: now)
        publishMQTT(o)
    }

    private func process(_ event: Event) {
        let now = now()
        if log.minimumPriority == .debug { log.debug("machine: \(event)") }
        if let o = Observation.before(event) { observe(o, now: now) }
        actions.removeAll(keepingCapacity: true)
        machine.handle(event, now: now, into: &actions)
        let batch = actions
        if case .countdownFired(let id) = event, id.purpose == .wedgeProbe, case .adapter(let adapter) = id.owner {
            for case .connect(let a, _, _) in batch {
                log.info("wedge probe: Connect() to \(a) (every wanted wearable on adapter \(adapter) waits on the kernel's auto-connect, "
                         + "whose refusals BlueZ does not report; [Connection] WedgeProbeInterval)")
            }
        }
        for action in batch {
            let o = Observation.after(action)
            if let o { record(o, now: now) }   // recorded before it is performed (a persist, a script)
            perform(action, now: now)
            if let o { tell(o, now: now) }     // after it is performed, as the machine now has it
        }
        let status = machine.statusLine(now: now)
        if status != lastStatus {
            lastStatus = status
            SystemdNotifier.notify("STATUS=\(status)")
        }
    }

    // MARK: Actions out

    func perform(_ action: Action, now: Moment) {
        if log.minimumPriority == .debug { log.debug("action: \(action)") }
        switch action {
        case .connect(let a, let call, let timeout):
            bluez.connect(a, timeout: timeout) { [unowned self] failure in
                if let failure {
                    feed(.connectFailed(a, call: call, failure))
                } else {
                    feed(.connectSucceeded(a, call: call))
                    // A reconnect through Connect() often signals neither Connected nor
                    // ServicesResolved: ask.
                    bluez.readServicesResolved(a) { [unowned self] resolved in
                        if resolved == true { feed(.servicesResolved(a)) }
                    }
                }
            }
        case .disconnect(let a):
            bluez.disconnect(a) { [unowned self] failure in
                if let failure { log.debug("Disconnect \(a): \(failure.token)") }
                feed(.disconnectAnswered(a))
            }
        case .batteryChanged(let a, let level):
            try? bus.emitSignal(path: PairdAPI.objectPath, interface: PairdAPI.interface, member: "Battery",
                                args: [.string(a.description), .byte(level)])
        case .releaseSleepInhibitor(let why):
            releaseSleepInhibitor(why)
        case .setUpLink(let a):
            bluez.setUpLink(a, subscribe: config.subscribe, battery: config.battery) { [unowned self] failure in
                feed(.setUpLinkFinished(a, failure: failure))
            }
        case .resubscribe(let a, let ch):
            log.info("\(a): subscribing to \(ch) again (BlueZ ended it while the link is up, or the wearable answered a probe while it was silent)")
            bluez.resubscribe(a, characteristic: ch) { [unowned self] failure in
                guard let failure else { return }
                log.warning("\(a): StartNotify \(ch) again: \(failure.token)")
                feed(.subscriptionEnded(a, characteristic: ch))
            }
        case .probe(let a, let call, let ch, let timeout):
            log.info("\(a): \(ch) silent for several of its periods; probing with a read")
            bluez.probe(a, characteristic: ch, timeout: timeout) { [unowned self] result in
                log.info("\(a): probe: \(result)")
                feed(.probeFinished(a, call: call, result))
            }
        case .powerCycleAdapter:
            powerCycleAdapter()
        case .powerCycle(let adapter):
            powerCycleAdapter(adapter)
        case .powerOn(let adapter, let attempt):
            powerOn(adapter, attempt: attempt)
        case .powerOnReport(let outcome):
            logPowerOn(outcome)
        case .setTrusted(let a, let trusted):
            bluez.setTrusted(a, trusted) { [unowned self] failure in
                if let failure { log.warning("setting Trusted=\(trusted) on \(a) failed: \(failure.token)") }
            }
        case .removeDevice(let a):
            bluez.removeDevice(a) { [unowned self] failure in
                if let failure, failure != .deviceGone { log.warning("RemoveDevice \(a) failed: \(failure.token)") }
                api?.unpairFinished(a)
                feed(.removeDeviceAnswered(a, failure))
            }
        case .startDiscovery(let request):
            bluez.startDiscovery(address: request.address, adapter: request.adapter) { [unowned self] failure in
                if let failure { feed(.discoveryFailed(failure)) }
            }
            // Only what advertises during this scan is a candidate (the BlueZ client passes on
            // RSSI heard in it alone). One device BlueZ merely remembers is offered too: the one
            // the user named by address, which the machine takes only if BlueZ holds a bond for
            // it that paird does not manage (made with another tool: taken over, `adoptingBond`;
            // a connected wearable does not advertise).
            if let a = request.address, var info = bluez.device(a) {
                info.rssi = nil
                feed(.candidateFound(info.candidate))
            }
        case .stopDiscovery:
            bluez.stopDiscovery()
        case .restartDiscovery(let request):
            // A scan restart, or the scan going on after a stale bond's removal.
            log.info("discovery started again (scan restart)")
            bluez.startDiscovery(address: request.address, adapter: request.adapter) { [unowned self] failure in
                if let failure { log.debug("restarting discovery: \(failure.token); trying again at the next restart") }
            }
        case .pair(let a, let call, let timeout):
            bluez.pair(a, timeout: timeout) { [unowned self] failure, now in
                if let failure { feed(.pairFailed(now, call: call, failure)) } else { feed(.pairSucceeded(now, call: call)) }
            }
        case .answerAgent(let request, let answer):
            bluez.answerAgent(request, answer)
        case .cancelPairing(let a):
            bluez.cancelPairing(a)
        case .updateAutoConnect(let uuids):
            bluez.setAutoConnectUUIDs(uuids)
        case .queryBluetoothdUnit:
            queryBluetoothdUnit()
        case .startBluetoothd:
            log.info("starting bluetoothd again (bus activation of org.bluez)")
            startBluetoothd()
        case .bluetoothdReport(let r):
            report(r)
        case .arm(let c):
            let id = c.id
            let delay = Duration.nanoseconds(max(0, c.deadline.uptimeNanoseconds - now.uptimeNanoseconds))
            timers[id]?.cancel()
            timers[id] = loop.schedule(after: delay) { [unowned self] in
                guard timers.removeValue(forKey: id) != nil else { return }
                feed(.countdownFired(id))
            }
        case .cancel(let id):
            timers.removeValue(forKey: id)?.cancel()
        case .persist:
            do {
                try stateFile.save(machine.persistedState())
                if stateFileError != nil { log.info("state file \(stateFile.path) written again") }
                stateFileError = nil
            } catch {
                // Not acknowledged as saved: ManagerAPI answers the request with NotSaved.
                stateFileError = "\(error)"
                log.error("could not write the state file: \(error); the change is kept in memory only (pairctl is told) and written at the next change")
            }
        case .report(let r):
            report(r)
        case .pairingProgress(let p):
            api.pairingProgress(p)
        case .pairingEnded(let outcome):
            api.pairingEnded(outcome)
        }
    }

    /// One journal entry per report (wording: `JournalEntry`), and paird's `StateChanged` signal.
    func report(_ r: Report) {
        let entry = JournalEntry(r)
        log.log(entry.priority, entry.message, id: Log.MessageID.forReport(r.kind), fieldList: entry.fields)
        if let a = r.device {
            try? bus.emitSignal(path: PairdAPI.objectPath, interface: PairdAPI.interface, member: "StateChanged",
                                args: [.string(a.description), .string(r.toToken), .string(r.reasonToken ?? "")])
        }
    }

    // MARK: Status

    func status() -> StatusDocument {
        let inUse = bluez?.adaptersInUse ?? []
        // With several adapters configured, each is listed (one that is not there with what was
        // last known of it); with one, `adapter` says it all.
        let adapters: [StatusDocument.Adapter]? = inUse.count < 2 ? nil : inUse.map { u in
            let known = machine.adapters.first { $0.configured == u.selector }
            return StatusDocument.Adapter(name: u.info?.name ?? known?.name ?? (u.selector.isEmpty ? nil : u.selector),
                                          address: u.info?.address ?? (u.known ?? known?.address)?.description,
                                          powered: u.info?.powered ?? false, present: u.info != nil, ready: u.ready, configured: u.selector)
        }
        var doc = StatusDocument(machine: machine, adapter: bluez?.adapter.map { .init(name: $0.name, address: $0.address, powered: $0.powered, present: true) },
                                 configuredAdapter: bluez?.selectors.first ?? config.adapter, now: now(), stateFileError: stateFileError)
        doc.adapters = adapters
        doc.daemon.mqtt = mqttStatus(now: now())
        return doc
    }
}
