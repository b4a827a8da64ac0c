"""The score report: Gradescope's results.json, with the grader's details under extra_data.

Students see each test's area, contract and hint; the inputs, node ids, seed and
worker logs sit under extra_data.instructor."""
from __future__ import annotations

import json
from pathlib import Path

from .. import __version__
from ..assignment import Assignment
from ..files import replacing
from .report_reader import ReportError as ReportError, read as read   # the reader, beside the writer
from .scoring import NEIGHBOURS, OUTCOMES, SHARED_FIGURE, WORKER_START, AreaResult, TestResult, regrade, totals

SCHEMA = Path(__file__).with_name("results.schema.json")


def build(assignment: Assignment, areas: dict[str, AreaResult], results: list[TestResult], *,
          submission: dict, environment: dict, sandbox: dict, phases: dict, instructor: dict,
          problem: str | None = None) -> dict:
    score, max_score = totals(areas)
    order = {name: i for i, name in enumerate(assignment.areas, start=1)}
    counters: dict[str, int] = {}
    seconds: dict[str, float] = {}     # wall time of each area's tests, setup and teardown included
    as_phases = {WORKER_START: "worker_start_s", NEIGHBOURS: "gpu_neighbours_wait_s",   # not areas
                 SHARED_FIGURE: "gpu_shared_figure_s"}
    in_phases: dict[str, float] = {}
    for r in results:
        moved = {a: s for a, s in r.charged.items() if (a in order or a in as_phases) and s >= 0}
        if sum(moved.values()) > r.duration_s:
            moved = {}              # more than the test took: a damaged record moves nothing
        seconds[r.area] = seconds.get(r.area, 0.0) + r.duration_s - sum(moved.values())
        for a, s in moved.items():
            if a in as_phases:
                in_phases[as_phases[a]] = in_phases.get(as_phases[a], 0.0) + s
            else:
                seconds[a] = seconds.get(a, 0.0) + s
    phases = {**phases, **{k: round(s, 3) for k, s in in_phases.items() if s}}
    tests = []
    for r in sorted(results, key=lambda r: order[r.area]):
        counters[r.area] = counters.get(r.area, 0) + 1
        number = f"{order[r.area]}.{counters[r.area]}"
        entry = {
            "name": f"{r.area}: {r.contract}",
            "number": number,
            "score": round(r.score, 4),
            "max_score": round(r.max_score, 4),
            "output": _student_output(r),
            "tags": [r.area],
            "visibility": "visible",
            "extra_data": {"outcome": r.outcome, "duration_s": round(r.duration_s, 3)},
        }
        if r.measure is not None:
            entry["extra_data"]["measure"] = round(r.measure, 4)
        if r.figures:
            entry["extra_data"]["figures"] = {k: float(f"{v:.6g}") for k, v in r.figures.items()}
        if r.outcome not in ("skipped", "not_measured"):
            entry["status"] = "passed" if r.outcome == "passed" and (r.score > 0 or r.max_score == 0) else "failed"
        tests.append(entry)
        instructor.setdefault("tests", {})[number] = r.nodeid
        if r.detail:
            instructor.setdefault("details", {})[number] = r.detail
    outcomes = {o: sum(r.outcome == o for r in results) for o in OUTCOMES}
    report = {
        "score": round(score, 2),
        "max_score": round(max_score, 2),
        "execution_time": round(phases.get("total_s", 0.0), 2),
        "output": summary_markdown(assignment, areas, score, max_score, problem),
        "output_format": "md",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
        "extra_data": {
            "grader_version": __version__,
            "assignment": assignment.id,
            "assignment_fingerprint": assignment.fingerprint(),
            "submission": submission,
            "environment": environment,
            "sandbox": sandbox,
            "areas": {a.name: {"points": a.points, "graded": a.graded, "score": round(a.score, 4),
                               "passed": a.passed, "total": a.total, "gated_by": a.gated_by,
                               "note": a.note, "seconds": round(seconds.get(a.name, 0.0), 3)}
                      for a in areas.values()},
            "outcomes": outcomes,
            "phases": {k: round(v, 3) for k, v in phases.items()},
            "problem": problem,
            "regrade": regrade(areas),
            "instructor": instructor,
        },
    }
    board = leaderboard(assignment, results)
    if board:
        report["leaderboard"] = board
    return report


def leaderboard(assignment: Assignment, results: list[TestResult]) -> list[dict]:
    """Gradescope's leaderboard entries: each column's number from its test, where that test
    passed and recorded it (a CPU grading, or a failed timing, leaves the column out)."""
    entries = []
    for column in assignment.leaderboard:
        result = next((r for r in results if r.outcome == "passed"
                       and r.nodeid.rsplit("::", 1)[-1] == column.test), None)
        if result is None:
            continue
        value = result.measure if column.figure == "measure" else (result.figures or {}).get(column.figure)
        if value is not None:
            entries.append({"name": column.name, "value": float(f"{value:.6g}"), "order": column.order})
    return entries


def _student_output(r: TestResult) -> str:
    if r.outcome == "skipped":
        return f"skipped: {r.hint}" if r.hint else "skipped"
    parts = []
    if r.measure is not None and r.outcome == "passed":
        parts.append(f"Measured {r.measure:.2f}; {r.score:.2f} of {r.max_score:.2f} points.")
    if r.gated_by:
        parts.append(f"No points for this area until {', '.join(r.gated_by)} passes completely.")
    if r.outcome != "passed":
        label = {"crashed": "The worker running your code crashed",
                 "timeout": "Your code did not finish in time",
                 "error": "The test could not run",
                 "not_measured": "Not scored yet"}.get(r.outcome)
        parts.append(f"{label}: {r.hint}" if label else r.hint)
    return " ".join(p for p in parts if p)


def summary_markdown(assignment: Assignment, areas: dict[str, AreaResult], score: float,
                     max_score: float, problem: str | None) -> str:
    lines = [f"**{assignment.title}**: {score:.2f} / {max_score:.2f}", ""]
    if problem:
        lines += [f"**{problem}**", ""]
    why = regrade(areas)
    if why:
        lines += [f"**Partly graded: {why}. The rest of the score is final.**", ""]
    lines += ["| area | tests passed | points |", "|---|---|---|"]
    for a in areas.values():
        pts = f"{a.score:.2f} / {a.points:.2f}" if a.graded else (a.note or "not graded on this machine")
        note = f" ({a.note})" if a.note and a.graded else ""
        lines.append(f"| {a.name} | {f'{a.passed}/{a.total}' if a.graded else '–'} | {pts}{note} |")
    return "\n".join(lines)


def write_atomically(report: dict, path: Path) -> None:
    with replacing(path) as f:
        json.dump(report, f, indent=2)
        f.write("\n")


def terminal_table(areas: dict[str, AreaResult]) -> str:
    """The grading's areas as `grade` prints them, from the same results the report is built from."""
    rows = [("area", "passed", "points")]
    for a in areas.values():
        if not a.graded:         # no test of it ran: neither a count nor points, only why
            rows.append((a.name, "–", a.note or "not graded on this machine"))
            continue
        rows.append((a.name, f"{a.passed}/{a.total}", f"{a.score:.2f}/{a.points:.2f}" + (f"  {a.note}" if a.note else "")))
    score, max_score = totals(areas)
    rows.append(("total", "", f"{score:.2f}/{max_score:.2f}"))
    width = [max(len(r[i]) for r in rows) for i in range(2)]
    return "\n".join(f"{r[0]:<{width[0]}}  {r[1]:>{width[1]}}  {r[2]}" for r in rows)
