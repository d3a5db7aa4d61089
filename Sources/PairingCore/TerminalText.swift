/// The one output rule for text paird does not control (a device's name from the air, a BlueZ
/// error message, a characteristic's value shown as text) printed to a terminal: every character
/// that could move the cursor, end the line, start an escape sequence, reorder the text or hide
/// itself is shown as a visible escape instead, so such a string is always one line of plain
/// characters and cannot fake or hide the output around it (as systemd's tools and `ls` do).
///
/// The form (one, reversible):
/// - `\n`, `\r`, `\t` for new line, carriage return and tab;
/// - `\xHH` (two lower-case hex digits) for the other C0 controls (U+0000–U+001F, ESC is `\x1b`,
///   BEL `\x07`), DEL (`\x7f`) and the C1 controls (U+0080–U+009F, e.g. CSI `\x9b`);
/// - `\u{HHHH}` (lower-case hex, at least four digits) for the bidi controls (U+202A–U+202E,
///   U+2066–U+2069, U+200E, U+200F, U+061C), the zero-width and other format characters (Unicode
///   general category Cf: U+200B–U+200D, U+2060, U+FEFF, soft hyphen, tags, …) and the line and
///   paragraph separators U+2028 and U+2029;
/// - `\\` for a backslash, so that a name spelling `\x1b` itself is told apart from an escaped ESC.
///
/// Everything else, any other UTF-8 (`Pulse‑Ü 心`, a lone U+FFFD), is kept as it is. JSON and
/// D-Bus carry the exact string, never this form.
extension String {
    public var terminalSafe: String {
        guard unicodeScalars.contains(where: TerminalText.mustEscape) else { return self }
        var out = ""
        out.reserveCapacity(utf8.count + 8)
        for s in unicodeScalars {
            if TerminalText.mustEscape(s) { out += TerminalText.escape(s) } else { out.unicodeScalars.append(s) }
        }
        return out
    }
}

/// The parts of `String.terminalSafe`.
public enum TerminalText {
    /// Whether `s` is shown as an escape.
    public static func mustEscape(_ s: Unicode.Scalar) -> Bool {
        switch s.value {
        case 0x00...0x1f, 0x5c, 0x7f...0x9f: return true    // C0, backslash, DEL, C1
        case 0x061c, 0x200e, 0x200f, 0x202a...0x202e, 0x2066...0x2069: return true    // bidi controls
        case 0x200b...0x200d, 0x2060, 0xfeff, 0x2028, 0x2029: return true   // zero width, separators
        default: return s.properties.generalCategory == .format
        }
    }

    static func escape(_ s: Unicode.Scalar) -> String {
        switch s.value {
        case 0x0a: return "\\n"
        case 0x0d: return "\\r"
        case 0x09: return "\\t"
        case 0x5c: return "\\\\"
        case ..<0xa0: return "\\x" + hex(s.value, digits: 2)   // C0, DEL, C1
        default: return "\\u{" + hex(s.value, digits: 4) + "}"
        }
    }

    private static func hex(_ v: UInt32, digits: Int) -> String {
        let h = String(v, radix: 16)
        return String(repeating: "0", count: max(0, digits - h.count)) + h
    }
}
