import DBus
import Foundation
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

    @Test("access denied (exit 4) names the fix: join the bluetooth group, then log in again")
    func accessDeniedNamesTheFix() {
        let e = PairctlError(DBusError(name: "org.freedesktop.DBus.Error.AccessDenied", message: "Rejected send message"))
        #expect(e.exit == .accessDenied)
        #expect(e.message.contains("sudo usermod -aG bluetooth $USER"), "\(e.message)")
        #expect(e.message.contains("log out and in again"), "\(e.message)")
        #expect(!e.message.contains("\n"), "one line")
        #expect(PairctlExit.accessDenied.meaning.contains("usermod -aG bluetooth"))
    }

    /// The README's exit-code table (Troubleshooting: `| exit | meaning | what to do |`) is the
    /// scripts' contract: it must list exactly the codes pairctl has (a code added, renumbered or
    /// dropped on one side only fails here).
    @Test("the README lists exactly pairctl's exit codes")
    func documented() throws {
        let text = try Self.readme()
        let header = try #require(text.range(of: "| exit | meaning | what to do |"))
        // The table's rows after its header and separator, up to the first line that is no row.
        let rows = text[header.upperBound...].split(separator: "\n").dropFirst().prefix { $0.hasPrefix("|") }
        let documented = rows.compactMap { Int32($0.split(separator: "|").first?.trimmingCharacters(in: .whitespaces) ?? "") }
        #expect(documented.sorted() == PairctlExit.allCases.map(\.rawValue).sorted())
    }

    /// The README's troubleshooting table (exit, meaning, what to do) has a row for every code.
    @Test("the README's exit-code table lists exactly pairctl's exit codes")
    func tabled() throws {
        let text = try Self.readme()
        let start = try #require(text.range(of: "| exit | meaning | what to do |"))
        let rows = text[start.upperBound...].split(separator: "\n").dropFirst().prefix { $0.hasPrefix("|") }
        let codes = rows.compactMap { Int32($0.split(separator: "|").first?.trimmingCharacters(in: .whitespaces) ?? "") }
        #expect(codes.sorted() == PairctlExit.allCases.map(\.rawValue).sorted())
    }

    static func readme() throws -> String {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../README.md").standardized
        return try String(contentsOf: url, encoding: .utf8)
    }
}
