"""Triton's start, compiled once per machine by the grader and copied into each worker's cache.

A worker's Triton cache is its own and starts empty (proxy.Worker), so that nothing one
submission compiles can be read or replaced by another. Each worker's first kernel (the
warm-up, warmup.py) then builds Triton's driver helpers with the C compiler: `cuda_utils`,
and a launcher for the warm-up kernel's signature. That is most of the worker's Triton start
(docs/instructor.md: 1.9 s alone on the H200, 3.7 s in a class's first wave, where every slot
starts two workers at once).

The seed is the cache of one grader process that ran the warm-up and nothing else: what it
holds came from Triton's sources and the grader's warm-up kernel alone, never from a
submission or the reference. It lives in a folder of the grader's that nobody else may enter,
one per Triton and Python version; a worker gets a copy in its own cache before it starts,
made its own, so no worker reads, let alone writes, the seed itself. A submission's own kernels and their
launchers are compiled in its worker as before.

The first grading on a machine with no seed starts the build beside itself, in the
background (`ensure`), and its workers compile as they always did; later workers start
seeded. GRADER_TRITON_SEED=off turns it off.
"""
from __future__ import annotations

import fcntl
import functools
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from ..files import ours_or_none, private_folder

SWITCH = "GRADER_TRITON_SEED"
RETRY_AFTER_FAILURE_S = 3600    # a build that failed is not tried again for this long


def root() -> Path:
    return Path(tempfile.gettempdir()) / "grader-triton-seed"


@functools.cache
def tag() -> str:
    """Which seed fits this process: Triton's version and the interpreter's (the helpers are
    C extensions of this Python)."""
    try:
        version = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        version = "none"
    return f"triton-{version}-{sys.implementation.cache_tag}"


def _lock(base: Path):
    """The build lock, taken (the open file), or None while a build holds it."""
    lock = open(base / "build.lock", "a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        return None
    return lock


def enabled() -> bool:
    return os.environ.get(SWITCH, "on").strip().lower() != "off"


def seed_into(cache: Path) -> bool:
    """Copy the seed into a new worker's Triton cache; False where there is none (yet)."""
    if not enabled() or (base := ours_or_none(root())) is None:
        return False
    seed = base / tag()
    if not seed.is_dir():
        return False
    shutil.copytree(seed, cache, dirs_exist_ok=True, symlinks=False)
    return True


def ensure() -> None:
    """Start building the seed in the background where there is none, no build runs and none
    failed lately. The lock is taken here and handed to the builder, so that a class's first
    gradings, each asking at once, start one builder between them."""
    if not enabled() or (base := ours_or_none(root())) is None or (base / tag()).is_dir():
        return
    failed = base / f"{tag()}.failed"
    if failed.exists() and time.time() - failed.stat().st_mtime < RETRY_AFTER_FAILURE_S:
        return
    if (lock := _lock(base)) is None:
        return                          # a build is running
    with lock, open(base / "build.log", "ab") as log:
        subprocess.Popen([sys.executable, "-m", "grader.sandbox.triton_seed", str(lock.fileno())],
                         stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                         pass_fds=[lock.fileno()], cwd=Path(__file__).resolve().parents[2],
                         env={**os.environ, "TMPDIR": str(base.parent)})


def build(fill: Callable[[Path], None], locked_fd: int | None = None) -> bool:
    """Make the seed with `fill(cache)`, unless a build runs or the seed is there: built aside,
    then renamed in place, so a worker copies all of it or none. True where this call made it.
    `locked_fd`: the lock, already taken by the process that started this one (ensure)."""
    base = private_folder(root())
    lock = os.fdopen(locked_fd, "a") if locked_fd is not None else _lock(base)
    if lock is None:
        return False
    with lock:
        if (base / tag()).is_dir():
            return False
        aside = Path(tempfile.mkdtemp(prefix="build-", dir=base))
        try:
            fill(aside)
            os.rename(aside, base / tag())
        except BaseException:
            (base / f"{tag()}.failed").touch()
            raise
        finally:
            shutil.rmtree(aside, ignore_errors=True)
    return True


def warm_up_into(cache: Path) -> None:
    """Run the worker's warm-up kernel with `cache` as Triton's cache (this process's first
    use of Triton, so that its driver helpers are built there)."""
    os.environ["TRITON_CACHE_DIR"] = str(cache)
    from . import warmup
    warmup.run()


if __name__ == "__main__":
    build(warm_up_into, int(sys.argv[1]) if len(sys.argv) > 1 else None)
