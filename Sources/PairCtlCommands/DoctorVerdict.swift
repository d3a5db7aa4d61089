#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import BlueZ
import PairingCore

/// `pairctl doctor`: what was found between the user and the wearable's data, and the one verdict
/// it makes. Pure: the facts come in (`DoctorCommand` collects them), the checks and the verdict
/// go out; no I/O, no clock (`now` is given).
///
/// The checks run in the order the data flows the other way: bluetoothd, the radio (rfkill), the
/// adapter, paird, the caller's rights, then each wearable. The first that fails is the verdict;
/// the ones after it are not made (their facts are not even collected: `evaluate` says when a
/// stage's facts are missing and the collector stops there once a verdict is made).
public enum Doctor {
    // MARK: facts

    /// One rfkill switch of type bluetooth (`/sys/class/rfkill/rfkillN/{type,name,soft,hard}`).
    /// `hci0` for a controller's own switch; a platform's (`tpacpi_bluetooth_sw`, …) otherwise.
    public typealias RfkillSwitch = BlueZ.RfkillSwitch

    /// BlueZ's adapter (Adapter1) doctor looks at: paird's, else the first.
    public struct AdapterFacts: Sendable, Hashable {
        /// `hci0`
        public var name: String
        public var address: String
        public var powered: Bool
        /// Adapter1.PowerState (`on`, `off`, `off-enabling`, `on-disabling`, `off-blocked`) where
        /// BlueZ has it (the bed's 5.66 showed none); nil when absent.
        public var powerState: String?
        public init(name: String, address: String, powered: Bool, powerState: String? = nil) {
            self.name = name
            self.address = address
            self.powered = powered
            self.powerState = powerState
        }
    }

    public enum AdapterLook: Sendable, Hashable {
        /// bluetoothd has no adapter at all.
        case none
        /// paird was told to use one (`[General] Adapter`) that bluetoothd does not have; the
        /// others it has.
        case missing(wanted: String, others: [String])
        case found(AdapterFacts)
    }

    /// paird as pairctl reaches it: its status, or why not.
    public enum PairdLook: Sendable, Hashable {
        case running(StatusDocument)
        /// Not on the bus (or the bus unreachable): exit 3.
        case notRunning(String)
        /// It owns its name but did not answer in time: exit 8.
        case notAnswering(String)
        /// Anything else (unreadable status …): exit 1.
        case failed(String)
    }

    /// Who runs doctor, and what paird's D-Bus policy says to a call only root and the bluetooth
    /// group may make.
    public struct CallerFacts: Sendable, Hashable {
        public var user: String
        public var root: Bool
        /// A member of the `bluetooth` group (primary or supplementary, in this process).
        public var inBluetoothGroup: Bool
        /// What paird's policy answered a privileged call with no arguments (`Connect()`: refused
        /// by the policy, or by paird for its missing argument, without doing anything).
        public var probe: Probe
        public enum Probe: String, Sendable, Hashable { case allowed, denied, unknown }
        public init(user: String, root: Bool, inBluetoothGroup: Bool, probe: Probe) {
            self.user = user
            self.root = root
            self.inBluetoothGroup = inBluetoothGroup
            self.probe = probe
        }
    }

    /// One wearable: paird's view, BlueZ's, and whether the listen heard it.
    public struct WearableFacts: Sendable, Hashable {
        public var device: StatusDocument.Device
        /// BlueZ's Device1 on doctor's adapter; nil: BlueZ has no object for it.
        public var bluez: BlueZDevice?
        /// Another adapter of this host that has a link to the same address (`hci2`): a central
        /// doctor can see. nil: none seen (a phone's link cannot be seen from here).
        public var connectedThrough: String?
        /// The strongest RSSI heard during the listen (dBm); nil: not heard.
        public var heardRSSI: Int?
        /// Whether doctor listened for it (not for a wearable paird has connected: it does not advertise).
        public var listened: Bool

        public struct BlueZDevice: Sendable, Hashable {
            public var paired: Bool
            public var bonded: Bool
            public var trusted: Bool
            public var connected: Bool
            public init(paired: Bool, bonded: Bool, trusted: Bool, connected: Bool) {
                self.paired = paired
                self.bonded = bonded
                self.trusted = trusted
                self.connected = connected
            }
        }

