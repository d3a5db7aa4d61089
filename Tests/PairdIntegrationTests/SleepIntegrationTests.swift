#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import PairingCore
import Testing

/// The real paird against python-dbusmock's logind and bluez5 (MockedHost.startLogind says what
/// the mock does not reproduce): a delay inhibitor held, PrepareForSleep followed.
@Suite("The host sleeps (logind mock)", .serialized)
struct SleepIntegrationTests {
    let watch = MockedHost.watch

    @Test("a delay inhibitor held; before the sleep the link let go (Disconnect) and the inhibitor released; after it, taken again; status and journal say so")
    func sleepAndResume() throws {
        let host = try MockedHost()
        try host.startLogind()
        try host.startPaird()
        try host.pairWatchOK()
        try waitFor("paird's delay inhibitor", deadline: 10) { host.inhibitors() == ["sleep paird delay"] }

        let disconnects = host.calls("Disconnect")
        try host.prepareForSleep(true)
        try waitFor("Disconnect of the watch", deadline: 10) { host.calls("Disconnect") > disconnects }
        try waitFor("the inhibitor released", deadline: 10) { host.inhibitors().isEmpty }
        var doc = try host.status()
        #expect(doc.host?.asleep == true)
        #expect(doc.devices.first?.lastDisconnect?.reason == "host-asleep")
        #expect(doc.devices.first?.state == "waitingForDevice")
        #expect(host.log().contains("the host is going to sleep: letting 1 wearable link(s) go"))

        try host.prepareForSleep(false)
        try waitFor("the inhibitor taken again", deadline: 10) { host.inhibitors() == ["sleep paird delay"] }
        doc = try host.status()
        #expect(doc.host?.asleep == false)
        #expect(doc.host?.lastSleep?.resumedAt != nil)
        #expect(doc.host?.lastSleep?.back.map(\.address) == [watch])
        #expect(host.log().contains("the host woke up"))
        let text = host.pairctl("status")
        #expect(text.out.contains("host: slept"), "\(text.out)")
    }

    @Test("nothing back by its deadline after the resume: the adapter power-cycled once (Powered off, then on), said in the journal; the adapter back")
    func powerCycleAfterResume() throws {
        let host = try MockedHost()
        try host.startLogind()
        try "[Sleep]\nResumeDeadlineFloor = 1\nResumeDeadlineCeiling = 2\n"
            .write(toFile: host.dir.appendingPathComponent("paird.conf").path, atomically: true, encoding: .utf8)
        try host.startPaird()
        try host.pairWatchOK()
        // From now on nobody answers the watch's Connect() (BlueZ's answer for an LE connection
        // the controller gave up on).
        try host.must(host.python("""
            b.get_object('org.bluez', '\(host.devicePath(watch))').AddMethod('org.bluez.Device1', 'Connect', '', '',
                'raise dbus.exceptions.DBusException("le-connection-abort-by-local", name="org.bluez.Error.Failed")',
                dbus_interface='org.freedesktop.DBus.Mock')
            """), "override Connect")
        try host.prepareForSleep(true)
        try waitFor("the watch let go", deadline: 10) { host.state() == "waitingForDevice" }
        try host.prepareForSleep(false)
        try waitFor("the power cycle's end", deadline: 20) { host.log().contains("power cycle: the adapter is powered again") }
        let connects = host.calls("Connect")
        #expect(host.log().contains("after the resume: the auto-connect registered again"), "the first step, in the journal")
        #expect(host.log().contains("power-cycling the adapter (1/2"), "the first power cycle of the cap's two: \(host.log())")
        #expect(host.log().contains("adapter unavailable"), "paird saw the adapter go with Powered=false")
        let powered = host.python("print(b.get_object('org.bluez', '/org/bluez/hci0').Get('org.bluez.Adapter1', 'Powered', dbus_interface='org.freedesktop.DBus.Properties'))")
        #expect(powered.out.trimmingCharacters(in: .whitespacesAndNewlines) == "1", "the adapter is powered again: \(powered.out) \(powered.err)")
        try waitFor("paird back on the adapter", deadline: 10) { (try? host.status())?.adapter?.powered == true }
        // Once: the window runs on to what follows the adapter's return, paird's next Connect() of
        // the watch (refused, as every one since the resume): a second cycle for this resume (its
        // deadline judged again, or the adapter's return taken for another resume) comes before.
        try waitFor("paird's Connect() of the watch after the power cycle", deadline: 30) { host.calls("Connect") > connects }
        let log = host.log()
        #expect(log.components(separatedBy: "power-cycling the adapter (").count == 2, "one power cycle asked for: \(log)")
        #expect(log.components(separatedBy: "power cycle: the adapter is powered again").count == 2, "one power cycle made: \(log)")
        #expect(try host.status().devices.first?.wanted == "connected", "still wanted: waited for, not given up")
    }

    @Test("a signal of the same name from another sender is not followed")
    func spoofed() throws {
        let host = try MockedHost()
        try host.startLogind()
        try host.startPaird()
        try host.pairWatchOK()
        try waitFor("paird's delay inhibitor", deadline: 10) { host.inhibitors() == ["sleep paird delay"] }
        // Anyone may emit a signal with logind's interface and path from their own connection.
        let r = host.python("""
            m = dbus.lowlevel.SignalMessage('/org/freedesktop/login1', 'org.freedesktop.login1.Manager', 'PrepareForSleep')
            m.append(True, signature='b')
            b.send_message(m); b.flush()
            """)
        try host.must(r, "spoofed signal")
        // paird answers a status call after the signal was delivered: it was not taken for logind's.
        let doc = try host.status()
        #expect(doc.host?.asleep == false)
        #expect(doc.devices.first?.state == "connected")
        #expect(host.inhibitors() == ["sleep paird delay"])
    }
}
