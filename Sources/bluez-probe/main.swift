// bluez-probe: drives the BlueZ client alone (no daemon) against the system bus, for the
// real-BlueZ test bed (Tests/e2e/bluez_client.py). One line per step on stdout:
//   "✓ <step> (<seconds> s)[: detail]", "await <what>" when it waits for the scenario to act,
//   "✗ <step>: <why>" and exit 1 on failure. Every wait has a deadline.
//
// usage: bluez-probe [--adapter hci0] [--name Pulse-1] [--service 180d]
import BlueZ
import DBus
import EventLoop
import PairingCore
#if canImport(Glibc)
import Glibc
#endif

/// One line, flushed at once (stdout is a pipe in the test bed).
func say(_ line: String) {
    print(line)
    fflush(nil)
}

var adapterSelector = "hci0"
var wantedName = "Pulse-1"
var service = ServiceUUID.heartRate
var argv = CommandLine.arguments.dropFirst()
while let a = argv.popFirst() {
    switch a {
    case "--adapter": adapterSelector = argv.popFirst() ?? adapterSelector
    case "--name": wantedName = argv.popFirst() ?? wantedName
    case "--service": service = argv.popFirst().flatMap { ServiceUUID.normalize($0) } ?? service
    default:
        say("usage: bluez-probe [--adapter hci0] [--name NAME] [--service UUID]")
        exit(2)
    }
}

struct ProbeFailure: Error { let why: String }

let loop: EventLoop
let bus: DBusConnection
do {
    loop = try EventLoop()
    bus = try DBusConnection.system(on: loop)
} catch {
    say("✗ connect to the system bus: \(error)")
    exit(1)
}
let client = BlueZClient(connection: bus, adapter: adapterSelector)
var events: [BlueZEvent] = []
client.onEvent = { events.append($0) }
if CommandLine.arguments.contains("-v") || getenv("BLUEZ_PROBE_VERBOSE") != nil {
    client.log = { say("  [bluez] \($0)") }
}

/// Runs the loop until `condition` holds or `seconds` pass.
@MainActor func wait(_ what: String, _ seconds: Double, _ condition: () -> Bool) throws {
    var expired = false
    let timer = loop.schedule(after: .milliseconds(Int64(seconds * 1000))) { expired = true }
    defer { timer.cancel() }
    try loop.run(until: { condition() || expired })
    if !condition() { throw ProbeFailure(why: "timed out after \(seconds) s waiting for \(what)") }
}

/// Issues an async request and waits for its reply.
@MainActor func request(_ what: String, _ seconds: Double, _ body: (@escaping (BlueZFailure?) -> Void) -> Void) throws {
    var result: BlueZFailure?? = .none
    body { result = .some($0) }
    try wait(what, seconds) { result != nil }
    if case .some(.some(let failure)) = result { throw ProbeFailure(why: "\(what): \(failure.token)") }
}

@MainActor func step(_ name: String, _ body: () throws -> String?) {
    let t0 = loop.now()
    do {
        let detail = try body()
        let dt = loop.now() - t0
        let secs = Double(dt.components.seconds) + Double(dt.components.attoseconds) / 1e18
        let cs = Int((secs * 100).rounded())
        let frac = cs % 100 < 10 ? "0\(cs % 100)" : "\(cs % 100)"
        say("✓ \(name) (\(cs / 100).\(frac) s)" + (detail.map { ": \($0)" } ?? ""))
    } catch let f as ProbeFailure {
        say("✗ \(name): \(f.why)")
        exit(1)
    } catch {
        say("✗ \(name): \(error)")
        exit(1)
    }
}

@MainActor func count(_ predicate: (BlueZEvent) -> Bool) -> Int { events.filter(predicate).count }
@MainActor func mark() -> Int { events.count }
@MainActor func since(_ m: Int, _ predicate: (BlueZEvent) -> Bool) -> Bool { events[m...].contains(where: predicate) }
@MainActor func notifications(since m: Int) -> Int {
    events[m...].filter { if case .notification(_, ServiceUUID.heartRateMeasurement, _) = $0 { true } else { false } }.count
}

var device: DeviceAddress?

step("adapter ready (agent + GattProfile1 registered)") {
    client.setAutoConnectUUIDs([service])
    client.start()
    try wait("adapterReady", 30) { client.isReady }
    return "\(client.adapter?.name ?? "?") \(client.adapter?.address ?? "?"), profile \(client.registeredAutoConnectUUIDs ?? [])"
}

step("discovery finds the wearable") {
    try request("StartDiscovery", 10) { client.startDiscovery(address: nil, reply: $0) }
    let matches = { (d: DeviceInfo) in d.name == wantedName || d.uuids.contains(service) }
    for d in client.devices where matches(d) { device = d.address }
    try wait("a device advertising \(service)", 30) {
        if device != nil { return true }
        for case .deviceFound(let d) in events where matches(d) { device = d.address; return true }
        return false
    }
    client.stopDiscovery()
    return device?.description
}
let dev = device!

