"""Quiet timing windows: a figure counts only if nothing but this grading used its GPU.

The GPU is time-sliced between processes: a neighbour's kernels, or kernels a frozen worker
left queued (SIGSTOP stops a process's threads, not its work on the GPU), stretch our timed
launches and would cost an honest author points. Turns (turns.py) keep other gradings'
tests out of a timing test's way, and workers are frozen between their calls; what is left
is seen here, through NVML's per-process utilisation samples: before a measurement we wait
until no process outside this grading has used the GPU lately, and after it we look at the
samples that cover it. A measurement beside foreign work is made again; where no quiet
window comes within the bound, the figure is not measured (`Busy`), never failed, and the
report asks for a regrade.

NVML samples are coarse (0.2-1 s on the H200), so a sample that covers the window is awaited
after it ends: each measurement costs about that much more. Without NVML (no driver library,
or nvidia-ml-py not installed) nothing can be checked, and the window says so instead.
"""
from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass
from typing import Callable, TypeVar

from ..sandbox import SandboxFailure, nvml

T = TypeVar("T")

ATTEMPTS = 4            # measurements tried beside foreign work before giving up
WAIT_S = 10.0           # the longest wait for a quiet GPU, over all attempts of one measurement
BUDGET_S = 20.0         # ... and over all measurements of one grading: past it, Busy at once
RECENT_S = 0.25         # "lately": foreign samples this recent make the GPU busy (the H200
                        # samples every 0.2 s)
COVER_S = 1.2           # after a window, how long a sample that covers its end is awaited
POLL_S = 0.1            # how often the samples are read during a window: NVML keeps one per
                        # process, so a burst could be hidden by a later idle sample


class Busy(SandboxFailure):
    """No quiet window came: the figure was not measured, and the grading is to be regraded."""
    outcome = "not_measured"


@dataclass
class Activity:
    pid: int
    sm: int
    mem: int
    seconds: float = 0.0    # how long it was seen busy, readings apart (at least one look-back)

    def __str__(self) -> str:
        return f"pid {self.pid} at {max(self.sm, self.mem)}% for {self.seconds:.1f} s"


def _now_us() -> int:
    return int(time.time() * 1e6)


