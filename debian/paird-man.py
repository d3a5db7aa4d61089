#!/usr/bin/python3
"""Writes paird(8) (roff, on stdout) from `paird --experimental-dump-help` (on stdin), so the
manual and `paird --help` cannot disagree. swift-argument-parser's generate-manual would give
paird the synopsis `paird [subcommand]` and an entry for the parser's own `help` verb (paird has
no verbs) and no FILES or EXAMPLES; here the discussion's headed blocks ("Exit status:",
"Files:", "Examples:", "See also:", each a list of `  term  text` lines) become those sections.

Usage: paird --experimental-dump-help | debian/paird-man.py VERSION > paird.8"""
import json
import re
import sys

version = sys.argv[1] if len(sys.argv) > 1 else ""
command = json.load(sys.stdin)["command"]


def roff(text):
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join(("\\&" + l) if l.startswith((".", "'")) else l for l in text.split("\n"))


def flag(a):
    names = [("-" if n["kind"] == "short" else "--") + n["name"] for n in a["names"]]
    return names


options = [a for a in command.get("arguments", []) if a.get("shouldDisplay", True) and a["kind"] != "positional"]

synopsis = []
for a in options:
    if a["preferredName"]["name"] in ("help", "version"):
        continue
    names = flag(a)
    text = "\\fB" + roff(names[-1]) + "\\fR"
    if a["kind"] == "option":
        text += " \\fI" + roff(a["valueName"]) + "\\fR"
    synopsis.append("[" + text + "]")

# The discussion: paragraphs, then blocks headed "Title:" with indented `term  text` lines (a
# term alone on its line has its text on the next, further indented, lines).
paragraphs, blocks, current = [], [], None
for chunk in command.get("discussion", "").split("\n\n"):
    lines = chunk.split("\n")
    if re.fullmatch(r"[A-Z][A-Za-z ]*:", lines[0].strip()) and all(l.startswith("  ") for l in lines[1:] if l):
        entries = []
        for l in lines[1:]:
            if not l.strip():
                continue
            m = re.match(r"^  (\S.*?)(?:\s{2,}(.*))?$", l)
            if l.startswith("   ") and entries:      # the text of the term above
                entries[-1][1].append(l.strip())
            elif m:
                entries.append((m.group(1), [m.group(2)] if m.group(2) else []))
        blocks.append((lines[0].strip().rstrip(":"), entries))
    else:
        paragraphs.append(" ".join(l.strip() for l in lines if l.strip()))

out = [f'.TH PAIRD 8 "" "paird {version}" "System Manager\'s Manual"',
       ".SH NAME", "paird \\- " + roff(command.get("abstract", "").rstrip(".")),
       ".SH SYNOPSIS", ".B paird", " ".join(synopsis),
       ".SH DESCRIPTION"]
for i, p in enumerate(paragraphs):
    if i:
        out.append(".PP")
    out.append(roff(p))
out.append(".SH OPTIONS")
for a in options:
    names = ", ".join("\\fB" + roff(n) + "\\fR" for n in flag(a))
    if a["kind"] == "option":
        names += " \\fI" + roff(a["valueName"]) + "\\fR"
    out += [".TP", names, roff(a.get("abstract", ""))]
for title, entries in blocks:
    out.append(".SH " + title.upper())
    if title.lower() == "see also":
        refs = ", ".join(t for t, _ in entries)
        out.append(re.sub(r"([\w.-]+)\((\d)\)", lambda m: f"\\fB{roff(m.group(1))}\\fR({m.group(2)})", refs))
        continue
    for term, text in entries:
        out += [".TP", "\\fB" + roff(term) + "\\fR", roff(" ".join(text))]
out += [".SH AUTHORS", "paird developers"]
print("\n".join(out))
