"""Does a busy GPU change a score? The checks behind docs/threat-model.md's "A shared GPU".

    python bench/busy_gpu.py [--cold N] [--class-copies N] [--classes K] [--jobs J] [--out FILE]

1. NVML: what the per-process samples look like beside a copy loop (their interval, our pids).
2. The reference graded N times cold (`python -m grader grade`) beside a copy loop of another
   process: each must score full marks, or full marks outside a performance area that was not
   measured (to be regraded).
3. A class of one noisy corpus entry (--noisy: gpu_thread_twin, the reference plus a thread that
   copies GPU memory in bursts from import; or gpu_work_after_return, which leaves seconds of
   GPU work queued after every call) and N distinct reference copies, graded K times with
   `grade-all` (--jobs J, or its default): every reference copy must score full marks.
4. With --rate-copies M: M reference copies alone, before the noisy classes and after them, for
   the class rate (gradings a minute) to set beside the noisy classes' rate: their share of the
   mean of the two.
Prints a table per check and exits 1 if any check failed.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader.gpu import load as gpu_load  # noqa: E402
from grader.grading import report_reader  # noqa: E402
from grader.assignment import Assignment  # noqa: E402
from grader.validate.corpus import load_corpus  # noqa: E402
from grader.course.folder import Course  # noqa: E402

REFERENCE = ROOT / "reference" / "l1_paged_kv_write.py"


def nvml_probe(seconds: float = 3.0) -> dict:
    import os

    import pynvml
    import torch

    from grader.sandbox import nvml
    handle, problem = nvml.handle(0)
    if handle is None:
        return {"problem": problem}
    load = gpu_load.start()
    try:
        t0 = int(time.time() * 1e6)
        time.sleep(seconds)
        samples = pynvml.nvmlDeviceGetProcessUtilization(handle, t0)
        rows = sorted((s.timeStamp, s.pid, s.smUtil, s.memUtil) for s in samples if s.timeStamp > t0)
        stamps = sorted({r[0] for r in rows if r[1] == load.pid})
        gaps = [(b - a) / 1e6 for a, b in zip(stamps, stamps[1:])]
        dev = pynvml.nvmlDeviceGetSamples(handle, pynvml.NVML_GPU_UTILIZATION_SAMPLES, t0)[1]
        dstamps = sorted(s.timeStamp for s in dev)
        return {"load_pid": load.pid, "our_pid": os.getpid(), "torch": torch.__version__,
                "samples_of_load": len(stamps), "sample_gaps_s": gaps[:20],
                "pids_seen": sorted({r[1] for r in rows}),
                "max_sm_of_load": max((r[2] for r in rows if r[1] == load.pid), default=None),
                "device_sample_gaps_s": [(b - a) / 1e6 for a, b in zip(dstamps, dstamps[1:])][:10]}
    finally:
        load.kill()
        load.wait()


def grade(submission: Path, report: Path) -> dict:
    subprocess.run([sys.executable, "-m", "grader", "grade", "--submission", str(submission), "--report",
                    str(report), "--device", "cuda"], cwd=ROOT, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False)
    return report_reader.read(report) or {}


def verdict(report: dict) -> tuple[bool, str]:
    """(full marks, or full marks outside an area not measured; a line)."""
    score, top = report.get("score"), report.get("max_score")
    why = report_reader.regrade(report)
    areas = report_reader.areas(report)
    lost = {n: a["score"] for n, a in areas.items() if a.get("graded") and a["score"] < a["points"] - 1e-6}
    ok = score is not None and not lost and score >= top - 1e-6
    perf = [t for t in report.get("tests", []) if "performance" in t.get("tags", [])]
    ratio = report_reader.test_detail(perf[0]).get("measure") if perf else None
    figures = [report_reader.test_detail(t).get("figures") or {} for t in perf]
    attempts = sum(f.get("quiet_attempts", 0) for f in figures)
    waited = max((f.get("quiet_waited_s", 0) for f in figures), default=0)
    # Each distinct message once, with how many tests gave it: a file ended for its GPU work
    # fails dozens of tests with one sentence.
    hints = collections.Counter(t.get("output", "")[:150] for t in report.get("tests", [])
                                if t.get("status") == "failed" and "performance" not in t.get("tags", []))
    lost_hints = "; ".join(h + (f" (x{n})" if n > 1 else "") for h, n in hints.items())
    return ok, f"{score}/{top}" + (f" lost {lost}: {lost_hints}" if lost else "") + \
        (f" regrade: {why[:120]}" if why else "") + (f" ratio {ratio}" if ratio is not None else "") + \
        (f" quiet: {attempts:g} attempts, {waited:.1f} s waited" if figures else "") + \
        f" {report.get('execution_time', 0):.0f} s"


def cold_beside_load(n: int, work: Path) -> list[dict]:
    out = []
    load = gpu_load.start()
    try:
        for i in range(n):
            t = time.monotonic()
            ok, line = verdict(grade(REFERENCE, work / f"cold-{i}.json"))
            out.append({"run": i, "ok": ok, "result": line, "wall_s": round(time.monotonic() - t, 1)})
            print(f"  cold {i}: {'ok ' if ok else 'BAD'} {line} ({out[-1]['wall_s']} s)", flush=True)
    finally:
        load.kill()
        load.wait()
    return out


def noisy_class(copies: int, jobs: int | None, work: Path, k: int, noisy: str | None = "gpu_thread_twin",
                deadline_s: float | None = None, keep: Path | None = None) -> list[dict]:
    """The class graded within deadline_s; the noisy entry's report kept at `keep`."""
    assignment = Assignment.find(None)
    course = work / f"class-{k}"
    students = {}
    if noisy:
        with tempfile.TemporaryDirectory(prefix="grader-mutants-") as mutants:
            students["noisy"] = next(e for e in load_corpus(assignment, mutants=Path(mutants))
                                     if e.name == noisy).file.read_text()
    for i in range(copies):
        students[f"ref{i:02d}"] = REFERENCE.read_text() + f"\n# copy {i}\n"
    for student, text in students.items():
        folder = course / "submitted" / student / assignment.id
        folder.mkdir(parents=True)
        (folder / assignment.submission).write_text(text)
    t, began = time.monotonic(), time.time()
    proc = subprocess.Popen([sys.executable, "-m", "grader", "grade-all", "--course", str(course), "--assignment",
                             str(assignment.folder), "--device", "cuda", *(["--jobs", str(jobs)] if jobs else [])], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    cut = False
    try:
        proc.wait(timeout=deadline_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        cut = True
        print(f"  class {k}: ended at its {deadline_s:g} s deadline", flush=True)
    wall = time.monotonic() - t
    out, copies_done, reports = [], [], []
    for student in students:
        path = Course(course, assignment).report_path(student)
        report = report_reader.read_or_none(path) or {}
        reports.append(report)
        ok, line = verdict(report)
        if report and student != "noisy":
            copies_done.append(path.stat().st_mtime - began)
        if student == "noisy" and report and keep is not None:
            keep.write_text(json.dumps(report))
        # A grading the deadline cut has no report: not graded, which the rate counts, not a wrong
        # score. A report missing without a cut is a failure.
        unfinished = cut and not report
        fine = (ok or student == "noisy") if report else unfinished
        out.append({"class": k, "student": student, "ok": fine,
                    "result": "not finished by the deadline" if unfinished else line})
        mark = "ok " if ok else "-- " if student == "noisy" or unfinished else "BAD"
        print(f"  class {k} {student}: {mark} {out[-1]['result']}", flush=True)
    graded = sum(map(bool, reports))
    per_min = 60 * graded / wall
    print(f"  class {k}: {graded} of {len(students)} graded in {wall:.0f} s ({per_min:.1f} a minute)")
    if copies_done:
        last = max(copies_done)
        print(f"  class {k}: its {len(copies_done)} reference copies done {last:.0f} s after the start "
              f"({60 * len(copies_done) / last:.1f} a minute)", flush=True)
    went = time_went(reports)
    print("  where a grading's time went (mean s): " + json.dumps(went), flush=True)
    out.append({"class": k, "wall_s": round(wall, 1), "gradings": graded, "per_min": per_min,
                "ok": True, "time_went": went,
                "copies_done_s": round(max(copies_done), 1) if copies_done else None})
    return out


def time_went(reports: list[dict]) -> dict:
    """Mean seconds per grading: in its tests, waiting for the GPU's turn (at checkpoints among
    them) and for a quiet GPU, timing again beside foreign work (pytest_plugin's figures), and
    the three slowest tests."""
    waits = ("gpu_turn_wait_s", "gpu_checkpoint_wait_s", "gpu_quiet_wait_s", "gpu_quiet_redo_s")
    totals: dict[str, float] = {"tests_s": 0.0, **dict.fromkeys(waits, 0.0)}
    per_test: dict[str, float] = {}
    for report in reports:
        for test in report.get("tests", []):
            detail = report_reader.test_detail(test)
            duration = float(detail.get("duration_s") or 0.0)
            figures = detail.get("figures") or {}
            totals["tests_s"] += duration
            for key in waits:
                totals[key] += float(figures.get(key) or 0.0)
            name = str(test.get("name", "?"))[:60]
            per_test[name] = per_test.get(name, 0.0) + duration
    n = max(1, len(reports))
    went = {k: round(v / n, 2) for k, v in totals.items()}
    went["slowest"] = {k: round(v / n, 2) for k, v in sorted(per_test.items(), key=lambda kv: -kv[1])[:3]}
    went["timing_windows"] = timing_windows(reports)
    return went


def timing_windows(reports: list[dict]) -> dict:
    """Mean seconds a grading's timing tests (those with gpu_alone_s) spent, by what the suite
    records of them: the GPU held alone, the whole measurement, and its parts (spent_*)."""
    totals: dict[str, float] = {}
    for report in reports:
        for test in report.get("tests", []):
            figures = report_reader.test_detail(test).get("figures") or {}
            if "gpu_alone_s" not in figures:
                continue
            for key, value in figures.items():
                if key == "measure_wall_s":      # a window several tests share counts once
                    value = float(value or 0.0) / max(1.0, float(figures.get("window_cases") or 1.0))
                if key in ("gpu_alone_s", "measure_wall_s", "gpu_quiet_wait_s", "gpu_quiet_redo_s") \
                        or key.startswith("spent_"):
                    totals[key] = totals.get(key, 0.0) + float(value or 0.0)
    n = max(1, len(reports))
    return {k: round(v / n, 3) for k, v in sorted(totals.items())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cold", type=int, default=5)
    ap.add_argument("--class-copies", type=int, default=8)
    ap.add_argument("--classes", type=int, default=2)
    ap.add_argument("--jobs", type=int, help="gradings at once (default: grade-all's own for the GPU)")
    ap.add_argument("--noisy", default="gpu_thread_twin", help="the noisy corpus entry of each class")
    ap.add_argument("--rate-copies", type=int, default=0,
                    help="then a class of this many reference copies alone, for the class rate")
    ap.add_argument("--deadline", type=float, help="seconds each class may take; what finished by then counts")
    ap.add_argument("--out", default="build/busy_gpu.json")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="busy-gpu-"))
    found: dict = {}
    print("NVML beside a copy loop:", flush=True)
    found["nvml"] = nvml_probe()
    print("  " + json.dumps(found["nvml"]), flush=True)
    print(f"the reference graded {args.cold} times cold beside a copy loop:", flush=True)
    found["cold"] = cold_beside_load(args.cold, work)
    found["classes"] = []

    def alone(k: int) -> float:
        print(f"rate: {args.rate_copies} reference copies, --jobs {args.jobs or 'default'}, nothing else on the GPU:",
              flush=True)
        rows = noisy_class(args.rate_copies, args.jobs, work, k, noisy=None, deadline_s=args.deadline)
        found["classes"] += rows
        return rows[-1]["per_min"]

    # The copies alone run before the noisy classes and after them, and the noisy classes are
    # set beside the mean of the two: a machine warms up over a run, and one class alone on
    # either side measured that warming as much as the noisy file.
    rates = [alone(args.classes)] if args.rate_copies else []
    noisy_rates = []
    for k in range(args.classes):
        print(f"class {k}: {args.noisy} and {args.class_copies} reference copies, --jobs {args.jobs or 'default'}:", flush=True)
        rows = noisy_class(args.class_copies, args.jobs, work, k, args.noisy, args.deadline,
                           Path(args.out).with_name(f"noisy-{k}.json"))
        found["classes"] += rows
        noisy_rates.append(rows[-1]["per_min"])
    if args.rate_copies:
        rates.append(alone(args.classes + 1))
        base = sum(rates) / len(rates)
        found["rate_beside_noisy"] = {"alone_per_min": [round(r, 2) for r in rates],
                                      "noisy_per_min": [round(r, 2) for r in noisy_rates],
                                      "share": [round(r / base, 3) for r in noisy_rates]}
        print(f"class rate with {args.noisy}: " + ", ".join(f"{r:.1f}" for r in noisy_rates) +
              f" a minute, against {' and '.join(f'{r:.1f}' for r in rates)} alone (before and after): " +
              ", ".join(f"{100 * r / base:.0f}%" for r in noisy_rates) + " of their mean", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(found, indent=1))
    bad = [r for r in found["cold"] + found["classes"] if not r["ok"]]
    print(f"{len(bad)} check(s) failed" if bad else "every check passed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
