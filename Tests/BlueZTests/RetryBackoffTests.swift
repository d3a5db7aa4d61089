import Testing
import BlueZ
import PairingCore

@Suite("Registration retry backoff")
struct RetryBackoffTests {
    @Test("a failed registration is retried after 5, 10, 20 … s, never more than 300 s apart")
    func doublesUpToTheCap() {
        let backoff = BlueZClient.registrationBackoff(base: .seconds(5), max: .seconds(300))
        let delays = (1...10).map { backoff.delay(attempt: $0, unit: 0.99) }
        #expect(delays == [5, 10, 20, 40, 80, 160, 300, 300, 300, 300].map { Duration.seconds($0) })
        #expect(backoff.delay(attempt: 10_000, unit: 0.5) == .seconds(300))
        #expect(backoff.delay(attempt: 0, unit: 0) == .seconds(5))
    }
}
