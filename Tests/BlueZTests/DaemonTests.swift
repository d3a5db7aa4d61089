import Foundation
import Testing
import BlueZ
import DBus
import EventLoop
@testable import Paird
import PairingCore
import TestSupport

/// The whole runtime in one process (issue 44, "the driver only drives"): the real `Daemon`, its
/// BlueZ client, D-Bus API, state file and record, on the test's own event loop, against
/// python-dbusmock's BlueZ (`MockBlueZ`, and what it does not reproduce of real BlueZ). The loop's
/// clock is the test's: `advanceClock(by:)` moves it on, so a countdown of a minute fires at once,
/// through the daemon's own timers, and a wait that took real time would fail the test's deadline.
@Suite("The daemon whole, on the test's loop and clock", .serialized)
struct DaemonTests {
    static let watch = "00:AA:01:01:00:01"
    let address = DeviceAddress(Self.watch)!

    @Test("pair → the link drops → the wearable returns: Pair over D-Bus, the state file written, paird's fallback Connect() when the loop's clock passes its countdown (no real minute waited), connected again")
    func pairDropReturn() throws {
        let mock = try MockBlueZ()
        try mock.addAdapter()
        let device = try mock.addDevice("hci0", Self.watch, name: "Watch")
        try mock.addGatt(device: device)
        let dir = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("paird-daemon-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let statePath = dir.appendingPathComponent("state.json").path
        let log = Log(forceStderr: true)
        log.minimumPriority = ProcessInfo.processInfo.environment["PAIRD_TEST_LOG"] != nil ? .debug : .warning
        // No registrar is told to the mock: its RegisterApplication refuses paird's profile, so
        // the auto-connect is not armed and paird's own fallback Connect() is what brings it back.
        let daemon = try Daemon(options: .init(configPath: dir.appendingPathComponent("paird.conf").path, stateFilePath: statePath,
                                               adapter: nil, busAddress: mock.bus.address),
                                log: log, loop: mock.loop)
        try daemon.start(handlingSignals: false)
        defer { daemon.stop() }
        try eventually(mock.loop, "paird's BlueZ client ready") { daemon.bluez.isReady }
        func state() -> DeviceState? { daemon.machine.devices[address]?.state }

        // Pair, as `pairctl pair ADDRESS` asks for it; the mock plays the radio's part.
        let client = try mock.connection()
        defer { client.close() }
        var paired: Result<[DBusValue], DBusError>?
        client.call(destination: PairdAPI.busName, path: PairdAPI.objectPath, interface: PairdAPI.interface, method: "Pair",
                    args: [.vardict(["Address": .string(Self.watch), "Timeout": .uint32(20)])], timeout: .seconds(30)) { paired = $0 }
        try eventually(mock.loop, "paird's scan") { try !mock.calls("/org/bluez/hci0", "StartDiscovery").isEmpty }
        try mock.updateProperties(device, "org.bluez.Device1", ["RSSI": .int16(-55)])
        try eventually(mock.loop, "paird's Connect() after Pair()") { try !mock.calls(device, "Connect").isEmpty }
        try mock.updateProperties(device, "org.bluez.Device1", ["Connected": .bool(true), "ServicesResolved": .bool(true)])
        try eventually(mock.loop, "Pair answered") { paired != nil }
        #expect(try paired?.get().map(\.string) == [Self.watch, "Watch"])
        #expect(state()?.isConnected == true)
        try eventually(mock.loop, "the set-up's Battery Level read, kept by the machine") { daemon.machine.devices[address]?.battery == 85 }
        let saved = try String(contentsOfFile: statePath, encoding: .utf8)
        #expect(saved.contains(Self.watch), "the intent is on disk before Pair is answered")

        // The link drops (a link loss): waiting for it, paird's fallback countdown armed.
        let connects = try mock.calls(device, "Connect").count
        try mock.updateProperties(device, "org.bluez.Device1", ["ServicesResolved": .bool(false), "Connected": .bool(false)])
        try eventually(mock.loop, "waiting for the wearable") { state()?.name == "waitingForDevice" }
        let fallback = try #require(state()?.countdown, "a fallback countdown, the auto-connect being refused")
        #expect(fallback.id.purpose == .fallbackConnect)

        // Time passes on the loop's clock only: the countdown fires through the daemon's timer.
        let wait = Duration.nanoseconds(fallback.deadline.uptimeNanoseconds - daemon.now().uptimeNanoseconds)
        #expect(wait > .seconds(5), "the countdown is far beyond the deadline of the wait below: only the clock can bring it")
        #expect(try mock.calls(device, "Connect").count == connects)
        mock.loop.advanceClock(by: wait + .seconds(1))
        try eventually(mock.loop, "paird's fallback Connect()", limit: .seconds(5)) { try mock.calls(device, "Connect").count > connects }

        // The wearable answers it: connected again.
        try mock.updateProperties(device, "org.bluez.Device1", ["Connected": .bool(true), "ServicesResolved": .bool(true)])
        try eventually(mock.loop, "connected again") { state()?.isConnected == true }
        #expect(daemon.machine.devices[address]?.wanted == .connected)
    }
}
