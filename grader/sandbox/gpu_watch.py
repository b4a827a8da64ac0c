"""A frozen worker must leave the GPU alone.

A worker synchronises the whole device before it answers, and is frozen (SIGSTOP) until its
next call. SIGSTOP stops threads, not kernels: work launched after that synchronise (from a
thread, or a child process with a context of its own) runs on while the worker is frozen, and
every neighbouring grading's timing waits on it (grader/gpu/quiet.py only sees it, and waits). So while
a worker is frozen, NVML's per-process samples of its processes are read here; one seen using the
GPU well after it was frozen is killed with its tree, which ends its CUDA contexts and the work
queued on them. Its next call then fails with the reason (`Worker.death`): the test in flight is
lost, and the neighbours go on.

An honest worker is idle on the GPU once frozen: only a sample taken after FROZEN_GRACE_S can
convict, a sample's period being at most a second (0.2 s on the H200), and it takes BUSY_SAMPLES
of them, so a late or odd sample alone convicts nobody. NVML answers one sample per process, its
latest, so the samples are gathered over the watch's readings.
"""
from __future__ import annotations

import threading
import time
from typing import Protocol

from . import nvml

FROZEN_GRACE_S = 1.0     # samples this long after the freeze cover nothing from before it
BUSY_SAMPLES = 2         # busy samples after the grace that end the worker
POLL_S = 0.25


class Frozen(Protocol):
    """What the watch reads of a frozen worker (proxy.Worker)."""
    frozen: set[int]
    frozen_at_us: int

    def end_for(self, why: str) -> None: ...


def left_running(samples: list[nvml.Sample], pids: set[int], frozen_at_us: int) -> str | None:
    """Why a worker frozen at frozen_at_us, of processes `pids`, is to be ended, from NVML's busy
    samples; None while they do not convict it."""
    after = frozen_at_us + int(FROZEN_GRACE_S * 1e6)
    busy = [s for s in samples if s.pid in pids and s.stamp_us > after]
    stamps = sorted({s.stamp_us for s in busy})
    if len(stamps) < BUSY_SAMPLES:
        return None
    peak = max(max(s.sm, s.mem) for s in busy)
    return (f"your code left work running on the GPU after its call had returned: process {busy[0].pid} was "
            f"still using the GPU (up to {peak}%) {(stamps[-1] - frozen_at_us) / 1e6:.1f} s after the call, while "
            "the grader was not calling it. A call must finish all the GPU work it starts before it returns "
            "(work queued from another thread or process is not waited for); the grader ended the process, "
            "and the work it had queued with it")


class FrozenGpuWatch:
    """One thread per grading process, reading NVML while any of its workers is frozen."""

    def __init__(self, gpu, start: bool = True):
        self.gpu = gpu
        self.workers: set[Frozen] = set()
        self.seen: dict[Frozen, dict[tuple[int, int], nvml.Sample]] = {}   # since the worker's freeze
        self.lock = threading.Lock()
        self.wake = threading.Event()
        if start:
            threading.Thread(target=self._run, daemon=True, name="frozen-gpu-watch").start()

    def watch(self, worker: Frozen) -> None:
        with self.lock:
            self.workers.add(worker)
            self.seen[worker] = {}
        self.wake.set()

    def forget(self, worker: Frozen) -> None:
        with self.lock:
            self.workers.discard(worker)
            self.seen.pop(worker, None)

    def _run(self) -> None:
        while True:
            self.wake.wait()
            time.sleep(POLL_S)
            with self.lock:
                workers = list(self.workers)
                if not workers:
                    self.wake.clear()
                    continue
            since = min(w.frozen_at_us for w in workers) + int(FROZEN_GRACE_S * 1e6)
            if since > time.time() * 1e6:
                continue
            try:
                samples = nvml.busy_since(self.gpu, since)
            except Exception:           # noqa: BLE001 - a failing NVML read convicts nobody
                continue
            self.take(workers, samples)

    def take(self, workers: list[Frozen], samples: list[nvml.Sample]) -> None:
        """One reading's samples: each frozen worker's gathered with those of the readings before,
        and the worker ended once they convict it."""
        for worker in workers:
            pids, frozen_at = set(worker.frozen), worker.frozen_at_us
            with self.lock:
                seen = self.seen.get(worker)
                if seen is None:            # thawed since the reading began
                    continue
                seen.update(((s.pid, s.stamp_us), s) for s in samples if s.pid in pids and s.stamp_us > frozen_at)
                gathered = list(seen.values())
            why = left_running(gathered, pids, frozen_at)
            if why:
                worker.end_for(why)

_watch: FrozenGpuWatch | None = None
_made = threading.Lock()


def for_this_process() -> FrozenGpuWatch | None:
    """The process's watch on the GPU it uses, or None where NVML cannot see it."""
    global _watch
    with _made:
        if _watch is None:
            import torch
            gpu, _ = nvml.handle(torch.cuda.current_device())
            _watch = FrozenGpuWatch(gpu) if gpu is not None else False
        return _watch or None


def forget(worker: Frozen) -> None:
    """The worker is thawed or gone: nothing more to watch of it."""
    if _watch:
        _watch.forget(worker)