step("Pair (Just Works, bonds), Trusted=true") {
    if client.device(dev)?.isBonded != true {
        try request("Pair", 60) { done in client.pair(dev, timeout: .seconds(60)) { failure, _ in done(failure) } }
    }
    try request("Trusted", 10) { client.setTrusted(dev, true, reply: $0) }
    try wait("bonded in the cache", 10) { client.device(dev)?.isBonded == true }
    return "bonded=\(client.device(dev)?.bonded.map(String.init) ?? "nil")"
}

/// Waits for a usable link: ServicesResolved, by signal or by Get (a Connect-made reconnect
/// often signals nothing). Falls back to Connect after `fallbackAfter` seconds.
@MainActor func awaitLink(_ seconds: Double, fallbackAfter: Double?) throws -> String {
    var resolved = client.device(dev)?.servicesResolved == true
    var how = "signal"
    let connectsBefore = client.stats.connectCalls[dev] ?? 0
    var connectTimer: TimerHandle?
    if let fallbackAfter {
        connectTimer = loop.schedule(after: .milliseconds(Int64(fallbackAfter * 1000))) {
            guard client.device(dev)?.servicesResolved != true else { return }
            how = "Connect()"
            client.connect(dev, timeout: .seconds(45)) { failure in
                if let failure { say("  Connect: \(failure.token)") }
                client.readServicesResolved(dev) { if $0 == true { resolved = true } }
            }
        }
    }
    defer { connectTimer?.cancel() }
    try wait("ServicesResolved", seconds) { resolved || client.device(dev)?.servicesResolved == true }
    let calls = (client.stats.connectCalls[dev] ?? 0) - connectsBefore
    return "via \(calls == 0 ? "auto-connect/pairing" : how), Connect calls \(calls)"
}

step("services resolved") { try awaitLink(30, fallbackAfter: 5) }

step("set up link: StartNotify 0x2A37, battery") {
    let m = mark()
    try request("setUpLink", 40) { client.setUpLink(dev, subscribe: [ServiceUUID.heartRateMeasurement], battery: true, reply: $0) }
    try wait("a battery report", 10) { since(m) { if case .battery = $0 { true } else { false } } }
    let level = events[m...].compactMap { if case .battery(_, let l) = $0 { l } else { nil } }.last
    return "battery \(level.map(String.init) ?? "?")%"
}

step("3 heart-rate notifications") {
    let m = mark()
    try wait("3 notifications", 15) { notifications(since: m) >= 3 }
    return nil
}

say("await walk-away")
step("link lost after walk-away") {
    try wait("Connected=false", 60) { client.device(dev)?.connected == false }
    return nil
}

say("await come-back")
step("link back after come-back") {
    let detail = try awaitLink(90, fallbackAfter: 10)
    try request("setUpLink", 40) { client.setUpLink(dev, subscribe: [ServiceUUID.heartRateMeasurement], battery: true, reply: $0) }
    let m = mark()
    try wait("2 notifications", 15) { notifications(since: m) >= 2 }
    return detail
}

say("await bluetoothd-restart")
step("bluetoothd restart: adapterLost (its only adapter), then adapterReady with registrations redone") {
    let agentBefore = client.stats.agentRegistrations
    let m = mark()
    try wait("adapterGone", 60) { since(m) { switch $0 { case .adapterGone, .adapterLost: true; default: false } } }
    try wait("adapterReady", 60) { client.isReady && client.stats.agentRegistrations > agentBefore }
    let reason = events[m...].compactMap { switch $0 { case .adapterGone(let r, _), .adapterLost(let r, _): r.token; default: nil } }.first ?? "?"
    return "gone: \(reason); agent registrations \(client.stats.agentRegistrations), app \(client.stats.applicationRegistrations)"
}

step("reconnect after the restart, battery read") {
    try wait("device back in the cache", 20) { client.device(dev) != nil }
    let detail = try awaitLink(90, fallbackAfter: 10)
    let m = mark()
    try request("setUpLink", 40) { client.setUpLink(dev, subscribe: [ServiceUUID.heartRateMeasurement], battery: true, reply: $0) }
    try wait("a battery report", 10) { since(m) { if case .battery = $0 { true } else { false } } }
    return detail
}

var stopped = false
client.stop { stopped = true }
try? wait("stop", 5) { stopped }
say("✓ done: Connect calls \(client.stats.connectCalls[dev] ?? 0), signals \(client.stats.signalsHandled) handled / \(client.stats.signalsIgnored) ignored")
exit(0)
