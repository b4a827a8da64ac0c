"""A generated class of the toy assignment in nbgrader's layout, graded once per test session.

Many students hand in the same few files (graded once each), plus the cases a
class always has: a binary file under the right name, an empty folder, a folder
with a misnamed file, a link or a folder in the file's place, a student folder without the
assignment's folder.
"""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import jsonschema

from grader.assignment import REPO, Assignment
from grader.course.batch import BatchResult, grade_all, publish
from grader.course.folder import Course, gradebook_url

TOY = Assignment.load(REPO / "tests/grader/toy")
SCHEMA = json.loads((REPO / "grader/grading/results.schema.json").read_text())
SUBMISSIONS = REPO / "tests/grader/toy/submissions"

# file handed in -> (students, expected score on the CPU)
HANDED_IN = {
    "good.py": (26, 90.0),
    "no_echo.py": (8, 60.0),              # echo fails; add is complete
    "syntax_error.py": (4, 0.0),
}
BINARY = b"\x7fELF\x02\x01\x01\x00" + bytes(range(256))
MISSING = {
    "s_no_folder": "no toy_add folder",             # a student folder without the assignment's
    "s_empty": "empty",                              # the assignment's folder, empty
    "s_stamp_only": "empty",                         # only nbgrader's timestamp.txt
}
# Handed in, but not a file under the assignment's name: graded 0, with feedback saying why.
REFUSED = {
    "s_wrong_name": "rename solution.py to toy.py",          # the one rule run_autograder applies too
    "s_link": "toy.py is a symbolic link",                   # to a classmate's file: never read
    "s_folder": "toy.py is a folder",
}


@dataclass
class GradedClass:
    course: Course
    first: BatchResult
    expected: dict[str, float]        # student -> score, for every student with a file
    distinct_files: int
    course_mode: int = 0o755          # the course folder's mode before the grading, as an instructor left it


def validate_report(report: dict) -> None:
    # Here rather than imported from conftest: two conftest modules (tests/grader, tests/assignment)
    # share that module name when both folders are collected in one run.
    jsonschema.Draft202012Validator(SCHEMA).validate(report)


def students() -> dict[str, bytes | None]:
    """student id -> the bytes of toy.py they handed in (None: missing, see MISSING)."""
    files: dict[str, bytes | None] = {}
    n = 0
    for name, (count, _) in HANDED_IN.items():
        for _ in range(count):
            files[f"s{n:02d}"] = (SUBMISSIONS / name).read_bytes()
            n += 1
    files["s_binary"] = BINARY
    files.update(dict.fromkeys(MISSING))
    files.update(dict.fromkeys(REFUSED))
    return files


def expected_scores() -> dict[str, float]:
    scores, n = {}, 0
    for _, (count, score) in HANDED_IN.items():
        for _ in range(count):
            scores[f"s{n:02d}"] = score
            n += 1
    scores["s_binary"] = 0.0
    scores.update(dict.fromkeys(REFUSED, 0.0))
    return scores


def make_course(root: Path) -> Course:
    for student, data in students().items():
        top = root / "submitted" / student
        folder = top / TOY.id
        if student == "s_no_folder":
            top.mkdir(parents=True)
            continue
        folder.mkdir(parents=True)
        if student == "s_stamp_only":
            (folder / "timestamp.txt").write_text("2026-01-05 10:00:00.000000 UTC\n")
        elif student == "s_wrong_name":
            shutil.copy(SUBMISSIONS / "good.py", folder / "solution.py")
        elif student == "s_link":
            (folder / TOY.submission).symlink_to(root / "submitted" / "s00" / TOY.id / TOY.submission)
        elif student == "s_folder":
            (folder / TOY.submission).mkdir()
        elif data is not None:
            (folder / TOY.submission).write_bytes(data)
    return Course(root, TOY)


@lru_cache(maxsize=None)
def _graded(root: str) -> GradedClass:
    course = make_course(Path(root))
    course.root.chmod(0o755)              # as a course folder usually is: the grading must leave it so
    result = grade_all(course, "cpu", jobs=2, progress=False)
    publish(course, result.rows, course.grades_csv, gradebook_url(course.root))
    distinct = len({data for data in students().values() if data is not None}) + len(REFUSED)
    return GradedClass(course, result, expected_scores(), distinct)


def graded(tmp_path_factory) -> GradedClass:
    """The class, graded on the first call of a session and reused after."""
    root = tmp_path_factory.getbasetemp() / "toy-class"
    return _graded(str(root))
