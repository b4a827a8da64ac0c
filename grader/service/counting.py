"""Every hand-in is kept (its bytes, time and sha256, in the database); one of them counts: the
one in submitted/<student>/<assignment>/ with its own timestamp.txt, which grade-all grades and
nbgrader collects. By default that is the student's newest hand-in (a late one only exists when
the student confirmed it with --late); the instructor can choose another, as Gradescope's
"activate" does, and a later hand-in counts again.

    python -m grader hand-ins --course COURSE [--assignment A] --list [STUDENT...]
    python -m grader hand-ins --course COURSE [--assignment A] --activate STUDENT ID
"""
from __future__ import annotations

import datetime
import sys
from pathlib import Path

from ..course.folder import Course
from . import hand_in
from .store import default_url, iso, open_for_command, Store, StoreUnavailable


def activate(course: Course, store: Store, student: str, sub_id: int) -> dict:
    """Make hand-in `sub_id` the one that counts, in the database and the course folder at once."""
    def write(row: dict, data: bytes) -> None:
        hand_in.store(course, student, data, row["submitted_at"].replace(tzinfo=datetime.timezone.utc))
    return store.choose(student, sub_id, write)


def line(row: dict) -> str:
    return (f"{row['student']} #{row['id']} {iso(row['submitted_at'])} sha256 {row['sha256']} {row['size']} bytes"
            + (" late" if row["late"] else "") + (" COUNTS" if row.get("counts") else ""))


def main(args) -> int:
    from ..assignment import Assignment, AssignmentError
    root = Path(args.course)
    if not root.is_dir():
        return _fail(f"no course folder at {root}")
    try:
        assignment = Assignment.find(args.assignment)
    except AssignmentError as exc:
        return _fail(str(exc))
    try:
        store = open_for_command(args.db or default_url(root))
    except StoreUnavailable as exc:
        return _fail(str(exc))
    try:
        if args.activate:
            student, sub_id = args.activate
            try:
                number = int(sub_id.lstrip("#"))
            except ValueError:
                return _fail(f"{sub_id!r} is not a submission number (the # column of --list)")
            try:
                row = activate(Course(root, assignment), store, student, number)
            except ValueError as exc:
                return _fail(f"{exc}: nothing was changed (`hand-ins --list {student}` shows that student's)")
            print(line(row))
            return 0
        students = args.list or sorted({r["student"] for r in store.listed(limit=10**9) if r["kind"] == "hand-in"})
        unknown = [s for s in students if not store.hand_ins(s)]
        if unknown and args.list:
            return _fail(f"no hand-in from {', '.join(map(repr, unknown))} (check the spelling)")
        if not students:
            print("no hand-ins yet")
        for student in students:
            for row in store.hand_ins(student):
                print(line(row))
        return 0
    finally:
        store.close()


def _fail(message: str) -> int:
    print(f"grader: {message}", file=sys.stderr)
    return 2
