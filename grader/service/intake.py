"""The front door's checks on one upload, shared by the API and the web form: who may send
what, when, and how much; then the submission is queued (and a hand-in filed in the course).

Every refusal is a Refused(status, sentence): 400 malformed, 403 not allowed now, 413 too
large, 415 not UTF-8 Python text or not the file at all (a form wrapped around it), 409 a
hand-in after the student's deadline without their --late (the sentence names the hand-in it
would replace), 429 over the hour's checks (with Retry-After).
"""
from __future__ import annotations

import datetime
import math
from dataclasses import dataclass, field

from ..grading import submission_file
from ..course.folder import Course
from . import hand_in
from .store import QuotaExceeded, Store, now
from .guard import FAILURES, Blocked, LoginGuard
from .tokens import Identity, Refused, identify

MAX_UPLOAD = 2**20          # far above a kernel file; a larger upload is refused
DRAIN_LIMIT = 16 * 2**20    # an upload this large is read to its end before the refusal; a larger one is cut
KINDS = ("check", "hand-in")
YES = ("1", "yes", "true", "on")
SESSION_AFTER_DEADLINE = datetime.timedelta(days=7)
SESSION_WITHOUT_DEADLINE = datetime.timedelta(days=30)
# What curl -F (multipart) and curl -d (form-encoded: urllib's and curl's default for a body) send.
FORM_TYPES = ("multipart/form-data", "application/x-www-form-urlencoded")


@dataclass
class Service:
    """What every request handler needs: the course, its state, its settings, its graders."""
    course: Course
    store: Store
    deadline: datetime.datetime | None = None      # naive UTC, as the store's times
    checks_per_hour: int | None = None
    graders: object = None                         # queue.Graders; None in a service that grades nothing
    device: str = "cpu"
    extra: dict = field(default_factory=dict)
    tz: datetime.tzinfo = datetime.timezone.utc    # the course's zone: every time a person reads is in it
    guard: LoginGuard = field(default_factory=LoginGuard)

    def identify(self, token: str | None, address: str) -> Identity:
        """The token's owner, as tokens.identify; a token not known here counts as a failed log-in
        from `address`, and an address over the limit is refused (429) whatever it sends."""
        try:
            self.guard.check(address)
        except Blocked as exc:
            raise QuotaRefused(f"too many failed log-ins from your address ({FAILURES} within a minute): log-ins "
                               f"from it are refused for {exc.retry_after_s} s more. Check that you copied your "
                               "token whole, or ask your instructor", exc.retry_after_s) from None
        try:
            return identify(self.store, token)
        except Refused as exc:
            if exc.status == 401 and token:
                self.guard.failed(address)
            raise

    def session_expiry(self, student: str | None) -> datetime.datetime:
        """When a log-in on the pages ends by itself: a student's, a week after their deadline; the
        instructor's (and any without a deadline), 30 days after it was made. Refused(403) for a
        student whose deadline passed more than a week ago."""
        deadline = self.deadline_for(student)
        if student is None or deadline is None:
            return now() + SESSION_WITHOUT_DEADLINE
        ends = deadline + SESSION_AFTER_DEADLINE
        if ends <= now():
            raise Refused(403, f"log-ins on these pages closed a week after the deadline ({self.when(ends)}); the "
                               "course's client (python submit.py) still works with your token")
        return ends

    @property
    def assignment(self):
        return self.course.assignment

    def deadline_for(self, student: str | None) -> datetime.datetime | None:
        """The deadline that holds for `student` (naive UTC): their extension (`grader extend`), else
        the course's."""
        if student is not None:
            own = self.store.extension(student)
            if own is not None:
                return own
        return self.deadline

    def past_deadline(self, when: datetime.datetime | None = None, student: str | None = None) -> bool:
        deadline = self.deadline_for(student)
        return deadline is not None and (when or now()) > deadline

    def local(self, t: datetime.datetime | None) -> str | None:
        """A stored time (naive UTC) in the course's zone, ISO-8601 with its offset."""
        return None if t is None else t.replace(tzinfo=datetime.timezone.utc).astimezone(self.tz) \
            .isoformat(timespec="seconds")

    def when(self, t: datetime.datetime | None) -> str:
        """A stored time for a sentence: in the course's zone, with UTC beside it when that differs."""
        if t is None:
            return "never"
        utc = t.replace(tzinfo=datetime.timezone.utc)
        local = utc.astimezone(self.tz)
        if local.utcoffset() == datetime.timedelta(0):
            return utc.strftime("%Y-%m-%d %H:%M:%S UTC")
        return f"{local.strftime('%Y-%m-%d %H:%M:%S')} {_zone_name(local)} ({utc.strftime('%H:%M:%S')} UTC)"


def _zone_name(t: datetime.datetime) -> str:
    name = t.tzname() or ""
    return name if name and not name.startswith(("UTC+", "UTC-")) else t.strftime("UTC%z")


class QuotaRefused(Refused):
    def __init__(self, message: str, retry_after_s: int):
        super().__init__(429, message)
        self.retry_after_s = retry_after_s


class LateUnconfirmed(Refused):
    """A hand-in after the deadline without the student's explicit --late."""


