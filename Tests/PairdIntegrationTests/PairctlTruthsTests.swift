import Foundation
import Testing
import PairingCore

/// Issue 34's small truths, from the real binaries (against the mocked BlueZ where paird runs).
@Suite("pairctl and paird: versions, help, JSON, errors (issue 34)", .serialized)
struct PairctlTruthsTests {
    @Test("--version of pairctl and paird, and paird's D-Bus Version, are the same build string")
    func versions() throws {
        let host = try MockedHost()
        let c = host.pairctl("--version")
        let d = host.run(MockedHost.pairdBin, ["--version"])
        #expect(c.status == 0 && d.status == 0)
        let ctl = c.out.trimmingCharacters(in: .whitespacesAndNewlines)
        let daemon = d.out.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(ctl.hasPrefix("pairctl "), "\(ctl)")
        #expect(daemon.hasPrefix("paird "), "\(daemon)")
        let build = String(ctl.dropFirst("pairctl ".count))
        #expect(daemon == "paird \(build)")
        // The package's (`make`: 0.1.0+git263.48e976b, .dirty when the tree was), or plain `swift
        // build`'s, from SwiftPM's git information (0.1.0+g48e976b); the bare code version only
        // outside a git checkout (issue 47: the version names the build however it is built).
        let named = build.wholeMatch(of: /\d+\.\d+\.\d+\+(git\d+\.|g)[0-9a-f]{7,}(\.dirty)?/) != nil
        let inGit = FileManager.default.fileExists(atPath: URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent(".git").path)
        #expect(named || (!inGit && build == PairdAPI.version), "\(build) (in a git checkout: \(inGit))")
        #expect(build.hasPrefix(PairdAPI.version))
        try host.startPaird()
        let prop = host.python("print(b.get_object('org.paird1', '/org/paird1').Get('org.paird1.Manager1', 'Version', dbus_interface='org.freedesktop.DBus.Properties'))")
        #expect(prop.out.trimmingCharacters(in: .whitespacesAndNewlines) == build, "\(prop.err)")
        #expect(try host.status().daemon.version == build)
    }

    @Test("paird --check-config: a missing file is \"no file, defaults\" (exit 0), every error of a bad one is named (exit 78)")
    func checkConfig() throws {
        let host = try MockedHost()
        let missing = host.dir.appendingPathComponent("absent.conf").path
        // without --config paird reads /etc/paird/paird.conf, absent or not on this host: an
        // explicit but absent --config must exist (78), so the default path's rule is checked in
        // ConfigTests.checkMissing; here the text of the two outcomes.
        let m = host.run(MockedHost.pairdBin, ["--check-config", "--config", missing])
        #expect(m.status == 78)
        #expect(m.err.contains("absent.conf:0: cannot read: no such file"), "\(m.err)")
        #expect(!m.out.contains("OK"), "\(m.out)")
        let conf = host.dir.appendingPathComponent("paird.conf").path
        try "[Pairing]\nScanTimeout = soon\n[Connection]\nFastAttempts = -1\nNope = 1\n".write(toFile: conf, atomically: true, encoding: .utf8)
        let r = host.run(MockedHost.pairdBin, ["--check-config", "--config", conf])
        #expect(r.status == 78)
        #expect(r.err.contains("paird.conf:2: ScanTimeout must be"), "\(r.err)")
        #expect(r.err.contains("paird.conf:4: FastAttempts must be"), "\(r.err)")
        #expect(r.out.contains("paird.conf:5: unknown key Nope"), "\(r.out)")
        #expect(r.out.contains("2 error(s)"), "\(r.out)")
        #expect(!r.out.contains(": OK"), "\(r.out)")
        try "[Pairing]\nScanTimeout = 5\n".write(toFile: conf, atomically: true, encoding: .utf8)
        let ok = host.run(MockedHost.pairdBin, ["--check-config", "--config", conf])
        #expect(ok.status == 0 && ok.out.contains("paird.conf: OK"), "\(ok.out) \(ok.err)")
    }

    @Test("paird --check-config without --config on a host without /etc/paird/paird.conf: \"no file, defaults\", exit 0",
          .enabled(if: !FileManager.default.fileExists(atPath: "/etc/paird/paird.conf"), "this host has /etc/paird/paird.conf"))
    func checkConfigDefaults() throws {
        let host = try MockedHost()
        let r = host.run(MockedHost.pairdBin, ["--check-config"])
        #expect(r.status == 0, "\(r.err)")
        #expect(r.out.trimmingCharacters(in: .whitespacesAndNewlines) == "/etc/paird/paird.conf: no file, defaults")
    }

