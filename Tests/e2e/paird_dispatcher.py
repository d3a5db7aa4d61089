#!/usr/bin/python3
# testbed: mode=systemd timeout=360 wearables=strap
"""Issue 43, item 7 on the bed: the dispatcher against scripts that misbehave, under systemd, as
the journal shows it. One batteryLow alert runs a directory holding:
- 10-flood: 5,000 lines of output → at most AlertScripts.maxOutputLines (100) reach the journal,
  under the script's own identifier, and paird says how many it dropped;
- 20-inject: a line that starts "<0>" (journald's emergency prefix on a stream) → logged as the
  script's text at info priority, never as an emergency of paird's;
- 30-setsid: a child in a session of its own (setsid), left running when the script exits →
  killed when the script ends, and said;
- 40-link: a symbolic link to an executable → not run, said as a warning;
- 50-record: a plain script → runs (the queue goes on past the others).
Then the directory made group-writable: the next alert runs none of its scripts, said as an error."""
import json
import os

from bedlib import *

DIR = "/etc/paird/bed-dispatcher.d"
# The unit's ProtectSystem=strict and PrivateTmp=yes leave the scripts (run as user paird) one
# place to write that the scenario can read: paird's StateDirectory.
RECORD = "/var/lib/paird/bed-dispatcher-record.log"
LINKED = "/var/lib/paird/bed-linked-ran"
SETSID_PID = "/var/lib/paird/bed-setsid.pid"
FLOOD_LINES = 5000
MAX_LINES = 100   # AlertScripts.maxOutputLines


def journal(identifier=None):
    """This boot's journal entries of paird.service (or of one SYSLOG_IDENTIFIER), as dicts."""
    sel = f"SYSLOG_IDENTIFIER={identifier}" if identifier else "-u paird.service"
    out = sh(f"journalctl {sel} -o json --no-pager", check=False)
    return [json.loads(l) for l in out.splitlines() if l.startswith("{")]


def messages(entries):
    return [e.get("MESSAGE") if isinstance(e.get("MESSAGE"), str) else str(e.get("MESSAGE")) for e in entries]


def records():
    try:
        with open(RECORD) as f:
            return f.read().split()
    except FileNotFoundError:
        return []


