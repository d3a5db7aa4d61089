import DBus
import EventLoop
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import PairingCore
#if canImport(Glibc)
import Glibc
#endif

/// pairctl's exit codes: each failure a script may want to tell apart has its own.
public enum PairctlExit: Int32, CaseIterable, Sendable {
    case success = 0
    case failure = 1
    case daemonNotRunning = 3
    case accessDenied = 4
    case noDeviceFound = 5
    case authenticationFailed = 6
    case unknownDevice = 7
    case timeout = 8
    case adapterUnavailable = 9
    case needsRepair = 10
    case notSaved = 11
    case needsInput = 12
    case usage = 64

    public var meaning: String {
        switch self {
        case .success: "success"
        case .failure: "other failure"
        case .daemonNotRunning: "paird is not running (or the system bus is unreachable)"
        case .accessDenied: "access denied by the D-Bus policy (root or the bluetooth group only: sudo usermod -aG bluetooth $USER, then log in again)"
        case .noDeviceFound: "no matching wearable found before the timeout"
        case .authenticationFailed: "authentication failed while pairing"
        case .unknownDevice: "the device is not paired with paird"
        case .timeout: "pairing or connecting timed out, or paird did not answer in time"
        case .adapterUnavailable: "no usable Bluetooth adapter"
        case .needsRepair: "the wearable needs to be paired again"
        case .notSaved: "done, but paird could not save it to its state file: it will not survive a restart"
        case .needsInput: "the wearable asks for a passkey or a confirmation and nobody can answer (give --passkey or --confirm, or run on a terminal)"
        case .usage: "bad arguments"
        }
    }
}

/// A failure pairctl reports on one line and exits with.
public struct PairctlError: Error, CustomStringConvertible {
    public var exit: PairctlExit
    public var message: String
    public init(_ exit: PairctlExit, _ message: String) { self.exit = exit; self.message = message }
    public var description: String { message }

    /// Maps a D-Bus error from the daemon or the bus to an exit code.
    public init(_ e: DBusError) {
        switch e.name {
        case "org.freedesktop.DBus.Error.ServiceUnknown", "org.freedesktop.DBus.Error.NameHasNoOwner",
             "org.freedesktop.DBus.Error.NoServer", "org.freedesktop.DBus.Error.FileNotFound",
             "org.freedesktop.DBus.Error.Disconnected":
            self.init(.daemonNotRunning, "paird is not running (\(e.name.split(separator: ".").last ?? ""))")
        case "org.freedesktop.DBus.Error.NoReply", "org.freedesktop.DBus.Error.Timeout", "org.freedesktop.DBus.Error.TimedOut":
            // paird owns its name but did not answer in time: stalled, not gone (systemd's
            // watchdog restarts a stalled paird).
            self.init(.timeout, "paird did not answer in time (\(e.name.split(separator: ".").last ?? ""))")
        case "org.freedesktop.DBus.Error.AccessDenied":
            self.init(.accessDenied, "access denied: only root and members of the bluetooth group may do that; \(Self.joinBluetoothGroup)")
        case PairdAPI.Error.invalidArguments: self.init(.usage, e.message)
        case PairdAPI.Error.unknownDevice: self.init(.unknownDevice, e.message)
        case PairdAPI.Error.noDeviceFound: self.init(.noDeviceFound, e.message)
        case PairdAPI.Error.authenticationFailed: self.init(.authenticationFailed, e.message)
        case PairdAPI.Error.timeout: self.init(.timeout, e.message)
        case PairdAPI.Error.adapterUnavailable: self.init(.adapterUnavailable, e.message)
        case PairdAPI.Error.needsRepair: self.init(.needsRepair, e.message)
        case PairdAPI.Error.needsInput: self.init(.needsInput, e.message)
        case PairdAPI.Error.notSaved: self.init(.notSaved, e.message)
        default: self.init(.failure, e.message.isEmpty ? e.name : e.message)
        }
    }
}

extension PairctlError {
    /// The fix for exit 4, named wherever access is denied.
    static let joinBluetoothGroup = "to join the group: sudo usermod -aG bluetooth $USER, then log out and in again"
}

