import DBus
import Testing
@testable import PairCtlCommands

@Suite("pairctl errors and exit codes")
struct PairctlErrorTests {
    @Test("each D-Bus failure maps to the exit code a script expects", arguments: [
        ("org.freedesktop.DBus.Error.ServiceUnknown", PairctlExit.daemonNotRunning),
        ("org.freedesktop.DBus.Error.NameHasNoOwner", .daemonNotRunning),
        ("org.freedesktop.DBus.Error.NoServer", .daemonNotRunning),
        ("org.freedesktop.DBus.Error.FileNotFound", .daemonNotRunning),
        ("org.freedesktop.DBus.Error.Disconnected", .daemonNotRunning),
        ("org.freedesktop.DBus.Error.NoReply", .timeout),          // running but stalled: not "not running"
        ("org.freedesktop.DBus.Error.AccessDenied", .accessDenied),
        ("org.paird1.Error.InvalidArguments", .usage),
        ("org.paird1.Error.UnknownDevice", .unknownDevice),
        ("org.paird1.Error.NoDeviceFound", .noDeviceFound),
        ("org.paird1.Error.AuthenticationFailed", .authenticationFailed),
        ("org.paird1.Error.Timeout", .timeout),
        ("org.paird1.Error.AdapterUnavailable", .adapterUnavailable),
        ("org.paird1.Error.NeedsRepair", .needsRepair),
        ("org.example.Error.Whatever", .failure),
    ])
    func mapping(name: String, exit: PairctlExit) {
        #expect(PairctlError(DBusError(name: name, message: "m")).exit == exit)
    }

    @Test("every exit code is distinct")
    func distinct() {
        #expect(Set(PairctlExit.allCases.map(\.rawValue)).count == PairctlExit.allCases.count)
    }

    @Test("bad arguments: exit 64 and one line on stderr naming the subcommand's --help (the real binary)")
    func usage() throws {
        let host = try MockedHost()   // no paird: bad arguments never reach the bus
        for (args, text, hint) in [
            (["pair", "not-an-address"], "not a Bluetooth address", "pairctl pair --help"),
            (["pair", "--timeout", "0"], "--timeout must be", "pairctl pair --help"),
            (["status", "--bogus"], "Unknown option '--bogus'", "pairctl status --help"),
            (["frobnicate"], "frobnicate", "pairctl --help"),
        ] {
            let r = host.run(MockedHost.pairctlBin, args)
            #expect(r.status == 64, "\(args)")
            #expect(r.err.hasPrefix("pairctl: "), "\(r.err)")
            #expect(r.err.contains(text), "\(r.err)")
            #expect(r.err.contains("(see '\(hint)')"), "\(r.err)")
            #expect(r.err.split(separator: "\n").count == 1, "one line: \(r.err)")
        }
    }
}
