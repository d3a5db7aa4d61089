#if canImport(Glibc)
import Glibc
#endif
import DBus
import PairingCore

/// paird's own check of a D-Bus caller (issue 43): the bus policy is a second fence, not the only
/// one. Changing anything, or reading wearable data (battery, last data, the history), needs uid 0,
/// paird's own uid, or membership of the privileged group (`bluetooth`). Pure but for `groups(of:)`.
enum CallerCheck {
    static let defaultGroup = "bluetooth"
    static let accessDenied = "org.freedesktop.DBus.Error.AccessDenied"

    /// The decision. `groups`: every group of the caller (primary and supplementary).
    static func isPrivileged(uid: UInt32, groups: [UInt32], ownUID: UInt32, privilegedGID: UInt32?) -> Bool {
        uid == 0 || uid == ownUID || privilegedGID.map(groups.contains) == true
    }

    /// `GetConnectionCredentials`' answer: the uid, and the groups when the bus gives them (the
    /// spec's `UnixGroupIDs` is complete or absent; nil: absent). Nil without a `UnixUserID`.
    static func credentials(_ dict: [String: DBusValue]) -> (uid: UInt32, groups: [UInt32]?)? {
        guard case .uint32(let uid)? = dict["UnixUserID"]?.unwrapped else { return nil }
        let groups = dict["UnixGroupIDs"]?.unwrapped.array.map { $0.compactMap { v -> UInt32? in
            if case .uint32(let g) = v { g } else { nil } } }
        return (uid, groups)
    }

    /// The refusal the caller sees: what it asked for and what it needs.
    static func refusal(_ what: String, group: String) -> DBusError {
        DBusError(name: accessDenied, message: "\(what) needs root or membership of the \(group) group (paird checks the caller itself)")
    }

    /// The groups of `uid`'s passwd entry (getgrouplist), for a bus that gives no `UnixGroupIDs`.
    static func groups(of uid: UInt32) -> [UInt32] {
        guard let pw = getpwuid(uid_t(uid)) else { return [] }
        let name = String(cString: pw.pointee.pw_name)
        let primary = pw.pointee.pw_gid
        var count: Int32 = 64
        var list = [gid_t](repeating: 0, count: Int(count))
        if getgrouplist(name, primary, &list, &count) < 0 {
            list = [gid_t](repeating: 0, count: Int(count))
            guard getgrouplist(name, primary, &list, &count) >= 0 else { return [primary] }
        }
        return Array(list.prefix(Int(count)))
    }

    /// The privileged group's gid, nil when the group does not exist.
    static func gid(of group: String) -> UInt32? { getgrnam(group).map { $0.pointee.gr_gid } }
}
