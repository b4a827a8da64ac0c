"""Gradings beside CPU hogs: a busy machine must not move a score (docs/timing.md).

    python bench/busy_cpu.py class   [--copies 50] [--jobs 2] [--hogs 2]   # grade-all over reference copies
    python bench/busy_cpu.py service [--checks 10] [--jobs 2] [--hogs 2]   # reference checks through serve
    python bench/busy_cpu.py matrix  [--jobs 2] [--hogs 2] [--only NAME ...] # validate: the slot_mapping entries

Each part starts `--hogs` processes that spin on a core each (`python3 -c "while True: pass"`)
for as long as it runs, on the CPU (`--device cpu`), and exits 1 unless:
class:   every reference copy scored its maximum;
service: every check of a reference copy came back done at its maximum;
matrix:  validate's kill matrix held (the slot_mapping wrong entries lose slot_mapping, the
         reference keeps every point), by validate's own exit status.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.h200_checks import make_class  # noqa: E402
from bench.service_burst import send_all, start_service  # noqa: E402
from grader.grading import report_reader  # noqa: E402
from grader.assignment import Assignment  # noqa: E402
from grader.course.folder import Course  # noqa: E402

SLOT_MAPPING_WRONG = ["wrong/slot_mapping_python_loop", "wrong/slot_mapping_tolist_comprehension",
                      "wrong/slot_mapping_loop_memoised", "wrong/slot_mapping_row_gather",
                      "wrong/slot_multiplied_before_widening", "wrong/slots_int32", "reference"]


@contextlib.contextmanager
def hogs(n: int):
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield procs
    finally:
        for p in procs:
            p.kill()
            p.wait()


def full(report: dict) -> bool:
    return bool(report) and abs(float(report.get("score", -1)) - float(report.get("max_score", -2))) < 1e-9


def part_class(args) -> bool:
    assignment = Assignment.find(None)
    course = Path(tempfile.mkdtemp(prefix="busy-cpu-class-"))
    try:
        students = make_class(course, args.copies, assignment)
        with hogs(args.hogs):
            t0 = time.monotonic()
            run = subprocess.run([sys.executable, "-m", "grader", "grade-all", "--course", str(course), "--device",
                                  "cpu", "--jobs", str(args.jobs)], cwd=ROOT, capture_output=True, text=True)
            wall = time.monotonic() - t0
        reports = [report_reader.read_or_none(Course(course, assignment).report_path(s)) or {} for s in students]
        short = [(s, r.get("score")) for s, r in zip(students, reports) if not full(r)]
        print(f"{len(students)} reference copies, grade-all --jobs {args.jobs} --device cpu beside {args.hogs} "
              f"CPU hogs: {wall:.0f} s (exit {run.returncode}); at full marks: {len(students) - len(short)}; "
              f"short: {short or 'none'}", flush=True)
        return run.returncode == 0 and not short
    finally:
        shutil.rmtree(course, ignore_errors=True)


def part_service(args) -> bool:
    assignment = Assignment.find(None)
    work = Path(tempfile.mkdtemp(prefix="busy-cpu-service-"))
    course = work / "course"
    course.mkdir()
    try:
        names = [f"st{i:02d}" for i in range(args.checks)]
        made = subprocess.run([sys.executable, "-m", "grader", "tokens", "--course", str(course), "--add", *names],
                              cwd=ROOT, capture_output=True, text=True, check=True)
        tokens = dict(line.split(" ", 1) for line in made.stdout.splitlines() if line.strip())
        reference = assignment.reference.read_bytes()
        runs = [{"student": n, "data": reference + f"\n# {n}\n".encode()} for n in names]
        with hogs(args.hogs):
            proc, url = start_service(course, assignment, "cpu", args.jobs)
            try:
                wall = send_all(url, tokens, runs, 1800)
            finally:
                proc.terminate()
                proc.wait(timeout=120)
        short = [(r["student"], r.get("problem") or (r.get("state") or {}).get("score")) for r in runs
                 if r.get("problem") or (r.get("state") or {}).get("status") != "done"
                 or (r["state"].get("score") != r["state"].get("max_score"))]
        waits = sorted(r.get("wait_s", 0) for r in runs)
        print(f"{len(runs)} reference checks through serve --jobs {args.jobs} beside {args.hogs} CPU hogs: "
              f"{wall:.0f} s, submit to report {waits[0]:.0f}-{waits[-1]:.0f} s; at full marks: "
              f"{len(runs) - len(short)}; short: {short or 'none'}", flush=True)
        return not short
    finally:
        shutil.rmtree(work, ignore_errors=True)


def part_matrix(args) -> bool:
    out = Path(tempfile.mkdtemp(prefix="busy-cpu-matrix-")) / "validate.json"
    with hogs(args.hogs):
        t0 = time.monotonic()
        run = subprocess.run([sys.executable, "-m", "grader", "validate", "--device", "cpu", "--jobs", str(args.jobs),
                              "--out", str(out), "--only", *(args.only or SLOT_MAPPING_WRONG)], cwd=ROOT,
                             capture_output=True, text=True)
        wall = time.monotonic() - t0
    print(run.stdout[-4000:])
    print(f"validate beside {args.hogs} CPU hogs: exit {run.returncode} in {wall:.0f} s", flush=True)
    shutil.rmtree(out.parent, ignore_errors=True)
    return run.returncode == 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("part", choices=["class", "service", "matrix"])
    ap.add_argument("--copies", type=int, default=50)
    ap.add_argument("--checks", type=int, default=10)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--hogs", type=int, default=2)
    ap.add_argument("--only", nargs="+", help="matrix: these corpus entries")
    args = ap.parse_args()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    ok = {"class": part_class, "service": part_service, "matrix": part_matrix}[args.part](args)
    print("every check passed" if ok else "a check failed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
