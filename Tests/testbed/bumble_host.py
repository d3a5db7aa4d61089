"""bumble_host.py RUNDIR — the host's end of a Bumble wearable (run-vm's BED_BUMBLE_HOST=1).

qemu's user network starts this (guestfwd 10.0.2.100:7000, `cmd:`) for each connection the
guest's bed-hci-relay opens, with the connection on stdin, stdout and stderr. The first line
says what the connection is:

  hci ID TRIES JSON   the wearable's HCI link: the controller hciN that bed-hci-relay took in the
                      guest, as an H4 stream. JSON = {"args": [bumble_wearable.py's arguments],
                      "log": host path of its event log, "keyspace": the run's name}. Runs
                      bumble_wearable.py here, natively, with `--transport fd:N` on this socket,
                      its control socket at RUNDIR/ID.sock, its key store under RUNDIR/keys/
                      (kept across a run's boots, as a wearable's flash would be), and ends the
                      stream with 0xFF STATUS (bed-hci-relay exits with it).
  control ID          the control protocol's lines, one reply each, passed to RUNDIR/ID.sock.

Why: Bumble's import alone takes 5-12 s under TCG (about 350 dataclasses compiled), 0.4 s
natively, and its own work (HCI log, 1 Hz notifications) competes with bluetoothd and paird for
the guest's one vCPU. The stack is the same Bumble with the same arguments; only where its
Python runs changes. docs/development.md, "Bumble on the host"."""
import json
import os
import socket
import sys
import time
import traceback

TESTBED = os.path.dirname(os.path.abspath(__file__))


def read_line(fd):
    """The header, byte by byte: nothing after its newline is consumed (HCI may follow)."""
    b = bytearray()
    while True:
        c = os.read(fd, 1)
        if not c:
            sys.exit(0)
        if c == b"\n":
            return b.decode()
        b += c


def hci(rundir, ident, tries, spec):
    link = os.dup(0)
    spec = json.loads(spec)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    log = os.open(spec["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    args = list(spec["args"])
    keys = os.path.join(rundir, "keys", spec.get("keyspace", "run"))
    if "--keystore" in args:   # the guest's path named a file: keep its name, here
        i = args.index("--keystore") + 1
        args[i] = os.path.join(keys, os.path.basename(args[i]))
    else:
        profile = args[args.index("--profile") + 1] if "--profile" in args else "strap"
        hcin = args[args.index("--hci") + 1] if "--hci" in args else "1"
        args += ["--keystore", os.path.join(keys, f"{profile}-hci{hcin}.json")]
    if "--readvertise-delay" not in args:
        # the order of a real host's events after a drop (bumble_wearable.readvertise_after_drop)
        args += ["--readvertise-delay", "0.5"]
    sys.argv = [os.path.join(TESTBED, "bumble_wearable.py")] + args + [
        "--transport", f"fd:{link}", "--socket", os.path.join(rundir, ident + ".sock"),
        "--relayed-tries", str(tries)]
    sys.path.insert(0, TESTBED)
    rc = 1
    try:
        import bumble_wearable
        rc = bumble_wearable.main() or 0
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 - said in the log; the relay exits non-zero
        traceback.print_exc()
    try:
        os.write(link, bytes([0xFF, rc & 0xFF]))
    except OSError:
        pass
    sys.stdout.flush()
    os._exit(rc)


def control(rundir, ident):
    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
    path = os.path.join(rundir, ident + ".sock")
    rd = os.fdopen(os.dup(0), "rb")
    wr = os.fdopen(os.dup(1), "wb", buffering=0)
    conn = None
    for line in rd:
        reply = None
        for attempt in (1, 2):
            try:
                if conn is None:
                    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    try:
                        s.connect(path)
                    except OSError:
                        s.close()
                        raise
                    conn = (s, s.makefile("rb"))
                conn[0].sendall(line)
                reply = conn[1].readline()
                if reply:
                    break
                raise ConnectionError("the wearable closed its control socket")
            except OSError as e:
                if conn is not None:
                    conn[0].close()
                    conn = None
                reply = f"err the wearable on the host is not answering ({type(e).__name__}: {e})\n".encode()
                if attempt == 1 and isinstance(e, (FileNotFoundError, ConnectionRefusedError)):
                    time.sleep(0.05)
        wr.write(reply if reply.endswith(b"\n") else reply + b"\n")


def main():
    rundir = sys.argv[1]
    kind, _, rest = read_line(0).partition(" ")
    if kind == "hci":
        ident, tries, spec = rest.split(" ", 2)
        hci(rundir, ident, int(tries), spec)
    elif kind == "control":
        control(rundir, rest.strip())


if __name__ == "__main__":
    main()
