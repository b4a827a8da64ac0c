"""The trusted side of the sandbox: a submission you can call but never import.

`Submission` exposes the assignment's functions as plain callables. Each call
crosses to a worker process (see worker.py); a worker that crashes, hangs past
the timeout, eats too much memory or poisons its CUDA context is killed with all
of its descendants and replaced on the next call, so one bug costs one test.
"""
from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from .. import bytecode
from . import gpu_watch, logs, triton_seed, wire
from .confine import Confinement
from .processes import descendants, kill_tree, private_rss, proc_table, signal_all, stopped

# torch is imported where a tensor is first handled, not here: the worker is spawned before
# that, so its own imports overlap the test process's (seconds each).
if TYPE_CHECKING:
    import torch

    from .exchange import Exchange

HERE = Path(__file__).resolve().parent
LIVE: set[int] = set()      # pids of workers in use; any other child of ours is an orphan


class SubmissionError(Exception):
    """The submission raised; type_name and message are its own (untrusted) words."""

    def __init__(self, type_name: str, message: str):
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name
        self.message = message


# What the worker runs: copied beside it into the sandbox, which cannot import the grader.
WORKER_FILES = ("worker.py", "wire.py", "vmm.py", "warmup.py")

# A submission that hangs keeps hanging: after this many timeouts in a row its other
# tests fail at once instead of each waiting out the call timeout. After the first, the
# calls that follow get a fraction of the timeout until one answers, so a hang costs
# 60 + 15 + 15 s, not three minutes.
TIMEOUTS_TO_GIVE_UP = 3
AFTER_A_TIMEOUT = 0.25
# Likewise a submission that meets the memory limit on this many calls in a row (killed
# there, or refused an allocation): each costs filling gigabytes, and a kill a restart.
# Other deaths (a segfault) depend on the inputs: a kernel with a wrong offset crashes on
# some tests and passes others, so they cost only the test in flight.
MEMORY_TO_GIVE_UP = 3
# How long a worker that answered is given to unmap what it was handed and say so, before it
# is frozen anyway.
IDLE_WAIT_S = 2.0
# How long time_calls looks for a timed batch's outputs after the worker has answered: a worker
# that answers early by a factor past this has its window closed with the outputs not there, and
# the caller's check fails it.
SETTLE_FACTOR = 20
SETTLE_MIN_S = 0.05


class SandboxFailure(BaseException):
    """The call produced no answer. A BaseException, so a test's `except Exception`
    cannot mistake it for an answer of the submission."""
    outcome = "error"


class WorkerCrashed(SandboxFailure):
    outcome = "crashed"


class MemoryLimitHit(WorkerCrashed):
    """Killed at the memory limit, or refused memory there."""


class WorkerTimeout(SandboxFailure):
    outcome = "timeout"


class SubmissionUnavailable(SandboxFailure):
    """The file did not import, or lacks the function asked for."""
    outcome = "failed"


class _KeptMapped:
    """A series of windows (Submission.time_repeats) whose worker keeps its inputs mapped between
    them: if the series ends early (a check failed, a refill raised), the worker is told to unmap
    them now, so that no mapping of the grader's memory outlives the series."""

    def __init__(self, sub, worker, name: str):
        self.sub, self.worker, self.name, self.mapped = sub, worker, name, False

    def __enter__(self) -> "_KeptMapped":
        return self

    def __exit__(self, *exc) -> None:
        if self.mapped and self.sub._worker is self.worker:
            self.mapped = False
            with contextlib.suppress(SandboxFailure, SubmissionError):
                self.sub._request(self.worker, self.name, {"op": "release"})


def _orphans(table: dict[int, tuple[int, int]], uid: int | None) -> list[int]:
    """Children of ours that are no live worker: what daemonised out of one (as subreaper we
    inherit it). Under the workers' own `uid` only that uid's are theirs: our other children (a
    test process's multiprocessing helper) are not, and were killed and frozen as if they were.
    Without one, every such child."""
    me = os.getpid()
    return [p for p, (ppid, owner) in table.items() if ppid == me and p not in LIVE and (uid is None or owner == uid)]


