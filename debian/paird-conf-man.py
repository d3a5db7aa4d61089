#!/usr/bin/python3
"""Writes paird.conf(5) (roff, on stdout) from etc/paird/paird.conf, the commented defaults file,
so the manual and the file cannot disagree: each `[Section]`, each `#Key = default` line with the
comment lines above it as its description."""
import re
import sys

src = sys.argv[1]
version = sys.argv[2] if len(sys.argv) > 2 else ""


def roff(text):
    text = text.replace("\\", "\\e")
    return "\n".join(("\\&" + l) if l.startswith((".", "'")) else l for l in text.split("\n"))


lines = open(src, encoding="utf-8").read().split("\n")
intro, sections, comment, current = [], [], [], None
for line in lines:
    if m := re.match(r"^\[(\w+)\]\s*$", line):
        current = (m.group(1), comment, [])
        sections.append(current)
        comment = []
    elif m := re.match(r"^#(\w+) = ?(.*)$", line):
        current[2].append((m.group(1), m.group(2), comment))
        comment = []
    elif line.startswith("#"):
        comment.append(line.lstrip("#").strip())
    elif not line.strip():
        if current is None and comment:
            intro += comment
            comment = []

out = [f'.TH PAIRD.CONF 5 "" "paird {version}" "File Formats Manual"',
       ".SH NAME", "paird.conf \\- configuration of paird, the Bluetooth LE wearable daemon",
       ".SH SYNOPSIS", "/etc/paird/paird.conf",
       ".SH DESCRIPTION", "The " + roff(re.sub(r"^/etc/paird/paird\.conf\s*\S\s*", "", " ".join(intro))),
       ".PP", "The file is read once at start-up (a change needs \\fBsystemctl restart paird\\fR);"
       " \\fBpaird \\-\\-check\\-config\\fR checks it. Sections and keys are case-sensitive; a key is"
       " written \\fIKey\\fR = \\fIvalue\\fR, a line starting with # is a comment."]
for name, desc, keys in sections:
    out += [".SH [" + name + "]"]
    if desc:
        out += [roff(" ".join(desc))]
    for key, default, text in keys:
        out += [".TP", f"\\fB{key}\\fR = \\fI{roff(default) if default else '(empty)'}\\fR (default)",
                roff(" ".join(text)) if text else ""]
out += [".SH FILES", ".TP", "/etc/paird/paird.conf", "this file",
        ".TP", "/var/lib/paird/state.json", "paired wearables and what you want of them (written by paird)",
        ".SH SEE ALSO", "\\fBpaird\\fR(8), \\fBpairctl\\fR(1)"]
print("\n".join(l for l in out if l is not None))
