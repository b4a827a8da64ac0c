"""grade-all's gradings as submitit jobs: tasks of a Slurm job array (`--executor slurm`),
or submitit's local executor, one job per GPU slot at a time (`--executor submitit-local`),
which runs the very same tasks on one machine.

A task grades a few files (`--files-per-task`, default FILES_PER_TASK), one after another,
each as a local batch grades it in a subprocess (batch.Runner: `python -m grader grade`,
student code in its sandboxed worker), in a warm grading host of its own (grader/warm/hosts.py)
unless `--cold`, and moves each report into the course folder as it is done. So the
folder, the repository and its Python must be on a filesystem every node shares. The
submitting process only plans, waits and publishes (batch.grade_all, batch.publish).
"""
from __future__ import annotations

import math
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..grading.report_reader import read_or_none
from ..assignment import REPO, Assignment
from .batch import STOP_GRACE_S, Job, Outcome, Runner
from .folder import JOB_LOGS, Course
from ..gpu.machines import slots
from ..sandbox.processes import signal_group
from ..warm.hosts import HostProcess

POLL_S = 2.0
# squeue's states for a task that will not run again. A task gone from squeue has ended too.
ENDED = {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY",
         "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT", "REVOKED"}
NODE_LOCAL = ("/tmp", "/var/tmp", "/dev/shm", "/run", "/scratch/local", "/local")
RESULT_WAIT_S = 15                   # a result written on a node may reach a shared filesystem late
SQUEUE_PATIENCE_S = 600              # a busy slurmctld may not answer for a while; the tasks go on


class ClusterError(RuntimeError):
    """The cluster refused or cannot run the batch: an instructor's problem, said plainly."""


@dataclass
class SlurmOptions:
    partition: str | None = None
    account: str | None = None
    time_min: int | None = None          # per task; default from the assignment's time budget
    gpus_per_task: int | None = None     # default 1 on cuda, 0 on the CPU
    cpus_per_task: int = 2               # the trusted pytest process and the worker
    mem_gb: int | None = None            # per task; default from the worker's memory limit
    max_tasks: int | None = None         # array parallelism
    sbatch: dict[str, object] = field(default_factory=dict)   # more #SBATCH lines


SIGNAL_DELAY_S = 90                  # submitit's warning (SIGUSR2) comes this long before Slurm's limit
# A task's host starts once (torch, the GPU, the reference's worker: 27 s for the first grading
# on an H200) and grades the rest in 7 s each; four files keep a task within a few minutes.
FILES_PER_TASK = 4


def task_time_min(timeout_s: float) -> int:
    """Slurm's limit, and its warning before it, sit above the task's own limit on its grading
    (plus a minute to start), so an overrun is stopped and explained by the grader first."""
    return math.ceil((timeout_s + SIGNAL_DELAY_S + STOP_GRACE_S + 60) / 60)


def task_mem_gb(assignment: Assignment) -> int:
    worker = assignment.worker_memory_bytes or 16 << 30       # the confinement's ceiling
    return math.ceil(worker / 2**30) + 4                       # + the trusted process and the grader


def parse_sbatch(items: list[str]) -> dict[str, object]:
    """`qos=high`, `--constraint=h100`, `exclusive` -> {"qos": "high", ...}, True for a bare flag."""
    out: dict[str, object] = {}
    for item in items:
        key, eq, value = item.lstrip("-").partition("=")
        if not key or " " in key:
            raise ClusterError(f"--sbatch {item!r}: give KEY=VALUE or a bare KEY, as after '#SBATCH --'")
        out[key] = value if eq else True
    return out