def sweep_orphans(uid: int | None = None) -> None:
    """Kill what daemonised out of a worker, and with `uid`, once no worker is left, that uid's
    processes wherever they are."""
    for pid in _orphans(proc_table(), uid):
        kill_tree(pid, None)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if uid is not None and not LIVE:
        kill_tree(None, uid)


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return str(-code)


class Worker:
    """One sandboxed process holding one imported submission."""

    def __init__(self, module: Path, functions: list[str], device: str,
                 confinement: Confinement, scratch: Path, keep: list[str] = ()):
        self.device = device
        self.conf = confinement
        self.scratch = scratch
        self.log = scratch / "worker.log"
        ours, theirs = socket.socketpair()
        self.sock = ours
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(scratch / "home"),
            # The worker's uid has no passwd entry, and getpass.getuser() then raises KeyError
            # unless these are set: torch 2.11 names its compile caches after the user, and its
            # first dispatch-mode call failed that way on the H200, then every later call too.
            "USER": "grader-worker",
            "LOGNAME": "grader-worker",
            "TMPDIR": confinement.tmpdir or str(scratch / "home"),
            "TRITON_CACHE_DIR": str(scratch / "triton-cache"),
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
            # OpenBLAS (numpy's, loaded by the interpreter) maps a buffer per thread at import,
            # one thread per core: on the 16-core H200 runner that met a 1 GiB data limit
            # ("Memory allocation still failed after 10 retries") before the worker said hello.
            "OPENBLAS_NUM_THREADS": str(min(4, len(os.sched_getaffinity(0)))),
        }
        for key in ("CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "PYTHONPATH", "NCCL_NVLS_ENABLE",
                    "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
            if key in os.environ:
                env[key] = os.environ[key]
        if (prefix := bytecode.in_use()) is not None:
            env[bytecode.PREFIX_ENV] = prefix       # read only: see grader/bytecode.py
        if device == "cpu":
            env["TRITON_INTERPRET"] = "1"
        cmd = [sys.executable, "-s", str(scratch / "worker" / "worker.py"), "--fd", str(theirs.fileno()),
               "--module", str(module), "--device", device, "--functions", ",".join(functions),
               *(["--prove"] if confinement.unproven else [])]
        with os.fdopen(logs.open_for_append(self.log), "ab") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         pass_fds=[theirs.fileno()], cwd=scratch / "home", env=env,
                                         start_new_session=True,
                                         preexec_fn=lambda: confinement.preexec([str(scratch), *keep]))
        theirs.close()
        LIVE.add(self.proc.pid)
        self.frozen: set[int] = set()
        self.frozen_at_us = 0
        self.ended_for: str | None = None   # why the grader killed it between calls (gpu_watch.py)
        self._frozen_lock = threading.Lock()
        self.expect_idle = False        # a request was answered, its "idle" not yet read

    def tree(self) -> set[int]:
        """The worker and everything it started: its uid's processes where that uid is its own,
        and orphans of ours that daemonised out of it (as subreaper we inherit them)."""
        table = proc_table()          # one scan of /proc: this runs twice per call
        pids = set()
        for root in (self.proc.pid, *_orphans(table, self.conf.uid)):
            pids |= {root, *descendants(root, table)}
        if self.conf.uid is not None:
            pids |= {p for p, (_, uid) in table.items() if uid == self.conf.uid}
        pids.discard(os.getpid())
        return pids

    def freeze(self) -> None:
        """Stop every thread of the worker's tree between its calls: a thread the submission
        started (at import, or left running after answering) launches nothing on the GPU while
        the grader, or a neighbouring grading, is not calling it. Kernels already queued still
        run to their end; a timing window waits for the GPU to be quiet (grader/gpu/quiet.py)."""
        if self.frozen or self.proc.poll() is not None:
            return
        self._take_idle()
        pids = self.tree()
        signal_all(pids, signal.SIGSTOP)
        with self._frozen_lock:
            self.frozen, self.frozen_at_us = pids, int(time.time() * 1e6)
        deadline = time.monotonic() + 0.5
        while not all(stopped(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.001)
        if self.device == "cuda" and (watch := gpu_watch.for_this_process()) is not None:
            watch.watch(self)

    def _take_idle(self) -> None:
        """Read the worker's "idle" after an answer (see worker.serve), once: left unread, it
        would be taken for the answer to the next request, and every answer after it would be
        one behind. A worker that never says it is idle is frozen all the same."""
        if not self.expect_idle:
            return
        self.expect_idle = False
        try:
            wire.recv(self.sock, deadline=time.monotonic() + IDLE_WAIT_S)
        except (OSError, EOFError, wire.WireError):
            pass
        finally:
            self.sock.settimeout(None)

    def thaw(self) -> None:
        if self.frozen:
            with self._frozen_lock:
                # Processes forked between the scan and the stop are stopped by nothing: they were
                # not frozen, so SIGCONT to the tree as it is now reaches the ones that were.
                signal_all(self.frozen | self.tree(), signal.SIGCONT)
                self.frozen = set()
            self._unwatch()

    def end_for(self, why: str) -> None:
        """Kill the frozen worker's tree now, from the GPU watch's thread: its CUDA contexts go,
        and the kernels queued on them. Its next request fails with `why` (see death)."""
        with self._frozen_lock:
            if not self.frozen or self.ended_for:
                return
            self.ended_for = why
            signal_all(self.frozen, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self._unwatch()

    def _unwatch(self) -> None:
        if self.device == "cuda":
            gpu_watch.forget(self)

    def greeting(self, timeout: float) -> dict:
        """The worker's first message, once it is up: {"held": true} when it waits to import."""
        return self.request({}, timeout)[0]

    def request(self, header: dict, timeout: float, fds: list[int] = ()) -> tuple[dict, list[bytes]]:
        self.thaw()
        self._take_idle()          # an earlier answer's, where nothing froze the worker after it
        if header:
            self.expect_idle = header.get("op") in ("call", "prepare", "go", "release")
            try:
                wire.send(self.sock, header, fds=fds)
            except OSError:
                raise WorkerCrashed(self.death()) from None
        deadline = time.monotonic() + timeout
        while True:
            ready, _, _ = select.select([self.sock], [], [], 0.1)
            if ready:
                break
            if time.monotonic() > deadline:
                raise WorkerTimeout(f"no answer within {timeout:.0f} s (infinite loop, deadlock or a hung kernel?)")
            rss = private_rss(self.proc.pid)
            if rss > self.conf.memory_limit:
                raise MemoryLimitHit(f"used {rss / 2**30:.1f} GiB of memory, over the "
                                    f"{self.conf.memory_limit / 2**30:.1f} GiB limit")
        try:
            return wire.recv(self.sock, deadline=max(deadline, time.monotonic() + 1.0))
        except socket.timeout:
            raise WorkerTimeout("the answer stopped half-way") from None
        except (EOFError, ConnectionError):
            raise WorkerCrashed(self.death()) from None
        except wire.WireError as exc:
            raise WorkerCrashed(f"sent a malformed answer ({exc})") from None
        finally:
            self.sock.settimeout(None)

    def death(self) -> str:
        if self.ended_for:
            return self.ended_for
        try:
            code = self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            return "closed its connection to the grader"
        if code < 0 and -code == signal.SIGXFSZ:
            return "printed more than the output limit allows"
        if code < 0:
            return f"died with signal {_signal_name(code)}" + (
                " (a segmentation fault: an out-of-bounds address, often an overflowing offset)"
                if -code == signal.SIGSEGV else "")
        return f"exited with status {code} instead of answering"

    def stop(self, polite: bool = True) -> None:
        """Ask the worker to leave, then kill what is left. Not `polite`: a worker that failed
        is killed at once, so that what it holds (memory, a turn on the GPU) is given back."""
        self.thaw()
        self._unwatch()
        if polite:
            try:
                self.sock.settimeout(0.5)
                wire.send(self.sock, {"op": "bye"})
            except OSError:
                pass
            try:
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
        kill_tree(self.proc.pid, self.conf.uid)
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        LIVE.discard(self.proc.pid)
        sweep_orphans(self.conf.uid)
        self.sock.close()

    def log_tail(self, limit: int = 4000) -> str:
        return logs.tail(self.log, limit)


def shared_tensor_root() -> str | None:
    """/dev/shm when it is a roomy tmpfs: the first read of a large sparse file is instant
    there, and takes seconds on a disk file system. A small one (containers often get
    64 MB) would fault when a shared tensor is touched, so it is passed over."""
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return None
    return "/dev/shm" if st.f_frsize * st.f_blocks >= 8 << 30 and os.access("/dev/shm", os.W_OK) else None


COUNTED = ("ops", "lines", "items", "max_alloc_bytes", "python_objects")


def _counted(raw) -> dict | None:
    """The worker's count of a call's work (see worker.WorkCount), checked for shape: a
    non-negative int per count, the count that cut the call short (or None) and whether the
    counting was still in place at the end. None where it is not that: no count to judge."""
    if not isinstance(raw, dict):
        return None
    out = {}
    for name in COUNTED:
        v = raw.get(name)
        if not (isinstance(v, int) and not isinstance(v, bool) and v >= 0):
            return None
        out[name] = v
    capped, intact = raw.get("capped"), raw.get("intact")
    if not (capped is None or capped in COUNTED) or not isinstance(intact, bool):
        return None
    return {**out, "capped": capped, "intact": intact}


def _observed(raw) -> dict | None:
    """The worker's account of a call (see worker.Observer), checked for shape: launches (an
    int, or None where they could not be seen) and [argument, op] pairs of PyTorch writes."""
    if not isinstance(raw, dict):
        return None
    launches = raw.get("triton_launches")
    writes = raw.get("torch_writes")
    if not (launches is None or (isinstance(launches, int) and not isinstance(launches, bool) and launches >= 0)):
        return None
    if not isinstance(writes, list) or not all(
            isinstance(w, list) and len(w) == 2 and isinstance(w[0], (int, str)) and isinstance(w[1], str)
            for w in writes):
        return None
    return {"triton_launches": launches, "torch_writes": [(w[0], w[1][:100]) for w in writes[:32]]}


class Submission:
    """Callable stand-in for the submitted module, e.g. `sub.slot_mapping(...)`."""

    def __init__(self, module: Path, functions: list[str], device: "str | torch.device",
                 confinement: Confinement, timeout: float, budget: float = float("inf"),
                 scratch_root: Path | None = None, exchange_root: Path | None = None):
        """`scratch_root`, `exchange_root`: folders to work in, which whoever passes them
        removes after the run whatever became of this process (default: made here)."""
        self.functions = list(functions)
        self.budget = budget                   # seconds of calls the whole run may spend
        self.device: str = getattr(device, "type", device)    # "cpu" or "cuda"
        self.conf = confinement
        self.timeout = timeout
        self.scratch = Path(tempfile.mkdtemp(prefix="grader-sandbox-", dir=scratch_root))
        for sub in ("home", "triton-cache", "worker", "submission"):
            (self.scratch / sub).mkdir()
        for name in WORKER_FILES:
            shutil.copy(HERE / name, self.scratch / "worker" / name)
        if self.device == "cuda" and not triton_seed.seed_into(self.scratch / "triton-cache"):
            triton_seed.ensure()
        self.module = self.scratch / "submission" / Path(module).name
        shutil.copy(module, self.module)
        for path in (self.scratch, *self.scratch.iterdir(), *(self.scratch / "triton-cache").rglob("*")):
            confinement.own(path)
        confinement.own(self.module)
        # Ours, mode 0711: the worker opens the files it is given and cannot add any.
        self.exchange_dir = Path(tempfile.mkdtemp(prefix="grader-exchange-",
                                                  dir=exchange_root or shared_tensor_root()))
        self.exchange_dir.chmod(0o711)
        self._worker: Worker | None = None
        self._up = False                       # the worker answered that it is waiting to import
        self._greeted = False                  # ... and has imported the submission
        self.unavailable: str | None = None    # import failure: deterministic, not retried
        self.present: list[str] = []
        self.restarts = 0
        self.import_crashes = 0
        self.timeouts_in_a_row = 0
        self.memory_in_a_row = 0               # calls that met the memory limit since the last answer
        self.failures: list[str] = []          # instructor detail: worker deaths and log tails
        self.last_observed: dict | None = None # what the worker saw the last answered call do
        self.hold_torch_writes = False         # calls leave their aten writes of arguments undone (worker.Observer)
        # Caps ({"ops": N, "lines": N, "items": N, "max_alloc_bytes": N}, any of them) that make calls
        # count their work and stop past a cap (worker.WorkCount); `last_counted` is the count of the
        # last call, answered or raised, or None.
        self.count_work: dict | None = None
        self.last_counted: dict | None = None
        # Where the first worker's start went, in seconds (instructor detail): how long the run
        # waited for it to be up (torch imported, the GPU opened), and its import of the file.
        self.timings: dict[str, float] = {}
        # Run before each call, outside its clock and budget: the grading's GPU turn steps aside
        # there for a neighbour's timing (gpu_turns.checkpoint); returns the seconds it waited.
        self.between_calls: Callable[[], float] | None = None
        self.last_call_waited_s = 0.0          # ... what the last call waited there, for callers that time it

    @cached_property
    def exchange(self) -> "Exchange":
        """Where the tensors a call passes live (see exchange.py)."""
        import torch
        from .exchange import Exchange
        return Exchange(self.exchange_dir, torch.device(self.device), self.conf.own,
                        vmm=self.conf.gpu_memory == "vmm")

    def release_shared(self) -> None:
        """Free the tensors calls have shared so far (a worker kept for the next grading)."""
        if "exchange" in self.__dict__:      # made on first use: nothing to free before it
            self.exchange.release()

    def pids(self) -> set[int]:
        """The worker's process tree, while it runs."""
        return self._worker.tree() if self.started else set()

    def __getattr__(self, name: str):
        if name.startswith("_") or name not in self.__dict__.get("functions", ()):
            raise AttributeError(name)
        return lambda *args, **kwargs: self.call(name, *args, **kwargs)

    def start(self) -> None:
        """Spawn the worker now; its imports overlap whatever the caller does next. It waits,
        before it imports the submission, until the first call (see wait_idle)."""
        if self._worker is None and not self.unavailable:
            self._worker = Worker(self.module, self.functions, self.device, self.conf, self.scratch,
                                  [str(self.exchange_dir)])
            self._up = self._greeted = False

    def adopt(self, module: Path) -> None:
        """Put the submission's file in place of the placeholder a worker was started with ahead
        of its grading (a grading host's spare): the worker reads it only when told to import."""
        if self.loaded or Path(module).name != self.module.name:
            raise ValueError(f"{module} cannot take the place of {self.module}")
        shutil.copy(module, self.module)
        self.conf.own(self.module)

    @property
    def started(self) -> bool:
        """A worker was spawned and has not ended."""
        return self._worker is not None and self._worker.proc.poll() is None

    @property
    def loaded(self) -> bool:
        """Whether the submission's file has been imported in the current worker."""
        return self._worker is not None and self._greeted

    def wait_idle(self) -> None:
        """Return once none of the submission's code is running or has work queued: its worker
        started and waiting to import the file. One that has imported it is stopped first (the
        next call starts another). For what must not share the machine with the submission."""
        if self.loaded:
            self._discard(None)
        if not self.unavailable:
            self._up_worker()

    def _up_worker(self) -> Worker:
        self.start()
        worker = self._worker
        if not self._up:
            waited = time.monotonic()
            try:
                up = worker.greeting(self.timeout)
            except SandboxFailure as exc:
                self._discard(f"while starting: {exc}")
                failed = type(exc)(f"the grader's worker process did not start: {exc}")
            else:
                failed = None if up.get("held") else WorkerCrashed(
                    f"the grader's worker process did not start: {self._refused(up)}")
            if failed is not None:
                if self.conf.doubt():
                    return self._up_worker()      # its uid cannot work here: again, as root
                raise failed from None
            self.conf.proven()
            self._up = True
            self.timings.setdefault("waited_for_worker_s", round(time.monotonic() - waited, 3))
            start = up.get("start") if isinstance(up.get("start"), dict) else {}
            for phase in ("before_main_s", "torch_s", "cuda_s", "triton_s"):
                if isinstance(start.get(phase), (int, float)):
                    self.timings.setdefault(f"worker_{phase}", round(float(start[phase]), 3))
        return worker

    def _ready_worker(self) -> Worker:
        if self.unavailable:
            raise SubmissionUnavailable(self.unavailable)
        worker = self._up_worker()
        if not self._greeted:
            started = time.monotonic()
            try:
                hello, _ = worker.request({"op": "load"}, self.timeout)
            except SandboxFailure as exc:
                self._discard(f"while importing: {exc}")
                self.import_crashes += 1
                if self.import_crashes >= 2:      # twice in a row: the import itself kills it
                    self.unavailable = f"your file stops the process while it is imported: {exc}"
                raise type(exc)(f"while importing your file: {exc}") from None
            if not hello.get("ok"):
                self.unavailable = f"your file failed to import: {self._refused(hello)}"
                raise SubmissionUnavailable(self.unavailable)
            worker.freeze()           # threads its import started wait for its first call
            self.present = [f for f in hello.get("functions", []) if f in self.functions]
            self._greeted = True
            self.timings.setdefault("import_s", round(time.monotonic() - started, 3))
        return worker

    def _refused(self, reply: dict) -> str:
        """"Type: message" of a worker that could not start or import; the worker is stopped and
        the traceback kept for the instructor."""
        err = reply.get("error") if isinstance(reply.get("error"), dict) else {}
        self.failures.append(str(err.get("traceback", ""))[-4000:])
        self._discard(None)
        return f"{err.get('type', '?')}: {str(err.get('message', ''))[:500]}"

    def _discard(self, why: str | None) -> None:
        if self._worker is not None:
            if why:
                self.failures.append(f"{why}\n{self._worker.log_tail()}")
                self.restarts += 1
            self._worker.stop(polite=not why)
            self._worker = None

    def _between_calls(self) -> None:
        self.last_call_waited_s = self.between_calls() if self.between_calls is not None else 0.0

    def call(self, name: str, *args, **kwargs):
        self.last_observed = self.last_counted = None
        self._between_calls()
        with self._budgeted():
            worker = self._worker_with(name)
            with self.exchange.crossing(args, kwargs) as (wargs, wkwargs):
                # Our writes of the inputs (and the staged copies) may still be queued on our
                # stream; the worker's kernels run in another context, which does not wait for
                # them. On a busy GPU they ran after the worker's and fed it stale inputs.
                self._settle_ours()
                request = {"op": "call", "fn": name, "args": wargs, "kwargs": wkwargs}
                if self.hold_torch_writes:
                    request["hold_torch_writes"] = True
                if self.count_work is not None:
                    request["count"] = {k: int(v) for k, v in self.count_work.items()}
                reply, blobs = self._request(worker, name, request)
            from .exchange import tensor_from_wire
            self.last_observed = _observed(reply.get("observed"))
            try:
                return wire.decode(reply.get("value"), lambda d: tensor_from_wire(d, blobs, self.device))
            except wire.WireError as exc:
                self._discard(f"{name}: malformed result {exc}")
                raise WorkerCrashed(f"returned something that is not a plain value or tensor ({exc})") from None

    def time_calls(self, name: str, calls: list[tuple[tuple, dict]], refill=None, settled=None) -> float:
        """Wall seconds for the worker to run `calls` back to back, until their outputs are seen.

        The inputs are mapped first; then `refill()` writes fresh data into them, so
        nothing could be computed ahead of the timed window; the caller checks every
        output afterwards. Only tensors from `exchange` may be used: staging copies
        would be timed too and their results copied back too late. The window also
        holds the round trip to the worker (time an empty `calls` for it); the worker
        unmaps the inputs after it answers.

        The worker's answer does not close the window: its code is the submission's, and
        a patched synchronize can answer before the work is done. `settled()` is the
        grader's own look at the outputs, from this process, and the window closes when
        it first holds. It is polled for at most SETTLE_FACTOR times the answer's own
        time (and SETTLE_MIN_S); past that the window closes anyway and the caller's check
        of the outputs decides. An honest worker has synchronised before answering, so
        its outputs hold at the first look: the look's cost is part of the round trip."""
        return self.time_repeats(name, calls, 1, refill=refill, settled=settled)[0]

    def time_repeats(self, name: str, calls: list[tuple[tuple, dict]], repeats: int, refill=None, settled=None,
                     after=None) -> list[float]:
        """time_calls `repeats` times over the same inputs, mapped into the worker once for all of
        them: refill() before each window, and after(seconds) once each window has closed and
        the worker is frozen again (the caller's check of that window's outputs, before the next
        refill overwrites them). Mapping and unmapping gigabytes for every window cost the
        grading's exclusive hold on the GPU more than the windows themselves. The worker keeps
        the inputs mapped only between the windows of this series, frozen; they are unmapped
        when it ends, however it ends."""
        self._between_calls()
        with self._budgeted():
            worker = self._worker_with(name)
            with contextlib.ExitStack() as stack:
                wire_calls = [dict(zip(("args", "kwargs"), stack.enter_context(self.exchange.crossing(a, k))))
                              for a, k in calls]
                self._request(worker, name, {"op": "prepare", "fn": name, "calls": wire_calls})
                kept = stack.enter_context(_KeptMapped(self, worker, name))
                seconds = []
                for i in range(repeats):
                    if refill is not None:
                        refill()
                    self._settle_ours()
                    kept.mapped = i < repeats - 1          # the last window's worker unmaps after it
                    seconds.append(self._window(worker, name, settled, keep=kept.mapped))
                    if after is not None:
                        after(seconds[-1])
                return seconds

    def _window(self, worker: Worker, name: str, settled, keep: bool) -> float:
        worker.thaw()                 # not inside the window: it scans /proc
        try:
            started = time.perf_counter()
            self._request(worker, name, {"op": "go", "keep": keep}, freeze=False)
            if settled is not None:
                answered = time.perf_counter() - started
                give_up = started + max(SETTLE_MIN_S, SETTLE_FACTOR * answered)
                while not settled() and time.perf_counter() < give_up:
                    pass
            return time.perf_counter() - started
        finally:
            worker.freeze()           # however the window ends: one that raised leaves no thread running

    @contextlib.contextmanager
    def _budgeted(self):
        if self.budget <= 0:
            raise WorkerTimeout("this submission has used up the grading run's time budget "
                                "(earlier calls were too slow or hung)")
        started = time.monotonic()
        try:
            yield
        finally:
            self.budget -= time.monotonic() - started

    def _worker_with(self, name: str) -> Worker:
        worker = self._ready_worker()
        if name not in self.present:
            raise SubmissionUnavailable(f"your file has no function named {name!r}")
        return worker

    def _settle_ours(self) -> None:
        """Everything this process queued on the GPU is done: before any handover."""
        if self.device == "cuda":
            import torch
            torch.cuda.synchronize()

    def _request(self, worker: Worker, name: str, header: dict, freeze: bool = True) -> tuple[dict, list[bytes]]:
        """Send one request; a submission's exception comes back as SubmissionError. The worker
        is frozen again once it has answered (see Worker.freeze), unless the caller does it."""
        ids, fds = self.exchange.take_outgoing()
        if ids:
            header = dict(header, fds=ids)
        timeout = self.timeout * (AFTER_A_TIMEOUT if self.timeouts_in_a_row else 1.0)
        try:
            reply, blobs = worker.request(header, min(timeout, max(1.0, self.budget)), fds)
        except SandboxFailure as exc:
            ended_by_watch = worker.ended_for is not None
            self._discard(f"{name}: {exc}")
            self._count_failure(exc)
            if ended_by_watch:
                # Not started again: a fresh worker of the same file leaves GPU work running again
                # at its next calls, and every neighbour's timing waits on it (gpu_watch.py).
                self.unavailable = ("the grader ended your code earlier in this grading because it left work "
                                    "running on the GPU after a call had returned (the first test that failed "
                                    "so says more), so the remaining tests were not run. A call must finish all "
                                    "the GPU work it starts before it returns")
            if not self.unavailable:
                self.start()       # the next worker imports torch while the next test builds its inputs
            raise
        self.timeouts_in_a_row = 0
        if "count" in header:
            self.last_counted = _counted(reply.get("counted"))
        if reply.get("poisoned"):
            self._discard(f"{name}: CUDA context poisoned")
            self.start()           # as after a crash: its start overlaps the next test's inputs
        elif freeze:
            worker.freeze()
        err = reply.get("error") if isinstance(reply.get("error"), dict) else {}
        if reply.get("ok") is not True and err.get("out_of_memory") is True:
            # Refused at the memory limit: as costly as being killed there, call after call.
            self._count_failure(MemoryLimitHit(f"ran out of memory (the limit is "
                                               f"{self.conf.memory_limit / 2**30:.1f} GiB)"))
        else:
            self.memory_in_a_row = 0
        if reply.get("ok") is True:
            return reply, blobs
        raise SubmissionError(str(err.get("type", "Exception"))[:100], str(err.get("message", ""))[:2000])

    def _count_failure(self, exc: SandboxFailure) -> None:
        """Give up on a submission that hung, or met the memory limit, too many calls in a row."""
        if isinstance(exc, WorkerTimeout):
            self.timeouts_in_a_row += 1
            if self.timeouts_in_a_row >= TIMEOUTS_TO_GIVE_UP:
                self.unavailable = (f"your code hung or ran past the time limit on {TIMEOUTS_TO_GIVE_UP} "
                                    "calls in a row, so the remaining tests were not run")
            return
        if not isinstance(exc, MemoryLimitHit):
            return
        self.memory_in_a_row += 1
        if self.memory_in_a_row >= MEMORY_TO_GIVE_UP:
            self.unavailable = (f"your code met the memory limit on {MEMORY_TO_GIVE_UP} calls in a row "
                                f"(the process running it {exc}), so the remaining tests were not run")

    def log_tail(self) -> str:
        """The end of what its workers printed, all of them one after another (instructor detail)."""
        return logs.tail(self.scratch / "worker.log")

    def close(self) -> None:
        self._discard(None)
        if "exchange" in self.__dict__:
            self.exchange.release(staging=True)
        shutil.rmtree(self.scratch, ignore_errors=True)
        shutil.rmtree(self.exchange_dir, ignore_errors=True)