        public init(device: StatusDocument.Device, bluez: BlueZDevice?, connectedThrough: String? = nil,
                    heardRSSI: Int? = nil, listened: Bool = false) {
            self.device = device
            self.bluez = bluez
            self.connectedThrough = connectedThrough
            self.heardRSSI = heardRSSI
            self.listened = listened
        }
    }

    public enum WearablesLook: Sendable, Hashable {
        /// The one named, or every one paird manages (none: nothing is paired).
        case checked([WearableFacts], listenSeconds: Int)
        /// The WEARABLE given matches no paired one.
        case unknown(String)
    }

    /// Everything doctor found; a nil stage was not looked at (an earlier one decided).
    public struct Facts: Sendable, Hashable {
        /// systemd's view of bluetooth.service; nil: no systemd on the bus, or no such unit.
        public var bluetoothdUnit: BluetoothdUnitState?
        /// Whether `org.bluez` has an owner on the system bus.
        public var bluezOnBus: Bool
        public var rfkill: [RfkillSwitch]?
        public var adapter: AdapterLook?
        public var paird: PairdLook?
        public var caller: CallerFacts?
        public var wearables: WearablesLook?

        public init(bluetoothdUnit: BluetoothdUnitState?, bluezOnBus: Bool, rfkill: [RfkillSwitch]? = nil, adapter: AdapterLook? = nil,
                    paird: PairdLook? = nil, caller: CallerFacts? = nil, wearables: WearablesLook? = nil) {
            self.bluetoothdUnit = bluetoothdUnit
            self.bluezOnBus = bluezOnBus
            self.rfkill = rfkill
            self.adapter = adapter
            self.paird = paird
            self.caller = caller
            self.wearables = wearables
        }
    }

    // MARK: result

