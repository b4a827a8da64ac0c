"""Figures measured once per GPU and shared, for a while, by every grading on that GPU.

Some figures a suite compares with are the same in every grading on one GPU: the reference's
time on the timed cases is one. Measured in each grading, each grading holds the GPU alone for
them, and a GPU's exclusive seconds are what cap its gradings a minute (docs/performance.md).
A memo keeps such a figure in the grader's private folder (gpu_turns.lock_dir: mode 0700,
outside every worker's file system), named by the physical GPU, and every grading on that GPU
reads it while it is younger than `ttl_s`. The first grading to need it makes it while the others
wait on its lock, so slots that start together measure once; a grading that has other work to do
meanwhile asks without waiting (`wait=False`) and again when it needs the figure.

A figure is kept under a fingerprint of what made it (the assignment's suites and rubric, its
reference's bytes, torch's and Triton's versions): a changed reference or suite never reads an
old figure. A maker that could not measure (a busy GPU, a failure) says so through `keep`, and
nothing is kept: the next grading measures again.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..files import atomic_write

TTL_S = 600.0          # a figure older than this is measured again (clocks and neighbours drift)
LOCK_WAIT_S = 240.0    # past this, a grading stops waiting for another's measurement and makes its own


@dataclass
class Memo:
    """A memo's value and how it came: `age_s` 0 when this grading made it."""
    value: Any
    age_s: float
    made_here: bool
    waited_s: float = 0.0      # for another grading making it: its neighbours' cost, not its own


class GpuMemo:
    """Figures of one GPU, kept in `folder` under `gpu` (gpu_turns.gpu_key) and `fingerprint`."""

    def __init__(self, folder: Path, gpu: str, fingerprint: str, ttl_s: float = TTL_S):
        self.folder, self.gpu, self.fingerprint, self.ttl_s = Path(folder), gpu, fingerprint, ttl_s

    def _path(self, name: str) -> Path:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in f"{self.gpu}.{name}")
        return self.folder / f"memo.{safe}.json"

    def read(self, name: str) -> Memo | None:
        """The kept figure, if it is this fingerprint's and young enough."""
        try:
            kept = json.loads(self._path(name).read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(kept, dict) or kept.get("fingerprint") != self.fingerprint:
            return None
        age = time.time() - float(kept.get("made", 0))
        if not 0 <= age < self.ttl_s:
            return None
        return Memo(kept.get("value"), age, made_here=False)

    def get(self, name: str, make: Callable[[], Any], keep: Callable[[Any], bool] = lambda _: True,
            wait: bool = True) -> Memo | None:
        """The kept figure `name`, or make() now (under the lock, so that gradings needing it at
        once make it once) and keep it when keep(value). With `wait` false, None where another
        grading is making it: the caller goes on with other work and asks again when it needs it."""
        if self.ttl_s <= 0:
            return Memo(make(), 0.0, made_here=True)
        if not wait:
            kept = self.read(name)
            if kept is not None:
                return kept
        asked = time.monotonic()
        with self._locked(name, wait) as locked:
            waited = time.monotonic() - asked
            if not locked:
                return None
            kept = self.read(name)
            if kept is not None:
                kept.waited_s = waited
                return kept
            value = make()
            if keep(value):
                atomic_write(self._path(name), json.dumps(
                    {"fingerprint": self.fingerprint, "made": time.time(), "value": value}))
            return Memo(value, 0.0, made_here=True, waited_s=waited)

    @contextlib.contextmanager
    def _locked(self, name: str, wait: bool = True):
        """Yields whether to go on: false only without `wait`, where another holds the lock."""
        fd = os.open(self._path(name).with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            deadline = time.monotonic() + (LOCK_WAIT_S if wait else 0.0)
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if not wait:
                        yield False
                        return
                    if time.monotonic() >= deadline:
                        break          # the maker is stuck: measure here, as without a memo
                    time.sleep(0.05)
            yield True
        finally:
            os.close(fd)           # closing drops the lock


def fingerprint(assignment) -> str:
    """What a memo's figures depend on besides the GPU: the suites and rubric, the reference's
    bytes, and the versions of torch and Triton that ran them."""
    import torch
    digest = hashlib.sha256(assignment.fingerprint().encode())
    if assignment.reference.is_file():
        digest.update(assignment.reference.read_bytes())
    digest.update(torch.__version__.encode())
    with contextlib.suppress(ImportError):
        import triton
        digest.update(triton.__version__.encode())
    return digest.hexdigest()