    /// Parses one line of JSON output into an object (fails the test if it is not one).
    static func object(_ line: some StringProtocol) throws -> [String: Any] {
        guard let o = try JSONSerialization.jsonObject(with: Data(String(line).utf8)) as? [String: Any] else {
            throw Failure("not a JSON object: \(line)")
        }
        return o
    }

    @Test("one JSON style: status --json, list --json and pair --json are compact, one object per line; pair's exit is a number")
    func jsonStyle() throws {
        let host = try MockedHost()
        // paird down: status, list and pair still print an object, and exit 3
        for args in [["status", "--json"], ["list", "--json"], ["pair", "--any", "--json"], ["watch", "--json"]] {
            let r = host.run(MockedHost.pairctlBin, args)
            #expect(r.status == 3, "\(args): \(r.err)")
            let lines = r.out.split(separator: "\n")
            #expect(lines.count == 1, "\(args): one compact line: \(r.out)")
            let o = try Self.object(lines.first ?? "")
            #expect(o["schemaVersion"] as? Int == 1 || ["pair", "watch"].contains(args[0]), "\(args): \(o)")
            if args[0] == "list" {
                #expect(o["exit"] as? Int == 3, "\(o)")
                #expect((o["error"] as? String)?.contains("not running") == true, "\(o)")
                #expect((o["devices"] as? [Any])?.isEmpty == true, "\(o)")
            }
            if args[0] == "pair" || args[0] == "watch" {
                #expect(o["event"] as? String == "failed")
                #expect(o["exit"] is NSNumber && !(o["exit"] is String) && (o["exit"] as? Int) == 3, "a number: \(o)")
            }
        }
        try host.startPaird()
        for args in [["status", "--json"], ["list", "--json"]] {
            let r = host.run(MockedHost.pairctlBin, args)
            #expect(r.status == 0, "\(args): \(r.err)")
            #expect(r.out.split(separator: "\n").count == 1, "\(args): compact: \(r.out)")
            _ = try Self.object(r.out)
        }
        // a pairing that finds nothing: the failed line carries exit 5, as a number
        let r = host.run(MockedHost.pairctlBin, ["pair", "00:AA:01:01:00:09", "--timeout", "1", "--json"])
        #expect(r.status == 5, "\(r.out) \(r.err)")
        let last = try Self.object(r.out.split(separator: "\n").last ?? "")
        #expect(last["event"] as? String == "failed" && last["exit"] as? Int == 5 && !(last["exit"] is String), "\(last)")
        #expect(r.out.split(separator: "\n").filter { $0.contains("\"failed\"") }.count == 1, "one failed line: \(r.out)")
    }

    @Test("pairctl help VERB: an unknown verb is a usage error (64); a known one shows its help (0)")
    func helpOfUnknownVerb() throws {
        let host = try MockedHost()
        let bogus = host.pairctl("help", "bogus")
        #expect(bogus.status == 64)
        #expect(bogus.err.hasPrefix("pairctl: ") && bogus.err.contains("bogus"), "\(bogus.err)")
        #expect(bogus.out.isEmpty)
        let pair = host.pairctl("help", "pair")
        #expect(pair.status == 0)
        #expect(pair.out.contains("--passkey"), "pair's own help")
        #expect(host.pairctl("help").status == 0)
    }

    /// Emits paird's `Notification` signals (as paird forwards them) on the private bus for `seconds`.
    static func emitNotifications(_ host: MockedHost, seconds: Double) -> MockedHost.Ran {
        host.python("""
            import time
            def signal(member, sig, args):
                m = dbus.lowlevel.SignalMessage('/org/paird1', 'org.paird1.Manager1', member)
                m.append(*args, signature=sig)
                b.send_message(m)
            end = time.time() + \(seconds)
            while time.time() < end:
                signal('Notification', 'ssay', ['\(MockedHost.watch)', '00002a37-0000-1000-8000-00805f9b34fb', dbus.ByteArray(b'\\x16\\x48\\x40\\x03')])
                signal('Notification', 'ssay', ['\(MockedHost.watch)', '00002a37-0000-1000-8000-00805f9b34fb', dbus.ByteArray(b'\\x01\\x48')])
                signal('Notification', 'ssay', ['\(MockedHost.watch)', '00002a5b-0000-1000-8000-00805f9b34fb', dbus.ByteArray(b'\\x00\\x48')])
                b.flush()
                time.sleep(0.2)
            """)
    }

