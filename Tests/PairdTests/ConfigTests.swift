import Foundation
import Testing
@testable import Paird
import PairingCore

@Suite("paird.conf")
struct ConfigTests {
    @Test("the shipped file is all comments: parsing it gives the defaults, no warnings")
    func shippedFileIsDefaults() throws {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../etc/paird/paird.conf")
        let text = try String(contentsOf: url, encoding: .utf8)
        let (config, warnings) = try DaemonConfig.parse(text, file: "paird.conf")
        var expected = DaemonConfig()
        expected.machine.adapter = "hci0"
        #expect(config == expected)
        #expect(warnings.isEmpty)
    }

    @Test("the shipped file lists every key at its default: uncommented, it parses to the defaults")
    func shippedFileListsEveryKey() throws {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../etc/paird/paird.conf")
        let text = try String(contentsOf: url, encoding: .utf8)
        var seen: [String: Set<String>] = [:]
        var section = ""
        let uncommented = text.split(separator: "\n", omittingEmptySubsequences: false).map { line -> String in
            if line.hasPrefix("[") { section = String(line.dropFirst().dropLast()) }
            // "#Key = value" (no space after #) is a commented-out setting; "# prose" is not
            guard line.hasPrefix("#"), let c = line.dropFirst().first, c.isLetter, line.contains("=") else { return String(line) }
            seen[section, default: []].insert(String(line.dropFirst().split(separator: "=")[0]).trimmingCharacters(in: .whitespaces))
            return String(line.dropFirst())
        }.joined(separator: "\n")
        #expect(seen == DaemonConfig.keys, "keys listed in paird.conf vs keys paird reads")
        let (config, warnings) = try DaemonConfig.parse(uncommented, file: "paird.conf")
        var expected = DaemonConfig()
        expected.machine.adapter = "hci0"
        #expect(config == expected, "a commented default differs from the compiled-in one")
        #expect(warnings.isEmpty, "\(warnings)")
    }

    @Test("BackoffMax below BackoffInitial: refused at the line of the later of the two keys")
    func backoffOrder() {
        for (text, line) in [("[Connection]\nBackoffMax = 2\nBackoffInitial = 5\n", 3),
                             ("[Connection]\nBackoffInitial = 5\n\nBackoffMax = 2\n", 4)] {
            let error = #expect(throws: DaemonConfig.Error.self) { try DaemonConfig.parse(text, file: "b.conf") }
            #expect(error?.line == line, "\(String(describing: error))")
            #expect(error?.problem.contains("BackoffMax") == true)
        }
    }