# -- the task, run on a node ------------------------------------------------------------
def grade_task(course_root: str, assignment_folder: str, jobs: list[Job], device: str,
               timeout_s: float, warm: bool = True) -> list[tuple[dict | None, str]]:
    """A task's gradings, on the node, one after another: for each job (the report, "") or
    (None, why there is none), each report in place as soon as it is done. With `warm` and
    more than one file, in a grading host the task starts and ends. Stopped by Slurm (scancel,
    the time limit, preemption) or by the local executor, it ends the grading in flight, keeps
    no report of it and starts no other."""
    course = Course(course_root, Assignment.load(assignment_folder))
    runner = Runner(course, device, timeout_s)
    stopped: list[str] = []

    def stop(signum, frame):
        # Not Runner.stop(): a handler must not wait on the grading it interrupted.
        stopped.append(signal.Signals(signum).name)
        runner.stopping = True
        with runner.lock:
            live = list(runner.live)
        for proc in live:
            proc.stopped = True
            signal_group(proc.pid, signal.SIGTERM)

    # SIGUSR2 is submitit's signal for a coming time limit or preemption; it would requeue.
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR2):
        signal.signal(signum, stop)
    host = HostProcess(course.assignment.folder, device, {}) if warm and len(jobs) > 1 else None
    results = []
    try:
        for job in jobs:
            report, why = (None, "") if stopped else runner.grade(job, host.env() if host else {})
            if stopped and report is None:
                why = (f"the task was stopped ({stopped[0]} on {socket.gethostname()}: cancelled, out of "
                       "time or preempted) before this grading finished")
            results.append((report, why))
    finally:
        if host is not None:
            host.close()
    return results


# -- the submitting side ----------------------------------------------------------------
class _SubmititBatch:
    """What the two submitit executors share: the task's arguments, and reading how a job ended."""
    name = "submitit"

    def __init__(self, course: Course, device: str, timeout_s: float, folder: Path | None = None,
                 files_per_task: int = FILES_PER_TASK, warm: bool = True):
        if files_per_task < 1:
            raise ClusterError("--files-per-task must be at least 1")
        self.course = course
        self.device = device
        self.timeout_s = timeout_s
        self.files_per_task = files_per_task
        self.warm = warm
        self.folder = folder or course.root / JOB_LOGS
        self.note: str | None = None
        self.status: dict[str, int] = {}
        self._root = str(course.root.resolve())
        self._assignment = str(course.assignment.folder.resolve())

    def chunks(self, jobs: list[Job], tasks_at_once: int = 1) -> list[list[Job]]:
        """The files of each task, in the planned order: at most files_per_task, and fewer where
        that leaves some of `tasks_at_once` slots idle."""
        n = min(self.files_per_task, max(1, math.ceil(len(jobs) / tasks_at_once)))
        return [jobs[i:i + n] for i in range(0, len(jobs), n)]

    def task_timeout_min(self, chunk_size: int) -> int:
        return task_time_min(self.timeout_s * chunk_size)

    def _task_args(self, chunk: list[Job]) -> tuple:
        # Absolute paths: the task starts in the repository, not where grade-all was started;
        # not resolved, which would follow a link the grading must refuse.
        return (self._root, self._assignment,
                [Job(j.sha256, j.file.absolute(), list(j.students), j.report and j.report.absolute()) for j in chunk],
                self.device, self.timeout_s, self.warm)

    def _outcomes(self, chunk: list[Job], sjob, state: str) -> list[Outcome]:
        """How a finished submitit job ended, file by file, as the local runner would say it."""
        result = sjob.paths.result_pickle
        deadline = time.monotonic() + RESULT_WAIT_S
        lag = state in ("COMPLETED", "FINISHED", "ENDED")       # ended well, or squeue forgot how
        while not result.exists() and lag and time.monotonic() < deadline:
            time.sleep(0.5)
        if result.exists():
            try:
                results = sjob.result()
            except Exception as exc:       # the task's own failure: its trace is the reason
                return self._salvaged(chunk, f"the task failed on its node:\n{_tail(str(exc), 4000)}")
            if isinstance(results, list) and len(results) == len(chunk):
                return [(job, report, why) for job, (report, why) in zip(chunk, results)]
            return self._salvaged(chunk, "the task's result does not match its files")
        log = _tail(sjob.stderr() or "", 2000)
        return self._salvaged(chunk, f"the {self.name} task {sjob.job_id} ended {state} without a result "
                                     f"(cancelled, out of time, out of memory, preempted or its node failed)"
                              + (f"\n\n{log}" if log else ""))

    def _salvaged(self, chunk: list[Job], why: str) -> list[Outcome]:
        """A task that ended without its results may have graded some of its files first: their
        reports are in place and current (they were not when the batch was planned)."""
        out: list[Outcome] = []
        for job in chunk:
            report = read_or_none(job.report) if job.report else self.course.read_report(job.students[0])
            current = self.course.is_current(report, job.sha256, self.device)
            out.append((job, report, "") if current else (job, None, why))
        return out


