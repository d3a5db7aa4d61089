import Testing
import BlueZ

@Suite("Registration retry backoff")
struct RetryBackoffTests {
    @Test("a failed registration is retried after 5, 10, 20 … s, never more than 300 s apart")
    func doublesUpToTheCap() {
        let delays = (0..<10).map { BlueZClient.backoff(base: .seconds(5), max: .seconds(300), failures: $0) }
        #expect(delays == [5, 10, 20, 40, 80, 160, 300, 300, 300, 300].map { Duration.seconds($0) })
        #expect(BlueZClient.backoff(base: .seconds(5), max: .seconds(300), failures: 10_000) == .seconds(300))
        #expect(BlueZClient.backoff(base: .seconds(5), max: .seconds(300), failures: -1) == .seconds(5))
    }
}
