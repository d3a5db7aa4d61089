import Foundation
import PackagePlugin

/// The checkout's commit for `--version` when the build is given no PAIRD_VERSION (a plain
/// `swift build`): `g<commit>[.dirty]`, asked of git before every build. Package.swift's
/// `Context.gitInformation` did this once; SwiftPM caches the manifest's evaluation without the
/// git state in its key, so an incremental build named a commit from weeks before
/// (swiftlang/swift-package-manager#8202). A prebuild command runs before every build; it
/// rewrites the generated file only when the commit or the dirty state changed, so an unchanged
/// checkout recompiles nothing. Not a checkout, no git, or git refusing the directory (another
/// user's): the file says "", and BuildInfo falls back to the code's version.
@main
struct BuildCommit: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: Target) throws -> [Command] {
        let out = context.pluginWorkDirectoryURL.appending(path: "generated")
        let script = #"""
            pkg=$1 out=$2
            mkdir -p "$out"
            c=
            if h=$(git -C "$pkg" rev-parse --short=7 HEAD 2>/dev/null); then
              c=g$h
              [ -z "$(git -C "$pkg" status --porcelain --untracked-files=no 2>/dev/null)" ] || c=$c.dirty
            fi
            case $c in *[!0-9a-z.]*) c= ;; esac
            f=$out/BuildCommit.swift
            printf '// Generated before each build by the BuildCommit plugin: the checkout'"'"'s commit.\nlet buildCommit = "%s"\n' "$c" >"$f.new"
            if cmp -s "$f.new" "$f"; then rm -f "$f.new"; else mv "$f.new" "$f"; fi
            """#
        return [.prebuildCommand(
            displayName: "BuildCommit: the checkout's commit for --version",
            executable: URL(fileURLWithPath: "/bin/sh"),
            arguments: ["-c", script, "sh", context.package.directoryURL.path, out.path],
            outputFilesDirectory: out)]
    }
}