    @Test("pairctl watch decodes heart rate (bpm, contact, RR) and leaves malformed and unknown values in hex, in text and JSON (the real binary)")
    func watchDecodes() throws {
        let host = try MockedHost()
        try host.startPaird()
        let text = host.start(MockedHost.pairctlBin, ["watch"], timeout: 1)
        let json = host.start(MockedHost.pairctlBin, ["watch", "--json"], timeout: 1)
        #expect(Self.emitNotifications(host, seconds: 3).status == 0)   // both subscribed well before its end
        let t = text.finish(), j = json.finish()   // each killed 1 s later
        let lines = t.out.split(separator: "\n").map(String.init)
        #expect(lines.contains { $0.hasSuffix(" notify 00002a37-0000-1000-8000-00805f9b34fb (heart rate: 72 bpm, contact, RR 812.5 ms) 16484003") }, "\(t.out) \(t.err)")
        #expect(lines.contains { $0.hasSuffix(" notify 00002a37-0000-1000-8000-00805f9b34fb 0148") }, "malformed: hex only: \(t.out)")
        #expect(lines.contains { $0.hasSuffix(" notify 00002a5b-0000-1000-8000-00805f9b34fb 0048") }, "unknown: hex only: \(t.out)")
        let objects = try j.out.split(separator: "\n").map(Self.object)
        let decoded = objects.first { $0["hex"] as? String == "16484003" }
        let hr = decoded?["heartRate"] as? [String: Any]
        #expect(hr?["bpm"] as? Int == 72 && hr?["rrIntervals"] as? [Double] == [812.5], "\(j.out) \(j.err)")
        #expect(decoded?["event"] as? String == "notify" && decoded?["address"] as? String == MockedHost.watch)
        let malformed = objects.first { $0["hex"] as? String == "0148" }
        #expect(malformed != nil && malformed?["heartRate"] == nil, "\(j.out)")
    }

    @Test("status WEARABLE by address (any case) or name (any case); unknown: exit 7; list has a header, --no-legend drops it")
    func oneWearable() throws {
        let host = try MockedHost()
        #expect(host.pairctl("status", "Watch").status == 3, "paird down: 3, as for status")
        try host.startPaird()
        try host.pairWatchOK()
        let watch = MockedHost.watch
        for name in [watch.lowercased(), watch, "Watch", "WATCH"] {
            let r = host.pairctl("status", name)
            #expect(r.status == 0, "\(name): \(r.err)")
            #expect(r.out.hasPrefix("Watch \(watch): connected, since "), "\(name): \(r.out)")
            #expect(!r.out.contains("adapter:"), "only the wearable: \(r.out)")
            #expect(r.out.split(separator: "\n").allSatisfy { $0.count <= 100 })
            #expect(r.out.contains(" ago"), "relative time: \(r.out)")
            #expect(r.out.firstMatch(of: /\d{4}-\d{2}-\d{2}T\d{2}/) == nil, "no absolute time in text: \(r.out)")
        }
        let j = host.pairctl("status", "--json", "watch")
        #expect(j.status == 0)
        let doc = try StatusDocument.decode(j.out)
        #expect(doc.devices.map(\.address) == [watch])
        #expect(j.out.contains("\"since\":\"20"), "the absolute time in --json: \(j.out)")
        for unknown in ["Nobody", "00:AA:01:01:00:99"] {
            let r = host.pairctl("status", unknown)
            #expect(r.status == 7, "\(unknown): \(r.status) \(r.err)")
            #expect(r.err.hasPrefix("pairctl: no paired wearable"), "\(r.err)")
            let rj = host.pairctl("status", "--json", unknown)
            #expect(rj.status == 7)
            #expect(try StatusDocument.decode(rj.out).devices.isEmpty, "\(rj.out)")
        }
        #expect(host.pairctl("status", "00:11:22:33:44:GG").status == 64, "a malformed address is a usage error")
        let verb = host.pairctl("Watch")
        #expect(verb.status == 64 && verb.err.contains("unknown command \"Watch\""), "no verb: \(verb.err)")
        // an option's value is no verb (make dist-docs generates the completions so)
        let completion = host.pairctl("--generate-completion-script", "bash")
        #expect(completion.status == 0 && completion.out.contains("pairctl"), "\(completion.err)")

        // --watch WEARABLE: that wearable's block, then its changes; not paired: exit 7 at once
        #expect(host.pairctl("status", "--watch", "Nobody").status == 7)
        let file = host.dir.appendingPathComponent("follow.out").path
        _ = FileManager.default.createFile(atPath: file, contents: nil)
        let following = Process()
        following.executableURL = URL(fileURLWithPath: MockedHost.pairctlBin)
        following.arguments = ["status", "--watch", "watch"]
        following.environment = host.env
        following.standardOutput = FileHandle(forWritingAtPath: file)
        try following.run()
        defer { if following.isRunning { kill(following.processIdentifier, SIGKILL) } }
        func followed() -> String { (try? String(contentsOfFile: file, encoding: .utf8)) ?? "" }
        // its first block is printed once it has subscribed
        try waitFor("status --watch's first block", deadline: 10) { followed().hasPrefix("Watch \(watch): connected") }
        #expect(host.pairctl("disconnect", "Watch").status == 0)
        try waitFor("the change in status --watch", deadline: 10) { followed().contains("Watch \(watch): disconnected (as you asked)") }
        #expect(!followed().contains("adapter:"), "only the wearable: \(followed())")
        #expect(host.pairctl("connect", "Watch").status == 0)

        let list = host.pairctl("list").out.split(separator: "\n").map(String.init)
        #expect(list.count == 2, "\(list)")
        #expect(list.first?.wholeMatch(of: /ADDRESS +STATE +NAME/) != nil, "\(list)")
        // (its state: out of range, after the connect above the mock does not bring the link back)
        #expect(list.last?.wholeMatch(of: /00:AA:01:01:00:01  [a-z ()]{20}  Watch/) != nil, "\(list)")
        let bare = host.pairctl("list", "--no-legend").out.split(separator: "\n").map(String.init)
        #expect(bare == [list[1]], "\(bare)")
    }

