internal import CDBus

/// Type codes (`DBUS_TYPE_*` are cast macros Swift does not import).
enum TypeCode {
    static let invalid: Int32 = 0
    static let byte = Int32(UInt8(ascii: "y"))
    static let boolean = Int32(UInt8(ascii: "b"))
    static let int16 = Int32(UInt8(ascii: "n"))
    static let uint16 = Int32(UInt8(ascii: "q"))
    static let int32 = Int32(UInt8(ascii: "i"))
    static let uint32 = Int32(UInt8(ascii: "u"))
    static let int64 = Int32(UInt8(ascii: "x"))
    static let uint64 = Int32(UInt8(ascii: "t"))
    static let double = Int32(UInt8(ascii: "d"))
    static let string = Int32(UInt8(ascii: "s"))
    static let objectPath = Int32(UInt8(ascii: "o"))
    static let signature = Int32(UInt8(ascii: "g"))
    static let unixFD = Int32(UInt8(ascii: "h"))
    static let array = Int32(UInt8(ascii: "a"))
    static let variant = Int32(UInt8(ascii: "v"))
    static let structure = Int32(UInt8(ascii: "r"))
    static let dictEntry = Int32(UInt8(ascii: "e"))
}

/// A D-Bus message. Owns one libdbus reference, dropped in `deinit`.
///
/// Built by `DBusConnection` for calls and signals; handed to signal handlers and kept by
/// `MethodContext`. Loop thread only.
public final class DBusMessage {
    /// The libdbus message; this object owns one reference.
    let raw: OpaquePointer

    /// Takes over a reference the caller owns.
    init(owning raw: OpaquePointer) {
        self.raw = raw
    }

    /// Adds a reference to a message libdbus lends us (e.g. inside a filter).
    init(retaining raw: OpaquePointer) {
        dbus_message_ref(raw)
        self.raw = raw
    }

    deinit {
        dbus_message_unref(raw)
    }

    public enum Kind: Sendable, Hashable {
        case methodCall, methodReturn, error, signal
        /// A type this library does not know (the protocol allows new ones).
        case other(Int32)
    }

    public var kind: Kind {
        switch dbus_message_get_type(raw) {
        case 1: .methodCall
        case 2: .methodReturn
        case 3: .error
        case 4: .signal
        case let t: .other(t)
        }
    }

    public var path: String? { dbus_message_get_path(raw).map { String(cString: $0) } }
    public var interface: String? { dbus_message_get_interface(raw).map { String(cString: $0) } }
    public var member: String? { dbus_message_get_member(raw).map { String(cString: $0) } }
    public var sender: String? { dbus_message_get_sender(raw).map { String(cString: $0) } }
    public var destination: String? { dbus_message_get_destination(raw).map { String(cString: $0) } }
    public var errorName: String? { dbus_message_get_error_name(raw).map { String(cString: $0) } }
    /// The signature of the body, "" for no arguments.
    public var signature: String { dbus_message_get_signature(raw).map { String(cString: $0) } ?? "" }
    public var serial: UInt32 { dbus_message_get_serial(raw) }
    public var replySerial: UInt32 { dbus_message_get_reply_serial(raw) }
    /// The caller asked for no reply (method calls only).
    public var noReplyExpected: Bool { dbus_message_get_no_reply(raw) != 0 }

    /// This message as an error, if it is an error reply: its name verbatim, and its first
    /// argument as message when that is a string.
    public var error: DBusError? {
        guard kind == .error else { return nil }
        let name = errorName ?? DBusError.Name.failed
        let text = (try? arguments())?.first?.string ?? ""
        return DBusError(name: name, message: text)
    }

    // MARK: Building

    /// `autoStart: false` sets NO_AUTO_START: the bus answers `NameHasNoOwner` when nobody owns
    /// `destination` instead of starting its activatable service.
    static func methodCall(destination: String?, path: String, interface: String?, method: String,
                           autoStart: Bool = true) throws(DBusError) -> DBusMessage {
        if let destination { try Syntax.require(Syntax.isValidBusName(destination), "invalid bus name '\(destination)'") }
        try Syntax.require(Syntax.isValidObjectPath(path), "invalid object path '\(path)'")
        if let interface { try Syntax.require(Syntax.isValidInterfaceName(interface), "invalid interface name '\(interface)'") }
        try Syntax.require(Syntax.isValidMemberName(method), "invalid method name '\(method)'")
        guard let raw = dbus_message_new_method_call(destination, path, interface, method) else { throw DBusError.noMemory }
        if !autoStart { dbus_message_set_auto_start(raw, 0) }
        return DBusMessage(owning: raw)
    }

