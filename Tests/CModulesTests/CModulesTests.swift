import Testing
import CDBus
import CSystemd
#if canImport(Glibc)
import Glibc
#endif

/// Proves the two system-library targets link and answer, without a bus or systemd.
/// Serialized: two tests set and unset NOTIFY_SOCKET, which the whole process shares (run side by
/// side they raced: the no-op test saw the other's socket, -2, in a run after the metrics merge).
@Suite(.serialized) struct CModulesTests {
    @Test func libdbusLinksAndReportsItsVersion() {
        let version = CDBus_linked_version()
        #expect(version >= 1_12_00, "libdbus \(version) is older than Debian 12's 1.14")
    }

    @Test func sdNotifyIsANoOpWithoutNotifySocket() {
        unsetenv("NOTIFY_SOCKET")
        // sd_notify returns 0 when NOTIFY_SOCKET is unset (sd_notify(3)), <0 on error, >0 when sent.
        #expect(sd_notify(0, "READY=1") == 0)
    }

    @Test func sdNotifyReportsAMissingSocketAsAnError() {
        setenv("NOTIFY_SOCKET", "/nonexistent/paird-test-notify", 1)
        defer { unsetenv("NOTIFY_SOCKET") }
        #expect(sd_notify(0, "READY=1") < 0)
    }
}
