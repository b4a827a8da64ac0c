"""A report read back: what the instructor's side needs from results.json, without knowing
where in extra_data it sits. Apart from the builder (grader/grading/report.py), so that what only reads
reports (the course, the summary) does not sit above scoring."""
from __future__ import annotations

import json
from pathlib import Path


INTERRUPTED = -2       # the pytest exit grader/grading/grade_one.py records when it caught SIGINT or SIGTERM


class ReportError(ValueError):
    """A file that should hold a report does not: truncated, not JSON, or not the grader's report."""


def read(path: Path) -> dict | None:
    """The report at `path`, or None when there is no file there."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return None
    try:
        report = json.loads(text)
    except ValueError as exc:
        raise ReportError(f"{path}: not JSON, or cut short ({exc})") from None
    if not isinstance(report, dict) or not isinstance(report.get("extra_data"), dict):
        raise ReportError(f"{path}: JSON, but not a grader report (no extra_data)")
    return report


def read_or_none(path: Path) -> dict | None:
    """`read`, for callers to whom a broken report is as good as none (it is graded again)."""
    try:
        return read(path)
    except (OSError, ReportError):
        return None


def _extra(report: dict, key: str) -> dict:
    value = (report.get("extra_data") or {}).get(key)
    return value if isinstance(value, dict) else {}


def instructor(report: dict) -> dict:
    """What the report keeps for the instructor alone (the seed, the test process, the worker)."""
    return _extra(report, "instructor")


def sha256(report: dict) -> str | None:
    """The sha256 of the file that was graded."""
    return _extra(report, "submission").get("sha256")


def device(report: dict) -> str | None:
    return _extra(report, "environment").get("device")


def grader_version(report: dict) -> str | None:
    return (report.get("extra_data") or {}).get("grader_version")


def assignment_of(report: dict) -> tuple[str | None, str | None]:
    """(assignment id, fingerprint of its toml and suites) the report was graded under."""
    extra = report.get("extra_data") or {}
    return extra.get("assignment"), extra.get("assignment_fingerprint")


def problem(report: dict) -> str | None:
    """Why the grading as a whole went wrong, if it did."""
    return (report.get("extra_data") or {}).get("problem")


def regrade(report: dict) -> str | None:
    """Why the report must be made again (a timing found the GPU busy), or None."""
    why = (report.get("extra_data") or {}).get("regrade")
    return why if isinstance(why, str) and why else None


def interrupted(report: dict) -> bool:
    """The grader caught SIGINT or SIGTERM while its suites ran."""
    return _extra(report, "instructor").get("pytest_exit") == INTERRUPTED


def sandbox(report: dict) -> dict:
    """The isolation that was in force: privilege_drop, uid, protected_paths, ..."""
    return _extra(report, "sandbox")


def phases(report: dict) -> dict:
    """Where the grading's time went: startup_s, suites_s, total_s; within suites_s,
    before_session_s, session_s and after_session_s (pytest's session: collection and tests)."""
    return _extra(report, "phases")


def areas(report: dict) -> dict[str, dict]:
    """Area name -> {points, graded, score, passed, total, gated_by, note, seconds}."""
    return _extra(report, "areas")


def area_points(report: dict) -> dict[str, float | None]:
    """Area name -> points earned, None where the area was not graded on that device."""
    return {name: (a.get("score") if a.get("graded") else None) for name, a in areas(report).items()}


def gpu(report: dict) -> "dict | str | None":
    """Which GPU the grading ran on: "cpu", {"visible": its CUDA_VISIBLE_DEVICES, "uuid": the
    device's uuid}, or None in a report written before the grader recorded it."""
    return _extra(report, "instructor").get("gpu")


def test_detail(test: dict) -> dict:
    """One test's grader details: outcome, duration_s, and measure and figures where it was timed."""
    value = test.get("extra_data")
    return value if isinstance(value, dict) else {}