    /// Whether the bus may start the destination's service for this message (NO_AUTO_START unset).
    var autoStart: Bool { dbus_message_get_auto_start(raw) != 0 }

    static func signal(path: String, interface: String, member: String) throws(DBusError) -> DBusMessage {
        try Syntax.require(Syntax.isValidObjectPath(path), "invalid object path '\(path)'")
        try Syntax.require(Syntax.isValidInterfaceName(interface), "invalid interface name '\(interface)'")
        try Syntax.require(Syntax.isValidMemberName(member), "invalid signal name '\(member)'")
        guard let raw = dbus_message_new_signal(path, interface, member) else { throw DBusError.noMemory }
        return DBusMessage(owning: raw)
    }

    func makeReturn() throws(DBusError) -> DBusMessage {
        guard let raw = dbus_message_new_method_return(raw) else { throw DBusError.noMemory }
        return DBusMessage(owning: raw)
    }

    /// An error reply. An invalid error name (libdbus would abort) becomes `Failed`, keeping the
    /// original name in the message.
    func makeError(_ error: DBusError) throws(DBusError) -> DBusMessage {
        var name = error.name
        var text = error.message
        if !Syntax.isValidErrorName(name) {
            text = "\(name): \(text)"
            name = DBusError.Name.failed
        }
        // NUL would silently truncate the C string; D-Bus strings cannot contain it anyway.
        text = String(text.unicodeScalars.filter { $0 != "\0" })
        guard let raw = dbus_message_new_error(raw, name, text) else { throw DBusError.noMemory }
        return DBusMessage(owning: raw)
    }

    // MARK: Arguments

    /// Appends `values` as arguments. Validates everything first, so a bad value throws and
    /// leaves the message unchanged.
    public func append(_ values: [DBusValue]) throws(DBusError) {
        guard !values.isEmpty else { return }
        for v in values { try v.validate() }
        try Syntax.require(Syntax.isValidSignature(values.signature), "arguments nest too deeply or exceed 255 signature characters")
        var iter = DBusMessageIter()
        dbus_message_iter_init_append(raw, &iter)
        for v in values { try Marshal.append(v, to: &iter) }
    }

    /// The arguments. Throws only for what libdbus could not hand over (an unknown future type,
    /// an fd it could not duplicate); messages are validated by libdbus on arrival.
    public func arguments() throws(DBusError) -> [DBusValue] {
        var iter = DBusMessageIter()
        guard dbus_message_iter_init(raw, &iter) != 0 else { return [] }
        var values: [DBusValue] = []
        while dbus_message_iter_get_arg_type(&iter) != TypeCode.invalid {
            values.append(try Marshal.read(&iter))
            dbus_message_iter_next(&iter)
        }
        return values
    }
}

