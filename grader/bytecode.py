"""Compiled bytecode of the packages every grading process imports (torch and pytest), kept by
the grader in a folder of its own where the Python installation keeps none.

An installation built without bytecode (the course's GPU runner has none for torch, and
PYTHONDONTWRITEBYTECODE set) makes every process compile torch's source as it imports it: a
grading host, and each worker, again and again (docs/instructor.md has the figures). Python
can read and write bytecode in a folder apart from the sources (PYTHONPYCACHEPREFIX); this
module decides whether the grader's processes use one, and when they write to it.

Trust. Bytecode is code: whoever can write the folder runs code in every later grading. So:
- it is this user's, and nobody else may write it (checked each time, as for the uid locks);
- only a grader process writes, and only inside `writing()`, around its imports of third-party
  packages: nothing of the grader's or the assignment's (the hidden tests) is ever compiled
  into it, so a worker that reads it learns nothing;
- workers read it and never write it: they run under another uid, with the folder in their
  view read-only (grader/sandbox/confine.python_paths), and with bytecode writing off.
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

from .files import ours_or_none

SWITCH = "GRADER_BYTECODE"      # "auto" (default): used where torch has no bytecode of its own; "on"; "off"
PREFIX_ENV = "PYTHONPYCACHEPREFIX"


def folder() -> Path:
    return Path(tempfile.gettempdir()) / "grader-bytecode"


def installation_lacks_bytecode(package: str = "torch") -> bool:
    """Whether `package` was installed without its __pycache__ (then each import compiles it)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return False
    source = Path(spec.origin)
    return not (source.parent / "__pycache__" / f"{source.stem}.{sys.implementation.cache_tag}.pyc").is_file()


def _ours(path: Path) -> bool:
    return ours_or_none(path, others_read=True) is not None


def chosen() -> Path | None:
    """The folder the grader's processes share their bytecode in, or None (they use the
    installation's own, or compile as they import)."""
    switch = os.environ.get(SWITCH, "auto").strip().lower()
    if switch == "off" or (switch != "on" and not installation_lacks_bytecode()):
        return None
    path = folder()
    return path if _ours(path) else None


def environment(env: dict[str, str]) -> dict[str, str]:
    """`env` for a grader process (a grading host, a cold session): bytecode read from the
    chosen folder, and written there only inside writing()."""
    path = chosen()
    if path is None:
        env.pop(PREFIX_ENV, None)
    else:
        env[PREFIX_ENV] = str(path)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def in_use() -> str | None:
    """This process's bytecode folder, where it is the grader's (what a worker is given to read)."""
    prefix = sys.pycache_prefix
    return prefix if prefix and os.path.realpath(prefix) == os.path.realpath(folder()) and _ours(folder()) else None


@contextlib.contextmanager
def writing():
    """Imports inside write their bytecode to the folder in use; nothing happens without one.
    For third-party packages only (see the module's docstring). What they make there is writable
    by this user alone, whatever the umask (a group's member could otherwise plant code)."""
    if in_use() is None:
        yield
        return
    before, sys.dont_write_bytecode = sys.dont_write_bytecode, False
    umask = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(umask)
        sys.dont_write_bytecode = before


def imported(name: str):
    """The third-party module `name`, imported inside writing() if this process has not imported
    it yet: a grading host's later sessions find it imported and leave bytecode and umask alone."""
    if name in sys.modules:
        return sys.modules[name]
    with writing():
        return importlib.import_module(name)
