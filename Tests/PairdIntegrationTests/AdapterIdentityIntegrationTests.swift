#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import PairingCore
import Testing

/// paird knows its adapter by its address (issue 32, part 2): the real paird against
/// python-dbusmock's bluez5 (MockedHost says what the mock does not reproduce). The mock derives
/// an adapter's address from its name (hci0 → 00:01:02:03:04:05); a dongle that comes back under
/// another index with its own address is played by adding hci2 and giving it hci0's address.
@Suite("The adapter, known by its address", .serialized)
struct AdapterIdentityIntegrationTests {
    let watch = MockedHost.watch
    let hci0Address = "00:01:02:03:04:05"

    func remembered(_ host: MockedHost) -> [PersistedAdapter] {
        (try? PersistedState.decode(Data(contentsOf: URL(fileURLWithPath: host.statePath))))?.adapters ?? []
    }

    /// The watch paired and connected on hci0; then hci0 unplugged (its objects gone, as when
    /// bluetoothd drops a removed controller).
    func pairedThenUnplugged() throws -> MockedHost {
        let host = try MockedHost()
        try host.startPaird()
        try host.pairWatchOK()
        try waitFor("the watch connected", deadline: 10) { host.state() == "connected" }
        try waitFor("the adapter's address in the state file", deadline: 10) {
            remembered(host).map { "\($0.configured)=\($0.address) \($0.name)" } == ["=\(hci0Address) hci0"]
        }
        try host.must(host.python("b.get_object('org.bluez', '/').RemoveAdapterWithDevices('hci0', dbus_interface='org.bluez.Mock')"), "unplug hci0")
        try waitFor("paird seeing the adapter go", deadline: 10) { host.state() == "adapterUnavailable" }
        return host
    }

    @Test("the dongle back under another index with its address: paird takes it and the watch comes back without a command; the state file follows its name")
    func renumbered() throws {
        let host = try pairedThenUnplugged()
        let dev = "/org/bluez/hci2/dev_" + watch.replacingOccurrences(of: ":", with: "_")
        // bluetoothd loads the bond from /var/lib/bluetooth/<the adapter's address>: the device
        // is there, paired, before paird could pick the adapter (its address is set last).
        try host.must(host.python("""
            m = b.get_object('org.bluez', '/')
            m.AddAdapter('hci2', 'host', dbus_interface='org.bluez.Mock')
            m.AddDevice('hci2', '\(watch)', 'Watch', dbus_interface='org.bluez.Mock')
            b.get_object('org.bluez', '\(dev)').UpdateProperties('org.bluez.Device1', {'Paired': True, 'Trusted': True}, dbus_interface='org.freedesktop.DBus.Mock')
            b.get_object('org.bluez', '/org/bluez/hci2').UpdateProperties('org.bluez.Adapter1', {'Address': '\(hci0Address)'}, dbus_interface='org.freedesktop.DBus.Mock')
            """), "plug it back as hci2")
        try waitFor("paird on hci2", deadline: 15) { (try? host.status())?.adapter?.name == "hci2" }
        try waitFor("paird's Connect() to the watch on hci2", deadline: 20) {
            Int(host.python("print(len(b.get_object('org.bluez', '\(dev)').GetMethodCalls('Connect', dbus_interface='org.freedesktop.DBus.Mock')))")
                .out.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0 > 0
        }
        try host.must(host.python("b.get_object('org.bluez', '\(dev)').UpdateProperties('org.bluez.Device1', {'ServicesResolved': True}, dbus_interface='org.freedesktop.DBus.Mock')"))
        try waitFor("the watch connected again", deadline: 15) { host.state() == "connected" }
        try waitFor("the state file naming hci2", deadline: 10) {
            remembered(host).map { "\($0.configured)=\($0.address) \($0.name)" } == ["=\(hci0Address) hci2"]
        }
    }

    @Test("another adapter where ours was (another address, without the bonds): not used; the watch waits, never needs re-pairing; paird says why")
    func anotherAdapter() throws {
        let host = try pairedThenUnplugged()
        try host.must(host.python("b.get_object('org.bluez', '/').AddAdapter('hci1', 'host', dbus_interface='org.bluez.Mock')"), "plug in another dongle")
        try waitFor("paird saying why it does not use hci1", deadline: 10) {
            host.log().contains("waiting for adapter \(hci0Address): /org/bluez/hci1 is another adapter (01:02:03:04:05:06)")
        }
        let doc = try host.status()
        #expect(doc.adapter?.name != "hci1", "\(String(describing: doc.adapter))")
        #expect(host.state() == "adapterUnavailable")
        #expect(doc.devices.first?.wanted == "connected")
        #expect(doc.adapter?.address == hci0Address && doc.adapter?.present == false, "status names the adapter it waits for: \(String(describing: doc.adapter))")
    }

    @Test("after a restart the remembered address is used: another adapter that sorts first is not taken")
    func restart() throws {
        let host = try MockedHost()
        try host.startPaird()
        try host.pairWatchOK()
        try waitFor("the adapter's address in the state file", deadline: 10) { !remembered(host).isEmpty }
        try host.stopPaird()
        // hci0 goes; another dongle appears as hci1; ours comes back as hci3.
        try host.must(host.python("""
            m = b.get_object('org.bluez', '/')
            m.RemoveAdapterWithDevices('hci0', dbus_interface='org.bluez.Mock')
            m.AddAdapter('hci1', 'host', dbus_interface='org.bluez.Mock')
            m.AddAdapter('hci3', 'host', dbus_interface='org.bluez.Mock')
            b.get_object('org.bluez', '/org/bluez/hci3').UpdateProperties('org.bluez.Adapter1', {'Address': '\(hci0Address)'}, dbus_interface='org.freedesktop.DBus.Mock')
            m.AddDevice('hci3', '\(watch)', 'Watch', dbus_interface='org.bluez.Mock')
            b.get_object('org.bluez', '/org/bluez/hci3/dev_\(watch.replacingOccurrences(of: ":", with: "_"))').UpdateProperties('org.bluez.Device1', {'Paired': True}, dbus_interface='org.freedesktop.DBus.Mock')
            """), "renumber")
        try host.startPaird()
        try waitFor("paird on hci3", deadline: 15) { (try? host.status())?.adapter?.name == "hci3" }
        #expect(host.log().contains("adapter: \(hci0Address) (hci0 when last seen), as remembered"))
        // Status names the adapter once it is selected, before paird has reconciled the watch
        // with it: wait for that verdict, then judge it.
        try waitFor("the watch reconciled on hci3", deadline: 15) { ![nil, "restoring", "adapterUnavailable"].contains(host.state()) }
        #expect(host.state() != "needsRepair", "the bond is on hci3: \(host.state() ?? "nil")")
    }
}
