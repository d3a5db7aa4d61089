import PairingCore

/// What the journal says about one `Report`: the human message, its priority, and the structured
/// fields (`PAIRD_*`) a `journalctl PAIRD_DEVICE=…` query reads. Pure, so its wording is tested
/// without a journal.
struct JournalEntry {
    let message: String
    let priority: Priority
    let fields: [(key: String, value: String)]

    init(_ r: Report) {
        let who = r.device.map { r.name.isEmpty ? "\($0)" : "\(r.name) (\($0))" } ?? "pairing"
        switch r.kind {
        case .paired: message = "\(who) paired"
        case .connected: message = "\(who) connected"
        case .reconnected:
            let n = r.attempt ?? 0
            message = n == 0 ? "\(who) reconnected (the kernel's auto-connect)" : "\(who) reconnected after \(n) Connect attempt(s)"
        case .hostAsleep: message = "\(who) let go: the host is going to sleep; paird brings it back after the resume"
        case .resumeEscalation:
            let escalation: ResumeEscalation? = if case .resume(let e)? = r.reason { e } else { nil }
            let detail = escalation?.detail ?? ""
            switch escalation?.step {
            case .autoConnect?: message = "after the resume: the auto-connect registered again; paird's Connect() follows the head start"
            case .away?: message = "\(who) not back after the resume \(detail), while another one is (or the adapter was power-cycled): away, waiting for it"
            case .powerCycle?: message = "\(who) not back after the resume, nor any other wearable: power-cycling the adapter (\(detail))"
            case .capReached?: message = "\(who) not back after the resume, nor any other: no power cycle, as many in a row brought nothing back (\(detail)); waiting"
            case nil: message = "after the resume: \(r.reasonToken ?? "?")"
            }
        case .adapterWedged:
            let wedge: WedgeReport? = if case .wedge(let w)? = r.reason { w } else { nil }
            switch wedge {
            case .capReached(let done, let cap, let adapter)?:
                message = "adapter \(adapter) still refuses every wearable's connection after \(done) power cycle(s) in a row "
                    + "([Connection] WedgePowerCycles = \(cap)): "
                    + "no more (paird cannot reset it further: that needs CAP_NET_ADMIN, which its unit does not have); "
                    + "unplug and replug it, or `btmgmt --index N power off` then `power on`; its wearables wait for it"
            case .powerCycle(let attempt, let cap, let adapter)?:
                message = "adapter \(adapter) refuses every wearable's connection at once (taken for wedged, not for lost bonds): "
                    + "power-cycling it (\(attempt)/\(cap)); its wearables wait for it"
            case nil:
                message = "adapter the adapter refuses every wearable's connection at once (taken for wedged, not for lost bonds): "
                    + "power-cycling it (?); its wearables wait for it"
            }
        case .linkLost: message = "\(who) link lost (\(r.reasonToken ?? "unknown")), waiting for it to come back"
        case .needsRepair:
            // The token in brackets as always; where the reason has more to say (a reset wearable
            // crashing this kernel: issue 49), its words too, and the one command that fixes it.
            let repair: RepairReason? = if case .repair(let rr)? = r.reason { rr } else { nil }
            let why = repair.map { $0 == .bluetoothdDiedOnLink ? ": \($0.explanation)" : "" } ?? ""
            message = "\(who) needs re-pairing (\(r.reasonToken ?? "bond lost"))\(why): run pairctl pair \(r.device.map { "\($0)" } ?? "")"
                + (why.isEmpty ? "" : " (it removes the old bond, then pairs)")
        case .unpaired: message = "\(who) unpaired"
        case .userDisconnected: message = "\(who) disconnected on request; it stays down until pairctl connect"
        case .adapterLost: message = "\(who) adapter unavailable"
        case .pairingFailed: message = "pairing failed: \(r.reasonToken ?? "unknown")"
        case .pairingRefused:
            message = "\(who): refused BlueZ's pairing question (\(r.reasonToken ?? "unknown")): no pairing of it was started with pairctl pair"
        case .stateChanged: message = "\(who) \(r.fromToken) → \(r.toToken)" + (r.reasonToken.map { " (\($0))" } ?? "")
        case .characteristicMissing:
            message = "\(who): no characteristic \(r.reasonToken ?? "?") on its link (a firmware update dropped it, or BlueZ lost it: "
                + "if the wearable still has it, `pairctl unpair` and `pairctl pair` make BlueZ read its services anew); not retried"
        }
        switch r.kind {
        case .needsRepair, .pairingFailed, .pairingRefused, .characteristicMissing: priority = .warning
        case .linkLost, .adapterLost, .paired, .connected, .reconnected, .unpaired, .userDisconnected: priority = .notice
        case .stateChanged, .hostAsleep: priority = .info
        case .resumeEscalation: priority = Self.resumeStep(r) == .powerCycle ? .warning : .notice
        case .adapterWedged: priority = .warning
        }
        fields = [
            ("PAIRD_DEVICE", r.device?.description ?? ""),
            ("PAIRD_STATE", r.toToken),
            ("PAIRD_PREVIOUS_STATE", r.fromToken),
            ("PAIRD_REASON", r.reasonToken ?? ""),
            ("PAIRD_ATTEMPT", r.attempt.map(String.init) ?? ""),
            ("PAIRD_EVENT", r.kind.rawValue),
        ]
    }

