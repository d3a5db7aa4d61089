import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import PairingCore

struct List: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List paired wearables, one per line under a header: address, state, name.",
        discussion: "--json: one object, {\"schemaVersion\": 1, \"devices\": [...]} with the devices as in status --json.")

    @Flag(help: "Print one JSON object instead of lines.")
    var json = false

    @Flag(name: .customLong("no-legend"), help: "Leave out the header line (for scripts).")
    var noLegend = false

    static let header = "\(padded("ADDRESS", 17))  \(padded("STATE", 20))  NAME"

    func run() throws {
        let devices: [StatusDocument.Device]
        do {
            devices = try PairdClient().status().devices
        } catch let e {
            // JSON readers get an object on stdout too (and the exit code): never nothing.
            if json { say(ListDocument.failure(e)) }
            throw e
        }
        if json {
            say(ListDocument(devices: devices).json())
            return
        }
        for line in Self.lines(devices, legend: !noLegend) { say(line) }
    }

    /// The text output: the header (`legend`), then one line per wearable, whatever its name
    /// holds (a name is `terminalSafe`: a new line in it is `\n`, not a second line).
    static func lines(_ devices: [StatusDocument.Device], legend: Bool = true) -> [String] {
        (legend ? [header] : []) + devices.map {
            "\(padded($0.address.terminalSafe, 17))  \(padded(StatusText.human($0.state).terminalSafe, 20))  \($0.name.terminalSafe)"
        }
    }
}

struct ListDocument: Encodable {
    var schemaVersion = StatusDocument.schemaVersion
    var devices: [StatusDocument.Device]
    func json() -> String { compactJSON(self) }

    /// `list --json` when it cannot list: `{"devices":[],"error":"…","exit":3,"schemaVersion":1}`.
    static func failure(_ e: PairctlError) -> String {
        struct Failed: Encodable { var schemaVersion = StatusDocument.schemaVersion; var devices: [String] = []; var error: String; var exit: Int32 }
        return compactJSON(Failed(error: e.message, exit: e.exit.rawValue))
    }

    /// A follow mode's line for something that is not a status document (paird gone / back).
    static func event(_ name: String) -> String {
        "{\"event\":\"\(name)\",\"schemaVersion\":\(StatusDocument.schemaVersion),\"time\":\"\(Date().formatted(.iso8601))\"}"
    }
}
