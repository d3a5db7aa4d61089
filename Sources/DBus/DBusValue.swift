#if canImport(Glibc)
import Glibc
#endif

/// A D-Bus value of any type BlueZ uses, carrying its own type so that it can be sent as is.
///
/// Containers keep their element types (`array("s", [])` is an empty `as`, not an unknown array),
/// dictionaries keep their entry order. Object paths and signatures are `String`s; they are
/// validated when a message is built, where a bad one throws `DBusError` instead of reaching
/// libdbus (which aborts the process on invalid input).
public enum DBusValue: Hashable, Sendable {
    case byte(UInt8)
    case bool(Bool)
    case int16(Int16)
    case uint16(UInt16)
    case int32(Int32)
    case uint32(UInt32)
    case int64(Int64)
    case uint64(UInt64)
    case double(Double)
    case string(String)
    case objectPath(String)
    case signature(String)
    /// A file descriptor; see `UnixFD` for who closes it.
    case unixFD(UnixFD)
    /// An array of values that all have the signature `elementSignature` (one complete type).
    case array(elementSignature: String, [DBusValue])
    /// An `a{kv}`: `keySignature` is a basic type, `valueSignature` one complete type.
    case dict(keySignature: String, valueSignature: String, [DBusDictEntry])
    /// A struct: one or more fields.
    case structure([DBusValue])
    // Only the variant needs an indirect box; arrays already live on the heap.
    indirect case variant(DBusValue)

    /// The D-Bus signature of this value (one complete type).
    public var signature: String {
        switch self {
        case .byte: "y"
        case .bool: "b"
        case .int16: "n"
        case .uint16: "q"
        case .int32: "i"
        case .uint32: "u"
        case .int64: "x"
        case .uint64: "t"
        case .double: "d"
        case .string: "s"
        case .objectPath: "o"
        case .signature: "g"
        case .unixFD: "h"
        case .array(let element, _): "a" + element
        case .dict(let key, let value, _): "a{" + key + value + "}"
        case .structure(let fields): "(" + fields.map(\.signature).joined() + ")"
        case .variant: "v"
        }
    }

    /// The type code for basic types and variants (the only single-character signatures), else nil.
    var basicTypeCode: UInt8? {
        switch self {
        case .byte: UInt8(ascii: "y")
        case .bool: UInt8(ascii: "b")
        case .int16: UInt8(ascii: "n")
        case .uint16: UInt8(ascii: "q")
        case .int32: UInt8(ascii: "i")
        case .uint32: UInt8(ascii: "u")
        case .int64: UInt8(ascii: "x")
        case .uint64: UInt8(ascii: "t")
        case .double: UInt8(ascii: "d")
        case .string: UInt8(ascii: "s")
        case .objectPath: UInt8(ascii: "o")
        case .signature: UInt8(ascii: "g")
        case .unixFD: UInt8(ascii: "h")
        case .variant: UInt8(ascii: "v")
        case .array, .dict, .structure: nil
        }
    }

    /// Whether this value's signature is `signature`, without building strings for basic types.
    func hasSignature(_ signature: String) -> Bool {
        if let code = basicTypeCode {
            let utf8 = signature.utf8
            return utf8.count == 1 && utf8.first == code
        }
        return self.signature == signature
    }
}

/// One entry of a `DBusValue.dict`.
public struct DBusDictEntry: Hashable, Sendable {
    public var key: DBusValue
    public var value: DBusValue

    public init(key: DBusValue, value: DBusValue) {
        self.key = key
        self.value = value
    }
}

/// An owned file descriptor inside a `DBusValue`.
///
/// Ownership: the `UnixFD` owns `fd` and closes it when the last reference goes away. Values read
/// from a message hold a fresh duplicate made by libdbus; keep the `UnixFD` alive for as long as
/// you use the fd, or `duplicate()` it to take an fd of your own. When sending, libdbus duplicates
/// the fd again, so the `UnixFD` may be dropped right after the call.
public final class UnixFD: Hashable, Sendable, CustomStringConvertible {
    public let fd: Int32