    static let repo = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    @Test("help strings are ASCII (the manual pages are made from them): every abstract and discussion of pairctl and paird")
    func asciiHelp() throws {
        let host = try MockedHost()
        for bin in [MockedHost.pairctlBin, MockedHost.pairdBin] {
            let dump = host.run(bin, ["--experimental-dump-help"])
            #expect(dump.status == 0)
            #expect(dump.out.contains("\"abstract\""), "the dump has the help text")
            let odd = dump.out.unicodeScalars.filter { !$0.isASCII }
            #expect(odd.isEmpty, "\(bin): non-ASCII \(odd.map { String($0) })")
        }
        for verb in ["pair", "status", "list", "watch", "unpair", "connect", "disconnect"] {
            let help = host.pairctl(verb, "--help")
            #expect(help.status == 0 && help.out.unicodeScalars.allSatisfy { $0.isASCII }, "\(verb)")
        }
    }

    @Test("paird(8): a real synopsis (no subcommand, no help verb), exit codes 64 and 78, FILES, EXAMPLES, SEE ALSO")
    func pairdManual() throws {
        let host = try MockedHost()
        let help = host.run(MockedHost.pairdBin, ["--help"])
        for heading in ["Exit status:", "  64  bad arguments", "  78  a bad configuration file", "Files:", "Examples:", "See also:"] {
            #expect(help.out.contains(heading), "paird --help: \(heading)")
        }
        let dump = host.run(MockedHost.pairdBin, ["--experimental-dump-help"])
        let script = Self.repo.appendingPathComponent("debian/paird-man.py").path
        // the dump on the script's stdin
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        p.arguments = [script, "1.2.3"]
        let input = Pipe(), output = Pipe()
        p.standardInput = input
        p.standardOutput = output
        try p.run()
        input.fileHandleForWriting.write(Data(dump.out.utf8))
        try input.fileHandleForWriting.close()
        let man = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        #expect(p.terminationStatus == 0)
        let sections = man.split(separator: "\n").filter { $0.hasPrefix(".SH ") }.map { String($0.dropFirst(4)) }
        #expect(sections == ["NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "EXIT STATUS", "FILES", "EXAMPLES", "SEE ALSO", "AUTHORS"], "\(sections)")
        let synopsis = man.components(separatedBy: ".SH SYNOPSIS\n").last?.components(separatedBy: ".SH").first ?? ""
        #expect(synopsis.contains("\\-\\-config") && synopsis.contains("\\-\\-state\\-file") && !synopsis.contains("subcommand"), "\(synopsis)")
        #expect(!man.contains("\\fBhelp\\fR") && !man.contains("\\fIhelp\\fR"), "no help verb")
        #expect(man.contains(".TP\n\\fB64\\fR\nbad arguments") && man.contains(".TP\n\\fB78\\fR\n"), "exit codes")
        #expect(man.contains("\\fBpairctl\\fR(1)") && man.contains("/etc/paird/paird.conf") && man.contains("paird 1.2.3"))
        #expect(man.unicodeScalars.allSatisfy { $0.isASCII })
    }
}
