import ArgumentParser
import BuildInfo
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc
import Paird
import PairingCore

/// paird: keeps Bluetooth LE wearables connected. Runs in the foreground (systemd Type=notify).
struct PairdCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "paird",
        abstract: "Keep Bluetooth LE wearables connected around the clock, through BlueZ.",
        discussion: """
        paird runs in the foreground and is meant to be started by systemd (paird.service, \
        Type=notify, with a watchdog). It talks to BlueZ (org.bluez) on the system bus, owns the \
        bus name \(PairdAPI.busName), and is controlled with pairctl(1). The wearables it keeps \
        connected, and what was asked of them, survive restarts in its state file.

        Exit status:
          0   stopped by SIGTERM or SIGINT (or --check-config found no error)
          1   a runtime failure (systemd restarts it)
          64  bad arguments
          78  a bad configuration file or an unusable state file
              (systemd does not restart it: fix the file first)

        Files:
          /etc/paird/paird.conf      configuration (paird.conf(5)); absent: defaults
          /var/lib/paird/state.json  paired wearables ($STATE_DIRECTORY under systemd)
          /usr/share/dbus-1/system.d/org.paird1.conf
                                     the D-Bus policy: who may pair, connect, read data

        Examples:
          systemctl enable --now paird
                                     start it at boot (the Debian package does this)
          paird --check-config       check the configuration: every error; 78 if any
          journalctl -u paird -f     follow what it does
          paird --verbose --config ./paird.conf --state-file /tmp/paird-state.json
                                     run by hand (as root), logging every event

        See also:
          pairctl(1), paird.conf(5), bluetoothd(8), systemctl(1), journalctl(1)
        """,
        version: "paird \(BuildInfo.version)")

    static let defaultConfig = "/etc/paird/paird.conf"

    @Option(name: .long, help: ArgumentHelp("Configuration file (default: \(Self.defaultConfig); when given, it must exist).", valueName: "path"))
    var config: String?

    @Option(name: .customLong("state-file"),
            help: ArgumentHelp("State file (default: $STATE_DIRECTORY/state.json, else /var/lib/paird/state.json).", valueName: "path"))
    var stateFile: String?

    @Option(name: .long, help: ArgumentHelp("Adapter to use, by name (hci0) or address; overrides the config file.", valueName: "name|address"))
    var adapter: String?

    @Flag(name: .customLong("check-config"), help: "Parse the configuration file, report problems, and exit.")
    var checkConfig = false

    @Flag(name: [.short, .long], help: "Also log, at debug priority, every BlueZ event paird reacts to and every action it takes (not the notifications' values).")
    var verbose = false

    func validate() throws {
        if let a = adapter, !DaemonConfig.isAdapterName(a), DeviceAddress(a) == nil {
            throw ValidationError("--adapter must be an adapter name like hci0 or an address like 00:AA:01:00:00:00, got \"\(a)\"")
        }
    }

    func run() throws {
        let log = Log()
        let configPath = config ?? Self.defaultConfig
        if verbose { log.minimumPriority = .debug }
        if checkConfig {
            // Every error, not only the first; a missing file (allowed without --config) is "no
            // file, defaults", not "OK".
            let checked = DaemonConfig.check(path: configPath, mustExist: config != nil)
            for w in checked.warnings { print("warning: \(w)") }
            for e in checked.errors { log.error("\(e)") }
            if !checked.errors.isEmpty {
                print("\(configPath): \(checked.errors.count) error(s)")
                throw ExitCode(78)
            }
            print(checked.fileExists ? "\(configPath): OK" : "\(configPath): no file, defaults")
            return
        }
        let statePath = stateFile ?? ProcessInfo.processInfo.environment["STATE_DIRECTORY"]
            .flatMap { $0.split(separator: ":").first.map { "\($0)/state.json" } } ?? "/var/lib/paird/state.json"
        do {
            let daemon = try Daemon(options: .init(configPath: configPath, configRequired: config != nil, stateFilePath: statePath, adapter: adapter), log: log)
            try daemon.run()
        } catch let e as DaemonConfig.Error {
            log.error("\(e)")
            throw ExitCode(78)
        } catch let e as StateFile.Unusable {
            log.error("\(e)")
            throw ExitCode(78)
        } catch {
            log.error("\(error)")
            throw ExitCode.failure
        }
    }
}

// Block the signals the event loop handles before any thread exists, so every thread inherits
// the mask and SIGTERM always reaches the loop's signalfd (and STOPPING=1 is sent), never the
// default action on some other thread.
var blocked = sigset_t()
sigemptyset(&blocked)
for s in [SIGTERM, SIGINT, SIGHUP, SIGUSR1] { sigaddset(&blocked, s) }
pthread_sigmask(SIG_BLOCK, &blocked, nil)

PairdCommand.main()
