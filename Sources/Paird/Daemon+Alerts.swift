import EventLoop
import PairingCore
#if canImport(Glibc)
import Glibc
#endif

/// The host's own alerts at run time: the pure `AlertDecider`, one timer for its next deadline,
/// and the `AlertScripts` that runs `[Alerts] DispatcherDir`'s scripts.
final class AlertRuntime {
    var decider: AlertDecider
    let scripts: AlertScripts
    var timer: TimerHandle?
    var timerDeadline: Moment?

    init(decider: AlertDecider, scripts: AlertScripts) {
        self.decider = decider
        self.scripts = scripts
    }
}

/// What the journal says about one alert. needsRepair and bluetoothdCrashed already have their
/// entries (the machine's report, `BluetoothdJournal`): those alerts only run the dispatcher.
struct AlertJournal {
    let message: String
    let priority: Priority
    let messageID: String?
    let fields: [(key: String, value: String)]

    init(_ a: Alert, config: AlertConfig) {
        let who = a.device.map { a.name.isEmpty ? "\($0)" : "\(a.name) (\($0))" } ?? ""
        let minutes = { (d: Duration?) in d.map { AlertJournal.span($0) } ?? "?" }
        switch a.kind {
        case .batteryLow:
            message = "\(who): battery low, \(a.battery.map(String.init) ?? "?") % (under \(config.batteryLow ?? 0) %)"
            messageID = Log.MessageID.alertBatteryLow
        case .awayTooLong:
            message = "\(who): away for \(minutes(a.duration))" + (a.reason.map { " (\($0))" } ?? "") + "; paird keeps waiting for it"
            messageID = Log.MessageID.alertAway
        case .noData:
            message = "\(who): connected, but no data for \(minutes(a.duration))"
            messageID = Log.MessageID.alertNoData
        case .needsRepair, .bluetoothdCrashed:
            message = "alert \(a.kind.rawValue)" + (who.isEmpty ? "" : " \(who)")
            messageID = nil
        }
        priority = .warning
        fields = [
            ("PAIRD_EVENT", a.kind.rawValue),
            ("PAIRD_DEVICE", a.device?.description ?? ""),
            ("PAIRD_NAME", a.name),
            ("PAIRD_BATTERY", a.battery.map(String.init) ?? ""),
            ("PAIRD_REASON", a.reason ?? ""),
            ("PAIRD_DURATION", a.duration.map { String(Int($0.seconds.rounded())) } ?? ""),
        ]
    }

    /// `4 min 10 s`, `2 h 5 min`, `45 s`.
    static func span(_ d: Duration) -> String {
        let s = Int(d.seconds.rounded())
        if s >= 3600 { return "\(s / 3600) h \(s % 3600 / 60) min" }
        if s >= 60 { return s % 60 == 0 ? "\(s / 60) min" : "\(s / 60) min \(s % 60) s" }
        return "\(s) s"
    }

    /// The dispatcher scripts' environment: the fields, and the threshold the alert crossed.
    static func environment(_ a: Alert, config: AlertConfig, now: Moment) -> [String: String] {
        var env: [String: String] = [:]
        for (k, v) in AlertJournal(a, config: config).fields { env[k] = v }
        let threshold: String? = switch a.kind {
        case .batteryLow: config.batteryLow.map(String.init)
        case .awayTooLong: config.awayLongerThan.map { String(Int($0.seconds.rounded())) }
        case .noData: config.noDataFor.map { String(Int($0.seconds.rounded())) }
        case .needsRepair, .bluetoothdCrashed: nil
        }
        env["PAIRD_THRESHOLD"] = threshold ?? ""
        env["PAIRD_TIME"] = String(Int(now.unixTime))
        return env
    }
}

extension Log.MessageID {
    /// A wearable's battery reading crossed `[Alerts] BatteryLow` downwards.
    public static let alertBatteryLow = "92151860b9d545609a563d4fe6f7c454"
    /// A wanted wearable has been away longer than `[Alerts] AwayLongerThan`.
    public static let alertAway = "02cad020ec9c454c91cf1060170929c1"
    /// A connected wearable sent no data for `[Alerts] NoDataFor`.
    public static let alertNoData = "3afbc1bf5b2e4cdf8d512a4af2e0a175"
    /// A dispatcher script failed, was killed at its limit, could not start, or was not run (insecure).
    public static let dispatcherScript = "43f2a50630ad44a69f051f62439d8827"
}

