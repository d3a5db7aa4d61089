import CBuildInfo
import PairingCore

/// What `--version` and paird's D-Bus `Version` say: the build's version, the same string as the
/// Debian package's (`0.1.0+git263.48e976b`: the code's version, git's commit count and commit,
/// `.dirty` for uncommitted changes; the Makefile passes it as PAIRD_VERSION). A build not given
/// one (plain `swift build`) names its commit all the same, asked of git by the BuildCommit
/// plugin (`buildCommit`) whenever git's HEAD, index or a source file changed:
/// `0.1.0+g48e976b[.dirty]`; outside a git checkout, the code's own version (`PairdAPI.version`).
public enum BuildInfo {
    public static let version: String = {
        let built = String(cString: paird_build_version())
        if !built.isEmpty { return built }
        return buildCommit.isEmpty ? PairdAPI.version : "\(PairdAPI.version)+\(buildCommit)"
    }()
}
