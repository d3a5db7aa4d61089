import ArgumentParser
import BuildInfo
import EventLoop
import PairingCore

/// `pairctl`: the command-line client of paird.
public struct Pairctl: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "pairctl",
        abstract: "Control paird, the daemon that keeps Bluetooth LE wearables connected.",
        discussion: """
        Everyone may read the status; pair, unpair, connect and disconnect need root or
        membership of the bluetooth group (paird's D-Bus policy). scan asks BlueZ directly:
        its D-Bus policy decides.

        Exit status:
        \(PairctlExit.allCases.map { "  \(padded(String($0.rawValue), 3)) \($0.meaning)" }.joined(separator: "\n"))
        """,
        version: "pairctl \(BuildInfo.version)",
        subcommands: [Pair.self, Unpair.self, Connect.self, Disconnect.self, List.self, Status.self, Watch.self, History.self, Scan.self, DoctorCommand.self],
        defaultSubcommand: Status.self)

    public init() {}

    /// Runs pairctl with `arguments` and returns its exit code (the @main calls exit with it).
    public static func run(_ arguments: [String]) -> Int32 {
        // `pairctl help VERB`: the parser's help verb shows the top-level help, exit 0, for a verb
        // that does not exist; that is a bad argument here.
        if arguments.first == "help", let verb = arguments.dropFirst().first(where: { !$0.hasPrefix("-") }),
           !configuration.subcommands.contains(where: { $0._commandName == verb }) {
            writeAll(2, "pairctl: help: no such command \"\(verb)\" (see 'pairctl --help')\n")
            return PairctlExit.usage.rawValue
        }
        // `pairctl` alone is `pairctl status`, but a first word that is no verb is a mistyped verb,
        // not a wearable to look up: `pairctl status WEARABLE` names one. (Only the first
        // argument: `--generate-completion-script bash` has a value.)
        if let verb = arguments.first, !verb.hasPrefix("-"), verb != "help",
           !configuration.subcommands.contains(where: { $0._commandName == verb }) {
            writeAll(2, "pairctl: unknown command \"\(verb)\" (to show one wearable: pairctl status \(verb)) (see 'pairctl --help')\n")
            return PairctlExit.usage.rawValue
        }
        do {
            var command = try parseAsRoot(arguments)
            try command.run()
            return 0
        } catch let e as PairctlError {
            // its message may carry a name or a BlueZ message: one line, no control characters
            writeAll(2, "pairctl: \(e.message.terminalSafe)\n")
            return e.exit.rawValue
        } catch let e as ExitCode {
            return e.rawValue   // doctor: its verdict is on stdout already
        } catch {
            let code = exitCode(for: error)
            if code == .success {
                print(fullMessage(for: error))   // --help, --version
            } else if code.rawValue == PairctlExit.usage.rawValue {
                // One line, like every other pairctl error; the usage is one --help away.
                let why = message(for: error).split(whereSeparator: \.isNewline).first.map(String.init) ?? "bad arguments"
                let sub = arguments.first { !$0.hasPrefix("-") }.flatMap { a in
                    configuration.subcommands.first { $0._commandName == a }.map { _ in a + " " } } ?? ""
                writeAll(2, "pairctl: \(why.hasPrefix("Error: ") ? String(why.dropFirst(7)) : why) (see 'pairctl \(sub)--help')\n")
            } else {
                writeAll(2, fullMessage(for: error) + "\n")
            }
            return code.rawValue
        }
    }
}
