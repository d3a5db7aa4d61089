import CMosquitto
import EventLoop
import PairingCore
#if canImport(Glibc)
import Glibc
#endif

/// The link to the MQTT broker of `[MQTT]`, through libmosquitto (loaded at run time,
/// CMosquitto), driven by paird's own loop: the client's socket watched (read; write while
/// libmosquitto has something to send), `mosquitto_loop_misc` every second for the keepalive,
/// the connect non-blocking (`mosquitto_connect_async`). No thread of libmosquitto's; no call
/// that waits for the broker. A broker away: tried again after 1 s, doubling to 60 s, said once
/// in the journal until it connects. The last will is `<prefix>/status` = `offline`, retained.
final class MQTTClient {
    /// Loads libmosquitto once; nil, or why it cannot be loaded.
    static func loadLibrary() -> String? { pmq_load().map { String(cString: $0) } }

    let settings: MQTTSettings
    let loop: EventLoop
    let log: Log
    private let client: OpaquePointer
    private var watch: IOWatch?
    private var misc: TimerHandle?
    private var retry: TimerHandle?
    private var backoff = MQTTClient.backoffInitial
    static let backoffInitial = Duration.seconds(1), backoffMax = Duration.seconds(60)
    /// Connected (CONNACK accepted) now.
    private(set) var connected = false
    /// Why the broker is away, once said (not said again per attempt).
    private var awaySaid = false
    private var stopped = false
    /// Called after every (re)connect: what is retained is sent again.
    var onConnect: () -> Void = {}
    /// Called when `link` changes (the metric `paird_mqtt_connected`).
    var onLink: (Link) -> Void = { _ in }

    /// The link as `pairctl status` shows it: `connecting` (the first attempt since paird
    /// started), `connected`, `away` (lost, unreachable or refused; tried again with the backoff).
    enum Link: String { case connecting, connected, away }
    private(set) var link = Link.connecting
    /// When `link` became what it is (paird's clock: `now`).
    private(set) var linkSince: Moment
    /// Why it is away (nil unless `link` is `away`).
    private(set) var awayWhy: String?
    /// The broker's refusal, kept for the `closed` that follows it.
    private var refusal: String?
    private let now: () -> Moment

    private func set(_ l: Link, why: String? = nil) {
        awayWhy = why
        guard l != link else { return }
        link = l
        linkSince = now()
        onLink(l)
    }

    var statusTopic: String { "\(settings.topicPrefix)/status" }

    /// `settings` resolved (`MQTTSettings.resolved`). Throws when libmosquitto cannot be loaded
    /// or refuses the settings.
    init(settings: MQTTSettings, password: String?, loop: EventLoop, log: Log, now: @escaping () -> Moment) throws {
        self.settings = settings
        self.loop = loop
        self.log = log
        self.now = now
        linkSince = now()
        if let why = Self.loadLibrary() { throw SystemError("libmosquitto cannot be loaded (\(why)): install libmosquitto1", ENOENT) }
        _ = pmq_lib_init()
        guard let c = pmq_new(settings.clientId, true, nil) else { throw SystemError("mosquitto_new failed", errno) }
        client = c
        let offline = Array("offline".utf8)
        var rc = pmq_will_set(c, "\(settings.topicPrefix)/status", Int32(offline.count), offline, 1, true)
        if rc == PMQ_ERR_SUCCESS, !settings.username.isEmpty {
            rc = pmq_username_pw_set(c, settings.username, password)
        }
        if rc == PMQ_ERR_SUCCESS, settings.tls {
            rc = settings.caFile.isEmpty ? pmq_tls_set(c, nil, "/etc/ssl/certs") : pmq_tls_set(c, settings.caFile, nil)
        }
        if rc != PMQ_ERR_SUCCESS {
            pmq_destroy(c)
            throw SystemError("libmosquitto refused the settings: \(String(cString: pmq_strerror(rc)))", EINVAL)
        }
        pmq_callbacks_set(c, { _, obj, rc in
            guard let obj else { return }
            Unmanaged<MQTTClient>.fromOpaque(obj).takeUnretainedValue().connack(rc)
        }, { _, obj, rc in
            guard let obj else { return }
            Unmanaged<MQTTClient>.fromOpaque(obj).takeUnretainedValue().closed(rc)
        })
    }

    deinit { pmq_destroy(client) }

    /// The first connect, and the keepalive timer.
    func start() {
        // libmosquitto's callbacks find this object through its user data (set once it exists).
        pmq_user_data_set(client, Unmanaged.passUnretained(self).toOpaque())
        attempt()
        tick()
    }

    /// A clean disconnect (no will): paird stops.
    func stop() {
        guard !stopped else { return }
        if connected { publish("status", "offline") }
        stopped = true
        retry?.cancel(); misc?.cancel()
        if connected {
            _ = pmq_disconnect(client)
            _ = pmq_loop_write(client, 1)
        }
        watch?.cancel(); watch = nil
        connected = false
    }

    /// Publishes `payload` on `<prefix>/<suffix>` (QoS 0; retained as `Retain` says, unless
    /// `retain` is false). Dropped while the broker is away: what is retained is sent again on
    /// connect.
    func publish(_ suffix: String, _ payload: String, retain: Bool = true) {
        publish(topic: "\(settings.topicPrefix)/\(suffix)", payload, retain: retain && settings.retain)
    }