class SlurmBatch(_SubmititBatch):
    """Every file one task of one `sbatch --array`; the submitter follows them with squeue."""
    name = "Slurm"

    def __init__(self, course: Course, device: str, timeout_s: float, options: SlurmOptions,
                 folder: Path | None = None, files_per_task: int = FILES_PER_TASK, warm: bool = True):
        super().__init__(course, device, timeout_s, folder, files_per_task, warm)
        self.options = options
        self.array_id: str | None = None
        self.task_ids: list[str] = []
        if device == "cuda" and course.assignment.grading_gpu_bytes:
            self.note = (f"each task gets one whole GPU, which must hold "
                         f"{course.assignment.grading_gpu_bytes / 2**30:.0f} GiB (gpu_memory_gib)")
        warning = node_local_warning([course.root, REPO, Path(sys.executable)])
        if warning:
            self.note = warning if self.note is None else f"{warning}\n{self.note}"

    def parameters(self, count: int, files: int = 1) -> dict[str, object]:
        """submitit's parameters for an array of `count` tasks of at most `files` files each."""
        o = self.options
        gpus = o.gpus_per_task if o.gpus_per_task is not None else (1 if self.device == "cuda" else 0)
        params: dict[str, object] = {
            "name": f"grade-{self.course.assignment.id}",
            "timeout_min": o.time_min or self.task_timeout_min(files),
            "cpus_per_task": o.cpus_per_task,
            "mem_gb": o.mem_gb or task_mem_gb(self.course.assignment),
            "slurm_array_parallelism": o.max_tasks or count,
            "slurm_signal_delay_s": SIGNAL_DELAY_S,
            # The task imports the grader from the repository, whatever the submitter's folder.
            "slurm_setup": [f"cd {shlex.quote(str(REPO))}"],
            "slurm_additional_parameters": dict(o.sbatch),
        }
        if gpus:
            params["slurm_gres"] = f"gpu:{gpus}"
        if o.partition:
            params["slurm_partition"] = o.partition
        if o.account:
            params["slurm_account"] = o.account
        return params

    def run(self, jobs: list[Job]):
        """Yields an Outcome per job as its task ends, and None at each poll (status is fresh)."""
        if not jobs:
            return
        import submitit
        executor = submitit.AutoExecutor(folder=self.folder / "%j", cluster="slurm")
        chunks = self.chunks(jobs)
        executor.update_parameters(**self.parameters(len(chunks), len(chunks[0])))
        try:
            sjobs = executor.map_array(grade_task, *zip(*(self._task_args(c) for c in chunks)))
        except Exception as exc:          # sbatch's refusal (no such partition, over a limit) is the message
            raise ClusterError(f"sbatch refused the array: {exc}") from None
        self.task_ids = [s.job_id for s in sjobs]      # "123_4"; a batch of one file is no array: "123"
        self.array_id = sjobs[0].job_id.split("_")[0]
        live = dict(zip((s.job_id for s in sjobs), zip(chunks, sjobs)))
        states: dict[str, str] = {task_id: "PENDING" for task_id in live}
        answered = time.monotonic()
        while live:
            try:
                states = self._states()
                answered = time.monotonic()
            except ClusterError:
                if time.monotonic() - answered > SQUEUE_PATIENCE_S:
                    raise
            self.status = _count(states.get(task_id, "ENDED") for task_id in live)
            for task_id, (chunk, sjob) in list(live.items()):
                state = states.get(task_id, "ENDED")
                if state in ENDED or state == "ENDED" or sjob.paths.result_pickle.exists():
                    del live[task_id]
                    yield from self._outcomes(chunk, sjob, state)
            yield None
            if live:
                time.sleep(POLL_S)

    def _states(self) -> dict[str, str]:
        """task id ("123_4") -> Slurm state, for the tasks squeue still knows (all of them
        until MinJobAge after they end)."""
        out = _slurm(["squeue", "-h", "-r", "-t", "all", "-j", self.array_id, "-o", "%i|%T"])
        if out.returncode != 0:
            if "Invalid job id" in out.stderr:       # every task ended long enough ago
                return {}
            raise ClusterError(f"squeue has not answered for {SQUEUE_PATIENCE_S} s: {out.stderr.strip()}")
        return dict(line.split("|", 1) for line in out.stdout.split() if "|" in line)

    def stop(self) -> None:
        """Cancel the whole array; tasks in flight end their gradings and keep no report."""
        if self.array_id is None:
            return
        try:
            _slurm(["scancel", self.array_id])
        except ClusterError:
            return
        deadline = time.monotonic() + STOP_GRACE_S + 30
        while time.monotonic() < deadline:
            try:
                if all(state in ENDED for state in self._states().values()):
                    return
            except ClusterError:
                pass
            time.sleep(1)

    def describe(self) -> str:
        where = f"partition {self.options.partition}" if self.options.partition else "the default partition"
        return f"as Slurm array {self.array_id or '-'} on {where}, {self.device}"


