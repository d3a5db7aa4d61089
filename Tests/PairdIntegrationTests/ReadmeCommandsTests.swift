import Foundation
import Testing

/// The README's commands run as written (issue 34): every `pairctl` and `paird` line of its `sh`
/// blocks is run with the real binaries exactly as it is written (the comment cut off, quotes
/// honoured). No paird runs here, so a `pairctl` command that parses ends in exit 3 ("paird is not
/// running") or, for a follow mode, is still running at its limit; exit 64 (bad arguments) or any
/// other code fails. What cannot run here is listed with the reason, never silently skipped.
@Suite("README commands")
struct ReadmeCommandsTests {
    static let readme = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("../../README.md").standardized

    /// The command lines of the README's ```sh blocks, comments cut off.
    static func commands() throws -> [String] {
        let text = try String(contentsOf: readme, encoding: .utf8)
        var out: [String] = []
        var inBlock = false
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("```") { inBlock = line == "```sh"; continue }
            guard inBlock else { continue }
            var cmd = String(line)
            // a comment starts at " #" outside quotes (README commands quote with "…" only)
            var quoted = false
            for (i, c) in cmd.enumerated() {
                if c == "\"" { quoted.toggle() }
                if c == "#", !quoted, i > 0, cmd[cmd.index(cmd.startIndex, offsetBy: i - 1)] == " " {
                    cmd = String(cmd.prefix(i)); break
                }
            }
            cmd = cmd.trimmingCharacters(in: .whitespaces)
            if !cmd.isEmpty { out.append(cmd) }
        }
        return out
    }

    /// Words as a POSIX shell splits this README's lines (double quotes only).
    static func words(_ s: String) -> [String] {
        var words: [String] = [], cur = "", quoted = false, any = false
        for c in s {
            if c == "\"" { quoted.toggle(); any = true; continue }
            if c == " ", !quoted { if any { words.append(cur) }; cur = ""; any = false; continue }
            cur.append(c); any = true
        }
        if any { words.append(cur) }
        return words
    }

    /// Why a README command is not run here (nil: it is run).
    static func notRunHere(_ words: [String]) -> String? {
        switch words.first {
        case "pairctl", "paird": return nil
        case "make": return "builds or installs on this host (the build and test tiers run those targets themselves)"
        case "sudo": return "changes the host as root (install, service start)"
        case "busctl": return "needs a running paird on the system bus and root"
        default: return "not a paird command"
        }
    }

    @Test("every pairctl and paird command of the README parses and runs (no paird here: exit 3)")
    func commandsRun() throws {
        let host = try MockedHost()   // no paird: a command that parses finds it not running
        let cmds = try Self.commands()
        var ran = 0
        var listed: [String] = []
        for cmd in cmds {
            let w = Self.words(cmd)
            if let why = Self.notRunHere(w) { listed.append("\(cmd)  — not run: \(why)"); continue }
            let bin = w[0] == "pairctl" ? MockedHost.pairctlBin : MockedHost.pairdBin
            // follow modes (watch, status --watch) wait for paird: a limit ends them (timeout: 124)
            let r = host.run("/usr/bin/timeout", ["5", bin] + w.dropFirst(), timeout: 30)
            ran += 1
            if w[0] == "pairctl", w.dropFirst().first == "scan" {
                // scan asks BlueZ itself, not paird: no BlueZ here (9), or the mock's adapter: done (0) or still scanning at the limit (124)
                #expect(r.status == 9 || r.status == 0 || r.status == 124, "\(cmd): exit \(r.status): \(r.err)")
            } else if w[0] == "pairctl", w.dropFirst().first == "doctor" {
                // doctor stops at paird (3) after the mock's bluetoothd and adapter; at rfkill (9)
                // should this host's own Bluetooth be blocked (it reads /sys/class/rfkill)
                #expect(r.status == 3 || r.status == 9, "\(cmd): exit \(r.status): \(r.out) \(r.err)")
            } else if w[0] == "pairctl" {
                #expect(r.status == 3 || r.status == 124, "\(cmd): exit \(r.status): \(r.err)")
            } else {
                // `paird --check-config`: 0 (no file: defaults; or a good file), 78 (a bad one)
                #expect(r.status == 0 || r.status == 78, "\(cmd): exit \(r.status): \(r.out) \(r.err)")
            }
        }
        print("README commands: \(ran) run, \(listed.count) not run here:\n" + listed.joined(separator: "\n"))
        #expect(ran >= 6, "the README's quick start has its pairctl commands (\(ran) found)")
    }

    @Test("the README is for users: at most 200 lines (issue 47; how packages are built is in docs/packaging.md)")
    func readmeShort() throws {
        let lines = try String(contentsOf: Self.readme, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false).count - 1
        #expect(lines <= 200, "README.md has \(lines) lines")
    }
}