/// DBusMessageIter marshalling, both ways. Values are validated before `append` is called.
enum Marshal {
    static func append(_ value: DBusValue, to iter: inout DBusMessageIter) throws(DBusError) {
        let ok: Bool
        switch value {
        case .byte(var v): ok = dbus_message_iter_append_basic(&iter, TypeCode.byte, &v) != 0
        case .bool(let b):
            var v: dbus_bool_t = b ? 1 : 0
            ok = dbus_message_iter_append_basic(&iter, TypeCode.boolean, &v) != 0
        case .int16(var v): ok = dbus_message_iter_append_basic(&iter, TypeCode.int16, &v) != 0
        case .uint16(var v): ok = dbus_message_iter_append_basic(&iter, TypeCode.uint16, &v) != 0
        case .int32(var v): ok = dbus_message_iter_append_basic(&iter, TypeCode.int32, &v) != 0
        case .uint32(var v): ok = dbus_message_iter_append_basic(&iter, TypeCode.uint32, &v) != 0
        case .int64(var v): ok = dbus_message_iter_append_basic(&iter, TypeCode.int64, &v) != 0
        case .uint64(var v): ok = dbus_message_iter_append_basic(&iter, TypeCode.uint64, &v) != 0
        case .double(var v): ok = dbus_message_iter_append_basic(&iter, TypeCode.double, &v) != 0
        case .string(let s): ok = appendString(s, TypeCode.string, &iter)
        case .objectPath(let s): ok = appendString(s, TypeCode.objectPath, &iter)
        case .signature(let s): ok = appendString(s, TypeCode.signature, &iter)
        case .unixFD(let fd):
            // libdbus duplicates the fd; the UnixFD keeps its own.
            var v = fd.fd
            ok = dbus_message_iter_append_basic(&iter, TypeCode.unixFD, &v) != 0
        case .array(let element, let items):
            var sub = DBusMessageIter()
            guard dbus_message_iter_open_container(&iter, TypeCode.array, element, &sub) != 0 else { throw DBusError.noMemory }
            do throws(DBusError) {
                for item in items { try append(item, to: &sub) }
            } catch {
                dbus_message_iter_abandon_container(&iter, &sub)
                throw error
            }
            ok = dbus_message_iter_close_container(&iter, &sub) != 0
        case .dict(let key, let valueSignature, let entries):
            var sub = DBusMessageIter()
            guard dbus_message_iter_open_container(&iter, TypeCode.array, "{" + key + valueSignature + "}", &sub) != 0 else {
                throw DBusError.noMemory
            }
            do throws(DBusError) {
                for entry in entries {
                    var pair = DBusMessageIter()
                    guard dbus_message_iter_open_container(&sub, TypeCode.dictEntry, nil, &pair) != 0 else { throw DBusError.noMemory }
                    do throws(DBusError) {
                        try append(entry.key, to: &pair)
                        try append(entry.value, to: &pair)
                    } catch {
                        dbus_message_iter_abandon_container(&sub, &pair)
                        throw error
                    }
                    guard dbus_message_iter_close_container(&sub, &pair) != 0 else { throw DBusError.noMemory }
                }
            } catch {
                dbus_message_iter_abandon_container(&iter, &sub)
                throw error
            }
            ok = dbus_message_iter_close_container(&iter, &sub) != 0
        case .structure(let fields):
            var sub = DBusMessageIter()
            guard dbus_message_iter_open_container(&iter, TypeCode.structure, nil, &sub) != 0 else { throw DBusError.noMemory }
            do throws(DBusError) {
                for field in fields { try append(field, to: &sub) }
            } catch {
                dbus_message_iter_abandon_container(&iter, &sub)
                throw error
            }
            ok = dbus_message_iter_close_container(&iter, &sub) != 0
        case .variant(let inner):
            var sub = DBusMessageIter()
            guard dbus_message_iter_open_container(&iter, TypeCode.variant, inner.signature, &sub) != 0 else { throw DBusError.noMemory }
            do throws(DBusError) {
                try append(inner, to: &sub)
            } catch {
                dbus_message_iter_abandon_container(&iter, &sub)
                throw error
            }
            ok = dbus_message_iter_close_container(&iter, &sub) != 0
        }
        guard ok else { throw DBusError.noMemory }
    }

    private static func appendString(_ s: String, _ type: Int32, _ iter: inout DBusMessageIter) -> Bool {
        s.withCString { cString in
            // append_basic takes a pointer to the `const char *`.
            var p: UnsafePointer<CChar>? = cString
            return dbus_message_iter_append_basic(&iter, type, &p) != 0
        }
    }