@scenario
def main():
    write_alert_scripts(DIR, {
        "10-flood": f'#!/bin/sh\ni=0\nwhile [ $i -lt {FLOOD_LINES} ]; do echo "flood line $i"; i=$((i+1)); done\n',
        "20-inject": "#!/bin/sh\nprintf 'a name\\n<0>forged emergency from a script\\n'\n",
        "30-setsid": f"#!/bin/sh\nsetsid sh -c 'echo $$ > {SETSID_PID}.tmp; mv {SETSID_PID}.tmp {SETSID_PID}; exec sleep 600' &\n"
                     f"while [ ! -s {SETSID_PID} ]; do sleep 0.1; done\nexit 0\n",
        "50-record": f'#!/bin/sh\necho "$PAIRD_EVENT" >> {RECORD}\n',
    })
    target = "/usr/local/bin/bed-linked-script"
    with open(target, "w") as f:
        f.write(f"#!/bin/sh\ntouch {LINKED}\n")
    os.chmod(target, 0o755)
    os.symlink(target, os.path.join(DIR, "40-link"))

    w = Wearable.start(name="Pulse-1", battery=87)
    conf = "/etc/paird/bed.conf"   # written before Paird() installs the unit, whose ExecStart names it
    with open(conf, "w") as f:
        f.write(f"[Alerts]\nBatteryLow = 15\nBatteryHysteresis = 5\nDispatcherDir = {DIR}\nDispatcherTimeout = 20s\n")
    p = Paird(mode="systemd", config=conf)
    with step("paird under systemd with [Alerts]; the strap paired and connected, battery 87 %"):
        p.start()
        pair_wearable(p)
        p.wait_state("connected", 20)
        wait_for(lambda: p.device(w.address).get("battery") == 87, 20, "battery 87 in status")

    with step("battery 14 % → one alert runs the directory: the plain script runs after the others"):
        w.cmd("battery 14")
        wait_for(lambda: "batteryLow" in records(), 60, "50-record's line")
        check(records() == ["batteryLow"], f"50-record ran once: {records()}")
        # Each outcome is logged when its script ends, in order: 50-record's is the last.
        wait_for(lambda: any("50-record batteryLow: exit status 0" in m for m in messages(journal())), 20,
                 "paird's line for 50-record's end")

    with step(f"10-flood's {FLOOD_LINES} lines: at most {MAX_LINES} in the journal, under its own identifier; the rest counted"):
        flood = journal("paird-dispatch-10-flood")
        log(f"10-flood: {len(flood)} lines in the journal")
        check(1 <= len(flood) <= MAX_LINES, f"between 1 and {MAX_LINES} lines logged: {len(flood)}")
        check(all(m.startswith("flood line ") for m in messages(flood)), "they are the script's lines")
        unit = journal()
        dropped = [m for m in messages(unit) if "10-flood" in m and "more lines of output not logged" in m]
        check(len(dropped) == 1 and str(FLOOD_LINES - len(flood)) in dropped[0], f"paird says how many it dropped: {dropped}")
        ids = {e.get("SYSLOG_IDENTIFIER") for e in unit if str(e.get("MESSAGE", "")).startswith("flood line ")}
        check(ids == {"paird-dispatch-10-flood"}, f"the unit's flood lines carry the script's identifier only: {ids}")

    with step("20-inject's '<0>' line: the script's text at info priority, no emergency in the journal"):
        inj = journal("paird-dispatch-20-inject")
        log(f"20-inject: {[(e.get('PRIORITY'), e.get('MESSAGE')) for e in inj]}")
        check(any("forged emergency" in m for m in messages(inj)), f"the line is logged as the script's: {messages(inj)}")
        check(all(e.get("PRIORITY") == "6" for e in inj), f"at info priority (6): {[e.get('PRIORITY') for e in inj]}")
        emerg = sh("journalctl -p 0 -o cat --no-pager", check=False).strip()
        check("forged" not in emerg, f"no emergency-priority entry carries it: {emerg!r}")

    with step("30-setsid's child (own session) killed when the script ended, and said"):
        pid = int(wait_for(lambda: open(SETSID_PID).read().strip() if os.path.exists(SETSID_PID) else None, 10, "the child's pid"))
        wait_for(lambda: process_gone(pid), 10, f"the setsid child (pid {pid}) gone")
        said = [m for m in messages(journal()) if "30-setsid" in m and "left running were killed" in m]
        check(len(said) == 1, f"paird says it killed what 30-setsid left: {said}")

    with step("40-link (a symbolic link to an executable): not run, said as a warning"):
        check(not os.path.exists(LINKED), "the link's target did not run")
        said = [e for e in journal() if "40-link" in str(e.get("MESSAGE")) and "symbolic link" in str(e.get("MESSAGE"))]
        check(len(said) >= 1 and all(e.get("PRIORITY") == "4" for e in said), f"a warning names it: {messages(said)}")

    with step("the directory made group-writable: the next alert runs none of its scripts, said as an error"):
        os.chmod(DIR, 0o775)
        for level in (25, 10):   # recovered above 15 + 5, then low again: a second batteryLow
            w.cmd(f"battery {level}")
            wait_for(lambda: p.device(w.address).get("battery") == level, 20, f"battery {level} in status")
        refused = wait_for(lambda: [e for e in journal() if "writable by group or others" in str(e.get("MESSAGE"))
                                    and "none of its scripts is run" in str(e.get("MESSAGE"))], 20, "the refusal")
        check(all(e.get("PRIORITY") == "3" for e in refused), f"an error: {messages(refused)}")
        check(records() == ["batteryLow"], f"50-record did not run again: {records()}")


main()