    /// The step a `resumeEscalation` report names: the first word of its reason.
    static func resumeStep(_ r: Report) -> ResumeStep? {
        if case .resume(let e)? = r.reason { e.step } else { nil }
    }
}

/// What the journal says about bluetoothd leaving the bus (`BluetoothdReport`): one entry per
/// crash (`MessageID.bluetoothdCrashed`), one per stop or wait (`MessageID.bluetoothdDown`).
struct BluetoothdJournal {
    let message: String
    let priority: Priority
    let messageID: String
    let fields: [(key: String, value: String)]

    init(_ r: BluetoothdReport) {
        switch r {
        case .crashed(let c):
            var m = "bluetoothd crashed (\(c.cause), systemd result \(c.unit.result)); \(c.action)"
            if !c.awaited.isEmpty { m += "; \(c.awaited.count) wearable(s) to bring back" }
            if !c.disarmed.isEmpty {
                m += "; disarmed \(c.disarmed.map(\.description).joined(separator: ", ")): bluetoothd crashed twice connecting to it, pair it again"
            }
            message = m
            priority = .warning
            messageID = Log.MessageID.bluetoothdCrashed
            fields = [
                ("PAIRD_EVENT", "bluetoothdCrashed"),
                ("PAIRD_BLUETOOTHD_RESULT", c.unit.result),
                ("PAIRD_BLUETOOTHD_EXIT", c.cause),
                ("PAIRD_BLUETOOTHD_ACTION", c.action),
                ("PAIRD_ATTEMPT", c.attempt.map(String.init) ?? ""),
                ("PAIRD_WEARABLES", c.awaited.map(\.description).joined(separator: " ")),
                ("PAIRD_DISARMED", c.disarmed.map(\.description).joined(separator: " ")),
            ]
        case .stopped:
            message = "bluetoothd was stopped (systemd result success): paird does not start it; waiting for it to be started"
            priority = .notice
            messageID = Log.MessageID.bluetoothdDown
            fields = [("PAIRD_EVENT", "bluetoothdStopped"), ("PAIRD_BLUETOOTHD_RESULT", "success")]
        case .waiting(let unit):
            message = unit.map { "bluetoothd is gone (systemd: \($0.activeState), result \($0.result)); waiting for it" }
                ?? "bluetoothd is gone and systemd does not say why; waiting for it"
            priority = .notice
            messageID = Log.MessageID.bluetoothdDown
            fields = [("PAIRD_EVENT", "bluetoothdGone"), ("PAIRD_BLUETOOTHD_RESULT", unit?.result ?? "")]
        }
    }
}
