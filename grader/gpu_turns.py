"""Turns on a GPU shared by several gradings at once (`grade-all --per-gpu N`).

A test that times the kernel (it uses the `measure` fixture) must have the GPU to
itself, or a neighbour's tests would slow it down and cost its author points; every
other test may share the GPU. flock() gives shared and exclusive locks between
processes but no fairness: a steady stream of shared holders would starve a timing
test for ever. So every turn first passes a turnstile (an exclusive lock held only
for a moment by the tests that share, and for the whole wait by one that times),
the classic fair readers-writer scheme.
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import tempfile
from pathlib import Path

LOCK_DIR_ENV = "GRADER_GPU_LOCK_DIR"


def lock_dir() -> Path:
    folder = Path(os.environ.get(LOCK_DIR_ENV) or Path(tempfile.gettempdir()) / "grader-gpu-turns")
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder


@functools.cache
def gpu_key(index: int = 0) -> str:
    """A name for the physical GPU behind `cuda:index`, the same in every process."""
    import torch
    props = torch.cuda.get_device_properties(index)
    uuid = getattr(props, "uuid", None)
    if uuid is not None:
        return f"gpu-{uuid}"
    return f"gpu-{os.environ.get('CUDA_VISIBLE_DEVICES', 'all')}-{index}".replace(",", "_")


@contextlib.contextmanager
def turn(key: str, exclusive: bool, folder: Path | None = None):
    """Hold the GPU named `key`: alone when `exclusive`, else beside other sharers."""
    folder = folder or lock_dir()
    gate = os.open(folder / f"{key}.gate", os.O_RDWR | os.O_CREAT, 0o600)
    room = os.open(folder / f"{key}.room", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(room, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        yield
    finally:
        os.close(room)       # closing drops the lock
        os.close(gate)
