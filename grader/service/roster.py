"""The class as the service knows it: every student with a token, in nbgrader's gradebook, or with
a submission, and where each stands: the latest check, the hand-in that counts (late or not), or
nothing yet, with the deadline that holds for them. The instructor's page, its CSV download, and
`python -m grader summary` (when the course has a service database) show the same rows.

    python -m grader extend --course COURSE STUDENT --until TIME     a student's own deadline
    python -m grader extend --course COURSE STUDENT --remove         back to the course's
"""
from __future__ import annotations

import csv
import datetime
import io
import sys
from pathlib import Path

import sqlalchemy as sa

from ..course.folder import gradebook_url
from .store import default_url, iso, open_for_command, parse_deadline, Store, StoreUnavailable

COLUMNS = ("student", "token", "gradebook", "deadline", "extension", "state", "latest_check", "latest_check_at",
           "latest_check_score", "counted_hand_in", "counted_at", "counted_late", "counted_sha256",
           "counted_score", "hand_ins")


def gradebook_students(root: Path, url: str | None = None) -> list[str]:
    """The students of nbgrader's gradebook; none where there is no gradebook (or no nbgrader)."""
    url = url or gradebook_url(root)
    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///"):]).is_file():
        return []
    # Read as a table (nbgrader's `student`, its `id` the student's), not through nbgrader's Gradebook,
    # which would first run its schema migrations (a subprocess) on every page view.
    engine = sa.create_engine(url)
    try:
        with engine.connect() as c:
            return sorted(c.execute(sa.text("SELECT id FROM student")).scalars())
    except sa.exc.SQLAlchemyError:
        return []
    finally:
        engine.dispose()


def rows(store: Store, course_deadline: datetime.datetime | None, gradebook: list[str]) -> list[dict]:
    """One row a student, by name."""
    live = store.students()
    counted = store.counted_all()
    latest = store.latest()
    own = store.extensions()
    hand_ins: dict[str, int] = {}
    for r in store.listed(limit=10**9):
        if r["kind"] == "hand-in":
            hand_ins[r["student"]] = hand_ins.get(r["student"], 0) + 1
    out = []
    for student in sorted(set(live) | set(gradebook) | set(own)):
        check = latest.get(student, {}).get("check")
        hand_in = counted.get(student)
        deadline = own.get(student, course_deadline)
        state = ("handed in late" if hand_in and hand_in["late"] else "handed in" if hand_in
                 else "checks only" if check else "nothing yet")
        out.append({
            "student": student, "token": live.get(student, "no"),
            "gradebook": student in gradebook, "deadline": deadline, "extension": student in own, "state": state,
            "check": check, "hand_in": hand_in, "hand_ins": hand_ins.get(student, 0)})
    return out


def _score(row: dict | None) -> str:
    if row is None or row.get("score") is None:
        return ""
    return f"{row['score']:g}/{row['max_score']:g}"


def flat(row: dict, when=iso) -> dict:
    """A roster row as plain text cells (the CSV's and the terminal's)."""
    check, hand_in = row["check"], row["hand_in"]
    return {
        "student": row["student"], "token": row["token"], "gradebook": "yes" if row["gradebook"] else "no",
        "deadline": when(row["deadline"]) if row["deadline"] else "", "extension": "yes" if row["extension"] else "no",
        "state": row["state"],
        "latest_check": f"#{check['id']}" if check else "", "latest_check_at": when(check["submitted_at"]) if check else "",
        "latest_check_score": _score(check) if check and check["status"] == "done" else (check["status"] if check else ""),
        "counted_hand_in": f"#{hand_in['id']}" if hand_in else "",
        "counted_at": when(hand_in["submitted_at"]) if hand_in else "",
        "counted_late": ("late" if hand_in["late"] else "on time") if hand_in else "",
        "counted_sha256": hand_in["sha256"] if hand_in else "", "counted_score": _score(hand_in),
        "hand_ins": str(row["hand_ins"])}


def to_csv(table: list[dict], when=iso) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in table:
        writer.writerow(flat(row, when))
    return buf.getvalue()


def terminal(table: list[dict]) -> str:
    shown = ("student", "token", "deadline", "state", "latest_check", "latest_check_score", "counted_hand_in",
             "counted_at", "counted_late")
    cells = [list(shown)] + [[flat(r)[c] for c in shown] for r in table]
    width = [max(len(line[i]) for line in cells) for i in range(len(shown))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(line, width)).rstrip() for line in cells)


def service_rows(root: Path, db: str | None, deadline: datetime.datetime | None) -> list[dict] | None:
    """The roster from a course's service database, for `summary`; None when it has none."""
    url = db or default_url(root)
    if db is None and not (Path(root) / "service.db").is_file():
        return None
    store = Store(url)
    try:
        if deadline is None and store.setting("deadline"):       # the one the service was last started with
            deadline = datetime.datetime.fromisoformat(store.setting("deadline")).replace(tzinfo=None)
        return rows(store, deadline, gradebook_students(Path(root)))
    finally:
        store.close()


# -- grader extend ----------------------------------------------------------------------------
def extend_main(args) -> int:
    from .tokens import valid_student
    root = Path(args.course)
    if not root.is_dir():
        return _fail(f"no course folder at {root}")
    if not valid_student(args.student):
        return _fail(f"{args.student!r} is not a student id this course can hold")
    until = None
    if not args.remove:
        try:
            until = parse_deadline(args.until)
        except ValueError as exc:
            return _fail(str(exc).replace("--deadline", "--until"))
    try:
        store = open_for_command(args.db or default_url(root))
    except StoreUnavailable as exc:
        return _fail(str(exc))
    try:
        known = store.students()
        if args.student not in known and args.student not in gradebook_students(root):
            return _fail(f"{args.student!r} has no token, no submission and no place in the gradebook: nothing was "
                         "changed (check the spelling; `tokens --add` makes a token)")
        store.extend(args.student, until)
    finally:
        store.close()
    print(f"{args.student}: deadline {iso(until)} (own)" if until else
          f"{args.student}: the course's deadline again")
    return 0


def _fail(message: str) -> int:
    print(f"grader: {message}", file=sys.stderr)
    return 2