    static func read(_ iter: inout DBusMessageIter) throws(DBusError) -> DBusValue {
        let type = dbus_message_iter_get_arg_type(&iter)
        switch type {
        case TypeCode.byte:
            var v: UInt8 = 0
            dbus_message_iter_get_basic(&iter, &v)
            return .byte(v)
        case TypeCode.boolean:
            var v: dbus_bool_t = 0
            dbus_message_iter_get_basic(&iter, &v)
            return .bool(v != 0)
        case TypeCode.int16:
            var v: Int16 = 0
            dbus_message_iter_get_basic(&iter, &v)
            return .int16(v)
        case TypeCode.uint16:
            var v: UInt16 = 0
            dbus_message_iter_get_basic(&iter, &v)
            return .uint16(v)
        case TypeCode.int32:
            var v: Int32 = 0
            dbus_message_iter_get_basic(&iter, &v)
            return .int32(v)
        case TypeCode.uint32:
            var v: UInt32 = 0
            dbus_message_iter_get_basic(&iter, &v)
            return .uint32(v)
        case TypeCode.int64:
            var v: Int64 = 0
            dbus_message_iter_get_basic(&iter, &v)
            return .int64(v)
        case TypeCode.uint64:
            var v: UInt64 = 0
            dbus_message_iter_get_basic(&iter, &v)
            return .uint64(v)
        case TypeCode.double:
            var v: Double = 0
            dbus_message_iter_get_basic(&iter, &v)
            return .double(v)
        case TypeCode.string:
            return .string(readString(&iter))
        case TypeCode.objectPath:
            return .objectPath(readString(&iter))
        case TypeCode.signature:
            return .signature(readString(&iter))
        case TypeCode.unixFD:
            // libdbus hands out a duplicate we own (or -1 if it could not make one).
            var fd: Int32 = -1
            dbus_message_iter_get_basic(&iter, &fd)
            guard fd >= 0 else { throw DBusError.failed("libdbus could not duplicate a received file descriptor") }
            return .unixFD(UnixFD(taking: fd))
        case TypeCode.array:
            return try readArray(&iter)
        case TypeCode.structure:
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            var fields: [DBusValue] = []
            while dbus_message_iter_get_arg_type(&sub) != TypeCode.invalid {
                fields.append(try read(&sub))
                dbus_message_iter_next(&sub)
            }
            return .structure(fields)
        case TypeCode.variant:
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            return .variant(try read(&sub))
        default:
            // Dict entries are read by readArray; anything else is a type this code predates.
            throw DBusError(name: DBusError.Name.invalidSignature, message: "unsupported D-Bus type code \(type)")
        }
    }

    private static func readString(_ iter: inout DBusMessageIter) -> String {
        var p: UnsafePointer<CChar>? = nil
        dbus_message_iter_get_basic(&iter, &p)
        guard let p else { return "" }
        return String(cString: p)
    }

    private static func readArray(_ iter: inout DBusMessageIter) throws(DBusError) -> DBusValue {
        // The array's own signature ("as", "a{sv}", ...) keeps the element type of empty arrays.
        guard let cSignature = dbus_message_iter_get_signature(&iter) else { throw DBusError.noMemory }
        let signature = String(cString: cSignature)
        dbus_free(cSignature)
        let elementSignature = String(signature.dropFirst())
        var sub = DBusMessageIter()
        dbus_message_iter_recurse(&iter, &sub)

        if dbus_message_iter_get_element_type(&iter) == TypeCode.dictEntry {
            // "{kv}": the key is one basic type code, the value everything up to the brace.
            let inner = elementSignature.dropFirst().dropLast()
            let key = String(inner.prefix(1))
            let value = String(inner.dropFirst())
            var entries: [DBusDictEntry] = []
            while dbus_message_iter_get_arg_type(&sub) == TypeCode.dictEntry {
                var pair = DBusMessageIter()
                dbus_message_iter_recurse(&sub, &pair)
                let k = try read(&pair)
                dbus_message_iter_next(&pair)
                let v = try read(&pair)
                entries.append(DBusDictEntry(key: k, value: v))
                dbus_message_iter_next(&sub)
            }
            return .dict(keySignature: key, valueSignature: value, entries)
        }

        if elementSignature == "y" {
            // Byte arrays (GATT values) in one copy.
            var bytes: UnsafeMutableRawPointer? = nil
            var count: Int32 = 0
            if dbus_message_iter_get_arg_type(&sub) != TypeCode.invalid {
                dbus_message_iter_get_fixed_array(&sub, &bytes, &count)
            }
            guard let bytes, count > 0 else { return .array(elementSignature: "y", []) }
            let buffer = UnsafeRawBufferPointer(start: bytes, count: Int(count))
            return .array(elementSignature: "y", buffer.map { DBusValue.byte($0) })
        }

        var items: [DBusValue] = []
        while dbus_message_iter_get_arg_type(&sub) != TypeCode.invalid {
            items.append(try read(&sub))
            dbus_message_iter_next(&sub)
        }
        return .array(elementSignature: elementSignature, items)
    }
}
