import ArgumentParser
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

/// `pairctl scan`: a look at what advertises nearby, from BlueZ directly, without paird.
///
/// BlueZ keeps one discovery session and one filter per D-Bus client (Adapter1.StartDiscovery:
/// "Each client can request a single device discovery session per adapter"; SetDiscoveryFilter
/// "sets the device discovery filter for the caller"; doc/adapter-api.txt of 5.66), so pairctl's
/// session, on its own connection, neither starts nor stops paird's. It ends with StopDiscovery
/// (also on SIGINT/SIGTERM); should pairctl die first, bluetoothd ends the session itself when the
/// connection closes (src/adapter.c 5.66: start_discovery adds a g_dbus_add_disconnect_watch on
/// the sender whose callback, discovery_disconnect, calls discovery_stop).
struct Scan: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List the LE devices advertising nearby: address, type, RSSI, name, services, who knows them.",
        discussion: """
        pairctl asks BlueZ for a discovery session of its own (LE, every advertisement reported) \
        for --timeout seconds, then stops it (also on Ctrl-C: then it lists what it heard so far); \
        paird's own scans are not disturbed. Only devices heard during this scan are listed, \
        strongest RSSI first (BlueZ also keeps objects of devices it merely remembers: those are \
        left out). KNOWN: "paired in paird", "bonded in BlueZ", "known to BlueZ" (BlueZ had it \
        before the scan) or "new". When paird is not running the list is still shown, with a \
        note. Who may scan is BlueZ's D-Bus policy (Debian 12: every local user).

        --json: one object: schemaVersion, timeout, interrupted, services (the --service \
        filter), pairdRunning, pairdError (null when paird answered), devices: [{address, \
        addressType, name (null: none heard), rssi (dBm), services (128-bit UUIDs), known \
        ("paird", "bonded", "bluez" or "new"), pairdState (null unless paired in paird)}].
        """)

    @Option(name: .customLong("service"), help: ArgumentHelp("List only devices advertising this service UUID (e.g. 180d); repeatable.", valueName: "uuid"))
    var services: [String] = []

    // .unconditional: "--timeout -1" is a bad value, not a missing one
    @Option(parsing: .unconditional, help: ArgumentHelp("Seconds to listen (1-60).", valueName: "seconds"))
    var timeout: Int = 5

    @Flag(help: "Print one JSON object instead of lines.")
    var json = false

    @Flag(name: .customLong("no-legend"), help: "Leave out the header line (for scripts).")
    var noLegend = false

    func validate() throws {
        for s in services where ServiceUUID.normalize(s) == nil { throw ValidationError("--service \"\(s)\" is not a UUID (e.g. 180d or 0000180d-0000-1000-8000-00805f9b34fb)") }
        if !(1...60).contains(timeout) { throw ValidationError("--timeout must be 1-60 seconds") }
    }

    func run() throws {
        do {
            let doc = try scan()
            say(json ? ScanReport.json(doc) : ScanReport.text(doc, legend: !noLegend).joined(separator: "\n"))
        } catch let e {
            if json { say(ListDocument.failure(e)) }   // {"devices":[],"error":…,"exit":9,"schemaVersion":1}
            throw e
        }
    }

    static let bluez = "org.bluez"

    /// A BlueZ error as pairctl's exit codes say it.
    static func failure(_ e: DBusError, _ what: String, adapter: String = "the adapter") -> PairctlError {
        switch e.name {
        case "org.freedesktop.DBus.Error.ServiceUnknown", "org.freedesktop.DBus.Error.NameHasNoOwner":
            PairctlError(.adapterUnavailable, "bluetoothd is not running (org.bluez is not on the system bus): sudo systemctl start bluetooth")
        case "org.freedesktop.DBus.Error.AccessDenied", "org.bluez.Error.NotAuthorized":
            PairctlError(.accessDenied, "access denied by BlueZ (\(what)): its D-Bus policy lets only some users scan; \(PairctlError.joinBluetoothGroup)")
        case "org.bluez.Error.NotReady":
            PairctlError(.adapterUnavailable, "\(adapter) is not ready (powered off or blocked): bluetoothctl power on; rfkill unblock bluetooth")
        case "org.bluez.Error.Failed" where what == "SetDiscoveryFilter":
            PairctlError(.adapterUnavailable, "\(adapter) cannot scan for LE devices (\(e.message))")
        case "org.freedesktop.DBus.Error.NoReply", "org.freedesktop.DBus.Error.Timeout", "org.freedesktop.DBus.Error.TimedOut":
            PairctlError(.timeout, "bluetoothd did not answer \(what) in time")
        default:
            PairctlError(.failure, "\(what): \(e.message.isEmpty ? e.name : e.message)")
        }
    }

    /// One device object as the scan tracks it.
    struct Tracked {
        var props: [String: DBusValue]
        var knownBefore: Bool
        var rssi: Int?

        var observation: ScanObservation? {
            guard let address = props["Address"]?.string else { return nil }
            return ScanObservation(address: address, addressType: props["AddressType"]?.string ?? "public",
                                   name: props["Name"]?.string, uuids: props["UUIDs"]?.stringArray ?? [],
                                   bonded: props["Bonded"]?.bool ?? props["Paired"]?.bool ?? false,
                                   knownBefore: knownBefore, heardRSSI: rssi)
        }
    }

    private func scan() throws(PairctlError) -> ScanReport.Document {
        let client = try PairdClient()

        // paird's wearables (GetStatus is public); paird down is a note, not a failure.
        var paird: [StatusDocument.Device]?
        var pairdError: String?
        do throws(PairctlError) {
            let reply = try client.call("GetStatus", timeout: .seconds(5))
            guard let text = reply.first?.string, let doc = try? StatusDocument.decode(text) else {
                throw PairctlError(.failure, "unreadable status")
            }
            paird = doc.devices
        } catch {
            pairdError = error.message
        }

        let heard = try Self.listen(client, seconds: timeout)
        let devices = heard.devices, adapterPath = heard.adapterPath, interrupted = heard.interrupted
        let wanted = services.compactMap(ServiceUUID.normalize)
        let mine = devices.filter { $0.key.hasPrefix(adapterPath + "/") }   // not another adapter's
        return ScanReport.Document(timeout: timeout, interrupted: interrupted, services: wanted, pairdRunning: paird != nil,
                                   pairdError: pairdError,
                                   devices: ScanReport.entries(mine.compactMap(\.value.observation), paird: paird, services: wanted))
    }

    /// What a discovery session of pairctl's own heard (`listen`).
    struct Listening {
        /// The adapter listened on (`/org/bluez/hci0`).
        var adapterPath: String
        /// Every Device1 object seen, by path (those of other adapters too), with the RSSI heard
        /// during the session.
        var devices: [String: Tracked]
        var interrupted: Bool
    }

    /// Listens `seconds` for LE advertisements on `adapterPath` (nil: BlueZ's first adapter) in a
    /// discovery session of pairctl's own (scan, doctor), ended with StopDiscovery, also on
    /// SIGINT/SIGTERM. bluetoothd down, no adapter or one powered off: exit 9.
    static func listen(_ client: PairdClient, seconds: Int, adapterPath wanted: String? = nil) throws(PairctlError) -> Listening {
        let bus = client.bus, loop = client.loop
        // Signals first (the bus handles our AddMatch before the calls after it), then the objects.
        var devices: [String: Tracked] = [:]
        var scanning = false
        var bluezGone = false
        // (A device removed during the scan was still heard: its entry stays.)
        func heard(_ path: String, _ changed: [String: DBusValue]) {
            var t = devices[path] ?? Tracked(props: [:], knownBefore: false, rssi: nil)
            t.props.merge(changed) { $1 }
            if scanning, let r = changed["RSSI"]?.int16 { t.rssi = Int(r) }
            devices[path] = t
        }
        bus.onSignal(interface: "org.freedesktop.DBus.ObjectManager", member: "InterfacesAdded", path: "/", sender: Self.bluez) { m in
            guard let args = try? m.arguments(), args.count == 2, let path = args[0].objectPath,
                  let props = args[1].interfacesAndProperties?["org.bluez.Device1"] else { return }
            heard(path, props)
        }
        bus.subscribe(MatchRule(sender: Self.bluez, interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged",
                                arg0: "org.bluez.Device1")) { m in
            guard let args = try? m.arguments(), args.count >= 2, args[0].string == "org.bluez.Device1",
                  let path = m.path, let changed = args[1].dictionary else { return }
            heard(path, changed)
        }
        bus.onSignal(interface: "org.freedesktop.DBus", member: "NameOwnerChanged", path: "/org/freedesktop/DBus",
                     sender: "org.freedesktop.DBus") { m in
            guard let args = try? m.arguments(), args.count == 3, args[0].string == Self.bluez, args[2].string == "" else { return }
            bluezGone = true
            loop.stop()
        }

        let objects: [String: [String: [String: DBusValue]]]
        do {
            let reply = try bus.callSync(destination: Self.bluez, path: "/", interface: "org.freedesktop.DBus.ObjectManager",
                                         method: "GetManagedObjects", timeout: .seconds(10))
            guard let o = reply.first?.managedObjects else { throw PairctlError(.failure, "BlueZ's GetManagedObjects answered \(reply.signature)") }
            objects = o
        } catch let e as DBusError {
            throw Self.failure(e, "GetManagedObjects")
        } catch let e as PairctlError {
            throw e
        } catch {
            throw PairctlError(.failure, "\(error)")
        }
        guard let adapterPath = wanted.flatMap({ objects[$0]?["org.bluez.Adapter1"] != nil ? $0 : nil })
                ?? objects.keys.filter({ objects[$0]?["org.bluez.Adapter1"] != nil }).sorted().first else {
            throw PairctlError(.adapterUnavailable, "no Bluetooth adapter (bluetoothd runs, but has none: is it plugged in? rfkill list)")
        }
        let adapterName = "adapter \(adapterPath.split(separator: "/").last.map(String.init) ?? adapterPath)"
        if objects[adapterPath]?["org.bluez.Adapter1"]?["Powered"]?.bool == false {
            throw PairctlError(.adapterUnavailable, "\(adapterName) is powered off: bluetoothctl power on (rfkill unblock bluetooth if it is blocked)")
        }
        for (path, interfaces) in objects where path.hasPrefix(adapterPath + "/") {
            if let props = interfaces["org.bluez.Device1"] {
                devices[path] = Tracked(props: props, knownBefore: true, rssi: nil)
            }
        }

        // SIGINT/SIGTERM end the scan (StopDiscovery below): blocked from now on, read by the loop.
        var interrupted = false
        do {
            try loop.onSignal(SIGINT) { interrupted = true; loop.stop() }
            try loop.onSignal(SIGTERM) { interrupted = true; loop.stop() }
        } catch {
            throw PairctlError(.failure, "cannot handle signals: \(error)")
        }

        // No UUIDs in BlueZ's filter: bluetoothd 5.87 segfaults on an advertisement matching a
        // filter with UUIDs (bluez/bluez#2282, see BlueZClient.startDiscovery); --service is
        // matched here, on Device1.UUIDs. A filter of ours also makes BlueZ report every
        // advertisement's RSSI (no 8 dBm delta threshold with a filtered discovery) and report
        // advertisers without the discoverable flags (device_is_discoverable), such as a bonded
        // wearable asking to be reconnected.
        let filter: [String: DBusValue] = ["Transport": .string("le"), "DuplicateData": .bool(true)]
        func adapterCall(_ method: String, _ args: [DBusValue] = []) throws(PairctlError) {
            do {
                _ = try bus.callSync(destination: Self.bluez, path: adapterPath, interface: "org.bluez.Adapter1",
                                     method: method, args: args, timeout: .seconds(10))
            } catch {
                throw Self.failure(error, method, adapter: adapterName)
            }
        }
        try adapterCall("SetDiscoveryFilter", [.vardict(filter)])
        scanning = true
        try adapterCall("StartDiscovery")
        var ended = false
        let timer = loop.schedule(after: .seconds(Int64(seconds))) { ended = true; loop.stop() }
        var loopError: (any Error)?
        do { try loop.run(until: { ended || interrupted || bluezGone }) } catch { loopError = error }
        timer.cancel()
        scanning = false
        if !bluezGone {
            do throws(PairctlError) {
                try adapterCall("StopDiscovery")
            } catch {
                writeAll(2, "pairctl: StopDiscovery: \(error.message.terminalSafe) (bluetoothd ends the session when pairctl exits)\n")
            }
        }
        if bluezGone { throw PairctlError(.adapterUnavailable, "bluetoothd stopped during the scan") }
        if let loopError { throw PairctlError(.failure, "event loop failed: \(loopError)") }

        return Listening(adapterPath: adapterPath, devices: devices, interrupted: interrupted)
    }
}
