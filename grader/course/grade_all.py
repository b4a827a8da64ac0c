"""`python -m grader grade-all`: the command line over grader/course/batch.py (planning, local
gradings, publishing) and grader/course/cluster.py (Slurm and submitit), which it chooses between.
Its own module, so that the two it chooses between need not import each other.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from . import batch, gradebook
from ..warm import leftovers
from ..grading import seeds
from ..assignment import Assignment, AssignmentError
from .batch import BatchResult, GradebookError, LocalBatch, default_timeout, grade_all, publish
from .folder import Course, gradebook_url
from .lock import BUSY_EXIT, CourseBusy, CourseLock, LockUnavailable
from ..files import cannot_write

def add_parser(sub) -> None:
    p = sub.add_parser("grade-all", help="grade every submission of a course folder (nbgrader layout)",
                       description=batch.__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--course", required=True, help="course folder holding submitted/<student>/<assignment>/")
    p.add_argument("--assignment", help="assignment folder (default: the only one under assignment/)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--jobs", type=int, help="gradings at once (default: on the CPU half the cores; on a GPU machine as "
                   "many as each GPU's memory (gpu_memory_gib in assignment.toml) and the cores allow, four a GPU at most). "
                        "On GPUs, N > GPUs shares each GPU; tests that time the kernel take turns alone")
    p.add_argument("--timeout", type=float, help="seconds one grading may take (default: 2 x time budget + 300)")
    p.add_argument("--csv", help="plain grades CSV (default: COURSE/grades-<assignment id>.csv)")
    p.add_argument("--db", help="nbgrader gradebook URL (default: sqlite:///COURSE/gradebook.db)")
    p.add_argument("--no-gradebook", action="store_true", help="leave nbgrader's gradebook alone")
    p.add_argument("--only", nargs="+", metavar="STUDENT", help="regrade these students' hand-ins alone, even where "
                                                               "their reports are current (a regrade request)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--wait", action="store_true",
                   help=f"when another grade-all holds the course, wait for it (default: exit with status "
                        f"{BUSY_EXIT}, naming it)")
    p.add_argument("--cold", action="store_true",
                   help="every grading starts its own test process (default: a warm host per slot keeps torch, "
                        "CUDA and the reference's worker up across gradings; grader/warm/hosts.py)")
    p.add_argument("--executor", default="local", choices=["local", "slurm", "submitit-local"],
                   help="local: gradings as subprocesses here (default); slurm: tasks of a Slurm job array, "
                        "--files-per-task files each (docs/cluster.md); submitit-local: the same tasks through submitit "
                        "on this machine")
    p.add_argument("--files-per-task", type=int, metavar="N",
                   help="files one task grades, one after another in a warm host unless --cold (slurm and "
                        "submitit-local; default: 4)")
    p.add_argument("--seeds", metavar="FILE",
                   help="grade a file listed here with the seed given for it, to make earlier gradings again and "
                        "compare: a JSON object {\"<sha256 of the file>\": seed} (a report's submission.sha256 "
                        "and extra_data.instructor.seed); others get a fresh seed")
    add_slurm_options(p)
    p.set_defaults(run=main)


def add_slurm_options(p) -> None:
    """The Slurm options of `--executor slurm` (grade-all, and the grading service's serve)."""
    s = p.add_argument_group("Slurm (--executor slurm); defaults come from assignment.toml")
    s.add_argument("--partition", help="partition to run the tasks in (default: the cluster's default)")
    s.add_argument("--account", help="account to charge")
    s.add_argument("--time-limit", type=int, metavar="MIN",
                   help="minutes per task (default: from time_budget_s, above --timeout)")
    s.add_argument("--gpus-per-task", type=int, metavar="N", help="--gres=gpu:N (default: 1 on cuda, 0 on cpu)")
    s.add_argument("--cpus-per-task", type=int, metavar="N", help="(default: 2)")
    s.add_argument("--mem-per-task", type=int, metavar="GB", help="host memory per task (default: the worker's "
                                                                   "memory limit + 4)")
    s.add_argument("--max-tasks", type=int, metavar="N", help="tasks running at once (the array's %%N)")
    s.add_argument("--sbatch", action="append", default=[], metavar="KEY[=VALUE]",
                   help="one more '#SBATCH --KEY=VALUE' line, e.g. --sbatch qos=high (repeatable)")


def main(args) -> int:
    try:
        assignment = Assignment.find(args.assignment)
    except AssignmentError as exc:
        return _usage(str(exc))
    root = Path(args.course)
    if not (root / "submitted").is_dir():
        return _usage(f"no submitted/ folder in {root}")
    course = Course(root, assignment)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    lock = CourseLock(root)
    try:
        lock.acquire(wait=args.wait, say=lambda text: print(f"grade-all: {text}", file=sys.stderr, flush=True))
        return _run(args, course)
    except CourseBusy as exc:
        print(f"grade-all: {exc}", file=sys.stderr)
        return BUSY_EXIT
    except LockUnavailable as exc:
        return _usage(str(exc))
    except KeyboardInterrupt:
        print("grade-all: interrupted; finished reports are kept, run it again to resume", file=sys.stderr)
        return 130
    finally:
        lock.release()
        signal.signal(signal.SIGTERM, previous)


def _run(args, course: Course) -> int:
    """The run itself, the course's lock held."""
    # Ours alone now: whatever runs that died left is theirs, not a neighbour's.
    swept = leftovers.sweep(course.root)
    if swept:
        print(f"grade-all: removed what a run that died left: {', '.join(swept)}", file=sys.stderr)
    # What the grading's results go to is checked before the grading: its minutes are not lost to a path.
    csv_path = Path(args.csv) if args.csv else course.grades_csv
    db_url = None if args.no_gradebook else (args.db or gradebook_url(course.root))
    why = cannot_write(csv_path)
    if why:
        return _usage(f"cannot write the CSV at {csv_path}: {why}")
    why = db_url and gradebook.url_problem(db_url)
    if why:
        return _usage(f"--db {db_url} names no database this machine can open ({why})")
    if args.seeds:
        try:
            seeds.read(Path(args.seeds))
        except seeds.SeedsError as exc:
            return _usage(str(exc))
        os.environ[seeds.SEEDS_ENV] = str(Path(args.seeds).resolve())    # the gradings read it (seeds.listed)
    only = getattr(args, "only", None)
    if only:
        missing = [s for s in only if course.submission(s)[0] is None]
        if missing:
            return _usage(f"no hand-in to regrade for {', '.join(map(repr, missing))} in {course.root / 'submitted'}: "
                          "nothing was graded (check the spelling)")
    try:
        executor = make_executor(args, course)
    except ValueError as exc:
        return _usage(str(exc))
    if executor.note:
        print(executor.note, file=sys.stderr)
    try:
        result = grade_all(course, executor.device, progress=not args.no_progress, executor=executor, only=only)
    except RuntimeError as exc:          # the cluster refused the batch
        print(f"grader: {exc}", file=sys.stderr)
        return 1
    print(describe(result, executor.describe()))
    try:
        notes = publish(course, result.rows, csv_path, db_url)
    except GradebookError as exc:
        print(f"grader: {exc}", file=sys.stderr)
        return 1
    for note in notes:
        print(note)
    return 0


SLURM_OPTIONS = ("partition", "account", "time_limit", "gpus_per_task", "cpus_per_task", "mem_per_task",
                 "max_tasks", "sbatch")


def check_slurm_options(args) -> None:
    """ValueError naming the Slurm options given without --executor slurm."""
    slurm_only = [f"--{name.replace('_', '-')}" for name in SLURM_OPTIONS if getattr(args, name) not in (None, [])]
    if slurm_only and args.executor != "slurm":
        raise ValueError(f"{', '.join(slurm_only)}: only for --executor slurm")


def make_executor(args, course: Course):
    """The executor the command line asks for; ValueError says why it cannot be had."""
    from ..gpu.machines import DeviceUnavailable, default_jobs, resolve_device
    if args.timeout is not None and args.timeout <= 0:
        raise ValueError("--timeout must be more than 0 seconds")
    if args.jobs is not None and args.jobs < 1:
        raise ValueError("--jobs must be at least 1")
    timeout_s = args.timeout or default_timeout(course)
    check_slurm_options(args)
    if args.files_per_task is not None and args.executor == "local":
        raise ValueError("--files-per-task: only for --executor slurm or submitit-local")
    tasks = {"warm": not args.cold}
    if args.files_per_task is not None:
        tasks["files_per_task"] = args.files_per_task
    if args.executor == "slurm":
        return slurm_batch(args, course, timeout_s, **tasks)
    try:
        device = resolve_device(args.device)
    except DeviceUnavailable as exc:
        raise ValueError(str(exc)) from None
    jobs = args.jobs or default_jobs(device, course.assignment.grading_gpu_bytes)
    if jobs < 1:
        raise ValueError("--jobs must be at least 1")
    if args.executor == "submitit-local":
        from . import cluster
        try:
            return cluster.SubmititLocalBatch(course, device, timeout_s, jobs, **tasks)
        except (ImportError, cluster.ClusterError) as exc:
            raise ValueError(str(exc)) from None
    return LocalBatch(course, device, jobs, timeout_s, warm=not args.cold)


def slurm_batch(args, course: Course, timeout_s: float, **tasks):
    """A SlurmBatch as the Slurm options ask; ValueError says why there can be none here."""
    from . import cluster
    why = cluster.available()
    if why:
        raise ValueError(why)
    try:
        options = cluster.SlurmOptions(
            partition=args.partition, account=args.account, time_min=args.time_limit,
            gpus_per_task=args.gpus_per_task, cpus_per_task=args.cpus_per_task or 2, mem_gb=args.mem_per_task,
            max_tasks=args.max_tasks, sbatch=cluster.parse_sbatch(args.sbatch))
        return cluster.SlurmBatch(course, cluster.slurm_device(args.device, args.partition), timeout_s, options,
                                  **tasks)
    except cluster.ClusterError as exc:
        raise ValueError(str(exc)) from None


def _usage(message: str) -> int:
    print(f"grader: {message}", file=sys.stderr)
    return 2


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def describe(result: BatchResult, how: str) -> str:
    rows = result.rows
    count = lambda status: sum(r.status == status for r in rows)
    lines = [f"grade-all: {len(rows)} students, {count('graded')} graded, {count('missing')} missing, "
             f"{count('error')} errors; {result.graded} gradings run {how}, "
             f"{result.copied} reports reused for identical files, {result.unchanged} unchanged; "
             f"{result.wall_s:.0f} s"]
    for r in rows:
        if r.status != "graded" or r.note:
            lines.append(f"  {r.student}: {r.status}: {r.note.splitlines()[0] if r.note else ''}")
    return "\n".join(lines)
