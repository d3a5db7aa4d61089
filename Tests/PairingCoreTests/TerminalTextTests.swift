import Testing
import PairingCore

/// The one output rule for strings paird does not control (`String.terminalSafe`): what a name
/// from the air becomes on a terminal.
@Suite("terminalSafe: control, bidi and format characters become visible escapes")
struct TerminalTextTests {
    @Test("plain UTF-8 is unchanged", arguments: ["Pulse‑Ü 心", "Polar H10 8C3B4A2D", "", "A\u{FFFD}B", "e\u{301} (a combining mark)", "👍🏽"])
    func plain(_ s: String) {
        #expect(s.terminalSafe == s)
    }

    @Test("escape sequences, BEL, new line, CR, tab, DEL, C1", arguments: [
        ("\u{1b}[8mhidden\u{1b}[0m", "\\x1b[8mhidden\\x1b[0m"),
        ("\u{1b}]0;owned\u{07}", "\\x1b]0;owned\\x07"),
        ("two\nlines", "two\\nlines"),
        ("back\rfound AA:BB:CC:DD:EE:FF", "back\\rfound AA:BB:CC:DD:EE:FF"),
        ("a\tb", "a\\tb"),
        ("\u{0}\u{1}\u{1f}", "\\x00\\x01\\x1f"),
        ("del\u{7f}", "del\\x7f"),
        ("csi\u{9b}2J nel\u{85} \u{80}", "csi\\x9b2J nel\\x85 \\x80"),
        ("back\\slash \\x1b", "back\\\\slash \\\\x1b"),
    ])
    func controls(_ input: String, _ shown: String) {
        #expect(input.terminalSafe == shown)
    }

    @Test("bidi controls, zero-width and other format characters, line separators", arguments: [
        ("abc\u{202E}fdp.exe", "abc\\u{202e}fdp.exe"),
        ("\u{202A}\u{202B}\u{202C}\u{202D}", "\\u{202a}\\u{202b}\\u{202c}\\u{202d}"),
        ("\u{2066}\u{2067}\u{2068}\u{2069}", "\\u{2066}\\u{2067}\\u{2068}\\u{2069}"),
        ("\u{200E}\u{200F}\u{061C}", "\\u{200e}\\u{200f}\\u{061c}"),
        ("Wa\u{200B}tch", "Wa\\u{200b}tch"),
        ("\u{200C}\u{200D}\u{2060}\u{FEFF}", "\\u{200c}\\u{200d}\\u{2060}\\u{feff}"),
        ("soft\u{AD}hyphen", "soft\\u{00ad}hyphen"),
        ("tag\u{E0041}", "tag\\u{e0041}"),
        ("line\u{2028}para\u{2029}", "line\\u{2028}para\\u{2029}"),
    ])
    func invisible(_ input: String, _ shown: String) {
        #expect(input.terminalSafe == shown)
    }

    @Test("the result is one line of printable characters, and different inputs stay different")
    func oneLine() {
        var every = ""
        for v in UInt32(0)...0x2FFF { if let s = Unicode.Scalar(v) { every.unicodeScalars.append(s) } }
        let shown = every.terminalSafe
        for s in shown.unicodeScalars {
            #expect(!TerminalText.mustEscape(s) || s == "\\", "U+\(String(s.value, radix: 16)) left raw")
            #expect(s.value >= 0x20 && !(0x7f...0x9f).contains(s.value) && s.properties.generalCategory != .format)
        }
        // reversible: a name spelling an escape is not shown as that escape
        #expect("\u{1b}".terminalSafe != "\\x1b".terminalSafe)
        #expect("\n".terminalSafe != "\\n".terminalSafe)
    }
}
