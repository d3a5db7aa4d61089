import DBus
import EventLoop
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import PairingCore
#if canImport(Glibc)
import Glibc
#endif

/// The availability record and the metrics textfile at run time: opening them once paird owns
/// its bus name, feeding each observation to the recorder and the exporter, the hourly `alive`
/// line, and the retry of what could not be written.
extension Daemon {
    /// Opens the availability record and says paird started. Only once paird owns its bus name: a
    /// second paird on the same state directory, about to exit, must not touch the first's record.
    func openHistory() {
        let store = HistoryStore(path: historyPath, cap: config.history)
        do {
            recorder = HistoryRecorder(earlier: try store.open(), batteryLimit: config.historyBattery)
            history = store
        } catch {
            log.error("availability record \(store.path) unusable (\(error)); paird runs without it")
        }
        record(.pairdStarted, now: now())
    }

    /// Feeds the recorder and appends what it makes: one write per record and one fsync. The cap
    /// is applied on a thread of its own (`HistoryStore.compactInBackground`), never on the loop.
    func record(_ input: Observation, now: Moment) {
        var records = recorder.handle(input, now: now, facts: machine)
        if let jump = clockWatch.check(now) {
            log.warning("the wall clock jumped \(jump > 0 ? "+" : "")\(Int(jump.rounded())) s against the monotonic clock: recorded; "
                        + "the availability record's age cap waits until both agree again")
            records.insert(HistoryRecord(kind: .clock, at: now.unixTime, jump: jump), at: 0)
        }
        if let metrics {
            metrics.model.take(records)
            if records.contains(where: { $0.kind == .down && WearableMetrics.waitsForCause($0.reason) }) {
                // Counted once the adapter or bluetoothd had the time to turn out to be its cause.
                _ = loop.schedule(after: DisconnectClassifier.causeWindow + .seconds(1)) { [weak metrics] in
                    metrics?.model.settleLinkLosses()
                }
            }
        }
        guard let history, !records.isEmpty else { return }
        let lostBefore = history.lostTotal
        if let error = history.record(records, now: now.unixTime, resync: { recorder.resync(now: now) }) {
            if historyError == nil {
                log.error("could not write the availability record: \(error); what is lost is kept as a not-recorded span until it can be written")
            }
            historyError = "\(error)"
            retryHistoryLater()
        } else {
            lastHistoryWrite = now.uptimeNanoseconds
            if historyError != nil { log.info("availability record \(history.path) written again") }
            historyError = nil
        }
        if history.lostTotal > lostBefore { metrics?.model.notRecorded(history.lostTotal - lostBefore) }
        let byAge = clockWatch.agree
        if history.compactionDue(now: now, byAge: byAge) {
            let lines = history.lineCount
            history.compactInBackground(now: now.unixTime, byAge: byAge, on: loop) { [unowned self] error in
                if let error, !history.isOpen {
                    log.error("availability record \(history.path) compacted but not open again: \(error); nothing is written until it opens "
                              + "(tried at each record; what is lost meanwhile is a not-recorded span)")
                } else if let error {
                    log.warning("could not apply the availability record's cap: \(error); tried again in \(history.backoff.failures == 1 ? "a minute" : "up to an hour")")
                } else {
                    log.info("availability record \(history.path) compacted: \(lines) → \(history.lineCount) lines")
                }
            }
        }
    }

    /// While records are held as a not-recorded span, its line is tried again every minute (not
    /// only at the next record), so the record resumes soon after the disk has room again.
    func retryHistoryLater() {
        guard !historyRetryPending else { return }
        historyRetryPending = true
        loop.schedule(after: .seconds(60)) { [unowned self] in
            historyRetryPending = false
            guard let history, history.notRecorded != nil else { return }
            let now = now()
            if history.record([], now: now.unixTime, resync: { recorder.resync(now: now) }) != nil {
                retryHistoryLater()
            } else {
                lastHistoryWrite = now.uptimeNanoseconds
                log.info("availability record \(history.path) written again (with the span it could not write)")
                historyError = nil
            }
        }
    }

    /// Starts the Prometheus textfile when `[Metrics] Textfile` is set (Metrics.swift): every
    /// wearable paird manages, not connected until its record says so. Also only once paird owns
    /// its bus name.
    func openMetrics() {
        guard !config.metricsTextfile.isEmpty else { return }
        var group: gid_t?
        if !config.metricsTextfileGroup.isEmpty {
            group = CallerCheck.gid(of: config.metricsTextfileGroup)
            if group == nil { log.error("[Metrics] TextfileGroup: no group \(config.metricsTextfileGroup); the textfile keeps paird's group") }
        }
        let m = MetricsExporter(path: config.metricsTextfile, interval: config.metricsInterval, loop: loop,
                                mode: mode_t(config.metricsTextfileMode), group: group)
        m.log = { [unowned self] error in
            if let error {
                log.error("could not write the metrics textfile: \(error); tried again at the next change")
            } else {
                log.info("metrics textfile \(config.metricsTextfile) written again")
            }
        }
        for (a, d) in machine.devices.sorted(by: { $0.key.description < $1.key.description }) { m.model.seed(a.description, name: d.identity.name) }
        metrics = m
        m.writeNow()
        log.info("metrics: writing \(config.metricsTextfile) on change, at most every \(config.metricsInterval.seconds) s")
    }

    /// An `alive` line when nothing was written for an hour: after a crash of paird, the time
    /// its record knows nothing about is at most that.
    func scheduleHistoryAlive() {
        loop.schedule(after: .seconds(Self.historyAliveInterval)) { [unowned self] in
            let now = now()
            if now.uptimeNanoseconds - lastHistoryWrite >= Int64(Self.historyAliveInterval) * 1_000_000_000 - 1_000_000_000 {
                record(.alive, now: now)
            }
            scheduleHistoryAlive()
        }
    }
    static let historyAliveInterval = 3600

    /// `GetHistory`'s answer: a read-only descriptor of the record (pairctl reads and analyses
    /// it; paird parses nothing while running).
    func historyFile() throws -> UnixFD {
        guard let history else { throw SystemError("the availability record is not open (see paird's journal)", EIO) }
        return UnixFD(taking: try history.openForReading())
    }
}
