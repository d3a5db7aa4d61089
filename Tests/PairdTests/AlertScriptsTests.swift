import EventLoop
import Foundation
import Testing
@testable import Paird

/// `AlertScripts` (the dispatcher) with real processes on a real `EventLoop`: what the scripts are
/// given, the order and one-at-a-time, the time limit, and the files it must not run.
@Suite("Alert scripts: /etc/paird/dispatcher.d", .serialized)
struct AlertScriptsTests {
    /// A fresh directory for the scripts, and one for what they write.
    final class Fixture {
        let dir: String
        let out: String
        let loop: EventLoop
        var outcomes: [AlertScripts.Outcome] = []
        var skipped: [(String, String, Bool)] = []
        var refused: [String] = []
        var output: [(String, String)] = []

        init() throws {
            let base = NSTemporaryDirectory() + "paird-dispatcher-\(getpid())-\(UUID().uuidString.prefix(8))"
            dir = base + "/dispatcher.d"
            out = base + "/out"
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)
            loop = try EventLoop()
        }
        deinit {
            loop.shutdown()
            try? FileManager.default.removeItem(atPath: (dir as NSString).deletingLastPathComponent)
        }

        func script(_ name: String, _ body: String, mode: Int = 0o755) throws {
            let path = dir + "/" + name
            try ("#!/bin/sh\n" + body + "\n").write(toFile: path, atomically: false, encoding: .utf8)
            chmod(path, mode_t(mode))
        }

        /// A limit far above what a script here takes, loaded host or not: only the tests about
        /// the limit set their own.
        func scripts(timeout: Duration = .seconds(60)) -> AlertScripts {
            let d = AlertScripts(directory: dir, timeout: timeout, loop: loop)
            d.onOutcome = { [unowned self] in outcomes.append($0) }
            d.onSkip = { [unowned self] in skipped.append(($0, $1, $2)) }
            d.onRefused = { [unowned self] in refused.append($0) }
            d.onOutput = { [unowned self] in output.append(($0, $1)) }
            return d
        }

        /// Runs the loop until the scripts are idle again (at most `limit`).
        func runUntilIdle(_ d: AlertScripts, limit: Duration = .seconds(90)) throws {
            var timedOut = false
            let guardTimer = loop.schedule(after: limit) { timedOut = true }
            try loop.run(until: { d.isIdle || timedOut })
            guardTimer.cancel()
            #expect(!timedOut, "the scripts did not finish within \(limit)")
        }