    /// Takes ownership of `fd`: it will be closed when this object goes away.
    public init(taking fd: Int32) {
        self.fd = fd
    }

    /// Duplicates `fd` (with close-on-exec); the caller keeps ownership of `fd`.
    public convenience init(duplicating fd: Int32) throws {
        let copy = fcntl(fd, F_DUPFD_CLOEXEC, 0)
        guard copy >= 0 else {
            throw DBusError.invalidArgs("cannot duplicate fd \(fd): \(String(cString: strerror(errno)))")
        }
        self.init(taking: copy)
    }

    /// A new fd of the caller's own (close-on-exec), referring to the same open file.
    public func duplicate() throws -> Int32 {
        let copy = fcntl(fd, F_DUPFD_CLOEXEC, 0)
        guard copy >= 0 else {
            throw DBusError.failed("cannot duplicate fd \(fd): \(String(cString: strerror(errno)))")
        }
        return copy
    }

    deinit {
        if fd >= 0 { close(fd) }
    }

    // Open fds are unique while open, so the number identifies the object.
    public static func == (a: UnixFD, b: UnixFD) -> Bool { a.fd == b.fd }
    public func hash(into hasher: inout Hasher) { hasher.combine(fd) }
    public var description: String { "fd \(fd)" }
}

// MARK: - Literals