    /// One line of the output: what was checked, whether it is fine, and what was seen.
    public struct Check: Encodable, Sendable, Hashable {
        /// `system bus` (only when it fails), `bluetoothd`, `rfkill`, `adapter`, `paird`, `rights`, `wearable`.
        public var check: String
        public var ok: Bool
        public var detail: String
        /// The wearable's address for `wearable` checks; null otherwise.
        public var address: String?
        public init(_ check: String, _ ok: Bool, _ detail: String, address: String? = nil) {
            self.check = check
            self.ok = ok
            self.detail = detail
            self.address = address
        }
        enum CodingKeys: String, CodingKey { case check, ok, detail, address }
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(check, forKey: .check)
            try c.encode(ok, forKey: .ok)
            try c.encode(detail, forKey: .detail)
            try c.encode(address, forKey: .address)
        }
    }

    /// The one verdict: a stable token for scripts, the exit code, the words and the fix.
    public struct Verdict: Sendable, Hashable {
        public var kind: Kind
        public var text: String
        /// What to do; nil when all is well.
        public var fix: String?
        public var address: String?
        public var exit: PairctlExit { kind.exit }

        public enum Kind: String, Sendable, Hashable, CaseIterable {
            case allWell = "all-well"
            case noSystemBus = "no-system-bus"
            case bluetoothdStopped = "bluetoothd-stopped"
            case bluetoothdCrashed = "bluetoothd-crashed"
            case bluetoothdFailed = "bluetoothd-failed"
            case bluetoothdNotRunning = "bluetoothd-not-running"
            case rfkillHardBlock = "rfkill-hard-block"
            case rfkillSoftBlock = "rfkill-soft-block"
            case noAdapter = "no-adapter"
            case adapterOff = "adapter-off"
            case pairdStopped = "paird-stopped"
            case pairdNotAnswering = "paird-not-answering"
            case pairdFailed = "paird-failed"
            case accessDenied = "access-denied"
            case nothingPaired = "nothing-paired"
            case unknownWearable = "unknown-wearable"
            case bondMissing = "bond-missing"
            case bondLost = "bond-lost"
            case needsRepair = "needs-repair"
            case disconnectedByUser = "disconnected-by-user"
            case connectedElsewhere = "connected-elsewhere"
            case notHeard = "not-heard"
            case connecting = "connecting"

            public var exit: PairctlExit {
                switch self {
                case .allWell: .success
                case .bluetoothdStopped, .bluetoothdCrashed, .bluetoothdFailed, .bluetoothdNotRunning,
                     .rfkillHardBlock, .rfkillSoftBlock, .noAdapter, .adapterOff: .adapterUnavailable
                case .pairdStopped, .noSystemBus: .daemonNotRunning
                case .pairdNotAnswering, .connecting: .timeout
                case .pairdFailed, .disconnectedByUser: .failure
                case .accessDenied: .accessDenied
                case .nothingPaired, .unknownWearable: .unknownDevice
                case .bondMissing, .bondLost, .needsRepair: .needsRepair
                case .connectedElsewhere, .notHeard: .noDeviceFound
                }
            }
        }

        public init(_ kind: Kind, _ text: String, fix: String? = nil, address: String? = nil) {
            self.kind = kind
            self.text = text
            self.fix = fix
            self.address = address
        }
    }

    public struct Result: Sendable, Hashable {
        public var checks: [Check]
        /// nil: no problem in the facts given, but a later stage's facts are missing.
        public var verdict: Verdict?
    }

    // MARK: the evaluation

    /// The checks the facts allow, in order, up to the first that fails (its verdict), or up to the
    /// first stage whose facts are missing (no verdict yet), or through the end (all well).
    public static func evaluate(_ f: Facts, now: Date) -> Result {
        var checks: [Check] = []
        func fail(_ c: Check, _ v: Verdict) -> Result { Result(checks: checks + [c], verdict: v) }

        // 1. bluetoothd: on the bus is running, however it was started; off it, systemd says why
        let started = "sudo systemctl start bluetooth"
        if !f.bluezOnBus, let unit = f.bluetoothdUnit {
            let cause = unit.exitDescription ?? unit.result
            switch BluetoothdExit.classify(unit) {
            case .crashed, .crashedSystemdRestarts:
                return fail(Check("bluetoothd", false, "bluetooth.service \(unit.activeState), crashed (\(cause), result \(unit.result))"),
                            Verdict(.bluetoothdCrashed, "bluetoothd crashed (\(cause)) and is not running",
                                    fix: "\(started) (a running paird starts it again itself); why: journalctl -u bluetooth -b"))
            case .stopped:
                return fail(Check("bluetoothd", false, "bluetooth.service \(unit.activeState), stopped (result success: an administrator's stop)"),
                            Verdict(.bluetoothdStopped, "bluetoothd was stopped (systemctl stop, not a crash)", fix: started))
            case .failedOther:
                return fail(Check("bluetoothd", false, "bluetooth.service \(unit.activeState), result \(unit.result)"),
                            Verdict(.bluetoothdFailed, "bluetoothd is not running (\(unit.result))",
                                    fix: "systemctl status bluetooth; sudo systemctl reset-failed bluetooth; \(started)"))
            case .notSettled, .unknown:
                return fail(Check("bluetoothd", false, "bluetooth.service \(unit.activeState), org.bluez not on the system bus"),
                            Verdict(.bluetoothdNotRunning, "bluetoothd is not on the system bus (bluetooth.service \(unit.activeState))",
                                    fix: "systemctl status bluetooth; \(started)"))
            }
        }
        if !f.bluezOnBus {
            return fail(Check("bluetoothd", false, "org.bluez has no owner on the system bus (systemd did not say why)"),
                        Verdict(.bluetoothdNotRunning, "bluetoothd is not running", fix: "\(started) (or start bluetoothd)"))
        }
        checks.append(Check("bluetoothd", true, "running (org.bluez on the system bus)"))

        // 2. rfkill and the adapter
        guard let rfkill = f.rfkill, let adapter = f.adapter else { return Result(checks: checks, verdict: nil) }
        let ours: String? = if case .found(let a) = adapter { a.name } else { nil }
        let relevant = RfkillSwitch.relevant(rfkill, adapter: ours)
        if let hard = relevant.first(where: \.hard) {
            return fail(Check("rfkill", false, "\(hard.name): hard blocked"),
                        Verdict(.rfkillHardBlock, "Bluetooth is blocked by a hardware switch or the firmware (rfkill hard block on \(hard.name))",
                                fix: "turn Bluetooth on with the laptop's switch or key (airplane mode off), or in the firmware setup; rfkill list shows it"))
        }
        if let soft = relevant.first(where: \.soft) {
            return fail(Check("rfkill", false, "\(soft.name): soft blocked"),
                        Verdict(.rfkillSoftBlock, "Bluetooth is switched off in software (rfkill soft block on \(soft.name))",
                                fix: "rfkill unblock bluetooth"))
        }
        checks.append(Check("rfkill", true, relevant.isEmpty ? "no rfkill switch for Bluetooth" : "not blocked (\(relevant.map(\.name).joined(separator: ", ")))"))
        switch adapter {
        case .none:
            return fail(Check("adapter", false, "bluetoothd has no adapter"),
                        Verdict(.noAdapter, "no Bluetooth adapter",
                                fix: "plug the Bluetooth dongle in, or check the driver: dmesg | grep -i bluetooth; btmgmt info"))
        case .missing(let wanted, let others):
            return fail(Check("adapter", false, "paird's adapter \(wanted) is not there (bluetoothd has: \(others.isEmpty ? "none" : others.joined(separator: ", ")))"),
                        Verdict(.noAdapter, "paird's adapter \(wanted) is not there",
                                fix: "plug it in, or set [General] Adapter in /etc/paird/paird.conf to one that is, then sudo systemctl restart paird"))
        case .found(let a):
            if !a.powered {
                return fail(Check("adapter", false, "\(a.name) \(a.address) powered off\(a.powerState.map { " (PowerState \($0))" } ?? "")"),
                            Verdict(.adapterOff, "adapter \(a.name) is powered off", fix: "bluetoothctl power on"))
            }
            checks.append(Check("adapter", true, "\(a.name) \(a.address) powered on"))
        }

        // 3. paird
        guard let paird = f.paird else { return Result(checks: checks, verdict: nil) }
        let status: StatusDocument
        switch paird {
        case .notRunning(let why):
            return fail(Check("paird", false, "not running (\(why))"),
                        Verdict(.pairdStopped, "paird is not running",
                                fix: "sudo systemctl start paird; systemctl status paird and journalctl -u paird say why it stopped"))
        case .notAnswering(let why):
            return fail(Check("paird", false, "owns its bus name but does not answer (\(why))"),
                        Verdict(.pairdNotAnswering, "paird does not answer", fix: "sudo systemctl restart paird; journalctl -u paird -n 50"))
        case .failed(let why):
            return fail(Check("paird", false, why), Verdict(.pairdFailed, "paird answered, but not as expected: \(why)", fix: "journalctl -u paird -n 50"))
        case .running(let s):
            status = s
            var words = "running\(s.daemon.version.map { " (\($0))" } ?? "")"
            if let crash = s.bluetoothd?.lastCrash {
                words += "; bluetoothd crashed \(StatusText.relative(crash.at, now)) (\(crash.cause)), \(crash.action)"
            }
            if let e = s.daemon.stateFileError { words += "; cannot save its state: \(e)" }
            checks.append(Check("paird", true, words))
        }

        // 4. the caller's rights
        guard let caller = f.caller else { return Result(checks: checks, verdict: nil) }
        let allowed = caller.probe == .allowed || (caller.probe == .unknown && (caller.root || caller.inBluetoothGroup))
        if !allowed {
            return fail(Check("rights", false, "\(caller.user) is neither root nor in the bluetooth group: may read the status, not pair, connect or receive the data"),
                        Verdict(.accessDenied, "\(caller.user) may not pair or connect wearables nor receive their data (root and the bluetooth group only)",
                                fix: "sudo usermod -aG bluetooth \(caller.root ? "USER" : caller.user), then log out and in again"))
        }
        checks.append(Check("rights", true, caller.root ? "root" : "\(caller.user), in the bluetooth group"))

        // 5. the wearables
        guard let look = f.wearables else { return Result(checks: checks, verdict: nil) }
        switch look {
        case .unknown(let text):
            return fail(Check("wearable", false, "\"\(text)\" is not paired with paird"),
                        Verdict(.unknownWearable, "\"\(text)\" is not a wearable paird manages",
                                fix: "pairctl list shows the paired ones; pairctl scan, then pairctl pair ADDRESS pairs a new one"))
        case .checked(let wearables, let listen):
            if wearables.isEmpty {
                return fail(Check("wearable", false, "paird manages no wearable"),
                            Verdict(.nothingPaired, "no wearable is paired",
                                    fix: "put it in pairing mode, then pairctl pair --service 180d (or --name NAME; pairctl scan lists names)"))
            }
            var firstProblem: Verdict?
            for w in wearables {
                let (check, verdict) = wearable(w, listen: listen, now: now)
                checks.append(check)
                if firstProblem == nil, let verdict { firstProblem = verdict }
            }
            if let firstProblem { return Result(checks: checks, verdict: firstProblem) }
            let n = wearables.count
            return Result(checks: checks, verdict: Verdict(.allWell, "all is well: \(n == 1 ? "the wearable is" : "all \(n) wearables are") connected"
                                                                     + (status.daemon.stateFileError != nil ? " (but paird cannot save its state)" : "")))
        }
    }

    /// One wearable's check line and, when it is not fine, its verdict.
    static func wearable(_ w: WearableFacts, listen: Int, now: Date) -> (Check, Verdict?) {
        let d = w.device
        let who = d.name.isEmpty ? d.address : "\(d.name) \(d.address)"
        let a = d.address
        var facts: [String] = ["paird: \(StatusText.human(d.state))\(d.repairReason.map { " (\($0))" } ?? "") since \(StatusText.relative(d.since, now))"]
        if let b = w.bluez {
            facts.append("BlueZ: \(b.bonded ? "bonded" : b.paired ? "paired, not bonded" : "not paired"), \(b.trusted ? "trusted" : "not trusted")"
                         + (b.connected ? ", connected" : ""))
        } else {
            facts.append("BlueZ: no such device")
        }
        facts.append(d.autoConnect ? "auto-connect armed" : "auto-connect not armed")
        if let last = d.lastDisconnect { facts.append("last drop \(StatusText.relative(last.at, now)) (\(last.reason))") }
        if let data = d.lastData { facts.append("data \(StatusText.relative(data, now))") }
        if w.listened {
            facts.append(w.heardRSSI.map { "heard advertising \(rssiWords($0))" } ?? "not heard advertising in \(listen) s")
        }
        if let other = w.connectedThrough { facts.append("linked through \(other)") }
        let detail = "\(who): " + facts.joined(separator: "; ")
        func bad(_ v: Verdict) -> (Check, Verdict?) { (Check("wearable", false, detail, address: a), v) }
        let pair = "pairctl pair \(a)"

        // paird's connected has proof (services resolved, subscribed); BlueZ's Connected may lag it
        if d.state == "connected" {
            return (Check("wearable", true, detail, address: a), nil)
        }
        if d.state == "needsRepair" {
            // the reason in words (RepairReason.explanation), as status says it; an unknown token as it came
            let why = d.repairReason.map { RepairReason(rawValue: $0)?.explanation ?? $0.terminalSafe }
            if d.repairReason == RepairReason.bluetoothdDiedOnLink.rawValue {
                // it takes bluetoothd down when it links: heard or not, the fix is the one command
                return bad(Verdict(.bondLost, "\(who) needs pairing again: \(why!)", fix: pair, address: a))
            }
            if let rssi = w.heardRSSI {
                return bad(Verdict(.bondLost, "\(who) is advertising (\(rssiWords(rssi))) but refusing: it forgot the bond (\(why ?? "needs pairing again"))",
                                   fix: pair, address: a))
            }
            return bad(Verdict(.needsRepair, "\(who) needs pairing again (\(why ?? "bond lost"))\(w.listened ? "; it is not advertising now" : "")",
                               fix: "put it in pairing mode, then \(pair)", address: a))
        }
        if let b = w.bluez, !(b.bonded || b.paired) {
            return bad(Verdict(.bondMissing, "BlueZ has no bond with \(who) (removed outside paird?)", fix: "put it in pairing mode, then \(pair)", address: a))
        }
        if w.bluez == nil {
            return bad(Verdict(.bondMissing, "BlueZ does not know \(who) any more (removed outside paird?)", fix: "put it in pairing mode, then \(pair)", address: a))
        }
        if d.wanted == "disconnected" || d.state == "disconnected" {
            return bad(Verdict(.disconnectedByUser, "\(who) is disconnected because you asked (pairctl disconnect)", fix: "pairctl connect \(a)", address: a))
        }
        if let other = w.connectedThrough {
            return bad(Verdict(.connectedElsewhere, "\(who) is connected to another central: this host's \(other), not paird's adapter",
                               fix: "disconnect it there (bluetoothctl, on \(other)); paird's auto-connect takes it when it advertises again", address: a))
        }
        if let rssi = w.heardRSSI {
            return bad(Verdict(.connecting, "\(who) is in range (heard \(rssiWords(rssi))) but not connected yet: paird is connecting (\(d.reconnectAttempts) attempt(s))",
                               fix: "run pairctl doctor again in a few seconds; if it stays so: journalctl -u paird PAIRD_DEVICE=\(a)", address: a))
        }
        if w.bluez?.connected == true || d.state == "discovering" {
            return bad(Verdict(.connecting, "\(who) has a link, being set up by paird", fix: "run pairctl doctor again in a few seconds", address: a))
        }
        return bad(Verdict(.notHeard, "\(who) is not heard: out of range, switched off or asleep, or connected to another device "
                           + "(a phone); from here these look the same",
                           fix: "bring it close and wake it; if it is close, switch off Bluetooth on the phone or device it may be connected to; "
                           + "paird connects it as soon as it advertises", address: a))
    }

    /// "at -54 dBm"; 127 is the HCI's "RSSI not available" (the bed's btvirt reports it).
    static func rssiWords(_ rssi: Int) -> String { rssi == 127 ? "with no RSSI reported" : "at \(rssi) dBm" }

    // MARK: output

    /// The text output: one line per check (`ok` / `FAIL`), then the verdict and its fix. Their
    /// texts carry names and messages from the air, BlueZ, the kernel and paird: `terminalSafe`
    /// (`--json` has them exact).
    public static func text(_ r: Result) -> [String] {
        var lines: [String] = []
        for c in r.checks { lines += wrap("\(c.ok ? "ok  " : "FAIL") \(padded(c.check.terminalSafe, 10)) ", c.detail.terminalSafe) }
        if let v = r.verdict {
            lines.append("")
            lines += wrap("verdict: ", v.text.terminalSafe)
            if let fix = v.fix { lines += wrap("fix:     ", fix.terminalSafe) }
        }
        return lines
    }

    /// `head` then `text`'s words in lines of at most 100 columns, continuation lines indented
    /// under the text.
    static func wrap(_ head: String, _ text: String, width: Int = StatusText.width) -> [String] {
        var lines: [String] = []
        var current = head
        var empty = true
        for word in text.split(separator: " ") {
            if !empty && current.count + 1 + word.count > width {
                lines.append(current)
                current = String(repeating: " ", count: head.count)
                empty = true
            }
            current += (empty ? "" : " ") + word
            empty = false
        }
        lines.append(current)
        return lines
    }

    /// `doctor --json`: one compact object.
    public struct Document: Encodable {
        public var schemaVersion = StatusDocument.schemaVersion
        public var checks: [Check]
        public var verdict: String
        public var text: String
        public var fix: String?
        public var address: String?
        public var exit: Int32
        public var listenSeconds: Int?

        enum CodingKeys: String, CodingKey { case schemaVersion, checks, verdict, text, fix, address, exit, listenSeconds }
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(schemaVersion, forKey: .schemaVersion)
            try c.encode(checks, forKey: .checks)
            try c.encode(verdict, forKey: .verdict)
            try c.encode(text, forKey: .text)
            try c.encode(fix, forKey: .fix)
            try c.encode(address, forKey: .address)
            try c.encode(exit, forKey: .exit)
            try c.encode(listenSeconds, forKey: .listenSeconds)
        }
    }

    public static func json(_ r: Result, listenSeconds: Int?) -> String {
        let v = r.verdict ?? Verdict(.allWell, "all is well")
        return compactJSON(Document(checks: r.checks, verdict: v.kind.rawValue, text: v.text, fix: v.fix, address: v.address,
                                    exit: v.exit.rawValue, listenSeconds: listenSeconds))
    }
}