class QuietGpu:
    """Measurements on one GPU, made only while no process but `ours()` uses it."""

    def __init__(self, index: int, ours: Callable[[], set[int]]):
        self.ours = ours
        self.handle, self.problem = nvml.handle(index)
        self.windows: list[int] = []       # each quiet measurement: how many attempts it took
        self.serving = 0                   # figures the quiet measurements made may still back
        self.unchecked = self.handle is None
        self.budget_s = BUDGET_S
        self.waited_s = 0.0                # waiting for quiet, over the grading
        self.redone_s = 0.0                # measurements thrown away for foreign work in them: the
                                           # neighbours' cost, as a wait is (validate's budgets)
        # What a measurement runs inside: the plugin sets the GPU's exclusive turn here for a
        # timing test, so that the grading holds the GPU alone for its measurements only.
        self.window: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext

    def foreign(self, since_us: int, ours: set[int]) -> list[Activity]:
        """Processes outside `ours` that used the GPU in samples taken after since_us."""
        seen: dict[int, list[nvml.Sample]] = {}
        for s in nvml.busy_since(self.handle, since_us):
            if s.pid not in ours:
                seen.setdefault(s.pid, []).append(s)
        return [Activity(pid, max(s.sm for s in ss), max(s.mem for s in ss)) for pid, ss in seen.items()]

    def wait_quiet(self, deadline: float, ours: set[int]) -> list[Activity]:
        """Wait until no foreign process used the GPU in the last RECENT_S; what was last seen
        busy when the deadline passed, or [] once quiet."""
        first: dict[int, float] = {}
        while True:
            busy = self.foreign(_now_us() - int(RECENT_S * 1e6), ours)
            now = time.monotonic()
            for a in busy:
                a.seconds = now - first.setdefault(a.pid, now) + RECENT_S
            if not busy or now >= deadline:
                return busy
            time.sleep(0.05)

    def covered_end(self, end_us: int) -> None:
        """Wait for the samples that cover the window's end to be taken."""
        import pynvml
        until = time.monotonic() + COVER_S
        while time.monotonic() < until:
            try:
                rates = pynvml.nvmlDeviceGetSamples(self.handle, pynvml.NVML_GPU_UTILIZATION_SAMPLES, end_us)
                if rates[1]:
                    return
            except pynvml.NVMLError:
                pass
            time.sleep(0.05)

    def measure(self, fn: Callable[[], T], serves: int | Callable[[T], int] = 1) -> T:
        """fn() in a quiet window: made again beside foreign work, Busy past the bound. Its
        result backs `serves` recorded figures (tests' measures; a function of the result gives
        the number): several tests timed in one window (one wait for the GPU alone, one NVML
        wait on each side) say so."""
        with self.window():
            if self.handle is None:
                result = fn()
                self.windows.append(1)
            else:
                result = self._attempts(fn, time.monotonic() + max(0.0, min(WAIT_S, self.budget_s)))
        self.serving += serves(result) if callable(serves) else serves
        return result

    def _attempts(self, fn: Callable[[], T], deadline: float) -> T:
        busy: list[Activity] = []
        beside = 0                         # measurements made again for foreign work in them
        began = time.monotonic()
        # Once per measurement: a scan of /proc from the watching thread would hold the GIL
        # while the window runs, and slow the very timing it guards.
        ours = self.ours()
        for attempt in range(1, ATTEMPTS + 1):
            waited = time.monotonic()
            busy = self.wait_quiet(deadline, ours)
            self.waited_s += time.monotonic() - waited
            self.budget_s -= time.monotonic() - waited      # only waiting counts, not measuring
            if busy:
                break
            start, window_began = _now_us(), time.monotonic()
            with _Watch(self, start, ours) as watch:
                result = fn()
                end = _now_us()
                self.covered_end(end)
            busy = watch.seen
            if not busy:
                self.windows.append(attempt)
                return result
            beside += 1
            self.redone_s += time.monotonic() - window_began
            if time.monotonic() >= deadline:
                break
        tried = f"{beside} measurement(s) made beside it and " if beside else ""
        raise Busy("not measured: the GPU was busy with work outside this grading ("
                   + (", ".join(map(str, busy)) or "seen before") + f"), through {tried}"
                   f"{time.monotonic() - began:.1f} s of waiting for it to end; the grading is marked for a regrade, and "
                   "no point is lost to it")


class _Watch:
    """Reads the samples since `start` every POLL_S from a thread of ours while a window runs,
    and once more at its end; `seen` is every foreign process found busy in any reading."""

    def __init__(self, quiet: QuietGpu, start_us: int, ours: set[int]):
        self.quiet, self.start_us, self.ours = quiet, start_us, ours
        self.found: dict[int, Activity] = {}
        self.first: dict[int, float] = {}      # when each was first seen busy
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)

    def _read(self) -> None:
        now = time.monotonic()
        for a in self.quiet.foreign(self.start_us, self.ours):
            a.seconds = now - self.first.setdefault(a.pid, now) + POLL_S
            known = self.found.get(a.pid)
            if known is not None:
                a.sm, a.mem = max(a.sm, known.sm), max(a.mem, known.mem)
            self.found[a.pid] = a

    def _poll(self) -> None:
        while not self.done.wait(POLL_S):
            self._read()

    def __enter__(self) -> "_Watch":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join()
        self._read()

    @property
    def seen(self) -> list[Activity]:
        return list(self.found.values())


class Unchecked:
    """Where there is no GPU: measurements run as they are (nothing is scored on a timing there)."""
    unchecked = True
    problem = None
    waited_s = redone_s = 0.0

    def __init__(self):
        self.windows: list[int] = []
        self.serving = 0
        self.window = contextlib.nullcontext

    def measure(self, fn: Callable[[], T], serves: int | Callable[[T], int] = 1) -> T:
        result = fn()
        self.windows.append(1)
        self.serving += serves(result) if callable(serves) else serves
        return result
