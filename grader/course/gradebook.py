"""Where a class's scores go: nbgrader's gradebook, and a plain grades.csv for courses without it.

In the gradebook the assignment has one notebook, named after the submitted
file, holding one grade cell per rubric area (max_score = the area's points),
so `nbgrader export` lists every student. The grader sets only auto_score: a
manual_score entered in nbgrader's formgrader still wins. An area not graded on
this machine (a GPU-only area graded on the CPU) has no auto_score and is
marked as needing a manual grade, and so is every area of a submission the
grader failed on.
"""
from __future__ import annotations

import contextlib
import csv
import datetime
import os
import sys
import warnings
from pathlib import Path

from ..assignment import Assignment
from .folder import Course, StudentRow
from ..files import replacing


def write_csv(rows: list[StudentRow], assignment: Assignment, path: Path) -> None:
    with replacing(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student_id", "score", "max_score", *assignment.areas, "status", "note"])
        for r in rows:
            areas = ["" if r.areas.get(name) is None else _num(r.areas[name]) for name in assignment.areas]
            w.writerow([r.student, _num(r.score if r.status in ("graded", "stale") else 0.0),
                        _num(r.max_score or 0.0), *areas, r.status, r.note])


def _num(x: float) -> str:
    return f"{x:.4f}".rstrip("0").rstrip(".")


def url_problem(db_url: str) -> str | None:
    """Why `db_url` names no database SQLAlchemy can open, asked before a class is graded (the
    server itself is met only when the gradebook is written); None where it parses and its
    driver is installed, or where nbgrader (and so SQLAlchemy) is not installed at all."""
    try:
        import sqlalchemy
    except ImportError:
        return None
    try:
        sqlalchemy.make_url(db_url).get_dialect()
    except Exception as exc:        # ArgumentError, NoSuchModuleError, a driver's ImportError
        return f"{type(exc).__name__}: {exc}"
    return None


def update(course: Course, rows: list[StudentRow], db_url: str) -> None:
    from nbgrader.api import Grade, Gradebook
    from sqlalchemy.exc import SAWarning

    assignment = course.assignment
    notebook = Path(assignment.submission).stem
    with _scripts_on_path(), warnings.catch_warnings(), Gradebook(db_url) as gb:
        # nbgrader's add_submission builds objects before adding them to its session, which
        # SQLAlchemy 2 warns about on every new submission; the rows are stored all the same.
        warnings.filterwarnings("ignore", category=SAWarning, module="nbgrader")
        gb.update_or_create_assignment(assignment.id)
        gb.update_or_create_notebook(notebook, assignment.id)
        for area in assignment.areas.values():
            gb.update_or_create_grade_cell(area.name, notebook, assignment.id,
                                           max_score=area.points, cell_type="code")
        for row in rows:
            gb.update_or_create_student(row.student)
            if row.status not in ("graded", "error"):
                continue      # no submission: nbgrader's export gives the student 0
            submission = gb.update_or_create_submission(assignment.id, row.student,
                                                        timestamp=_timestamp(course, row.student))
            nb = next(n for n in submission.notebooks if n.name == notebook)
            have = {g.name: g for g in nb.grades}
            for cell in nb.notebook.grade_cells:
                # Submissions made before an area was added to the rubric lack its grade.
                grade = have.get(cell.name) or Grade(cell_id=cell.id, notebook=nb)
                score = row.areas.get(cell.name) if row.status == "graded" else 0.0
                grade.auto_score = score
                grade.needs_manual_grade = score is None or row.status == "error"
                gb.db.add(grade)
            gb.db.commit()


@contextlib.contextmanager
def _scripts_on_path():
    """nbgrader stamps a new database by running the `alembic` script installed beside
    Python, which is not on PATH when the environment's python is run without activating it."""
    saved = os.environ.get("PATH", "")
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), saved])
    try:
        yield
    finally:
        os.environ["PATH"] = saved


def _timestamp(course: Course, student: str) -> str:
    """nbgrader's submit records the time in timestamp.txt; else the file's time."""
    from nbgrader.utils import parse_utc

    folder = course.submission_folder(student)
    stamp = course.timestamp_path(student)
    if stamp.is_file():
        text = stamp.read_text(errors="replace").strip()
        try:
            parse_utc(text)
            return text
        except (ValueError, OverflowError):
            pass
    # A refused hand-in has no such file, or a link there: its own time, never its target's.
    entry = folder / course.assignment.submission
    mtime = (entry.lstat() if os.path.lexists(entry) else folder.stat()).st_mtime
    return datetime.datetime.fromtimestamp(mtime, datetime.timezone.utc).isoformat()
