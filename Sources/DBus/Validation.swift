/// Checks done in Swift before anything reaches libdbus. libdbus treats invalid arguments to its
/// API (a bad object path, a value not matching its container's signature, ...) as programming
/// errors and, by default, aborts the process; a daemon must turn them into `DBusError`s instead.
enum Syntax {
    static let basicTypes: Set<UInt8> = Set("ybnqiuxtdsogh".utf8)

    /// Splits a signature into its complete types; nil if it is not a valid signature.
    static func completeTypes(_ signature: String) -> [Substring]? {
        let bytes = Array(signature.utf8)
        guard bytes.count <= 255 else { return nil }
        var types: [Substring] = []
        var i = 0
        var start = signature.utf8.startIndex
        while i < bytes.count {
            guard let end = parseComplete(bytes, i, arrayDepth: 0, structDepth: 0) else { return nil }
            let endIndex = signature.utf8.index(start, offsetBy: end - i)
            types.append(Substring(signature[start..<endIndex]))
            start = endIndex
            i = end
        }
        return types
    }

    /// True if `signature` is exactly one complete type.
    static func isSingleCompleteType(_ signature: String) -> Bool {
        let bytes = Array(signature.utf8)
        guard !bytes.isEmpty, bytes.count <= 255 else { return false }
        return parseComplete(bytes, 0, arrayDepth: 0, structDepth: 0) == bytes.count
    }

    static func isValidSignature(_ signature: String) -> Bool { completeTypes(signature) != nil }

    /// Parses one complete type starting at `i`; returns the index after it, or nil.
    /// Depth limits are the spec's 32 arrays and 32 structs.
    private static func parseComplete(_ b: [UInt8], _ i: Int, arrayDepth: Int, structDepth: Int) -> Int? {
        guard i < b.count else { return nil }
        let c = b[i]
        if basicTypes.contains(c) || c == UInt8(ascii: "v") { return i + 1 }
        switch c {
        case UInt8(ascii: "a"):
            guard arrayDepth < 32 else { return nil }
            if i + 1 < b.count && b[i + 1] == UInt8(ascii: "{") {
                // Dict entry: a basic key, one complete value, closing brace.
                guard structDepth < 32, i + 2 < b.count, basicTypes.contains(b[i + 2]),
                      let afterValue = parseComplete(b, i + 3, arrayDepth: arrayDepth + 1, structDepth: structDepth + 1),
                      afterValue < b.count, b[afterValue] == UInt8(ascii: "}") else { return nil }
                return afterValue + 1
            }
            return parseComplete(b, i + 1, arrayDepth: arrayDepth + 1, structDepth: structDepth)
        case UInt8(ascii: "("):
            guard structDepth < 32 else { return nil }
            var j = i + 1
            var fields = 0
            while j < b.count && b[j] != UInt8(ascii: ")") {
                guard let next = parseComplete(b, j, arrayDepth: arrayDepth, structDepth: structDepth + 1) else { return nil }
                j = next
                fields += 1
            }
            guard j < b.count, fields > 0 else { return nil }
            return j + 1
        default:
            return nil
        }
    }

    /// Object path rules of the D-Bus specification.
    static func isValidObjectPath(_ path: String) -> Bool {
        let b = Array(path.utf8)
        guard b.first == UInt8(ascii: "/") else { return false }
        if b.count == 1 { return true }
        guard b.last != UInt8(ascii: "/") else { return false }
        var previousSlash = true
        for c in b.dropFirst() {
            if c == UInt8(ascii: "/") {
                if previousSlash { return false }
                previousSlash = true
            } else {
                guard isNameChar(c) else { return false }
                previousSlash = false
            }
        }
        return true
    }

