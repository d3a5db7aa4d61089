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
        case .linkLost: message = "\(who) link lost (\(r.reason ?? "unknown")), waiting for it to come back"
        case .needsRepair: message = "\(who) needs re-pairing (\(r.reason ?? "bond lost")): run pairctl pair \(r.device.map { "\($0)" } ?? "")"
        case .unpaired: message = "\(who) unpaired"
        case .userDisconnected: message = "\(who) disconnected on request; it stays down until pairctl connect"
        case .adapterLost: message = "\(who) adapter unavailable"
        case .pairingFailed: message = "pairing failed: \(r.reason ?? "unknown")"
        case .pairingRefused:
            message = "\(who): refused BlueZ's pairing question (\(r.reason ?? "unknown")): no pairing of it was started with pairctl pair"
        case .stateChanged: message = "\(who) \(r.from) → \(r.to)" + (r.reason.map { " (\($0))" } ?? "")
        }
        switch r.kind {
        case .needsRepair, .pairingFailed, .pairingRefused: priority = .warning
        case .linkLost, .adapterLost, .paired, .connected, .reconnected, .unpaired, .userDisconnected: priority = .notice
        case .stateChanged: priority = .info
        }
        fields = [
            ("PAIRD_DEVICE", r.device?.description ?? ""),
            ("PAIRD_STATE", r.to),
            ("PAIRD_PREVIOUS_STATE", r.from),
            ("PAIRD_REASON", r.reason ?? ""),
            ("PAIRD_ATTEMPT", r.attempt.map(String.init) ?? ""),
            ("PAIRD_EVENT", r.kind.rawValue),
        ]
    }
}
