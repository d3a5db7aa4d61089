"""bumble_dc_cache: the code `dataclasses` compiles while Bumble is imported, compiled once.

Under TCG, importing Bumble takes 5-12 s of the guest's one vCPU, most of it compiling the
generated methods (`__init__`, `__repr__`, `__eq__` …) of its ~350 dataclasses: `dataclasses`
builds each one's source text and exec()s it. The text is the same in every run, so run-vm
compiles it once on the host (`record`, natively, 0.7 s) into a marshal file in the bed's cache,
and bumble_wearable.py, in the guest, installs it before importing Bumble (`install`): a text
found there gets its code object from the file, anything else is compiled as before.

Safe by construction: the key is the whole source text, so a changed Bumble or Python produces
texts that miss (compiled as usual, never a stale method); the file is keyed by the venv's Python
version and Bumble's version (marshal's format is the interpreter's). Measured in one quiet VM:
`import bumble.device` 5.2 s → 2.9-3.6 s (docs/development.md)."""
import builtins
import dataclasses
import marshal
import os
import sys

_cache = {}
_compile = builtins.compile
_exec = builtins.exec
stats = {"hits": 0, "misses": 0}


def _cached_exec(src, globals_=None, locals_=None):
    if isinstance(src, str):
        code = _cache.get(src)
        if code is None:
            stats["misses"] += 1
            code = _cache[src] = _compile(src, "<string>", "exec")
        else:
            stats["hits"] += 1
        src = code
    return _exec(src, globals_, locals_)


def path_for(directory):
    """The cache file for this interpreter and this Bumble, in `directory`."""
    from importlib.metadata import version
    return os.path.join(directory, f"bumble-dc-{sys.implementation.cache_tag}-{version('bumble')}.marshal")


def install(path):
    """Use the compiled texts in `path` (if it exists) for every dataclass made from now on."""
    if path and os.path.exists(path):
        try:
            with open(path, "rb") as f:
                _cache.update(marshal.load(f))
        except (OSError, EOFError, ValueError, TypeError):
            _cache.clear()   # unreadable: compile as before
    dataclasses.exec = _cached_exec   # dataclasses._create_fn calls the `exec` of its module


def record(directory):
    """Import what the wearable imports, natively, and write the texts' code to the cache."""
    path = path_for(directory)
    install(None)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bumble_wearable  # noqa: F401 - the import is the point
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "wb") as f:
        marshal.dump(_cache, f)
    os.replace(tmp, path)
    return path, len(_cache)


if __name__ == "__main__":
    # bumble_dc_cache.py DIR: record into DIR; --path DIR: the file's path, recorded first if missing.
    # Through the module by its name: bumble_wearable.py installs that one, not this __main__.
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bumble_dc_cache as m
    if sys.argv[1] == "--path":
        p = m.path_for(sys.argv[2])
        if not os.path.exists(p):
            m.record(sys.argv[2])
        print(p)
    else:
        p, n = m.record(sys.argv[1])
        print(f"{p}: {n} compiled texts")