    private static func isNameChar(_ c: UInt8) -> Bool {
        (c >= UInt8(ascii: "a") && c <= UInt8(ascii: "z")) || (c >= UInt8(ascii: "A") && c <= UInt8(ascii: "Z"))
            || (c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9")) || c == UInt8(ascii: "_")
    }

    /// Interface and error names: two or more dot-separated elements of [A-Za-z_][A-Za-z0-9_]*.
    static func isValidInterfaceName(_ name: String) -> Bool {
        let b = Array(name.utf8)
        guard !b.isEmpty, b.count <= 255 else { return false }
        let elements = b.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard elements.count >= 2 else { return false }
        for e in elements {
            guard let first = e.first, !(first >= UInt8(ascii: "0") && first <= UInt8(ascii: "9")),
                  e.allSatisfy(isNameChar) else { return false }
        }
        return true
    }

    static func isValidErrorName(_ name: String) -> Bool { isValidInterfaceName(name) }

    /// Member (method, signal, property) names: [A-Za-z_][A-Za-z0-9_]*, at most 255.
    static func isValidMemberName(_ name: String) -> Bool {
        let b = Array(name.utf8)
        guard let first = b.first, b.count <= 255, !(first >= UInt8(ascii: "0") && first <= UInt8(ascii: "9")) else {
            return false
        }
        return b.allSatisfy(isNameChar)
    }

    /// Bus names: unique (`:1.42`) or well-known (`org.bluez`).
    static func isValidBusName(_ name: String) -> Bool {
        let b = Array(name.utf8)
        guard !b.isEmpty, b.count <= 255 else { return false }
        let unique = b.first == UInt8(ascii: ":")
        let elements = (unique ? b.dropFirst() : b[...]).split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard elements.count >= 2 else { return false }
        for e in elements {
            guard let first = e.first else { return false }
            if !unique && first >= UInt8(ascii: "0") && first <= UInt8(ascii: "9") { return false }
            guard e.allSatisfy({ isNameChar($0) || $0 == UInt8(ascii: "-") }) else { return false }
        }
        return true
    }

    static func require(_ ok: Bool, _ what: @autoclosure () -> String) throws(DBusError) {
        guard ok else { throw DBusError.invalidArgs(what()) }
    }
}

extension DBusValue {
    /// Throws if libdbus would refuse (abort on) this value, or a peer would reject it: invalid
    /// strings, paths, signatures, elements not matching their container's signature, nesting
    /// beyond the specification's limits.
    func validate(containerDepth: Int = 0) throws(DBusError) {
        guard containerDepth <= 64 else { throw DBusError.invalidArgs("value nested deeper than 64 containers") }
        switch self {
        case .byte, .bool, .int16, .uint16, .int32, .uint32, .int64, .uint64, .double:
            return
        case .string(let s):
            try Syntax.require(!s.utf8.contains(0), "string contains a NUL character")
        case .objectPath(let p):
            try Syntax.require(Syntax.isValidObjectPath(p), "invalid object path '\(p)'")
        case .signature(let g):
            try Syntax.require(Syntax.isValidSignature(g), "invalid signature '\(g)'")
        case .unixFD(let fd):
            try Syntax.require(fd.fd >= 0, "invalid file descriptor \(fd.fd)")
        case .array(let element, let items):
            try Syntax.require(Syntax.isSingleCompleteType(element), "invalid array element signature '\(element)'")
            try Syntax.require(!element.hasPrefix("{"), "array element signature '\(element)' is a dict entry; use .dict")
            for item in items {
                guard item.hasSignature(element) else {
                    throw DBusError.unexpectedSignature(expected: element, got: item.signature)
                }
                try item.validate(containerDepth: containerDepth + 1)
            }
        case .dict(let key, let value, let entries):
            try Syntax.require(key.utf8.count == 1 && Syntax.basicTypes.contains(key.utf8.first!),
                               "dict key signature '\(key)' is not a basic type")
            try Syntax.require(Syntax.isSingleCompleteType(value), "invalid dict value signature '\(value)'")
            for entry in entries {
                guard entry.key.hasSignature(key) else {
                    throw DBusError.unexpectedSignature(expected: key, got: entry.key.signature)
                }
                guard entry.value.hasSignature(value) else {
                    throw DBusError.unexpectedSignature(expected: value, got: entry.value.signature)
                }
                try entry.key.validate(containerDepth: containerDepth + 2)
                try entry.value.validate(containerDepth: containerDepth + 2)
            }
        case .structure(let fields):
            try Syntax.require(!fields.isEmpty, "a struct needs at least one field")
            for field in fields { try field.validate(containerDepth: containerDepth + 1) }
        case .variant(let inner):
            try inner.validate(containerDepth: containerDepth + 1)
        }
    }
}
