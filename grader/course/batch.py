"""Grade a class: every submitted/<student>/<assignment>/<file> of a course folder
in nbgrader's layout (see grader/course/folder.py), then feedback, a grades CSV and
nbgrader's gradebook.

Each grading is its own `python -m grader grade` process: one per GPU on a
GPU machine (CUDA_VISIBLE_DEVICES names its GPU), a bounded number on the CPU;
with --executor slurm, in the tasks of a Slurm job array, a few files each (grader/course/cluster.py,
docs/cluster.md), planned and published here all the same.
Work already done is not redone. A student whose report matches the file's
sha256, the grader's version and the device is skipped, and identical files are
graded once, their report copied to every student who submitted them. Reports
are moved into place only once complete, so an interrupted batch resumes where
it stopped, and a grading that fails leaves a grading-error.log instead of a
report: that student scores 0 until a later run succeeds.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from . import feedback, gradebook
from ..warm import leftovers
from ..grading import report_reader
from ..assignment import REPO
from .folder import Course, StudentRow
from ..files import atomic_write
from ..gpu.machines import SlotPool
from ..warm.hosts import HostProcess
from ..grading.report import write_atomically
from ..sandbox.processes import signal_group

STOP_GRACE_S = 30       # a stopped grading still kills its workers and writes its report


@dataclass
class Job:
    """One distinct file to grade, for every student who submitted it."""
    sha256: str
    file: Path      # the first student's hand-in folder: a link in it must not be followed
    students: list[str] = field(default_factory=list)
    report: Path | None = None      # where its report goes (default: the first student's report path)


Outcome = tuple[Job, "dict | None", str]    # a grading's end: (job, report, "") or (job, None, why)


@dataclass
class BatchResult:
    rows: list[StudentRow]
    graded: int = 0         # grading processes run: one per distinct file not graded before
    copied: int = 0         # students given the report of an identical file
    unchanged: int = 0      # students whose report was already current
    errors: int = 0         # students whose grading produced no report
    wall_s: float = 0.0


def plan(course: Course, device: str, only: list[str] | None = None) -> tuple[list[Job], dict[Path, list[str]], int]:
    """(files to grade, current reports to copy to other students, students already current).
    `only`: these students alone, graded again even where their report is current (a regrade)."""
    current: dict[str, Path] = {}
    todo: dict[str, Job] = {}
    unchanged = 0
    for student in (only if only is not None else course.students()):
        picked, _ = course.submission(student)
        if picked is None:
            continue
        sha = picked.sha256
        if only is None and course.is_current(course.read_report(student), sha, device):
            current.setdefault(sha, course.report_path(student))
            unchanged += 1
        else:
            # The hand-in folder, not a file in it: the grading applies the same rule again, and
            # a refused hand-in (a link, a misnamed file) gets its 0-point report from it too.
            todo.setdefault(sha, Job(sha, course.submission_folder(student))).students.append(student)
    copies = {current[sha]: job.students for sha, job in todo.items() if sha in current}
    return [job for sha, job in todo.items() if sha not in current], copies, unchanged


class Runner:
    """Runs gradings as subprocesses; `stop()` ends those in flight."""

    def __init__(self, course: Course, device: str, timeout_s: float):
        self.course = course
        self.device = device
        self.timeout_s = timeout_s
        self.live: set[subprocess.Popen] = set()
        self.lock = threading.Lock()
        self.stopping = False

    def grade(self, job: Job, env: dict[str, str]) -> tuple[dict | None, str]:
        """(the report, "") or (None, why there is none)."""
        dest = job.report or self.course.report_path(job.students[0])
        dest.parent.mkdir(parents=True, exist_ok=True)
        partial = dest.with_name(".report.json.grading")
        partial.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "grader", "grade", "--assignment", str(self.course.assignment.folder.resolve()),
               "--submission", str(job.file.absolute()), "--report", str(partial.resolve()),
               "--device", self.device, "--quiet",
               # Other students' files and reports are closed to the worker, as the hidden tests are.
               "--protect", str(self.course.root.resolve())]
        with self.lock:
            if self.stopping:
                return None, "interrupted"
            # The grading ends with us where it can (grader/warm/leftovers.py), and a later run finds it
            # by our identity where it could not.
            env = {**os.environ, **env, leftovers.PARENT_ENV: leftovers.identity()}
            proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, start_new_session=True)
            self.live.add(proc)
        try:
            out, _ = proc.communicate(timeout=self.timeout_s)
            why = f"the grader exited with status {proc.returncode} without a report"
        except subprocess.TimeoutExpired:
            self._end([proc])
            out, _ = proc.communicate()
            why = f"the grading did not finish within {self.timeout_s:.0f} s"
        finally:
            with self.lock:
                self.live.discard(proc)
        # A grading we stopped still writes a report, of an interrupted run: not one to keep.
        report = report_reader.read_or_none(partial) if proc.returncode == 0 and not getattr(proc, "stopped", False) else None
        if self.stopping:
            partial.unlink(missing_ok=True)
            return None, "interrupted"
        if report is not None and report_reader.interrupted(report):
            # A signal from elsewhere (Slurm ending the task, an administrator) stopped the grading:
            # its report scores what had run by then, not the file.
            report, why = None, "the grading was interrupted by a signal before it finished"
        if report is None or report_reader.sha256(report) != job.sha256:
            partial.unlink(missing_ok=True)
            return None, why + "\n\n" + (out or "")[-4000:]
        os.replace(partial, dest)
        return report, ""

    def stop(self) -> None:
        with self.lock:
            self.stopping = True
            live = list(self.live)
        self._end(live)

    @staticmethod
    def _end(procs: list[subprocess.Popen]) -> None:
        # SIGTERM first: the grader then ends its own workers, which SIGKILL would orphan.
        for proc in procs:
            proc.stopped = True
            signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                signal_group(proc.pid, signal.SIGKILL)


class LocalBatch:
    """Gradings as subprocesses of this process, in the slots of a SlotPool."""

    def __init__(self, course: Course, device: str, jobs: int, timeout_s: float, warm: bool = True):
        self.at_once = jobs
        self.runner = Runner(course, device, timeout_s)
        hosts = (lambda env: HostProcess(course.assignment.folder, device, env)) if warm else None
        self.slot_pool = SlotPool(device, jobs, course.assignment.grading_gpu_bytes, hosts=hosts)
        self.note = self.slot_pool.note
        self.status: dict[str, int] = {}
        self.device = device

    def run(self, jobs: list[Job]):
        """Yields an Outcome per job as it ends."""
        pool = ThreadPoolExecutor(max_workers=self.at_once)
        try:
            futures = {pool.submit(self.slot_pool.run, self.runner.grade, job): job for job in jobs}
            for future in as_completed(futures):
                try:
                    report, why = future.result()
                except Exception:      # the batch's own failure on one file must not stop the others
                    report, why = None, "grade-all failed on this file:\n" + traceback.format_exc()
                yield futures[future], report, why
        except BaseException:     # Ctrl-C here, or the caller closing us: end the gradings first
            self.runner.stop()
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            self.slot_pool.close()

    def stop(self) -> None:
        self.runner.stop()
        self.slot_pool.close()

    def describe(self) -> str:
        return f"on {self.device} with {self.at_once} at once" + (", warm" if self.slot_pool.hosts else ", cold")


def grade_all(course: Course, device: str, jobs: int = 1, timeout_s: float | None = None,
              progress: bool = True, executor=None, only: list[str] | None = None) -> BatchResult:
    """Grade what needs grading, locally or through `executor` (a LocalBatch, or one of
    grader/course/cluster.py's); feedback, CSV and gradebook are `publish`'s. `only`: regrade these
    students' hand-ins, and no one else's."""
    t0 = time.monotonic()
    todo, copies, unchanged = plan(course, device, only)
    result = BatchResult(rows=[], unchanged=unchanged)
    for source, students in copies.items():
        result.copied += _copy(course, report_reader.read(source), students)
    if executor is None:
        executor = LocalBatch(course, device, jobs, timeout_s or default_timeout(course))

    from tqdm import tqdm
    bar = tqdm(total=len(todo), desc=f"grading {course.assignment.id}", unit="file", disable=not progress,
               file=sys.stderr, dynamic_ncols=True)
    events = executor.run(todo)
    try:
        for outcome in events:
            if outcome is not None:
                record(course, result, *outcome)
                bar.update(1)
            bar.set_postfix(errors=result.errors, **executor.status, refresh=outcome is None)
    except BaseException:
        executor.stop()
        raise
    finally:
        events.close()
        bar.close()
    result.rows = course.rows()
    result.wall_s = time.monotonic() - t0
    return result


def default_timeout(course: Course) -> float:
    return course.assignment.time_budget_s * 2 + 300


def record(course: Course, result: BatchResult, job: Job, report: dict | None, why: str) -> None:
    """One grading's end: the report copied to every student of identical files, or an
    error log (the next run grades them again)."""
    result.graded += 1
    if report is None:
        result.errors += len(job.students)
        for student in job.students:
            path = course.error_path(student)
            atomic_write(path, why.strip() + "\n")
    else:
        course.error_path(job.students[0]).unlink(missing_ok=True)
        result.copied += _copy(course, report, job.students[1:])


def _copy(course: Course, report: dict, students: list[str]) -> int:
    for student in students:
        write_atomically(report, course.report_path(student))
        course.error_path(student).unlink(missing_ok=True)
    return len(students)


class GradebookError(RuntimeError):
    """The gradebook could not be written; the feedback and the CSV were."""


def publish(course: Course, rows: list[StudentRow], csv_path: Path, db_url: str | None) -> list[str]:
    """Feedback for each graded student (and none for the others), the CSV, the gradebook; what
    was done, as notes. GradebookError once the rest is written, if the gradebook cannot be."""
    notes = []
    for row in rows:
        path = course.feedback_path(row.student)
        if row.status == "graded":
            atomic_write(path, feedback.markdown(row.report, row.student))
        else:
            path.unlink(missing_ok=True)      # feedback for an older file would mislead
    gradebook.write_csv(rows, course.assignment, csv_path)
    notes.append(f"wrote {csv_path}")
    if db_url is not None:
        try:
            import nbgrader.api  # noqa: F401
        except ImportError:
            notes.append("nbgrader is not installed: gradebook not updated")
        else:
            try:
                gradebook.update(course, rows, db_url)
            except Exception as exc:        # the server is down, refuses us, or is not a gradebook
                raise GradebookError(f"could not update the gradebook {db_url}: {type(exc).__name__}: "
                                     f"{' '.join(str(exc).split())[:300]} (the reports and {csv_path} are written; run grade-all "
                                     "again to retry)") from None
            notes.append(f"updated gradebook {db_url}")
    return notes
