import Foundation
import Testing
@testable import Paird
import PairingCore

@Suite("The state file on disk")
struct StateFileTests {
    let doc = PersistedState(devices: [
        PersistedDevice(identity: DeviceIdentity(address: DeviceAddress("00:AA:01:01:00:01")!, name: "Watch",
                                                 adapter: "hci0", serviceUUIDs: [ServiceUUID.heartRate]),
                        wanted: .connected, pairedAt: 1_800_000_000, updatedAt: 1_800_000_000),
    ])

    func tempDir() throws -> String {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("paird-statefile-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        return dir
    }

    @Test("missing file is a first start")
    func missing() throws {
        let f = StateFile(path: try tempDir() + "/state.json")
        guard case .missing = try f.load() else { Issue.record("expected .missing"); return }
    }

    @Test("save then load round-trips; mode 0600; no temporary file left behind")
    func roundTrip() throws {
        let dir = try tempDir()
        let f = StateFile(path: dir + "/state.json")
        try f.save(doc)
        try f.save(doc) // replacing an existing file
        guard case .loaded(let back) = try f.load() else { Issue.record("not loaded"); return }
        #expect(back == doc)
        let attrs = try FileManager.default.attributesOfItem(atPath: f.path)
        #expect((attrs[.posixPermissions] as? NSNumber)?.intValue == 0o600)
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir) == ["state.json"])
    }

    @Test("a corrupt, truncated or oversized file is moved aside, never deleted", arguments: [
        "{\"version\":1,\"devi", "", String(repeating: " ", count: (1 << 20) + 10),
    ])
    func quarantine(content: String) throws {
        let dir = try tempDir()
        let f = StateFile(path: dir + "/state.json")
        try content.write(toFile: f.path, atomically: false, encoding: .utf8)
        guard case .quarantined(_, let aside) = try f.load(now: Date(timeIntervalSince1970: 1_800_000_000)) else {
            Issue.record("not quarantined"); return
        }
        #expect(aside == dir + "/state.json.corrupt-1800000000")
        #expect(!FileManager.default.fileExists(atPath: f.path))
        #expect(try String(contentsOfFile: aside, encoding: .utf8) == content)
        // The daemon runs on and writes a fresh file next to the quarantined one.
        try f.save(doc)
        guard case .loaded = try f.load() else { Issue.record("fresh file unreadable"); return }
    }

    @Test("a newer paird's file is left untouched and refused (Unusable: exit 78), never quarantined or overwritten")
    func newerVersion() throws {
        let dir = try tempDir()
        let f = StateFile(path: dir + "/state.json")
        let newer = "{\"version\":7,\"devices\":[]}"
        try newer.write(toFile: f.path, atomically: false, encoding: .utf8)
        #expect(throws: StateFile.Unusable.self) { try f.load() }
        #expect(try String(contentsOfFile: f.path, encoding: .utf8) == newer)
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir) == ["state.json"])
    }

    @Test("a state path that is a directory, or in a directory that does not exist, is unusable (exit 78)")
    func unusablePaths() throws {
        let dir = try tempDir()
        try FileManager.default.createDirectory(atPath: dir + "/state.json", withIntermediateDirectories: false)
        #expect(throws: StateFile.Unusable.self) { try StateFile(path: dir + "/state.json").load() }
        #expect(throws: StateFile.Unusable.self) { try StateFile(path: dir + "/nope/state.json").load() }
    }

    @Test("a state file that is there but cannot be read (EIO, EACCES) is unusable (exit 78): its path and the fix, never started empty")
    func unreadable() throws {
        // /proc/self/mem is a regular file whose read at offset 0 fails with EIO, also for root.
        do {
            _ = try StateFile(path: "/proc/self/mem").load()
            Issue.record("loaded")
        } catch let e as StateFile.Unusable {
            #expect(e.description.hasPrefix("state file /proc/self/mem cannot be read (read /proc/self/mem: Input/output error)"), "\(e)")
            #expect(e.description.contains("check the disk"), "\(e)")
        }
        let denied = StateFile.unreadable("/var/lib/paird/state.json", SystemError("open /var/lib/paird/state.json", EACCES))
        #expect(denied == "state file /var/lib/paird/state.json cannot be read (open /var/lib/paird/state.json: Permission denied): "
                + "paird does not start without it, so as not to forget the wearables it holds: let the user paird read and write it "
                + "(sudo chown paird:paird /var/lib/paird/state.json; sudo chmod 600 /var/lib/paird/state.json)")
        // Root reads a file of mode 000: the real EACCES only for another user.
        if getuid() != 0 {
            let dir = try tempDir()
            let f = StateFile(path: dir + "/state.json")
            try f.save(doc)
            chmod(f.path, 0)
            #expect(throws: StateFile.Unusable.self) { try f.load() }
            chmod(f.path, 0o600)
            #expect(try FileManager.default.contentsOfDirectory(atPath: dir) == ["state.json"], "left as it was")
        }
        // Missing is a first start, corrupt is quarantined: neither is unusable.
        let dir = try tempDir()
        guard case .missing = try StateFile(path: dir + "/state.json").load() else { Issue.record("not missing"); return }
    }

    @Test("an unwritable directory is an error, not a crash, and leaves the old file intact")
    func unwritable() throws {
        let dir = try tempDir()
        let f = StateFile(path: dir + "/state.json")
        try f.save(doc)
        let missingDir = StateFile(path: dir + "/nope/state.json")
        #expect(throws: SystemError.self) { try missingDir.save(doc) }
        guard case .loaded(let back) = try f.load() else { Issue.record(); return }
        #expect(back == doc)
    }
}
