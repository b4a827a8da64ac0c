"""Turns on a GPU shared by several gradings at once (`grade-all --jobs N` with N above the GPUs).

A test that times the kernel (it uses the `measure` fixture) must have the GPU to
itself, or a neighbour's tests would slow it down and cost its author points; every
other test may share the GPU. flock() gives shared and exclusive locks between
processes but no fairness: a steady stream of shared holders would starve a timing
test for ever. So every turn first passes a turnstile (an exclusive lock held only
for a moment by the tests that share, and for the whole wait by one that times),
the classic fair readers-writer scheme.

A sharer may be stuck: a test waiting on a hung worker holds its turn for up to the
call timeout, and a timing test behind it would wait as long (three minutes on the
H200, behind a submission that hangs). So a timing test waits at most EXCLUSIVE_WAIT_S
for the sharers already inside; then it goes ahead beside them, keeping newcomers out,
and says so (the turn yields whether the GPU was had alone).

Most stuck sharers are stuck on the CPU: a call that sleeps or loops in Python until its
timeout, three such calls in a row for a file that ignores signals. A timing neighbour
waiting EXCLUSIVE_WAIT_S for each of them made a reference grading beside such a file take
127 s against 21 s alone on the H200. So a sharer still inside after SHARE_HOLD_S steps
aside: it leaves the room for a "stuck" lock it holds (shared) until its test ends. A timing
test that finds the room free and that lock held goes ahead at once, and its turn says it
was not alone, as after the bounded wait.

A holder may be stuck too: a timing test whose worker hangs would keep every
neighbour out. So a turn taken with `hold_s` has a deadline: past it a timer in the
holder's process gives the lock back, the neighbours go on, and the holder learns it
lost the turn (`Turn.lost`; the plugin fails its test for that reason).
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import tempfile
import threading
import time
from pathlib import Path

from .files import private_folder

LOCK_DIR_ENV = "GRADER_GPU_LOCK_DIR"
EXCLUSIVE_WAIT_S = 30.0     # the longest test that shares the GPU takes about 5 s on the H200
HOLD_S = 90.0               # a timing test's turn: past one call's timeout (60 s), which only a stuck test reaches
SHARE_HOLD_S = 5.0          # a sharing test inside longer is stuck: the longest on the H200 took 1.8 s warm


class Turn:
    """A held turn: `alone` (see turn) and whether it was `lost` at its deadline."""

    def __init__(self, alone: bool):
        self.alone = alone
        self.lost = False
        self.hold_s: float | None = None

    def __bool__(self) -> bool:
        return self.alone


def lock_dir() -> Path:
    return private_folder(Path(os.environ.get(LOCK_DIR_ENV) or Path(tempfile.gettempdir()) / "grader-gpu-turns"))


@functools.cache
def gpu_key(index: int = 0) -> str:
    """A name for the physical GPU behind `cuda:index`, the same in every process."""
    import torch
    props = torch.cuda.get_device_properties(index)
    uuid = getattr(props, "uuid", None)
    if uuid is not None:
        return f"gpu-{uuid}"
    return f"gpu-{os.environ.get('CUDA_VISIBLE_DEVICES', 'all')}-{index}".replace(",", "_")


def _lock_within(fd: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)


@contextlib.contextmanager
def turn(key: str, exclusive: bool, folder: Path | None = None, wait_s: float = EXCLUSIVE_WAIT_S,
         hold_s: float | None = None, share_s: float = SHARE_HOLD_S):
    """Hold the GPU named `key`: alone when `exclusive`, else beside other sharers.
    Yields a Turn, false only for an exclusive turn that went ahead beside stuck sharers;
    with `hold_s` (exclusive turns), the lock is given back that many seconds in, and the Turn
    says it was lost. A sharer steps aside `share_s` seconds in (see the module's doc)."""
    folder = folder or lock_dir()
    gate = os.open(folder / f"{key}.gate", os.O_RDWR | os.O_CREAT, 0o600)
    room = os.open(folder / f"{key}.room", os.O_RDWR | os.O_CREAT, 0o600)
    stuck = os.open(folder / f"{key}.stuck", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(gate, fcntl.LOCK_EX)
        alone = True
        try:
            if exclusive:
                alone = _lock_within(room, wait_s) and _free(stuck)
            else:
                fcntl.flock(room, fcntl.LOCK_SH)
        finally:
            if alone:        # one that is not alone keeps the gate: no newcomer joins it
                fcntl.flock(gate, fcntl.LOCK_UN)
        held = Turn(alone)
        if exclusive and hold_s is not None:
            held.hold_s = hold_s
            timer = threading.Timer(hold_s, _expire, args=(held, room, gate))
        elif exclusive:
            timer = None
        else:
            timer = threading.Timer(share_s, _step_aside, args=(room, stuck))
        if timer is not None:
            timer.daemon = True
            timer.start()
        try:
            yield held
        finally:
            if timer is not None:
                timer.cancel()
                timer.join()     # an expiry under way finishes before the fds are closed
    finally:
        os.close(room)       # closing drops the locks
        os.close(stuck)
        os.close(gate)


def _free(stuck: int) -> bool:
    """No sharer that stepped aside is still inside."""
    try:
        fcntl.flock(stuck, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    fcntl.flock(stuck, fcntl.LOCK_UN)
    return True


def _expire(held: Turn, room: int, gate: int) -> None:
    held.lost = True
    fcntl.flock(room, fcntl.LOCK_UN)
    fcntl.flock(gate, fcntl.LOCK_UN)


def _step_aside(room: int, stuck: int) -> None:
    fcntl.flock(stuck, fcntl.LOCK_SH)      # first: a timing test never finds both free meanwhile
    fcntl.flock(room, fcntl.LOCK_UN)