class SubmititLocalBatch(_SubmititBatch):
    """submitit's LocalExecutor on this machine: one job per slot, each seeing only its GPU
    (CUDA_VISIBLE_DEVICES); the same task as on a cluster, without a cluster."""
    name = "submitit-local"

    def __init__(self, course: Course, device: str, timeout_s: float, jobs: int, folder: Path | None = None,
                 files_per_task: int = FILES_PER_TASK, warm: bool = True):
        super().__init__(course, device, timeout_s, folder, files_per_task, warm)
        self.slots = [env.get("CUDA_VISIBLE_DEVICES") for env in
                      slots(device, jobs, course.assignment.grading_gpu_bytes)]
        if not self.slots:
            raise ClusterError("no GPU to grade on")
        if any(gpu is not None and not gpu.isdigit() for gpu in self.slots):
            raise ClusterError("submitit's local executor names GPUs by index: set CUDA_VISIBLE_DEVICES "
                               "to indices, not UUIDs")
        if len(self.slots) < jobs:
            self.note = f"grading {len(self.slots)} at once, not {jobs}: the GPUs hold no more (gpu_memory_gib)"
        self._live: dict[int, tuple[list[Job], object]] = {}

    def _submit(self, slot: int, chunk: list[Job]):
        import submitit
        executor = submitit.LocalExecutor(folder=self.folder / "%j")
        gpu = self.slots[slot]
        params: dict[str, object] = {"timeout_min": self.task_timeout_min(len(chunk))}
        if gpu is not None:
            params.update(gpus_per_node=1, visible_gpus=[int(gpu)])
        executor.update_parameters(**params)
        return executor.submit(grade_task, *self._task_args(chunk))

    def run(self, jobs: list[Job]):
        waiting = list(reversed(self.chunks(jobs, len(self.slots))))
        free = list(range(len(self.slots)))
        while waiting or self._live:
            while waiting and free:
                slot = free.pop()
                chunk = waiting.pop()
                self._live[slot] = (chunk, self._submit(slot, chunk))
            states = {slot: sjob.state for slot, (_, sjob) in self._live.items()}
            self.status = {"running": len(self._live), "pending": len(waiting)}
            for slot, state in states.items():
                if state != "RUNNING":
                    chunk, sjob = self._live.pop(slot)
                    free.append(slot)
                    yield from self._outcomes(chunk, sjob, state)
            yield None
            if self._live or waiting:
                time.sleep(0.5)

    def stop(self) -> None:
        # SIGTERM to the job's controller (its job id is its pid), which hands it to the task:
        # the task then ends its grading. submitit's cancel() would SIGKILL the task a second
        # later, orphaning the grading.
        for _, sjob in self._live.values():
            try:
                os.kill(int(sjob.job_id), signal.SIGTERM)
            except (ProcessLookupError, ValueError):
                pass
        deadline = time.monotonic() + STOP_GRACE_S + 10
        while time.monotonic() < deadline and any(s.state == "RUNNING" for _, s in self._live.values()):
            time.sleep(0.2)

    def describe(self) -> str:
        return f"through submitit's local executor on {self.device} with {len(self.slots)} at once"