    /// Publishes on `topic` as it is (Home Assistant's discovery configs: retained whatever
    /// `Retain` says, as Home Assistant needs them to be).
    func publish(topic: String, _ payload: String, retain: Bool) {
        guard connected, !stopped else { return }
        let bytes = Array(payload.utf8)
        let rc = pmq_publish(client, nil, topic, Int32(bytes.count), bytes, 0, retain)
        if rc != PMQ_ERR_SUCCESS, rc != PMQ_ERR_NO_CONN { log.warning("mqtt: could not publish \(topic): \(describe(rc))") }
        sync()
    }

    private func describe(_ rc: Int32) -> String {
        if rc == PMQ_ERR_TLS, settings.tls {
            return "TLS handshake failed: the broker's certificate is not signed by \(settings.caFile.isEmpty ? "a CA in /etc/ssl/certs" : "CAFile \(settings.caFile)") or does not name \(settings.host)"
        }
        return rc == PMQ_ERR_ERRNO ? String(cString: strerror(errno)) : String(cString: pmq_strerror(rc))
    }

    private func attempt() {
        retry = nil
        guard !stopped else { return }
        // The old socket (closed by libmosquitto on the reconnect) leaves epoll first.
        watch?.cancel(); watch = nil
        let rc = pmq_connect_async(client, settings.host, Int32(settings.port), Self.keepalive)
        if rc != PMQ_ERR_SUCCESS { away(describe(rc)); return }
        sync()
    }
    static let keepalive: Int32 = 30

    /// The broker's CONNACK (from within `mosquitto_loop_read`).
    private func connack(_ rc: Int32) {
        guard rc == 0 else {
            // libmosquitto closes the link after this (`closed`, which retries later).
            let why = String(cString: pmq_connack_string(rc))
            if !awaySaid { log.error("mqtt: broker \(settings.host):\(settings.port) refused paird: \(why) (see [MQTT] Username and PasswordFile)") }
            awaySaid = true
            refusal = "refused: \(why)"
            set(.away, why: refusal)
            backoff = Self.backoffMax   // a refusal is not answered by trying again every second
            return
        }
        connected = true
        set(.connected)
        backoff = Self.backoffInitial
        log.info("mqtt: connected to \(settings.host):\(settings.port) as \(settings.clientId), publishing under \(settings.topicPrefix)/")
        awaySaid = false
        publish("status", "online")
        onConnect()
    }

    /// The link closed (read or write failed, the keepalive expired, or paird's disconnect).
    private func closed(_ rc: Int32) {
        watch?.cancel(); watch = nil   // the fd is closed already; epoll forgot it
        let was = connected
        connected = false
        guard !stopped else { return }
        if was { log.warning("mqtt: lost the broker \(settings.host):\(settings.port) (\(describe(rc))); reconnecting with a backoff up to 60 s"); awaySaid = true }
        let why = refusal ?? describe(rc)
        refusal = nil
        away(why)
    }

    private func away(_ why: String) {
        set(.away, why: why)
        if !awaySaid {
            log.warning("mqtt: broker \(settings.host):\(settings.port) unreachable (\(why)); trying again with a backoff up to 60 s, said again once connected")
            awaySaid = true
        }
        guard retry == nil, !stopped else { return }
        retry = loop.schedule(after: backoff) { [unowned self] in attempt() }
        backoff = min(backoff * 2, Self.backoffMax)
    }

    /// The socket's watch as libmosquitto needs it now.
    private func sync() {
        let fd = pmq_socket(client)
        guard fd >= 0, !stopped else { watch?.cancel(); watch = nil; return }
        let events: IOEvents = pmq_want_write(client) ? [.read, .write] : [.read]
        if let w = watch, w.fd == fd {
            if w.events != events { w.update(events: events) }
        } else {
            watch?.cancel()
            watch = loop.watch(fd: fd, events: events) { [unowned self] e in ready(e) }
        }
    }

    private func ready(_ e: IOEvents) {
        var rc = PMQ_ERR_SUCCESS
        if e.contains(.write), pmq_socket(client) >= 0 { rc = pmq_loop_write(client, 1) }
        if !e.isDisjoint(with: [.read, .hangup, .error]), pmq_socket(client) >= 0 {
            let r = pmq_loop_read(client, 1)
            if rc == PMQ_ERR_SUCCESS { rc = r }
        }
        // A link that fails before CONNACK (a TLS handshake refused) is closed by libmosquitto
        // without its disconnect callback: handled here as that callback would (which, when it
        // did come, scheduled the retry already).
        if rc != PMQ_ERR_SUCCESS, pmq_socket(client) < 0, retry == nil, !stopped { closed(rc) }
        sync()
    }

    /// Every second: libmosquitto's keepalive (PINGREQ, and the link given up when unanswered).
    private func tick() {
        misc = loop.schedule(after: .seconds(1)) { [unowned self] in
            guard !stopped else { return }
            if pmq_socket(client) >= 0 { _ = pmq_loop_misc(client) }
            sync()
            tick()
        }
    }
}