extension DBusValue: ExpressibleByStringLiteral, ExpressibleByBooleanLiteral {
    public init(stringLiteral value: String) { self = .string(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
}

// MARK: - Building

extension DBusValue {
    /// An `a{sv}` with entries sorted by key (deterministic on the wire); values are wrapped in
    /// variants unless they already are variants.
    public static func vardict(_ properties: [String: DBusValue]) -> DBusValue {
        .dict(keySignature: "s", valueSignature: "v", properties.sorted { $0.key < $1.key }.map {
            DBusDictEntry(key: .string($0.key), value: $0.value.asVariant)
        })
    }

    /// An `a{sv}` keeping the given order.
    public static func vardict(_ properties: KeyValuePairs<String, DBusValue>) -> DBusValue {
        .dict(keySignature: "s", valueSignature: "v", properties.map {
            DBusDictEntry(key: .string($0.key), value: $0.value.asVariant)
        })
    }

    /// An `as`.
    public static func stringArray(_ strings: [String]) -> DBusValue {
        .array(elementSignature: "s", strings.map(DBusValue.string))
    }

    /// An `ao`.
    public static func objectPathArray(_ paths: [String]) -> DBusValue {
        .array(elementSignature: "o", paths.map(DBusValue.objectPath))
    }

    /// An `ay`.
    public static func bytes(_ bytes: some Sequence<UInt8>) -> DBusValue {
        .array(elementSignature: "y", bytes.map(DBusValue.byte))
    }

    /// This value in a variant, unless it is one already.
    public var asVariant: DBusValue {
        if case .variant = self { return self }
        return .variant(self)
    }
}

// MARK: - Reading

/// Optional accessors: each returns the payload when the value is exactly that type, else nil.
/// They do not look through variants (use `variantInner` or `unwrapped`), except `dictionary`,
/// which unwraps its values' variants because `a{sv}` is what it exists for.
extension DBusValue {
    public var uint8: UInt8? { if case .byte(let v) = self { v } else { nil } }
    public var bool: Bool? { if case .bool(let v) = self { v } else { nil } }
    public var int16: Int16? { if case .int16(let v) = self { v } else { nil } }
    public var uint16: UInt16? { if case .uint16(let v) = self { v } else { nil } }
    public var int32: Int32? { if case .int32(let v) = self { v } else { nil } }
    public var uint32: UInt32? { if case .uint32(let v) = self { v } else { nil } }
    public var int64: Int64? { if case .int64(let v) = self { v } else { nil } }
    public var uint64: UInt64? { if case .uint64(let v) = self { v } else { nil } }
    public var double: Double? { if case .double(let v) = self { v } else { nil } }
    public var string: String? { if case .string(let v) = self { v } else { nil } }
    public var objectPath: String? { if case .objectPath(let v) = self { v } else { nil } }
    public var signatureString: String? { if case .signature(let v) = self { v } else { nil } }
    public var unixFD: UnixFD? { if case .unixFD(let v) = self { v } else { nil } }
    public var structure: [DBusValue]? { if case .structure(let v) = self { v } else { nil } }
    public var variantInner: DBusValue? { if case .variant(let v) = self { v } else { nil } }

    /// The value with all variant layers removed.
    public var unwrapped: DBusValue {
        var v = self
        while case .variant(let inner) = v { v = inner }
        return v
    }

    /// Elements of an array (not of a dict; see `dictEntries`).
    public var array: [DBusValue]? { if case .array(_, let v) = self { v } else { nil } }

    /// Entries of a dict, in wire order.
    public var dictEntries: [DBusDictEntry]? { if case .dict(_, _, let v) = self { v } else { nil } }

    /// A dict keyed by strings or object paths (`a{sv}`, `a{oa{sv}}`, ...), with variant values
    /// unwrapped one level. A later duplicate key wins.
    public var dictionary: [String: DBusValue]? {
        guard case .dict(let k, _, let entries) = self, k == "s" || k == "o" else { return nil }
        var result: [String: DBusValue] = [:]
        result.reserveCapacity(entries.count)
        for entry in entries {
            let key: String
            switch entry.key {
            case .string(let s), .objectPath(let s): key = s
            case .byte, .bool, .int16, .uint16, .int32, .uint32, .int64, .uint64, .double,
                 .signature, .unixFD, .array, .dict, .structure, .variant:
                return nil
            }
            result[key] = entry.value.variantInner ?? entry.value
        }
        return result
    }

    /// An `as` or `ao` as strings.
    public var stringArray: [String]? {
        guard case .array(let e, let items) = self, e == "s" || e == "o" || e == "g" else { return nil }
        return items.compactMap { v in
            switch v {
            case .string(let s), .objectPath(let s), .signature(let s): s
            case .byte, .bool, .int16, .uint16, .int32, .uint32, .int64, .uint64, .double,
                 .unixFD, .array, .dict, .structure, .variant: nil
            }
        }
    }

    /// An `ay` as bytes.
    public var bytes: [UInt8]? {
        guard case .array("y", let items) = self else { return nil }
        return items.compactMap(\.uint8)
    }

    /// The `a{oa{sa{sv}}}` of `ObjectManager.GetManagedObjects`: path → interface → property.
    public var managedObjects: [String: [String: [String: DBusValue]]]? {
        guard case .dict("o", "a{sa{sv}}", let entries) = self else { return nil }
        var result: [String: [String: [String: DBusValue]]] = [:]
        for entry in entries {
            guard let path = entry.key.objectPath, let interfaces = entry.value.interfacesAndProperties else { return nil }
            result[path] = interfaces
        }
        return result
    }

    /// The `a{sa{sv}}` of `InterfacesAdded`: interface → property.
    public var interfacesAndProperties: [String: [String: DBusValue]]? {
        guard case .dict("s", "a{sv}", let entries) = self else { return nil }
        var result: [String: [String: DBusValue]] = [:]
        for entry in entries {
            guard let name = entry.key.string, let props = entry.value.dictionary else { return nil }
            result[name] = props
        }
        return result
    }
}

extension Array where Element == DBusValue {
    /// The concatenated signature of the values, e.g. `"oa{sa{sv}}"`.
    public var signature: String { map(\.signature).joined() }

    /// Returns the values if their signature is `signature`, else throws
    /// `DBusError.unexpectedSignature` (name `org.freedesktop.DBus.Error.InvalidSignature`).
    /// After it, the optional accessors of the expected types cannot return nil.
    @discardableResult
    public func expect(_ signature: String) throws(DBusError) -> [DBusValue] {
        let actual = self.signature
        guard actual == signature else { throw DBusError.unexpectedSignature(expected: signature, got: actual) }
        return self
    }
}
