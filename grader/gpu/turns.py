"""Turns on a GPU shared by several gradings at once (`grade-all --jobs N` with N above the GPUs).

A test that times the kernel (it uses the `measure` fixture) must have the GPU to
itself, or a neighbour's tests would slow it down and cost its author points; every
other test may share the GPU. flock() gives shared and exclusive locks between
processes but no fairness: a steady stream of shared holders would starve a timing
test for ever. So every turn first passes a turnstile (an exclusive lock held only
for a moment by the tests that share, and for the whole wait by one that times),
the classic fair readers-writer scheme.

Timing tests go before sharers that came while they waited. The turnstile alone did not do
that: a timing test lets go of it once it has the GPU, and a sharer that took it next got in
first when that test was done, so the next timing test waited for the sharer's whole test to end
while the GPU stood mostly idle (docs/instructor.md). So a timing test holds a "want" lock
(shared among timing tests) from its request until it has the GPU, and a sharer waits until
nobody holds it: timing tests that queue up while one measures run one after another, with one
drain for all of them.

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

A sharer holds the room for GPU work, not for the whole test: a timing test's wait for the
sharers inside (a drain) used to last until each neighbour's test ended, the longest part of a
class's time on the H200 (docs/instructor.md). So a sharer passes a checkpoint before each call
into its worker (`checkpoint()`, which the grading's workers run): where a timing test waits, it
settles its own GPU work, leaves the room, and comes back once the timing tests are done. Its GPU
work between two checkpoints stays inside the room, so a timing window still sees none of it.

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
import sys
import tempfile
import threading
import time
from pathlib import Path

from ..files import private_folder

LOCK_DIR_ENV = "GRADER_GPU_LOCK_DIR"
EXCLUSIVE_WAIT_S = 30.0     # the longest test that shares the GPU takes about 5 s on the H200
HOLD_S = 90.0               # a timing test's turn: past one call's timeout (60 s), which only a stuck test reaches
SHARE_HOLD_S = 5.0          # a sharing test inside longer is stuck: the longest on the H200 took 1.8 s warm


class Turn:
    """A held turn: `alone` (see turn) and whether it was `lost` at its deadline. A shared turn
    can become exclusive for the length of a block (`exclusive()`): a timing test shares the
    GPU while it builds inputs and compiles, and has it alone only while it measures."""

    def __init__(self, gate: int, room: int, stuck: int, share_s: float, want: int):
        self._gate, self._room, self._stuck, self._share_s, self._want = gate, room, stuck, share_s, want
        self.alone = True
        self.lost = False
        self.hold_s: float | None = None
        self.exclusive_s = 0.0             # time spent holding the GPU alone
        self.waited_s = 0.0                # ... and waiting for it, then for the shared turn back
        self.checkpoint_waited_s = 0.0     # ... and, sharing, at checkpoints (of waited_s)
        self._exclusive = False
        self._timer: threading.Timer | None = None

    def __bool__(self) -> bool:
        return self.alone

    def _take_shared(self) -> None:
        fcntl.flock(self._want, fcntl.LOCK_EX)      # no timing test is waiting for the GPU
        fcntl.flock(self._want, fcntl.LOCK_UN)
        fcntl.flock(self._gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(self._room, fcntl.LOCK_SH)
        finally:
            fcntl.flock(self._gate, fcntl.LOCK_UN)
        self._exclusive = False
        self._start(threading.Timer(self._share_s, _step_aside, args=(self._room, self._stuck)))

    def checkpoint(self) -> float:
        """Between two pieces of a sharer's GPU work: if a timing test waits for the GPU, this
        process's queued GPU work is finished, the room left to it and taken again after it;
        the seconds waited are returned (0 where nobody waited, at the cost of one flock)."""
        if self._exclusive or not _held(self._want):     # no timing test waits
            return 0.0
        asked = time.monotonic()
        torch = sys.modules.get("torch")       # not imported: nothing of ours is on the GPU
        if torch is not None and torch.cuda.is_initialized():
            torch.cuda.synchronize()           # nothing of ours may run in its window
        self._leave()
        self._take_shared()
        waited = time.monotonic() - asked
        self.waited_s += waited
        self.checkpoint_waited_s += waited
        return waited

    def _take_exclusive(self, wait_s: float, hold_s: float | None) -> None:
        fcntl.flock(self._want, fcntl.LOCK_SH)
        try:
            fcntl.flock(self._gate, fcntl.LOCK_EX)
            alone = _lock_within(self._room, wait_s) and not _held(self._stuck)
        finally:
            fcntl.flock(self._want, fcntl.LOCK_UN)
        if alone:            # one that is not alone keeps the gate: no newcomer joins it
            fcntl.flock(self._gate, fcntl.LOCK_UN)
        self.alone = self.alone and alone
        self._exclusive = True
        if hold_s is not None:
            self.hold_s = hold_s
            self._start(threading.Timer(hold_s, _expire, args=(self, self._room, self._gate)))

    def _start(self, timer: threading.Timer) -> None:
        timer.daemon = True
        self._timer = timer
        timer.start()

    def _leave(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer.join()     # an expiry under way finishes before the locks go
            self._timer = None
        for fd in (self._room, self._stuck, self._gate):
            fcntl.flock(fd, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def exclusive(self, wait_s: float = EXCLUSIVE_WAIT_S, hold_s: float | None = None):
        """From a shared turn: the GPU alone for the block (as turn(exclusive=True) gives it),
        then shared again. The shared lock is left first: a process waiting on its own
        sharer would wait out wait_s. Inside a block already held alone, it is that block."""
        if self._exclusive:
            yield self
            return
        self._leave()
        asked = began = time.monotonic()
        try:
            self._take_exclusive(wait_s, hold_s)
            began = time.monotonic()
            self.waited_s += began - asked
            yield self
        finally:
            ended = time.monotonic()
            self.exclusive_s += ended - began
            self._leave()
            self._take_shared()
            self.waited_s += time.monotonic() - ended


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
    want = os.open(folder / f"{key}.want", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        held = Turn(gate, room, stuck, share_s, want)
        if exclusive:
            held._take_exclusive(wait_s, hold_s)
        else:
            held._take_shared()
        _HELD.__dict__.setdefault("turns", []).append(held)
        try:
            yield held
        finally:
            _HELD.turns.remove(held)
            held._leave()
    finally:
        os.close(room)       # closing drops the locks
        os.close(stuck)
        os.close(gate)
        os.close(want)


_HELD = threading.local()       # .turns: the turns this thread holds, innermost last


def current() -> Turn | None:
    """The innermost turn this thread holds, if any."""
    turns = getattr(_HELD, "turns", None)
    return turns[-1] if turns else None


def checkpoint() -> float:
    """Turn.checkpoint of the innermost turn this thread holds (none: nothing to do). The
    grading's workers run it before each call (Submission.between_calls)."""
    held = current()
    return held.checkpoint() if held is not None else 0.0


def _held(fd: int) -> bool:
    """Whether another holds a lock on fd's file (the want lock: a timing test waits; the stuck
    lock: a sharer that stepped aside is still inside)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    fcntl.flock(fd, fcntl.LOCK_UN)
    return False



def _expire(held: Turn, room: int, gate: int) -> None:
    held.lost = True
    fcntl.flock(room, fcntl.LOCK_UN)
    fcntl.flock(gate, fcntl.LOCK_UN)


def _step_aside(room: int, stuck: int) -> None:
    fcntl.flock(stuck, fcntl.LOCK_SH)      # first: a timing test never finds both free meanwhile
    fcntl.flock(room, fcntl.LOCK_UN)
