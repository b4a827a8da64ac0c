"""Who a request comes from: a student's or the instructor's token.

A token is `secrets.token_urlsafe(32)` (256 random bits), shown once when it is made and stored
only as its SHA-256: a copy of the database gives no one a way in. A fast hash suffices for
random tokens of that length (there is nothing to guess a dictionary of), and the stored digest is
compared with hmac.compare_digest. A revoked token is kept, marked, so that it gets 403 ("this
token was revoked") rather than 401 ("no such token").

    python -m grader tokens --course COURSE --add STUDENT...     one new token per student
    python -m grader tokens --course COURSE --from-gradebook     every student of nbgrader's gradebook
    python -m grader tokens --course COURSE --revoke STUDENT...  every live token of these students
    python -m grader tokens --course COURSE --instructor         a new instructor token
"""
from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

from ..course.folder import gradebook_url
from .store import default_url, now, open_for_command, sessions, Store, StoreUnavailable, tokens

# A student id names a folder of the course (submitted/<student>/): nbgrader's ids, no path in them.
STUDENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@+-]{0,99}")
INSTRUCTOR = "instructor"


@dataclass(frozen=True)
class Identity:
    student: str | None          # None: the instructor

    @property
    def role(self) -> str:
        return INSTRUCTOR if self.student is None else "student"


class Refused(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


def valid_student(student: str) -> bool:
    return STUDENT_ID.fullmatch(student) is not None and student != INSTRUCTOR


def issue(store: Store, student: str | None) -> str:
    if student is not None and not valid_student(student):
        raise ValueError(f"{student!r} is not a student id this course can hold (letters, digits and _ . @ + -, "
                         "starting with a letter or digit, at most 100 characters)")
    token = secrets.token_urlsafe(32)
    while token.startswith("-"):      # given as `--token T`, one starting with "-" reads as an option
        token = secrets.token_urlsafe(32)
    with store.write, store.engine.begin() as c:
        c.execute(tokens.insert().values(digest=digest(token), student=student, created_at=now()))
    return token


def revoke(store: Store, student: str | None) -> int:
    """Revoke every live token of `student` (None: every instructor token), and end the log-ins
    made with them; how many tokens."""
    who = tokens.c.student.is_(None) if student is None else tokens.c.student == student
    t = now()
    with store.write, store.engine.begin() as c:
        ids = list(c.execute(sa.select(tokens.c.id).where(who, tokens.c.revoked_at.is_(None))).scalars())
        if ids:
            c.execute(tokens.update().where(tokens.c.id.in_(ids)).values(revoked_at=t))
            c.execute(sessions.update().where(sessions.c.token_id.in_(ids), sessions.c.ended_at.is_(None))
                      .values(ended_at=t))
        return len(ids)


def log_in(store: Store, token: str | None, expires_at) -> tuple[Identity, str]:
    """A page log-in: the token's owner and a new session id for the cookie (stored hashed).
    Refused as identify() refuses the token."""
    who = identify(store, token)
    session = secrets.token_urlsafe(32)
    with store.write, store.engine.begin() as c:
        token_id = c.execute(sa.select(tokens.c.id).where(tokens.c.digest == digest(token))).scalar_one()
        c.execute(sessions.insert().values(digest=digest(session), token_id=token_id, student=who.student,
                                           created_at=now(), expires_at=expires_at))
    return who, session


def session_identity(store: Store, session: str | None) -> Identity | None:
    """Who a live session belongs to; None for none, an unknown, ended or expired one, or one whose
    token was revoked."""
    if not session:
        return None
    wanted = digest(session)
    with store.engine.connect() as c:
        row = c.execute(sa.select(sessions.c.digest, sessions.c.student, sessions.c.expires_at, sessions.c.ended_at,
                                  tokens.c.revoked_at).join(tokens, tokens.c.id == sessions.c.token_id)
                        .where(sessions.c.digest == wanted)).first()
    if row is None or not hmac.compare_digest(row.digest, wanted):
        return None
    if row.ended_at is not None or row.revoked_at is not None or row.expires_at <= now():
        return None
    return Identity(row.student)


def log_out(store: Store, session: str | None) -> None:
    if not session:
        return
    with store.write, store.engine.begin() as c:
        c.execute(sessions.update().where(sessions.c.digest == digest(session), sessions.c.ended_at.is_(None))
                  .values(ended_at=now()))


def has_tokens(store: Store, student: str) -> bool:
    with store.engine.connect() as c:
        return c.execute(sa.select(tokens.c.id).where(tokens.c.student == student).limit(1)).first() is not None


def identify(store: Store, token: str | None) -> Identity:
    """The token's owner; Refused(401) for none or an unknown one, Refused(403) for a revoked one."""
    if not token:
        raise Refused(401, "no token: send the header 'Authorization: Bearer <your token>'")
    wanted = digest(token)
    with store.engine.connect() as c:
        row = c.execute(sa.select(tokens.c.digest, tokens.c.student, tokens.c.revoked_at)
                        .where(tokens.c.digest == wanted)).first()
    if row is None or not hmac.compare_digest(row.digest, wanted):
        raise Refused(401, "this token is not known here: check that you copied it whole, or ask your instructor")
    if row.revoked_at is not None:
        raise Refused(403, "this token was revoked: ask your instructor for a new one")
    return Identity(row.student)


def bearer(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


# -- the command line (grader/service/cli.py parses it) ----------------------------------
def main(args) -> int:
    root = Path(args.course)
    if not root.is_dir():
        return _fail(f"no course folder at {root}")
    try:
        store = open_for_command(args.db or default_url(root))
    except StoreUnavailable as exc:
        return _fail(str(exc))
    try:
        if args.revoke:
            # All or nothing: a typo among the names must not leave the others half done.
            unknown = [s for s in args.revoke if not has_tokens(store, s)]
            if unknown:
                return _fail(f"no token was ever made for {', '.join(map(repr, unknown))}: nothing was revoked "
                             "(check the spelling; `tokens --add` makes one)")
            for student in args.revoke:
                n = revoke(store, student)
                print(f"{student} revoked {n} token{'s' * (n != 1)}")
            return 0
        if args.instructor:
            print(f"{INSTRUCTOR} {issue(store, None)}")
            return 0
        students = args.add or _gradebook_students(root, args.gradebook)
        if students is None:
            return 2
        bad = [s for s in students if not valid_student(s)]
        if bad:
            return _fail(f"not student ids this course can hold: {', '.join(map(repr, bad))} (letters, digits and "
                         "_ . @ + -, starting with a letter or digit)")
        for student in students:
            print(f"{student} {issue(store, student)}")
        return 0
    finally:
        store.close()


def _gradebook_students(root: Path, url: str | None) -> list[str] | None:
    url = url or gradebook_url(root)
    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///"):]).is_file():
        _fail(f"no gradebook at {url[len('sqlite:///'):]}: give --add STUDENT..., or --gradebook URL")
        return None
    try:
        from nbgrader.api import Gradebook
    except ImportError:
        _fail("nbgrader is not installed: give the students with --add STUDENT...")
        return None
    with Gradebook(url) as gb:
        students = sorted(s.id for s in gb.students)
    if not students:
        _fail("the gradebook lists no student")
        return None
    return students


def _fail(message: str) -> int:
    print(f"grader: {message}", file=sys.stderr)
    return 2