# -- where things are ----------------------------------------------------------------------
def slurm_device(device: str, partition: str | None) -> str:
    """cpu or cuda for `--device` on a cluster: auto is cuda when the partition's nodes have GPUs."""
    if device != "auto":
        return device
    cmd = ["sinfo", "-h", "-o", "%G"] + (["-p", partition] if partition else [])
    out = _slurm(cmd)
    if out.returncode != 0:
        raise ClusterError(f"sinfo failed: {out.stderr.strip() or out.stdout.strip()}")
    return "cuda" if "gpu" in out.stdout else "cpu"


def cluster_nodes() -> int:
    """Nodes sinfo lists; 0 where it cannot say (no Slurm here: nothing to warn about)."""
    try:
        out = _slurm(["sinfo", "-h", "-N", "-o", "%N"])
    except ClusterError:
        return 0
    return len(set(out.stdout.split())) if out.returncode == 0 else 0


def _slurm(cmd: list[str]) -> subprocess.CompletedProcess:
    """One of Slurm's commands; ClusterError, not a traceback, where this machine lacks it."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True)
    except FileNotFoundError:
        raise ClusterError(f"no {cmd[0]} on this machine: run grade-all --executor slurm where Slurm's "
                           "commands are (a login node), or use --executor local") from None


def node_local_warning(paths: list[Path], nodes: int | None = None) -> str | None:
    """A warning when a path the tasks need looks private to this node and the cluster has others."""
    local = [p for p in paths if any(str(p.resolve()).startswith(top + "/") or str(p.resolve()) == top
                                     for top in NODE_LOCAL)]
    if not local:
        return None
    nodes = cluster_nodes() if nodes is None else nodes
    if nodes <= 1:
        return None
    shown = ", ".join(str(p) for p in local)
    return (f"warning: {shown} looks local to this machine, and the cluster has {nodes} nodes: "
            "tasks on other nodes cannot read or write it. Put the course folder, the repository "
            "and its Python on a filesystem the nodes share (docs/cluster.md).")


def available() -> str | None:
    """None when submitit and sbatch are there, else why not."""
    try:
        import submitit  # noqa: F401
    except ImportError:
        return "submitit is not installed (pip install -r requirements/instructor.txt)"
    for tool in ("sbatch", "squeue", "scancel", "sinfo"):
        if shutil.which(tool) is None:
            return f"no {tool} on this machine: use --executor slurm where Slurm's commands are (a login node)"
    return None


def _count(states) -> dict[str, int]:
    out: dict[str, int] = {}
    for state in states:
        key = {"PENDING": "pending", "RUNNING": "running", "COMPLETING": "running"}.get(state)
        if key:
            out[key] = out.get(key, 0) + 1
    return out


def _tail(text: str, n: int) -> str:
    return text if len(text) <= n else "..." + text[-n:]