def submit(service: Service, who: Identity, kind: str | None, data: bytes, late_ok: bool = False) -> dict:
    """Queue `data` as the student's `kind`; the stored row (with `replaces`: the hand-in that
    counted before this one, for a hand-in). Refused when it may not be: a hand-in after the
    deadline needs `late_ok` (the client's --late, the page's box), since it replaces the one
    that counts."""
    if who.student is None:
        raise Refused(403, "an instructor token cannot submit: submissions are made with a student's token")
    if kind not in KINDS:
        raise Refused(400, kind_refused(kind))
    if not data:
        raise Refused(400, f"the upload is empty: send the bytes of your {service.assignment.submission}")
    if len(data) > MAX_UPLOAD:
        raise too_large()
    picked = submission_file.decode(service.assignment.submission, data)
    if isinstance(picked, submission_file.Refused):
        raise Refused(415, f"{picked.reason}: upload {service.assignment.submission} as UTF-8 text")
    t = now()
    late = service.past_deadline(t, who.student)
    if late and kind == "check":
        raise Refused(403, f"the deadline ({service.when(service.deadline_for(who.student))}) has passed: checks are "
                           "closed. A hand-in is still accepted, marked late, once you confirm it (--late)")
    before = service.store.counted(who.student) if kind == "hand-in" else None
    if late and kind == "hand-in" and not late_ok:
        raise LateUnconfirmed(409, late_question(service, who.student, before))
    store_it = (lambda: hand_in.store(service.course, who.student, data, t.replace(tzinfo=datetime.timezone.utc))) \
        if kind == "hand-in" else None
    try:
        row = service.store.accept(who.student, kind, data, picked.sha256, late and kind == "hand-in",
                                   service.checks_per_hour, before_insert=store_it)
    except QuotaExceeded as exc:
        wait = max(1, math.ceil((exc.retry_at - now()).total_seconds()))
        raise QuotaRefused(f"you have used all {exc.limit} checks of this hour; the next one can be sent at "
                           f"{service.when(exc.retry_at)} (in {_duration(wait)}). A hand-in is still accepted and "
                           "filed, though not graded until then", wait) from None
    if service.graders is not None:
        service.graders.poke()
    row["replaces"] = before
    return row


def late_question(service: Service, student: str, counted: dict | None) -> str:
    """What a late hand-in would do, asked before it is kept."""
    head = f"the deadline ({service.when(service.deadline_for(student))}) has passed, so this hand-in would be late"
    if counted is None:
        what = "you have no hand-in yet; this one would be the one that counts, marked late"
    else:
        what = (f"it would replace your {'late' if counted['late'] else 'on-time'} hand-in #{counted['id']} of "
                f"{service.when(counted['submitted_at'])} (sha256 {counted['sha256'][:12]}) as the one that "
                "counts; that one stays kept, and your instructor can choose it again")
    return (f"{head}: {what}. To hand it in late anyway, send it again with --late (make submit LATE=1, python "
            "submit.py submit FILE --hand-in --late, or ?kind=hand-in&late=yes over HTTP), or tick 'hand in late' on the page. "
            "Nothing was kept")


def filed_feedback(service: Service, row: dict) -> str:
    """A hand-in kept without a grading now (over the hour's gradings, or after the deadline)."""
    name = service.assignment.submission
    if service.past_deadline(student=row["student"]):
        return (f"Handed in: your {name} is filed, and grade-all grades it with the class. Its score comes with "
                "the course's grades.\n")
    return (f"Handed in: your {name} is filed for grading after the deadline. You had used this hour's gradings, "
            "so it was not graded now; a check once the hour has room shows its score.\n")


async def read_body(request, limit: int) -> bytes:
    """The request's body, refused with 413 when it is over `limit`. An upload up to DRAIN_LIMIT
    is read to its end (and dropped) first: answered while it was still being sent, the
    connection closed under the client, which saw a broken pipe instead of the sentence."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > DRAIN_LIMIT:
        raise too_large()
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > DRAIN_LIMIT:
            break
        if size <= limit:
            chunks.append(chunk)
    if size > limit:
        raise too_large()
    return b"".join(chunks)


def not_the_file(submission: str, content_type: str | None, data: bytes) -> Refused | None:
    """A form around the file rather than the file: graded as Python, the envelope would fail
    the student and spend a check. A multipart body is known by its first part's header too,
    whatever type the request claims."""
    kind = (content_type or "").split(";", 1)[0].strip().lower()
    head = data[:2048].lower()
    envelope = data.startswith(b"--") and b"\ncontent-disposition: form-data" in head
    if kind not in FORM_TYPES and not envelope:
        return None
    what = "a multipart form (curl -F)" if kind == "multipart/form-data" or envelope else \
        "a form-encoded body (curl -d, or --data-binary without a Content-Type)"
    return Refused(415, f"the upload is {what}, not the file: send the bytes of {submission} as the body, e.g. "
                        f"curl --data-binary @{submission} -H 'Content-Type: text/x-python' -H 'Authorization: "
                        f"Bearer TOKEN' 'URL/api/submissions?kind=check', or with the course's client: "
                        f"make check, or python submit.py submit {submission}. Nothing was kept, and no check was spent")


def kind_refused(kind: str | None) -> str:
    choices = "kind must be 'check' or 'hand-in': ?kind=check (graded, changes nothing) or ?kind=hand-in (what the course grades)"
    return f"{choices}; no kind was given" if not kind else f"{choices}, not {kind!r}"


def too_large() -> Refused:
    return Refused(413, f"the upload is larger than {MAX_UPLOAD // 2**20} MiB, which no kernel file needs: send "
                        "only your Python source file")


def _duration(seconds: int) -> str:
    if seconds < 90:
        return f"{seconds} s"
    minutes = round(seconds / 60)
    return f"{minutes} minutes"
