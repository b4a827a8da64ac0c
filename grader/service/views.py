"""What a student may see of a report: feedback.md as grade-all writes it (grader/course/feedback.py,
made only of the report's student-facing parts), cut down before the deadline to the
assignment's `[service] visibility`:

    visible   everything feedback.md shows: areas, points and each failed test's hint
    areas     the score and the table of areas, no test's hint
    hidden    the score alone (Gradescope's "hidden" tests under a visible score)

After the deadline every report shows everything, as Gradescope's "after_due_date" does: by
then feedback.md says as much to everyone. A problem with the file as a whole (it does not
parse, it is not UTF-8) is said at every level: it is about the file, not about a hidden test.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

from starlette.responses import Response

from ..course import feedback

if TYPE_CHECKING:
    from .intake import Service


def shown(report: dict, student: str, visibility: str, past_deadline: bool) -> str:
    level = "visible" if past_deadline else visibility
    if level == "visible":
        return feedback.markdown(report, student)
    head = [f"# Feedback for {student}", ""]
    summary = str(report.get("output", "")).strip()
    if level == "areas":
        return "\n".join(head + [summary or _score_line(report), "",
                                 "_Before the deadline this course shows the areas only, not each test's hint._"]) + "\n"
    lines = head + [_score_line(report), ""]
    problem = (report.get("extra_data") or {}).get("problem")
    if problem:
        lines += [f"**{_escape(str(problem))}**", ""]
    lines.append("_Before the deadline this course shows the score only._")
    return "\n".join(lines) + "\n"


def _score_line(report: dict) -> str:
    return f"**Score: {float(report.get('score', 0.0)):.2f} / {float(report.get('max_score', 0.0)):.2f}**"


def _escape(s: str) -> str:
    return re.sub(r"([\\`*\[\]<])", r"\\\1", " ".join(s.split()))


def file_response(service: Service, row: dict) -> Response:
    data = service.store.data(row["id"])
    return Response(data, media_type="text/x-python; charset=utf-8", headers={
        "Content-Disposition": f'attachment; filename="{service.assignment.submission}"',
        "X-Content-SHA256": row["sha256"], "Cache-Control": "no-store"})
