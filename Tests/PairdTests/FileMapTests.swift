import Foundation
import Testing

/// docs/development.md's file map names every file under Sources/ (issue 44, item 5): a file added,
/// moved or renamed without its row in the map fails here by name, and so does a row naming a file
/// that is no longer there. The map is the table under "| module / file |"; a file is named by its
/// path under Sources/ in backquotes in a row's first cell (`Paird/Daemon.swift`).
@Suite("docs/development.md's file map")
struct FileMapTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()

    /// Every file under Sources/ (hidden ones left out), as its path under Sources/, sorted.
    static func sourceFiles() throws -> [String] {
        let sources = root.appendingPathComponent("Sources").path
        let fm = FileManager.default
        var files: [String] = []
        for path in try fm.subpathsOfDirectory(atPath: sources) {
            guard !path.split(separator: "/").contains(where: { $0.hasPrefix(".") }) else { continue }
            var isDirectory: ObjCBool = false
            if fm.fileExists(atPath: sources + "/" + path, isDirectory: &isDirectory), !isDirectory.boolValue {
                files.append(path)
            }
        }
        return files.sorted()
    }

    /// What the map's rows name in their first cell: the backquoted words of it (nil: no map).
    static func mapped() throws -> [String]? {
        let doc = try String(contentsOf: root.appendingPathComponent("docs/development.md"), encoding: .utf8)
        let lines = doc.split(separator: "\n", omittingEmptySubsequences: false)
        guard let start = lines.firstIndex(where: { $0.hasPrefix("| module / file |") }) else { return nil }
        var names: [String] = []
        for line in lines[start...] {
            guard line.hasPrefix("|") else { break }
            let cells = line.split(separator: "|", omittingEmptySubsequences: false)
            guard cells.count > 2 else { continue }
            // backquoted words sit at odd positions once the cell is split at its backquotes
            let parts = cells[1].split(separator: "`", omittingEmptySubsequences: false)
            names += stride(from: 1, to: parts.count, by: 2).map { String(parts[$0]) }
        }
        return names
    }

    @Test("the map names every file under Sources/")
    func everyFileMapped() throws {
        let files = try Self.sourceFiles()
        #expect(files.count > 50, "only \(files.count) files found under \(Self.root.path)/Sources")
        let mapped = Set(try #require(try Self.mapped(), "no table under \"| module / file |\" in docs/development.md"))
        for file in files where !mapped.contains(file) {
            Issue.record("Sources/\(file) is not in docs/development.md's file map: add a row `\(file)` saying what it is for")
        }
    }

    @Test("every file the map names is under Sources/")
    func noStaleRows() throws {
        let files = Set(try Self.sourceFiles())
        #expect(!files.isEmpty)
        // a file's name: a path with a directory and an extension (module rows name modules)
        let mapped = try #require(try Self.mapped(), "no table under \"| module / file |\" in docs/development.md")
        for name in mapped where name.contains("/") && name.contains(".") && !files.contains(name) {
            Issue.record("docs/development.md's file map names \(name), which is not under Sources/")
        }
    }
}