extension Daemon {
    /// The decider with `[Alerts]`'s thresholds (no-data off when nothing is subscribed: no data
    /// is awaited then) and the alert scripts (the dispatcher) on the loop.
    func openAlerts() {
        var thresholds = config.alerts.thresholds
        if config.subscribe.isEmpty { thresholds.noDataFor = nil }
        let d = AlertScripts(directory: config.alerts.dispatcherDir, timeout: config.alerts.dispatcherTimeout, loop: loop)
        d.onOutcome = { [unowned self] o in
            let fields: KeyValuePairs<String, String> = ["PAIRD_SCRIPT": o.path, "PAIRD_EVENT": o.event, "PAIRD_SCRIPT_RESULT": "\(o.result)"]
            let took = (o.duration.seconds * 10).rounded() / 10
            if o.result == .exited(0) {
                log.log(.info, "dispatcher: \(o.path) \(o.event): exit status 0 (\(took) s)", fields: fields)
            } else {
                log.log(.warning, "dispatcher: \(o.path) \(o.event): \(o.result) (\(took) s)", id: Log.MessageID.dispatcherScript, fields: fields)
            }
            if o.linesNotLogged > 0 {
                log.log(.warning, "dispatcher: \(o.path) \(o.event): \(o.linesNotLogged) more lines of output not logged (at most \(AlertScripts.maxOutputLines) a run)",
                        id: Log.MessageID.dispatcherScript, fields: ["PAIRD_SCRIPT": o.path])
            }
            if o.leftoversKilled > 0 {
                log.log(.warning, "dispatcher: \(o.path) \(o.event): \(o.leftoversKilled) processes it left running were killed",
                        id: Log.MessageID.dispatcherScript, fields: ["PAIRD_SCRIPT": o.path])
            }
        }
        d.onSkip = { [unowned self] path, why, warning in
            if warning {
                log.log(.warning, "dispatcher: \(path): \(why)", id: Log.MessageID.dispatcherScript, fields: ["PAIRD_SCRIPT": path])
            } else {
                log.debug("dispatcher: \(path): \(why), skipped")
            }
        }
        d.onProblem = { [unowned self] m in log.warning(m) }
        d.onRefused = { [unowned self] m in
            log.log(.error, m, id: Log.MessageID.dispatcherScript, fields: ["PAIRD_SCRIPT": config.alerts.dispatcherDir])
        }
        d.onOutput = { [unowned self] path, line in
            log.scriptOutput(identifier: Log.scriptIdentifier(path), line, fields: ["PAIRD_SCRIPT": path])
        }
        alerting = AlertRuntime(decider: AlertDecider(config: thresholds), scripts: d)
    }

    /// Feeds the decider; logs and dispatches what it raises; re-arms the timer for its next deadline.
    func alert(_ input: Observation, now: Moment) {
        guard let rt = alerting else { return }
        let raised = rt.decider.handle(input, now: now, facts: machine)
        for a in raised {
            let entry = AlertJournal(a, config: rt.decider.config)
            if let id = entry.messageID {
                log.log(entry.priority, entry.message, id: id, fieldList: entry.fields)
            } else {
                log.debug(entry.message)
            }
            rt.scripts.run(event: a.kind.rawValue, device: a.device?.description ?? "",
                           environment: AlertJournal.environment(a, config: rt.decider.config, now: now))
        }
        armAlertTimer(rt, now: now)
    }

    private func armAlertTimer(_ rt: AlertRuntime, now: Moment) {
        let next = rt.decider.nextDeadline(machine)
        guard next != rt.timerDeadline || rt.timer?.isPending != true else { return }
        rt.timer?.cancel()
        rt.timer = nil
        rt.timerDeadline = next
        guard let next else { return }
        rt.timer = loop.schedule(after: .nanoseconds(max(0, next.uptimeNanoseconds - now.uptimeNanoseconds))) { [unowned self] in
            rt.timerDeadline = nil
            alert(.tick, now: self.now())
        }
    }
}
