import Foundation
import Testing
import PairingCore
@testable import Paird
import DBus

/// paird's own check of a D-Bus caller (issue 43 items 2 and 3).
@Suite("caller check")
struct CallerCheckTests {
    @Test("root, paird's own uid and the privileged group pass; anyone else does not")
    func decision() {
        let own: UInt32 = 990, bt: UInt32 = 112
        #expect(CallerCheck.isPrivileged(uid: 0, groups: [], ownUID: own, privilegedGID: bt))
        #expect(CallerCheck.isPrivileged(uid: own, groups: [], ownUID: own, privilegedGID: bt))
        #expect(CallerCheck.isPrivileged(uid: 1000, groups: [1000, bt], ownUID: own, privilegedGID: bt))
        #expect(!CallerCheck.isPrivileged(uid: 1000, groups: [1000, 27], ownUID: own, privilegedGID: bt))
        #expect(!CallerCheck.isPrivileged(uid: 65534, groups: [65534], ownUID: own, privilegedGID: nil), "no such group: nobody is in it")
    }

    @Test("GetConnectionCredentials: UnixUserID needed, UnixGroupIDs taken when given, absent otherwise")
    func credentials() {
        let full: [String: DBusValue] = ["UnixUserID": .variant(.uint32(1000)), "ProcessID": .variant(.uint32(42)),
                                         "UnixGroupIDs": .variant(.array(elementSignature: "u", [.uint32(100), .uint32(112)]))]
        let c = CallerCheck.credentials(full)
        #expect(c?.uid == 1000)
        #expect(c?.groups == [100, 112])
        let noGroups = CallerCheck.credentials(["UnixUserID": .variant(.uint32(7))])
        #expect(noGroups?.uid == 7)
        #expect(noGroups?.groups == nil, "absent: paird falls back to getgrouplist")
        #expect(CallerCheck.credentials(["ProcessID": .variant(.uint32(42))]) == nil)
    }

    @Test("the refusal is AccessDenied and names what is needed")
    func refusal() {
        let e = CallerCheck.refusal("unpairing", group: "bluetooth")
        #expect(e.name == "org.freedesktop.DBus.Error.AccessDenied")
        #expect(e.message.contains("unpairing") && e.message.contains("bluetooth"))
    }

    @Test("states only: no battery, last data or health check; the states stay")
    func statesOnly() throws {
        let d = StatusDocument.Device(address: "AA:BB:CC:DD:EE:FF", name: "strap", state: "connected", wanted: "connected",
                                      since: .init(timeIntervalSince1970: 0), lastDisconnect: nil, reconnectAttempts: 0,
                                      battery: 80, services: [], lastData: .init(timeIntervalSince1970: 5),
                                      health: .init(check: "data", characteristic: nil, deadline: .init(timeIntervalSince1970: 9)))
        let doc = StatusDocument(daemon: .init(running: true), adapter: nil, pairing: nil, devices: [d])
        let s = doc.statesOnly()
        #expect(s.devices[0].battery == nil && s.devices[0].lastData == nil && s.devices[0].health == nil)
        #expect(s.devices[0].state == "connected")
    }
}
