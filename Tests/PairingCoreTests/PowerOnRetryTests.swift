import PairingCore
import Testing

/// A power cycle's Powered=true, tried again by the machine (issue 44, "the driver only drives"):
/// three tries a second apart, then the adapter is said to stay off; an rfkill block is never
/// tried against.
@Suite("A power cycle's Powered=true, tried again")
struct PowerOnRetryTests {
    static let adapterB = DeviceAddress("00:01:02:03:04:0B")!
    let busy = BlueZFailure(errorName: "org.bluez.Error.Busy", message: "")
    let blocked = BlueZFailure(errorName: "org.bluez.Error.Blocked", message: "Blocked through rfkill")

    func retry(_ out: [Action]) -> Countdown? {
        out.compactMap { if case .arm(let c) = $0, c.id.purpose == .powerOnRetry { c } else { nil } }.first
    }

    @Test("three tries a second apart (the adapter in use), then the adapter stays off, said so; nothing more armed")
    func threeTries() throws {
        var h = Harness.connected()
        h.advance(.seconds(100))
        let first = h.send(.powerOnFailed(adapter: nil, attempt: 1, busy))
        let c1 = try #require(retry(first))
        #expect(first == [.powerOnReport(.retrying(after: .seconds(1), busy)), .arm(c1)])
        #expect(c1.id.owner == .adapterPower(nil))
        #expect(c1.deadline == h.now + .seconds(1))
        #expect(h.fireNext() == [.powerOn(adapter: nil, attempt: 2)])
        let second = h.send(.powerOnFailed(adapter: nil, attempt: 2, busy))
        let c2 = try #require(retry(second))
        #expect(second == [.powerOnReport(.retrying(after: .seconds(1), busy)), .arm(c2)])
        #expect(h.fireNext() == [.powerOn(adapter: nil, attempt: 3)])
        #expect(h.send(.powerOnFailed(adapter: nil, attempt: 3, busy)) == [.powerOnReport(.gaveUp(tries: 3, busy))])
        #expect(!h.armed.keys.contains { $0.purpose == .powerOnRetry })
        #expect(h.stateName(Harness.watch) == "connected", "the wearables' states are not the retry's business")
    }

    @Test("an adapter named by address (a wedged one of several) keeps its address through the retry")
    func namedAdapter() throws {
        var h = Harness.connected()
        let c = try #require(retry(h.send(.powerOnFailed(adapter: Self.adapterB, attempt: 1, busy))))
        #expect(c.id.owner == .adapterPower(Self.adapterB))
        #expect(h.fireNext() == [.powerOn(adapter: Self.adapterB, attempt: 2)])
    }

    @Test("rfkill blocks the adapter: said, never tried again")
    func rfkill() {
        var h = Harness.connected()
        #expect(blocked.rfkillBlocked)
        #expect(h.send(.powerOnFailed(adapter: nil, attempt: 1, blocked)) == [.powerOnReport(.rfkillBlocked(blocked))])
        #expect(h.armed.keys.allSatisfy { $0.purpose != .powerOnRetry })
    }

    @Test("a retry countdown fired twice (a cancel and a fire crossing) powers on once")
    func staleRetry() throws {
        var h = Harness.connected()
        let c = try #require(retry(h.send(.powerOnFailed(adapter: nil, attempt: 1, busy))))
        #expect(h.send(.countdownFired(c.id)) == [.powerOn(adapter: nil, attempt: 2)])
        #expect(h.send(.countdownFired(c.id)) == [])
    }
}
