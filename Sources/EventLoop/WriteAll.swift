#if canImport(Glibc)
import Glibc
#endif

/// Writes all of `text` to `fd`, unbuffered: retries short writes and EINTR, and gives up
/// quietly on any other failure (a closed pipe, a full disk): for log and output lines, where
/// the writer has nowhere better to report it.
public func writeAll(_ fd: Int32, _ text: String) {
    var bytes = Array(text.utf8)[...]
    while !bytes.isEmpty {
        let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        if n < 0 && errno == EINTR { continue }
        if n <= 0 { return }
        bytes = bytes.dropFirst(n)
    }
}