    @Test("[Sleep]: the resume deadline's floor and ceiling and the power-cycle cap are read; a ceiling below the floor is refused")
    func sleepKeys() throws {
        let (c, _) = try DaemonConfig.parse("[Sleep]\nResumeDeadlineFloor = 4\nResumeDeadlineCeiling = 30\nResumePowerCycles = 0\n", file: "s.conf")
        #expect(c.machine.resumeDeadlineFloor == .seconds(4) && c.machine.resumeDeadlineCeiling == .seconds(30))
        #expect(c.machine.resumePowerCycles == 0)
        let error = #expect(throws: DaemonConfig.Error.self) {
            try DaemonConfig.parse("[Sleep]\nResumeDeadlineFloor = 40\nResumeDeadlineCeiling = 30\n", file: "s.conf")
        }
        #expect(error?.line == 3 && error?.problem.contains("below ResumeDeadlineFloor") == true, "\(String(describing: error))")
        #expect(throws: DaemonConfig.Error.self) { try DaemonConfig.parse("[Sleep]\nResumePowerCycles = -1\n", file: "s.conf") }
    }

    @Test("a missing file means the defaults, unless it was named explicitly (--config)")
    func missingFile() throws {
        let path = "/nonexistent-\(getpid())/paird.conf"
        let (c, w) = try DaemonConfig.load(path: path)
        var expected = DaemonConfig()
        expected.machine.adapter = "hci0"
        #expect(c == expected && w.isEmpty)
        #expect(throws: DaemonConfig.Error(file: path, line: 0, problem: "cannot read: no such file")) {
            try DaemonConfig.load(path: path, mustExist: true)
        }
    }

    @Test("every key is read")
    func everyKey() throws {
        let (c, warnings) = try DaemonConfig.parse("""
            [General]
            Adapter = 00:AA:01:00:00:00
            [Pairing]
            ScanTimeout = 20
            PairTimeout=40
            [Connection]
            ConnectTimeout = 50
            DiscoveryTimeout = 25
            ResolveTimeout = 4.5
            LinkDownWait = 2.5
            ResolveFloor = 2
            BackoffInitial = 0.5
            BackoffMax = 30
            FallbackInterval = 120
            AutoConnectHeadStart = 0
            AbsentAfter = 15
            FastAttempts = 3
            SetupFailuresBeforeRepair = 4
            ProofWindow = 12
            WedgePowerCycles = 1
            WedgeProbeInterval = 300
            [Notifications]
            Subscribe = 2a37, 0x2A19
            Battery = no
            """, file: "t.conf")
        #expect(warnings.isEmpty)
        #expect(c.adapter == "00:AA:01:00:00:00")
        #expect(c.machine.scanTimeout == .seconds(20))
        #expect(c.machine.pairTimeout == .seconds(40))
        #expect(c.machine.connectTimeout == .seconds(50))
        #expect(c.machine.discoveryTimeout == .seconds(25))
        #expect(c.machine.resolveTimeout == .milliseconds(4500))
        #expect(c.machine.linkDownWait == .milliseconds(2500))
        #expect(c.machine.resolveFloor == .seconds(2))
        #expect(c.machine.backoff.initial == .milliseconds(500))
        #expect(c.machine.backoff.maximum == .seconds(30))
        #expect(c.machine.fallbackInterval == .seconds(120))
        #expect(c.machine.autoConnectHeadStart == .zero)
        #expect(c.machine.absentAfter == .seconds(15))
        #expect(c.machine.fastAttempts == 3)
        #expect(c.machine.setupFailuresBeforeRepair == 4)
        #expect(c.machine.proofWindow == .seconds(12))
        #expect(c.machine.wedgePowerCycles == 1)
        #expect(c.machine.wedgeProbeInterval == .seconds(300))
        #expect(c.subscribe == [ServiceUUID.heartRateMeasurement, ServiceUUID.batteryLevel])
        #expect(c.battery == false)
    }

    @Test("[Health]: every key is read; FirstDataTimeout reaches the machine only with something subscribed")
    func healthKeys() throws {
        #expect(DaemonConfig().machine.firstDataTimeout == .seconds(5), "on by default (Subscribe = 2a37)")
        let (c, warnings) = try DaemonConfig.parse("""
            [Health]
            FirstDataTimeout = 7.5
            ResubscribesPerLink = 1
            SilencePeriods = 4
            SilenceMinimum = 2
            ProbeTimeout = 3
            """, file: "t.conf")
        #expect(warnings.isEmpty)
        #expect(c.machine.firstDataTimeout == .milliseconds(7500))
        #expect(c.machine.resubscribesPerLink == 1)
        #expect(c.machine.silencePeriods == 4)
        #expect(c.machine.silenceMinimum == .seconds(2))
        #expect(c.machine.probeTimeout == .seconds(3))
        let (off, _) = try DaemonConfig.parse("[Health]\nFirstDataTimeout = 0\n", file: "t.conf")
        #expect(off.machine.firstDataTimeout == nil)
        let (nothing, _) = try DaemonConfig.parse("[Notifications]\nSubscribe =\n", file: "t.conf")
        #expect(nothing.subscribe.isEmpty && nothing.machine.firstDataTimeout == nil, "nothing subscribed: no data awaited")
        #expect(throws: DaemonConfig.Error(file: "t.conf", line: 2, problem: "SilencePeriods must be a whole number in 2…1000, got \"1\"")) {
            try DaemonConfig.parse("[Health]\nSilencePeriods = 1\n", file: "t.conf")
        }
        #expect(throws: DaemonConfig.Error.self) { try DaemonConfig.parse("[Health]\nProbeTimeout = 0\n", file: "t.conf") }
    }

    @Test("unknown keys and sections are warned about, with file and line")
    func unknownKeys() throws {
        let (_, warnings) = try DaemonConfig.parse("[General]\nAdaptor = hci0\n[Mystery]\nX = 1\n", file: "t.conf")
        #expect(warnings == ["t.conf:2: unknown key Adaptor in [General], ignored",
                             "t.conf:3: unknown section [Mystery]",
                             "t.conf:4: unknown key X in [Mystery], ignored"])
    }

    @Test("white space around keys and values, tabs and CRLF line ends are ignored")
    func whiteSpace() throws {
        let (c, warnings) = try DaemonConfig.parse("[General]\r\n\tAdapter\t=  hci12 \r\n[ Notifications ]\r\nSubscribe = 2a37 ,\t2a19\r\n", file: "t.conf")
        #expect(warnings.isEmpty, "\(warnings)")
        #expect(c.adapter == "hci12")
        #expect(c.subscribe == ["00002a37-0000-1000-8000-00805f9b34fb", "00002a19-0000-1000-8000-00805f9b34fb"])
    }

    @Test("several adapters: names and addresses separated by spaces or commas, kept in order, one space between")
    func severalAdapters() throws {
        let (c, _) = try DaemonConfig.parse("[General]\nAdapter = hci0,  00:aa:01:02:00:02\thci3\n", file: "t.conf")
        #expect(c.adapter == "hci0 00:aa:01:02:00:02 hci3")
    }

    @Test("bad values are refused with file, line and reason", arguments: [
        ("[Pairing]\nScanTimeout = soon\n", 2, "ScanTimeout must be a number of seconds"),
        ("[Pairing]\nScanTimeout = 0\n", 2, "ScanTimeout must be a number of seconds in 1.0…600.0"),
        ("\n\n[Connection]\nFastAttempts = -1\n", 4, "FastAttempts must be a whole number"),
        ("[General]\nAdapter = wlan0\n", 2, "Adapter must be adapter names"),
        ("[General]\nAdapter = hci\n", 2, "Adapter must be adapter names"),
        ("[General]\nAdapter = hci0x\n", 2, "Adapter must be adapter names"),
        ("[General]\nAdapter = hci0 wlan0\n", 2, "got \"wlan0\""),
        ("[Notifications]\nSubscribe = 2a37, nope\n", 2, "Subscribe: \"nope\" is not a UUID"),
        ("[Notifications]\nBattery = maybe\n", 2, "Battery must be yes or no"),
        ("[Connection]\nWedgeProbeInterval = 2\n", 2, "WedgeProbeInterval must be 0 (never) or a number of seconds in 5…86400"),
        ("[Connection]\nWedgeProbeInterval = -1\n", 2, "WedgeProbeInterval must be"),
        ("[General\n", 1, "malformed section header"),
        ("[General]\nAdapter\n", 2, "expected Key = value"),
    ])
    func badValues(text: String, line: Int, reason: String) {
        do {
            _ = try DaemonConfig.parse(text, file: "bad.conf")
            Issue.record("accepted: \(text)")
        } catch {
            #expect(error.file == "bad.conf")
            #expect(error.line == line)
            #expect(error.problem.contains(reason), "\(error.problem)")
            #expect(error.description.hasPrefix("bad.conf:\(line): "))
        }
    }

    @Test("every error of a file is reported, in line order; parse still throws the first")
    func everyError() throws {
        let text = "[Pairing]\nScanTimeout = soon\n[General\n[Connection]\nFastAttempts = -1\nBackoffInitial = 30\nBackoffMax = 2\nConnectTimeout = 20\n"
        let (c, _, errors) = DaemonConfig.parseAll(text, file: "bad.conf")
        #expect(errors.map(\.line) == [2, 3, 5, 7], "\(errors)")
        #expect(errors.map(\.problem).first?.contains("ScanTimeout") == true)
        #expect(errors.last?.problem.contains("BackoffMax") == true)
        #expect(c.machine.connectTimeout == .seconds(20), "the good lines after a bad one still count")
        #expect(throws: DaemonConfig.Error.self) { try DaemonConfig.parse(text, file: "bad.conf") }
        do { _ = try DaemonConfig.parse(text, file: "bad.conf") } catch { #expect(error.line == 2) }
        #expect(DaemonConfig.parseAll("[Pairing]\nScanTimeout = 5\n", file: "ok.conf").2.isEmpty)
    }

    @Test("check: a missing file is defaults (no error) unless it must exist; an unreadable one is an error")
    func checkMissing() throws {
        let missing = NSTemporaryDirectory() + "paird-no-such-\(UUID().uuidString).conf"
        let allowed = DaemonConfig.check(path: missing)
        #expect(!allowed.fileExists && allowed.errors.isEmpty && allowed.config == DaemonConfig())
        let required = DaemonConfig.check(path: missing, mustExist: true)
        #expect(required.errors.map(\.problem) == ["cannot read: no such file"])
    }
}
