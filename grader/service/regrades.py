"""Regrade requests: a student asks, with a sentence, for a regrade of the hand-in that counts;
the instructor sees the requests on their page, regrades (`python -m grader grade-all --course
COURSE --only STUDENT`, which grades that student's hand-in again even where its report is
current) and answers there. Shared by the API (app.py) and the pages (pages.py)."""
from __future__ import annotations

from .intake import Service
from .store import iso
from .tokens import Identity, Refused

MAX_TEXT = 2000


def ask(service: Service, who: Identity, reason) -> dict:
    if who.student is None:
        raise Refused(403, "regrades are asked for by students, with their own token")
    reason = reason.strip() if isinstance(reason, str) else ""
    if not reason:
        raise Refused(400, "say in a sentence what you think was graded wrong: the request needs a reason")
    if len(reason) > MAX_TEXT:
        raise Refused(413, f"the reason is longer than {MAX_TEXT} characters: say it in a few sentences")
    counted = service.store.counted(who.student)
    if counted is None:
        raise Refused(409, "you have no hand-in to regrade: a regrade is of the hand-in that counts")
    try:
        return service.store.ask_regrade(who.student, counted["id"], reason)
    except ValueError as exc:
        raise Refused(409, str(exc)) from None


def answer(service: Service, who: Identity, req_id: int, text) -> dict:
    if who.student is not None:
        raise Refused(403, "only the instructor answers regrade requests")
    text = text.strip() if isinstance(text, str) else ""
    if not text:
        raise Refused(400, "the answer is empty: say what the regrade found")
    if len(text) > MAX_TEXT:
        raise Refused(413, f"the answer is longer than {MAX_TEXT} characters")
    try:
        return service.store.answer_regrade(req_id, text)
    except ValueError as exc:
        raise Refused(404, str(exc)) from None


def public(service: Service, row: dict) -> dict:
    return {"id": row["id"], "student": row["student"], "submission_id": row["submission_id"],
            "reason": row["reason"], "asked_at": iso(row["asked_at"]), "asked_at_local": service.local(row["asked_at"]),
            "status": "answered" if row["answered_at"] else "open", "answer": row["answer"],
            "answered_at": iso(row["answered_at"]), "answered_at_local": service.local(row["answered_at"])}


def command(service: Service, student: str) -> str:
    return f"python -m grader grade-all --course {service.course.root} --only {student}"
