#!/usr/bin/python3
"""The words paird wrote in one e2e run, against another run's (issue 44: "the record, metrics and
journal tokens identical on the same scenario before and after").

  tokens.py RUN_DIR_A RUN_DIR_B     (each a testbed-out/<run>/ directory of the same scenario)

From each run: the journal's structured fields (paird.log: PAIRD_EVENT, PAIRD_STATE,
PAIRD_PREVIOUS_STATE, PAIRD_REASON on every report line), the availability record
(history.jsonl, when the run kept it: type, condition, reason of each line) and the Prometheus
textfile (paird.prom, when kept: metric names and label values). It prints, per kind, the
distinct words each run used and the sequence of (event, state, reason) reports, and exits 1
when the words differ. Times, counts and levels are left out: two runs of a scenario under TCG
differ in them, not in the vocabulary. A sequence that differs is printed, not failed on (a
walk that takes one more Connect() shows one more line)."""
import json
import os
import re
import sys

FIELDS = ("PAIRD_EVENT", "PAIRD_STATE", "PAIRD_PREVIOUS_STATE", "PAIRD_REASON")
FIELD = re.compile(r"(PAIRD_[A-Z_]+)=([^\s\]]*)")


def journal(run):
    """(event, state, previous, reason) per report line of paird.log, in order."""
    out = []
    path = os.path.join(run, "paird.log")
    if not os.path.exists(path):
        return out
    with open(path, errors="replace") as f:
        for line in f:
            if "[PAIRD_" not in line:
                continue
            fields = dict(FIELD.findall(line[line.rindex("[PAIRD_"):]))
            if "PAIRD_EVENT" in fields:
                out.append(tuple(fields.get(k, "") for k in FIELDS))
    return out


def record(run):
    """(type, condition, reason) per line of history.jsonl, in order."""
    out = []
    path = os.path.join(run, "history.jsonl")
    if not os.path.exists(path):
        return None
    with open(path, errors="replace") as f:
        for line in f:
            try:
                r = json.loads(line)
            except ValueError:
                continue
            out.append((r.get("type", ""), r.get("condition", ""), r.get("reason", "")))
    return out


def metrics(run):
    """The textfile's metric names and label values (no sample values)."""
    path = os.path.join(run, "paird.prom")
    if not os.path.exists(path):
        return None
    words = set()
    with open(path) as f:
        for line in f:
            if not line.strip() or line.startswith("#"):
                continue
            name = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0)
            words.add(name)
            for k, v in re.findall(r'(\w+)="([^"]*)"', line):
                if k not in ("address", "name", "device"):
                    words.add(f"{k}={v}")
    return words


def vocabulary(rows):
    return {f"{k}={v}" for row in rows for k, v in zip(FIELDS, row) if v} if rows is not None else None


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    a, b = sys.argv[1:]
    differs = False
    for kind, get, vocab in (("journal", journal, vocabulary),
                             ("record", record, lambda rows: None if rows is None else {"/".join(r) for r in rows}),
                             ("metrics", metrics, lambda words: words)):
        ra, rb = get(a), get(b)
        va, vb = vocab(ra), vocab(rb)
        if va is None or vb is None:
            print(f"{kind}: not kept in {'both runs' if va is None and vb is None else (a if va is None else b)}")
            continue
        only_a, only_b = sorted(va - vb), sorted(vb - va)
        print(f"{kind}: {len(va)} distinct words in A, {len(vb)} in B; "
              + ("identical" if not only_a and not only_b else f"only in A {only_a}, only in B {only_b}"))
        differs |= bool(only_a or only_b)
        if kind != "metrics" and ra != rb:
            print(f"{kind}: the sequences differ ({len(ra)} against {len(rb)} lines):")
            for i in range(max(len(ra), len(rb))):
                x = ra[i] if i < len(ra) else ()
                y = rb[i] if i < len(rb) else ()
                print(f"  {'=' if x == y else '≠'} {' '.join(x):60} | {' '.join(y)}")
    sys.exit(1 if differs else 0)


main()