/// pairctl's connection to paird: blocking calls for one-shot verbs, the loop for watching.
public final class PairdClient {
    public let loop: EventLoop
    public let bus: DBusConnection

    public init() throws(PairctlError) {
        do {
            loop = try EventLoop()
        } catch {
            throw PairctlError(.failure, "cannot create an event loop: \(error)")
        }
        do {
            bus = try DBusConnection.system(on: loop)
        } catch {
            throw PairctlError(.daemonNotRunning, "cannot reach the system bus: \(error.message.isEmpty ? error.name : error.message)")
        }
    }

    public func call(_ method: String, _ args: [DBusValue] = [], timeout: Duration = .seconds(25)) throws(PairctlError) -> [DBusValue] {
        do {
            return try bus.callSync(destination: PairdAPI.busName, path: PairdAPI.objectPath, interface: PairdAPI.interface,
                                    method: method, args: args, timeout: timeout)
        } catch {
            throw PairctlError(error)
        }
    }

    public func status() throws(PairctlError) -> StatusDocument {
        let reply = try call("GetStatus")
        guard let json = reply.first?.string else { throw PairctlError(.failure, "GetStatus answered \(reply.signature), expected s") }
        do { return try StatusDocument.decode(json) } catch { throw PairctlError(.failure, "GetStatus answered unreadable JSON: \(error)") }
    }

    /// Subscribes to one of the daemon's signals (from whoever owns the bus name).
    @discardableResult
    public func on(_ member: String, _ handler: @escaping ([DBusValue]) -> Void) -> SignalSubscription {
        bus.onSignal(interface: PairdAPI.interface, member: member, path: PairdAPI.objectPath) { message in
            if let args = try? message.arguments() { handler(args) }
        }
    }

    /// Runs the loop until `done()` or SIGINT/SIGTERM.
    public func runUntil(_ done: @escaping () -> Bool) throws(PairctlError) {
        do {
            try loop.onSignal(SIGINT) { [loop] in loop.stop() }
            try loop.onSignal(SIGTERM) { [loop] in loop.stop() }
            try loop.run(until: done)
        } catch {
            throw PairctlError(.failure, "event loop failed: \(error)")
        }
    }
}

/// Prints a line to stdout, flushing at once (progress lines reach pipes promptly).
func say(_ line: String) {
    writeAll(1, line + "\n")
}

/// `s` padded with spaces to `width` characters.
func padded(_ s: String, _ width: Int) -> String {
    s.count >= width ? s : s + String(repeating: " ", count: width - s.count)
}

/// pairctl's one JSON style: compact (one object per line), sorted keys, RFC 3339 UTC times.
func compactJSON<T: Encodable>(_ value: T) -> String {
    let e = JSONEncoder()
    e.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    e.dateEncodingStrategy = .iso8601
    return (try? e.encode(value)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
}

/// Lower-case hex, two digits per byte.
func hex(_ bytes: [UInt8]) -> String {
    let digits = Array("0123456789abcdef")
    var out = ""
    out.reserveCapacity(bytes.count * 2)
    for b in bytes { out.append(digits[Int(b >> 4)]); out.append(digits[Int(b & 0xf)]) }
    return out
}

/// The one form of time in pairctl's text output: RFC 3339 in the local time zone (TZ,
/// /etc/localtime) with its offset, e.g. `2026-11-25T06:41:26+01:00`. JSON has RFC 3339 in UTC (`Z`).
func timestamp(_ date: Date) -> String {
    var t = time_t(date.timeIntervalSince1970.rounded(.down))
    var tm = Glibc.tm()
    guard localtime_r(&t, &tm) != nil else { return date.formatted(.iso8601) }
    var buf = [CChar](repeating: 0, count: 40)
    let n = strftime(&buf, buf.count, "%Y-%m-%dT%H:%M:%S%z", &tm)
    var s = String(decoding: buf.prefix(n).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    if s.count >= 5 { s.insert(":", at: s.index(s.endIndex, offsetBy: -2)) } // +0100 → +01:00
    return s
}
