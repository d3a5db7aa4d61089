import CBuildInfo
import PairingCore

/// What `--version` and paird's D-Bus `Version` say: the build's version, the same string as the
/// Debian package's (`0.1.0+git263.48e976b`: the code's version, git's commit count and commit,
/// `.dirty` for uncommitted changes; the Makefile passes it as PAIRD_VERSION), or the code's own
/// version (`PairdAPI.version`, 0.1.0) when the build was not given one (plain `swift build`, a
/// tree without git).
public enum BuildInfo {
    public static let version: String = {
        let built = String(cString: paird_build_version())
        return built.isEmpty ? PairdAPI.version : built
    }()
}
