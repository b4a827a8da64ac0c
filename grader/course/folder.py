"""A course folder in nbgrader's layout, and where each student of one assignment stands.

    submitted/<student>/<assignment>/<file>              what the student handed in
    autograded/<student>/<assignment>/report.json        the grader's report (results.json)
    autograded/<student>/<assignment>/grading-error.log  why the last grading produced no report
    feedback/<student>/<assignment>/feedback.md          what the student reads

and, beside them, the grader's own files in the course root: the gradebook, the grades CSV,
the class page and the cluster jobs' logs (named below, here alone).

A report counts for a student only while it matches the submitted file's
sha256, this grader's version and the assignment (with its suites' fingerprint); anything else is stale.
"""
from __future__ import annotations

import argparse
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .. import __version__
from ..grading import submission_file
from ..grading import report_reader
from ..assignment import Assignment

GRADEBOOK = "gradebook.db"         # nbgrader's gradebook, where --db names no other
SUMMARY = "summary"                # the class page (grader/summary/page.py)
JOB_LOGS = ".grader-jobs"          # cluster jobs' scripts and logs: beside submitted/, never a student


def course_folder(value: str) -> Path:
    """--course as argparse reads it: a folder that exists, so that a mistyped path is an error
    and not a new, empty course (a summary, a database, tokens written where nobody looks)."""
    if not Path(value).is_dir():
        raise argparse.ArgumentTypeError(f"no course folder at {value}" + (" (it is a file)" if Path(value).exists() else ""))
    return Path(value)


def gradebook_url(root: str | Path) -> str:
    """The default gradebook of the course at `root` (SQLite, in the course root)."""
    return f"sqlite:///{Path(root).resolve() / GRADEBOOK}"



@dataclass
class StudentRow:
    student: str
    status: str                  # graded | stale | error | pending | missing
    score: float = 0.0
    max_score: float | None = None
    areas: dict[str, float | None] = field(default_factory=dict)   # None: not graded on that device
    note: str = ""
    sha256: str | None = None
    report: dict | None = None


class Course:
    def __init__(self, root: str | Path, assignment: Assignment):
        self.root = Path(root)
        self.assignment = assignment
        self._fingerprint = assignment.fingerprint()

    def _folder(self, kind: str, student: str) -> Path:
        return self.root / kind / student / self.assignment.id

    def submission_folder(self, student: str) -> Path:
        return self._folder("submitted", student)

    def report_path(self, student: str) -> Path:
        return self._folder("autograded", student) / "report.json"

    def error_path(self, student: str) -> Path:
        return self._folder("autograded", student) / "grading-error.log"

    def feedback_path(self, student: str) -> Path:
        return self._folder("feedback", student) / "feedback.md"

    def timestamp_path(self, student: str) -> Path:
        """nbgrader's record of when the student submitted, beside the hand-in."""
        return self.submission_folder(student) / submission_file.TIMESTAMP

    @property
    def grades_csv(self) -> Path:
        return self.root / f"grades-{self.assignment.id}.csv"

    def students(self) -> list[str]:
        top = self.root / "submitted"
        if not top.is_dir():
            return []
        return sorted(p.name for p in top.iterdir() if p.is_dir() and not p.name.startswith("."))

    def submission(self, student: str) -> tuple[submission_file.Picked | None, str]:
        """What the student handed in, by the rule every way in shares (grader/grading/submission_file.py):
        the file to grade, or a refusal that still gets a 0-point report and feedback saying why;
        None and why when there is nothing to grade at all."""
        folder = self.submission_folder(student)
        if not folder.is_dir():
            return None, f"no {self.assignment.id} folder in submitted/{student}"
        picked = submission_file.find(folder, self.assignment.submission)
        if isinstance(picked, submission_file.Refused) and picked.empty:
            return None, "the submission folder is empty"
        return picked, ""

    def read_report(self, student: str) -> dict | None:
        return report_reader.read_or_none(self.report_path(student))

    def is_current(self, report: dict | None, sha256: str, device: str | None = None) -> bool:
        if report is None:
            return False
        return (report_reader.sha256(report) == sha256
                and report_reader.regrade(report) is None
                and report_reader.grader_version(report) == __version__
                and report_reader.assignment_of(report) == (self.assignment.id, self._fingerprint)
                and (device is None or report_reader.device(report) == device))

    def rows(self) -> list[StudentRow]:
        rows = [self._row(student) for student in self.students()]
        # Ungraded students are out of what the graded ones were: areas that
        # need a device the class was not graded on do not count against them.
        usual = Counter(r.max_score for r in rows if r.report is not None).most_common(1)
        max_score = usual[0][0] if usual else self.assignment.total_points
        for r in rows:
            if r.report is None:
                r.max_score = max_score
                r.areas = {name: 0.0 for name in self.assignment.areas}
        return rows

    def _row(self, student: str) -> StudentRow:
        picked, why = self.submission(student)
        if picked is None:
            return StudentRow(student, "missing", note=why)
        sha = picked.sha256
        report = self.read_report(student)
        if self.is_current(report, sha):
            return _from_report(student, "graded", report, sha)
        error = self.error_path(student)
        if error.is_file():
            first = error.read_text(errors="replace").strip().splitlines()[:1]
            return StudentRow(student, "error", note=first[0] if first else "grading failed", sha256=sha)
        if report is not None:
            row = _from_report(student, "stale", report, sha)
            why = report_reader.regrade(report)
            row.note = (f"partly graded, run grade-all again: {why}" if why and report_reader.sha256(report) == sha
                        else "report is for another file or grader version: run grade-all again")
            return row
        return StudentRow(student, "pending", note="not graded yet", sha256=sha)


def _from_report(student: str, status: str, report: dict, sha: str) -> StudentRow:
    return StudentRow(student, status, float(report.get("score", 0.0)), float(report.get("max_score", 0.0)),
               report_reader.area_points(report), report_reader.problem(report) or "", sha, report)
