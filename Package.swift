// swift-tools-version: 6.1
// paird — keeps Bluetooth LE wearables connected, through BlueZ and systemd.
//
// Layering (bottom to top; a target imports only what is below it):
//   CDBus, CSystemd   system libraries: shim headers only, no variadic C call ever reaches Swift
//   CSpawn            one small C file: the dispatcher's fork + execveat of a checked descriptor
//   CMosquitto        one small C file: libmosquitto dlopen'd when `[MQTT]` is set (no build dependency)
//   PairingCore       pure Swift: state machine, countdowns as data, classifier, backoff, state model
//   EventLoop         the one epoll loop: fds, timerfd countdowns, signalfd
//   DBus              thin safe layer over libdbus-1, driven by EventLoop
//   BlueZ             typed BlueZ client over DBus (object-manager cache, Device1, GATT, Agent1, ...)
//   CBuildInfo, BuildInfo  the build's version string (PAIRD_VERSION from the Makefile)
//   Paird             the runtime: executes PairingCore's actions, state file, sd_notify, journald, API,
//                     the Prometheus textfile (swift-prometheus)
//   paird, pairctl    thin executables
import PackageDescription

// The build's version (`--version`, D-Bus `Version`): the Makefile sets PAIRD_VERSION to the Debian
// package's version (0.1.0+git263.48e976b). Only the one C file of CBuildInfo sees it, so a new
// commit recompiles that file and relinks. Unset (plain `swift build`) or malformed: the code's
// version, PairdAPI.version.
// Without it (plain `swift build`), the checkout's commit, asked of git by the BuildCommit plugin
// whenever git's HEAD, index or a source file changed (not `Context.gitInformation`, which SwiftPM
// caches with the manifest: swiftlang/swift-package-manager#8202), so every build names its commit:
// PairdAPI.version + "+g<commit>[.dirty]" (BuildInfo).
func versionSafe(_ v: String) -> Bool {
    !v.isEmpty && v.utf8.count <= 100 && v.unicodeScalars.allSatisfy { $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || ".+~-".unicodeScalars.contains($0)) }
}
let buildVersion = Context.environment["PAIRD_VERSION"].flatMap { versionSafe($0) ? $0 : nil }
let buildInfoDefines: [CSetting] = buildVersion.map { [.define("PAIRD_VERSION", to: "\"\($0)\"")] } ?? []

let package = Package(
    name: "paird",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "paird", targets: ["paird"]),
        .executable(name: "pairctl", targets: ["pairctl"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        // The Prometheus text exposition of `[Metrics] Textfile` (PrometheusCollectorRegistry).
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
    ],
    targets: [
        .systemLibrary(name: "CDBus", pkgConfig: "dbus-1", providers: [.apt(["libdbus-1-dev"])]),
        .systemLibrary(name: "CSystemd", pkgConfig: "libsystemd", providers: [.apt(["libsystemd-dev"])]),

        .target(name: "PairingCore"),
        // The dispatcher's fork + execveat of a checked descriptor (posix_spawn cannot run an fd).
        .target(name: "CSpawn"),
        // libmosquitto, dlopen'd only when `[MQTT]` is set: paird builds and runs without it.
        .target(name: "CMosquitto"),
        .target(name: "CBuildInfo", cSettings: buildInfoDefines),
        .target(name: "BuildInfo", dependencies: ["CBuildInfo", "PairingCore"], plugins: ["BuildCommit"]),
        .plugin(name: "BuildCommit", capability: .buildTool()),
        .target(name: "EventLoop"),
        .target(name: "DBus", dependencies: ["CDBus", "EventLoop"]),
        .target(name: "BlueZ", dependencies: ["DBus", "EventLoop", "PairingCore"]),
        .target(name: "Paird", dependencies: [
            "PairingCore", "EventLoop", "DBus", "BlueZ", "CSystemd", "CSpawn", "CMosquitto", "BuildInfo", .product(name: "Prometheus", package: "swift-prometheus"),
        ]),
        .executableTarget(name: "paird", dependencies: [
            "Paird", "PairingCore", "BuildInfo", .product(name: "ArgumentParser", package: "swift-argument-parser"),
        ]),
        .target(name: "PairCtlCommands", dependencies: [
            "DBus", "EventLoop", "PairingCore", "BlueZ", "BuildInfo", .product(name: "ArgumentParser", package: "swift-argument-parser"),
        ]),
        .executableTarget(name: "pairctl", dependencies: ["PairCtlCommands"]),
        .executableTarget(name: "PairingBench", dependencies: ["PairingCore"]),
        // `pairctl history`'s record: a busy wearable's 30 days generated, its query timed in-process.
        .executableTarget(name: "HistoryBench", dependencies: ["PairCtlCommands", "PairingCore"]),
        // Drives the BlueZ client alone (no daemon) inside the test bed.
        .executableTarget(name: "bluez-probe", dependencies: ["BlueZ", "DBus", "EventLoop", "PairingCore"]),

        // What several test targets share: a private dbus-daemon per test, waiting on the loop.
        .target(name: "TestSupport", dependencies: ["DBus", "EventLoop"], path: "Tests/TestSupport"),

        .testTarget(name: "PairingCoreTests", dependencies: ["PairingCore"]),
        .testTarget(name: "CModulesTests", dependencies: ["CDBus", "CSystemd"]),
        .testTarget(name: "EventLoopTests", dependencies: ["EventLoop"]),
        .testTarget(name: "DBusTests", dependencies: ["DBus", "EventLoop", "TestSupport"], exclude: ["leakcheck.sh"]),
        .testTarget(name: "BlueZTests", dependencies: ["BlueZ", "DBus", "EventLoop", "PairingCore", "Paird", "TestSupport"]),
        // In-process: configuration, state file, pairctl's error mapping.
        .testTarget(name: "PairdTests", dependencies: ["Paird", "PairCtlCommands", "PairingCore", "DBus"]),
        // The real paird and pairctl binaries against python-dbusmock's BlueZ on a private bus.
        .testTarget(name: "PairdIntegrationTests", dependencies: ["PairingCore", "TestSupport"]),
    ],
    swiftLanguageModes: [.v6]
)