        func read(_ name: String) -> String? { try? String(contentsOfFile: out + "/" + name, encoding: .utf8) }
    }

    @Test("each script gets the event and the wearable in its environment and argv, and nothing of paird's")
    func environment() throws {
        let f = try Fixture()
        // Written aside and renamed: the file is there complete or not at all. It failed once in a
        // clean clone under load with `env` empty: the fixture's 5 s limit killed the script
        // between the shell's `> env` (which creates the file) and sort's output (written at its
        // end). The limit is not what this test is about: 60 s, and the outcome checked first.
        try f.script("50-env", "env | sort > \(f.out)/env.tmp && mv \(f.out)/env.tmp \(f.out)/env; echo \"$1 $2\" > \(f.out)/argv.tmp && mv \(f.out)/argv.tmp \(f.out)/argv; exit 3")
        let d = f.scripts(timeout: .seconds(60))
        setenv("PAIRD_TEST_LEAK", "1", 1)
        d.run(event: "batteryLow", device: "00:AA:01:01:00:01",
                   environment: ["PAIRD_EVENT": "batteryLow", "PAIRD_DEVICE": "00:AA:01:01:00:01", "PAIRD_NAME": "Watch", "PAIRD_BATTERY": "14"])
        try f.runUntilIdle(d, limit: .seconds(90))
        #expect(f.outcomes.map(\.result) == [.exited(3)], "the script ran to its end")
        try Self.wait(f, "the script's env and argv files", limit: .seconds(30)) { f.read("env") != nil && f.read("argv") != nil }
        let env = f.read("env") ?? ""
        for line in ["PAIRD_EVENT=batteryLow", "PAIRD_DEVICE=00:AA:01:01:00:01", "PAIRD_NAME=Watch", "PAIRD_BATTERY=14", "PATH="] {
            #expect(env.contains(line), "\(line) in \(env)")
        }
        #expect(!env.contains("PAIRD_TEST_LEAK"), "paird's own environment is not passed")
        #expect(f.read("argv") == "batteryLow 00:AA:01:01:00:01\n")
        #expect(f.outcomes.first?.path == f.dir + "/50-env" && f.outcomes.first?.event == "batteryLow")
    }

    @Test("scripts run sorted by name, one at a time, and alerts one after another")
    func orderAndOneAtATime() throws {
        let f = try Fixture()
        // 20-b checks that 10-a had ended before it began.
        try f.script("20-b", "test -e \(f.out)/a-done-$PAIRD_EVENT && echo \"b $PAIRD_EVENT\" >> \(f.out)/log")
        try f.script("10-a", "echo \"a $PAIRD_EVENT\" >> \(f.out)/log; sleep 0.3; touch \(f.out)/a-done-$PAIRD_EVENT")
        let d = f.scripts()
        d.run(event: "one", environment: ["PAIRD_EVENT": "one"])
        d.run(event: "two", environment: ["PAIRD_EVENT": "two"])
        try f.runUntilIdle(d)
        #expect(f.read("log") == "a one\nb one\na two\nb two\n")
        #expect(f.outcomes.map(\.result) == [.exited(0), .exited(0), .exited(0), .exited(0)])
    }

    @Test("a script that hangs is killed (its process group) at the limit, the next one runs, and the loop stays responsive")
    func hangingScriptKilled() throws {
        let f = try Fixture()
        try f.script("10-hang", "echo $$ > \(f.out)/pgid; sleep 60 & sleep 60; echo never > \(f.out)/hang")
        try f.script("20-next", "echo ran > \(f.out)/next")
        let d = f.scripts(timeout: .seconds(1))
        // A timer every 100 ms while the script hangs: the loop runs them while the script is still
        // running (no outcome yet), so it is never blocked waiting for it. Counted by order, not by
        // lateness: the ticks due before the 1 s limit run before the limit's own timer, however
        // slow the host (a blocking wait would run none of them before the outcome). What this no
        // longer catches, and the old check (each tick less than 100 ms late) did on a quiet host:
        // a loop blocked for less than the limit, whose overdue ticks still run before the outcome.
        var ticks = 0
        var ticksWhileRunning = 0
        var ticking = true
        func tick(_ due: ContinuousClock.Instant) {
            f.loop.schedule(at: due) {
                ticks += 1
                if f.outcomes.isEmpty { ticksWhileRunning += 1 }
                if ticking { tick(due.advanced(by: .milliseconds(100))) }
            }
        }
        let started = f.loop.now()
        tick(started.advanced(by: .milliseconds(100)))
        d.run(event: "noData", environment: ["PAIRD_EVENT": "noData"])
        try f.runUntilIdle(d)
        ticking = false
        let took = started.duration(to: f.loop.now())
        // Figures, not checks: how long the hung script ran, and the whole dispatch.
        print("hangingScriptKilled: the hung script's outcome after \(f.outcomes.first?.duration ?? .zero) (limit 1 s), both scripts done after \(took)")
        #expect(f.outcomes.map(\.result) == [.killedAtLimit, .exited(0)])
        // Killed, not ended: it never reached the line after its foreground `sleep 60` (which
        // ends early only by a signal), yet its outcome came and the next script ran.
        #expect(f.read("next") == "ran\n" && f.read("hang") == nil)
        // Not before the limit: the ticks due in the limit's first half ran while it still ran.
        #expect(ticksWhileRunning >= 5, "the loop's timer fired \(ticksWhileRunning) of \(ticks) times while the script ran (\(took))")
        // The script's shell, and the background `sleep 60` of its group, are gone.
        if let pgid = f.read("pgid").flatMap({ Int32($0.trimmingCharacters(in: .whitespacesAndNewlines)) }) {
            #expect(kill(pgid, 0) == -1 && errno == ESRCH, "the script's shell (pid \(pgid)) is still there")
            var alive: [String] = []
            let end = ContinuousClock.now.advanced(by: .seconds(5))
            repeat {
                alive = Self.liveMembers(ofGroup: pgid)
                if alive.isEmpty { break }
                usleep(20_000)
            } while ContinuousClock.now < end
            #expect(alive.isEmpty, "process group \(pgid) still has live members: \(alive)")
        } else {
            Issue.record("the script did not write its pid")
        }
    }

    /// The processes of a group that are not zombies (an orphan killed with the group waits as a
    /// zombie for whoever reaps orphans here, which may be slow: it is dead all the same).
    static func liveMembers(ofGroup pgid: Int32) -> [String] {
        let pids = (try? FileManager.default.contentsOfDirectory(atPath: "/proc"))?.filter { Int32($0) != nil } ?? []
        return pids.compactMap { pid in
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                  let close = stat.lastIndex(of: ")") else { return nil }
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            guard fields.count > 2, Int32(fields[2]) == pgid, fields[0] != "Z" else { return nil }
            return "\(pid) \(fields[0])"
        }
    }

    @Test("not run: not executable, not a regular file, writable by group or others, not owned by root; backups and hidden files are passed over")
    func insecureAndNonExecutable() throws {
        let f = try Fixture()
        try f.script("10-plain", "touch \(f.out)/plain", mode: 0o644)
        try f.script("20-groupwritable", "touch \(f.out)/gw", mode: 0o775)
        try f.script("30-otherwritable", "touch \(f.out)/ow", mode: 0o757)
        try f.script("40-foreign", "touch \(f.out)/foreign")
        chown(f.dir + "/40-foreign", 65534, 65534)
        try f.script("50-good", "touch \(f.out)/good")
        try f.script("60-good~", "touch \(f.out)/backup")
        try f.script(".70-hidden", "touch \(f.out)/hidden")
        try f.script("80-good.dpkg-old", "touch \(f.out)/dpkg")
        try FileManager.default.createDirectory(atPath: f.dir + "/90-dir", withIntermediateDirectories: false)
        let d = AlertScripts(directory: f.dir, timeout: .seconds(5), loop: f.loop, allowedOwners: [0])
        d.onOutcome = { f.outcomes.append($0) }
        d.onSkip = { f.skipped.append(($0, $1, $2)) }
        d.run(event: "awayTooLong", environment: [:])
        try f.runUntilIdle(d)
        #expect(f.outcomes.map(\.path) == [f.dir + "/50-good"])
        #expect(f.read("good") != nil)
        for name in ["plain", "gw", "ow", "foreign", "backup", "hidden", "dpkg"] { #expect(f.read(name) == nil, "\(name) ran") }
        #expect(f.skipped.map { "\(($0.0 as NSString).lastPathComponent) \($0.2 ? "warning" : "debug")" } == [
            "10-plain debug", "20-groupwritable warning", "30-otherwritable warning", "40-foreign warning", "90-dir debug",
        ])
    }

    @Test("no directory: nothing runs, nothing is said")
    func noDirectory() throws {
        let f = try Fixture()
        let d = AlertScripts(directory: f.dir + "/absent", timeout: .seconds(1), loop: f.loop)
        var problems: [String] = []
        d.onProblem = { problems.append($0) }
        d.run(event: "noData", environment: [:])
        #expect(d.isIdle && problems.isEmpty)
    }

    @Test("a symbolic link in the directory is not run, even to a good script; said as a warning")
    func symlinkRefused() throws {
        let f = try Fixture()
        let real = (f.dir as NSString).deletingLastPathComponent + "/real"
        try "#!/bin/sh\ntouch \(f.out)/followed\n".write(toFile: real, atomically: false, encoding: .utf8)
        chmod(real, 0o755)
        #expect(symlink(real, f.dir + "/50-link") == 0)
        try f.script("60-good", "touch \(f.out)/good")
        let d = f.scripts()
        d.run(event: "noData", environment: [:])
        try f.runUntilIdle(d)
        #expect(f.read("followed") == nil, "the symlink's target ran")
        #expect(f.outcomes.map(\.path) == [f.dir + "/60-good"])
        #expect(f.skipped.map { "\(($0.0 as NSString).lastPathComponent) \($0.2 ? "warning" : "debug")" } == ["50-link warning"])
        #expect(f.skipped.first?.1.contains("symbolic link") == true, "\(f.skipped)")
    }

    @Test("a directory writable by group, or not owned by root: no script runs, one error per alert")
    func unsafeDirectoryRefused() throws {
        let f = try Fixture()
        try f.script("50-good", "touch \(f.out)/good")
        chmod(f.dir, 0o775)
        let d = f.scripts()
        d.run(event: "noData", environment: [:])
        try f.runUntilIdle(d)
        #expect(f.read("good") == nil && f.outcomes.isEmpty, "a script of a group-writable directory ran")
        #expect(f.refused.count == 1 && f.refused.first?.contains("writable by group or others") == true, "\(f.refused)")

        chmod(f.dir, 0o755)
        chown(f.dir, 65534, 65534)
        let foreign = AlertScripts(directory: f.dir, timeout: .seconds(60), loop: f.loop, directoryOwners: [0])
        foreign.onOutcome = { f.outcomes.append($0) }
        foreign.onRefused = { f.refused.append($0) }
        foreign.run(event: "noData", environment: [:])
        try f.runUntilIdle(foreign)
        #expect(f.read("good") == nil && f.outcomes.isEmpty, "a script of a directory owned by uid 65534 ran")
        #expect(f.refused.count == 2 && f.refused.last?.contains("not owned by root") == true, "\(f.refused)")
    }

    @Test("a script that floods its output: at most maxOutputLines lines logged, the rest counted; the loop keeps running")
    func floodCapped() throws {
        let f = try Fixture()
        try f.script("50-flood", "yes flood | head -n 100000; echo done > \(f.out)/flooded")
        let d = f.scripts(timeout: .seconds(60))
        var ticks = 0
        var ticking = true
        func tick() { f.loop.schedule(after: .milliseconds(5)) { ticks += 1; if ticking { tick() } } }
        tick()
        d.run(event: "noData", environment: [:])
        try f.runUntilIdle(d, limit: .seconds(90))
        ticking = false
        #expect(f.read("flooded") == "done\n")
        #expect(f.outcomes.map(\.result) == [.exited(0)])
        #expect(f.output.count == AlertScripts.maxOutputLines, "\(f.output.count) lines logged")
        #expect(f.output.allSatisfy { $0.1 == "flood" && $0.0 == f.dir + "/50-flood" })
        #expect(f.outcomes.first?.linesNotLogged == 100_000 - AlertScripts.maxOutputLines)
        #expect(ticks > 0, "the loop ran no timer while the script flooded")
    }

    @Test("a line `<0>…` or with escapes from a script is a line of its own output, made safe: never a priority prefix of paird's")
    func priorityPrefixIsText() throws {
        let f = try Fixture()
        try f.script("50-name", #"printf 'Watch\n<0>emergency\n\033]0;title\007x\n'"#)
        let d = f.scripts(timeout: .seconds(60))
        d.run(event: "noData", environment: [:])
        try f.runUntilIdle(d)
        #expect(f.output.map(\.1) == ["Watch", "<0>emergency", "\\x1b]0;title\\x07x"], "\(f.output)")
        #expect(f.output.allSatisfy { !$0.1.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7f } })
        #expect(Log.scriptIdentifier(f.dir + "/50-name") == "paird-dispatch-50-name")
        #expect(Log.scriptIdentifier("/x/a b\n<0>") == "paird-dispatch-a_b__0_")
    }

    /// Waits, running the loop, until `condition` holds (at most `limit`).
    static func wait(_ f: Fixture, _ what: String, limit: Duration = .seconds(20), until condition: @escaping () -> Bool) throws {
        var timedOut = false
        let guardTimer = f.loop.schedule(after: limit) { timedOut = true }
        try f.loop.run(until: { condition() || timedOut })
        guardTimer.cancel()
        #expect(!timedOut, "\(what) within \(limit)")
    }

    /// Whether `pid` is gone: no process, not even a zombie.
    static func gone(_ pid: pid_t) -> Bool { kill(pid, 0) == -1 && errno == ESRCH }

    /// A script that starts a child in a session of its own (`setsid`, out of the script's process
    /// group), waits until that child wrote its pid to `pidFile`, then runs `then`.
    static func leavesSetsidChild(_ f: Fixture, pidFile name: String, then last: String) -> String {
        """
        setsid sh -c 'echo $$ > \(f.out)/\(name).tmp; mv \(f.out)/\(name).tmp \(f.out)/\(name); exec sleep 60' &
        while [ ! -e \(f.out)/\(name) ]; do sleep 0.05; done
        \(last)
        """
    }

    @Test("a child that calls setsid is killed at the limit too, and reaped: gone by its pid")
    func setsidKilledAtLimit() throws {
        let f = try Fixture()
        try f.script("50-escape", Self.leavesSetsidChild(f, pidFile: "escaped", then: "sleep 60"))
        // The limit only has to come after the child wrote its pid (a fork, sh and mv): 5 s,
        // loaded host or not.
        let d = f.scripts(timeout: .seconds(5))
        d.run(event: "noData", environment: [:])
        try f.runUntilIdle(d, limit: .seconds(60))
        #expect(f.outcomes.map(\.result) == [.killedAtLimit])
        guard let pid = f.read("escaped").flatMap({ pid_t($0.trimmingCharacters(in: .whitespacesAndNewlines)) }) else {
            Issue.record("the setsid child did not write its pid (the script was too slow for its 5 s limit?)")
            return
        }
        #expect(Self.gone(pid), "the setsid child (pid \(pid)) is still there (alive or a zombie)")
        if !Self.gone(pid) { kill(pid, SIGKILL) }
    }

    @Test("the sweep leaves alone a child of paird's process that is no script's (a test binary's other children, say)")
    func othersChildrenLeftAlone() throws {
        let f = try Fixture()
        let bystander = Process()
        bystander.executableURL = URL(fileURLWithPath: "/bin/sleep")
        bystander.arguments = ["60"]
        try bystander.run()
        defer { if bystander.isRunning { bystander.terminate() } }
        try f.script("50-leave", Self.leavesSetsidChild(f, pidFile: "left", then: "exit 0"))
        let d = f.scripts(timeout: .seconds(60))
        d.run(event: "noData", environment: [:])
        try f.runUntilIdle(d, limit: .seconds(60))
        #expect(f.outcomes.first?.leftoversKilled == 1, "the script's own leftover killed")
        #expect(bystander.isRunning && kill(bystander.processIdentifier, 0) == 0, "the bystander child still runs")
    }

    @Test("a script that exits leaving a setsid child behind: the child is killed and reaped at the script's end")
    func setsidLeftoverKilledAtEnd() throws {
        let f = try Fixture()
        try f.script("50-leave", Self.leavesSetsidChild(f, pidFile: "left", then: "exit 0"))
        let d = f.scripts(timeout: .seconds(60))
        d.run(event: "noData", environment: [:])
        try f.runUntilIdle(d, limit: .seconds(60))
        #expect(f.outcomes.map(\.result) == [.exited(0)])
        #expect(f.outcomes.first?.leftoversKilled == 1)
        guard let pid = f.read("left").flatMap({ pid_t($0.trimmingCharacters(in: .whitespacesAndNewlines)) }) else {
            Issue.record("the setsid child did not write its pid")
            return
        }
        #expect(Self.gone(pid), "the setsid child (pid \(pid)) is still there (alive or a zombie)")
        if !Self.gone(pid) { kill(pid, SIGKILL) }
    }

    @Test("a script swapped after the check (renamed over, or a symlink put in its place) does not run: the checked file does")
    func swappedAfterCheckRunsTheChecked() throws {
        let f = try Fixture()
        let evil = (f.dir as NSString).deletingLastPathComponent + "/evil"
        try "#!/bin/sh\ntouch \(f.out)/evil\n".write(toFile: evil, atomically: false, encoding: .utf8)
        chmod(evil, 0o755)
        // 10-swap runs after the directory was listed and checked, before 20-b and 30-c start.
        try f.script("10-swap", """
            printf '#!/bin/sh\\ntouch \(f.out)/replaced\\n' > \(f.dir)/.new; chmod 755 \(f.dir)/.new; mv -f \(f.dir)/.new \(f.dir)/20-b
            ln -s \(evil) \(f.dir)/.link; mv -f \(f.dir)/.link \(f.dir)/30-c
            """)
        try f.script("20-b", "touch \(f.out)/b")
        try f.script("30-c", "touch \(f.out)/c")
        let d = f.scripts()
        d.run(event: "noData", environment: [:])
        try f.runUntilIdle(d)
        #expect(f.outcomes.map(\.result) == [.exited(0), .exited(0), .exited(0)])
        #expect(f.read("b") != nil && f.read("c") != nil, "the files checked ran")
        #expect(f.read("replaced") == nil && f.read("evil") == nil, "what was put in their place after the check ran")
    }

    @Test("an endless flood: paird closes the pipe after maxDiscardedBytes, the writer gets SIGPIPE, the script goes on")
    func endlessFloodCut() throws {
        let f = try Fixture()
        try f.script("50-endless", "yes flood; echo \"$?\" > \(f.out)/after")
        let d = f.scripts()
        d.run(event: "noData", environment: [:])
        try f.runUntilIdle(d)
        #expect(f.outcomes.map(\.result) == [.exited(0)], "ended by itself, not at the limit")
        #expect(f.read("after") == "141\n", "yes ended by SIGPIPE (128 + 13): \(f.read("after") ?? "nothing")")
        #expect(f.output.count == AlertScripts.maxOutputLines)
        #expect((f.outcomes.first?.linesNotLogged ?? 0) > 0)
    }
}
