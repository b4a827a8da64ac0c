"""The service's state in one database, through SQLAlchemy Core: SQLite in the course folder by
default, PostgreSQL by URL (postgresql+psycopg://...).

A submission's bytes are stored with it, in the same transaction that accepts it: once the
client has its 202, a crash loses nothing, and a restart grades from the database, never from a
file that may have changed since. Each grading a submission took is a row of its own (`gradings`),
so that "graded exactly once" can be read back: one grading with a report per submission, beside
any that were interrupted or failed.

The queue is round-robin across students: a submission's `turn` is one past both the turn being
served and the student's own last queued one, and the next grading is the queued submission with
the lowest (turn, id) whose student has none in flight. A burst of one student's takes turns
1, 2, 3...; everyone else's next one sits in the first turn not yet served.
"""
from __future__ import annotations

import datetime
import json
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

HOUR = datetime.timedelta(hours=1)
MAX_FAILURES = 2            # a grading that fails in the grader is tried once more, then an error

metadata = sa.MetaData()

tokens = sa.Table(
    "service_tokens", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("digest", sa.String(64), nullable=False, unique=True),     # sha256 of the token
    sa.Column("student", sa.String(200)),                               # None: an instructor's
    sa.Column("created_at", sa.DateTime, nullable=False),
    sa.Column("revoked_at", sa.DateTime))

submissions = sa.Table(
    "service_submissions", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("student", sa.String(200), nullable=False, index=True),
    sa.Column("kind", sa.String(16), nullable=False),                  # check | hand-in
    sa.Column("data", sa.LargeBinary, nullable=False),
    sa.Column("sha256", sa.String(64), nullable=False),
    sa.Column("submitted_at", sa.DateTime, nullable=False),
    sa.Column("late", sa.Boolean, nullable=False),
    sa.Column("turn", sa.Integer, nullable=False),
    sa.Column("status", sa.String(16), nullable=False, index=True),    # queued | grading | done | error | filed
    sa.Column("failures", sa.Integer, nullable=False),                 # gradings the grader failed on
    sa.Column("started_at", sa.DateTime),
    sa.Column("finished_at", sa.DateTime),
    sa.Column("score", sa.Float),
    sa.Column("max_score", sa.Float),
    sa.Column("report", sa.Text),                                      # results.json
    sa.Column("error", sa.Text))                                       # why the grader failed

gradings = sa.Table(
    "service_gradings", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("submission_id", sa.Integer, sa.ForeignKey("service_submissions.id"), nullable=False, index=True),
    sa.Column("started_at", sa.DateTime, nullable=False),
    sa.Column("ended_at", sa.DateTime),
    sa.Column("outcome", sa.String(16)),          # report | failed | interrupted; None while it runs
    sa.Column("detail", sa.Text))

# A log-in on the pages: the cookie holds a random id, stored only as its SHA-256. It ends at log-out,
# when its token is revoked, or at `expires_at` (the student's deadline plus a week).
sessions = sa.Table(
    "service_sessions", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("digest", sa.String(64), nullable=False, unique=True),
    sa.Column("token_id", sa.Integer, sa.ForeignKey("service_tokens.id"), nullable=False, index=True),
    sa.Column("student", sa.String(200)),                               # None: the instructor's
    sa.Column("created_at", sa.DateTime, nullable=False),
    sa.Column("expires_at", sa.DateTime, nullable=False),
    sa.Column("ended_at", sa.DateTime))

# A student's own deadline (`grader extend`): checks, lateness, visibility and log-ins follow it.
extensions = sa.Table(
    "service_extensions", metadata,
    sa.Column("student", sa.String(200), primary_key=True),
    sa.Column("until", sa.DateTime, nullable=False),
    sa.Column("granted_at", sa.DateTime, nullable=False))

# A student's request for a regrade of their counted hand-in, and the instructor's answer.
regrades = sa.Table(
    "service_regrades", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("student", sa.String(200), nullable=False, index=True),
    sa.Column("submission_id", sa.Integer, sa.ForeignKey("service_submissions.id"), nullable=False),
    sa.Column("asked_at", sa.DateTime, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("answered_at", sa.DateTime),
    sa.Column("answer", sa.Text))

# The hand-in that counts, where the instructor chose one (`grader hand-ins --activate`, the page):
# without a row, a student's newest hand-in counts. A new hand-in removes the row (it counts).
counted = sa.Table(
    "service_counted", metadata,
    sa.Column("student", sa.String(200), primary_key=True),
    sa.Column("submission_id", sa.Integer, sa.ForeignKey("service_submissions.id"), nullable=False),
    sa.Column("chosen_at", sa.DateTime, nullable=False))

settings = sa.Table(
    "service_settings", metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.Text, nullable=False))


def now() -> datetime.datetime:
    """UTC without a zone: SQLite keeps no zone, so every time in the database is naive UTC."""
    return datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)


def iso(t: datetime.datetime | None) -> str | None:
    return None if t is None else t.replace(tzinfo=datetime.timezone.utc).isoformat(timespec="seconds")


def parse_deadline(text: str | None) -> datetime.datetime | None:
    """The deadline as naive UTC (the store's times); ValueError says what is wrong with it."""
    if not text:
        return None
    try:
        t = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"--deadline {text!r} is not an ISO-8601 time (e.g. 2026-03-01T23:59:00+01:00)") from None
    if t.tzinfo is not None:
        t = t.astimezone(datetime.timezone.utc)
    return t.replace(tzinfo=None)


def default_url(course_root: Path) -> str:
    return f"sqlite:///{Path(course_root).resolve() / 'service.db'}"


def make_engine(url: str) -> sa.Engine:
    if url.startswith("sqlite"):
        engine = sa.create_engine(url, connect_args={"timeout": 30})

        @sa.event.listens_for(engine, "connect")
        def _pragmas(conn, _record):
            # WAL: readers (status requests) never wait for the writer (a grading being stored).
            cur = conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()
        return engine
    return sa.create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)


FILED = "filed"        # a hand-in over the hour's gradings: in the course folder, not graded now


class QuotaExceeded(Exception):
    def __init__(self, limit: int, retry_at: datetime.datetime):
        super().__init__(f"{limit} checks an hour")
        self.limit = limit
        self.retry_at = retry_at


@dataclass(frozen=True)
class Claim:
    """A submission taken from the queue, and the grading row it runs under."""
    id: int
    student: str
    kind: str
    data: bytes
    sha256: str
    grading: int


class StoreUnavailable(Exception):
    """The service's database cannot be opened; the message is the sentence a command prints."""


def open_for_command(url: str) -> "Store":
    """The store for a command line (tokens, hand-ins, extend): StoreUnavailable, in a sentence,
    where the database cannot be opened."""
    try:
        return Store(url)
    except sa.exc.SQLAlchemyError as exc:
        raise StoreUnavailable(f"cannot open the service's database: {exc.__class__.__name__}: "
                               f"{str(exc).splitlines()[0]}") from None


class Store:
    def __init__(self, url: str):
        self.url = url
        self.engine = make_engine(url)
        metadata.create_all(self.engine)
        # One writer at a time in this process: SQLite would otherwise refuse a second writer that
        # read first, and a quota must be counted and spent in one step.
        self.write = threading.Lock()

    def close(self) -> None:
        self.engine.dispose()

    # -- settings -----------------------------------------------------------------------
    def secret(self, key: str) -> str:
        """A random value made once per database (the leaderboard's pseudonyms hash with it)."""
        with self.write, self.engine.begin() as c:
            value = c.execute(sa.select(settings.c.value).where(settings.c.key == key)).scalar()
            if value is None:
                value = secrets.token_hex(32)
                c.execute(settings.insert().values(key=key, value=value))
            return value

    def setting(self, key: str) -> str | None:
        with self.engine.connect() as c:
            return c.execute(sa.select(settings.c.value).where(settings.c.key == key)).scalar()

    def set_setting(self, key: str, value: str) -> None:
        with self.write, self.engine.begin() as c:
            c.execute(settings.delete().where(settings.c.key == key))
            c.execute(settings.insert().values(key=key, value=value))

    # -- submissions --------------------------------------------------------------------
    def accept(self, student: str, kind: str, data: bytes, sha256: str, late: bool,
               checks_per_hour: int | None, before_insert=None) -> dict:
        """Queue a submission, spending one of the hour's checks if it is one (QuotaExceeded
        when none is left). `before_insert()` runs in the same step, before the row is written
        (a hand-in's move into the course folder)."""
        t = now()
        with self.write, self.engine.begin() as c:
            status = "queued"
            if checks_per_hour is not None:
                recent = self._recent_checks(c, student, t)
                if len(recent) >= checks_per_hour:
                    if kind == "check":
                        raise QuotaExceeded(checks_per_hour, recent[len(recent) - checks_per_hour] + HOUR)
                    # Graded, a hand-in is a check with feedback: unlimited, it would lift the
                    # quota. It is never refused (it is the official one), only not graded now.
                    status = FILED
            if kind == "hand-in":
                # before the folder is written: a `hand-ins --activate` in another process waits for this
                self._hold_hand_ins(c, student)
                c.execute(counted.delete().where(counted.c.student == student))
            if before_insert is not None:
                before_insert()
            turn = self._next_turn(c, student) if status == "queued" else 0
            new_id = c.execute(submissions.insert().values(
                student=student, kind=kind, data=data, sha256=sha256, submitted_at=t, late=late, turn=turn,
                status=status, failures=0)).inserted_primary_key[0]
        return self.get(new_id)

    def _recent_checks(self, c, student: str, t: datetime.datetime) -> list[datetime.datetime]:
        """When the student's gradings of the last hour were sent: checks, and hand-ins graded as one."""
        return list(c.execute(sa.select(submissions.c.submitted_at).where(
            submissions.c.student == student, submissions.c.status != FILED,
            submissions.c.submitted_at > t - HOUR).order_by(submissions.c.submitted_at)).scalars())

    def checks_left(self, student: str, checks_per_hour: int | None) -> tuple[int | None, datetime.datetime | None]:
        """(checks left this hour, when the next one frees up) for a student."""
        if checks_per_hour is None:
            return None, None
        with self.engine.connect() as c:
            recent = self._recent_checks(c, student, now())
        left = max(0, checks_per_hour - len(recent))
        return left, (recent[len(recent) - checks_per_hour] + HOUR if left == 0 else None)

    def _next_turn(self, c, student: str) -> int:
        served = c.execute(sa.select(sa.func.max(submissions.c.turn))
                           .where(submissions.c.status != "queued")).scalar() or 0
        own = c.execute(sa.select(sa.func.max(submissions.c.turn)).where(
            submissions.c.student == student, submissions.c.status.in_(("queued", "grading")))).scalar() or 0
        return max(served, own) + 1

    def get(self, sub_id: int) -> dict | None:
        with self.engine.connect() as c:
            row = c.execute(sa.select(*_listed).where(submissions.c.id == sub_id)).mappings().first()
            if row is None:
                return None
            return self._with_position(c, dict(row))

    def report(self, sub_id: int) -> dict | None:
        with self.engine.connect() as c:
            text = c.execute(sa.select(submissions.c.report).where(submissions.c.id == sub_id)).scalar()
        return json.loads(text) if text else None

    def data(self, sub_id: int) -> bytes | None:
        with self.engine.connect() as c:
            return c.execute(sa.select(submissions.c.data).where(submissions.c.id == sub_id)).scalar()

    def listed(self, student: str | None = None, limit: int = 500) -> list[dict]:
        """Submissions newest first (one student's, or everyone's), each with its queue position."""
        query = sa.select(*_listed).order_by(submissions.c.id.desc()).limit(limit)
        if student is not None:
            query = query.where(submissions.c.student == student)
        with self.engine.connect() as c:
            rows = [dict(r) for r in c.execute(query).mappings()]
            order = self._queue_order(c)
        for row in rows:
            row["position"] = order.get(row["id"])
        return rows

    def queue(self) -> list[dict]:
        """What is graded now and what waits, in the order it will be served."""
        with self.engine.connect() as c:
            rows = [dict(r) for r in c.execute(sa.select(*_listed).where(
                submissions.c.status.in_(("queued", "grading"))).order_by(submissions.c.turn, submissions.c.id))
                .mappings()]
        position = 0
        for row in rows:
            if row["status"] == "queued":
                position += 1
                row["position"] = position
            else:
                row["position"] = None
        return sorted(rows, key=lambda r: (r["status"] != "grading", r["position"] or 0))

    def _queue_order(self, c) -> dict[int, int]:
        ids = c.execute(sa.select(submissions.c.id).where(submissions.c.status == "queued")
                        .order_by(submissions.c.turn, submissions.c.id)).scalars()
        return {i: n for n, i in enumerate(ids, start=1)}

    def _with_position(self, c, row: dict) -> dict:
        row["position"] = None
        if row["status"] == "queued":
            ahead = c.execute(sa.select(sa.func.count()).select_from(submissions).where(
                submissions.c.status == "queued",
                sa.or_(submissions.c.turn < row["turn"],
                       sa.and_(submissions.c.turn == row["turn"], submissions.c.id < row["id"])))).scalar()
            row["position"] = ahead + 1
        return row

    def latest(self) -> dict[str, dict[str, dict]]:
        """student -> kind -> that student's newest submission of that kind."""
        newest = (sa.select(sa.func.max(submissions.c.id)).group_by(submissions.c.student, submissions.c.kind))
        with self.engine.connect() as c:
            rows = c.execute(sa.select(*_listed).where(submissions.c.id.in_(newest))).mappings()
            out: dict[str, dict[str, dict]] = {}
            for row in rows:
                out.setdefault(row["student"], {})[row["kind"]] = dict(row)
        return out

    # -- extensions ----------------------------------------------------------------------------
    def extension(self, student: str) -> datetime.datetime | None:
        with self.engine.connect() as c:
            return c.execute(sa.select(extensions.c.until).where(extensions.c.student == student)).scalar()

    def extensions(self) -> dict[str, datetime.datetime]:
        with self.engine.connect() as c:
            return dict(c.execute(sa.select(extensions.c.student, extensions.c.until)).all())

    def extend(self, student: str, until: datetime.datetime | None) -> None:
        """Set (None: remove) a student's own deadline."""
        with self.write, self.engine.begin() as c:
            c.execute(extensions.delete().where(extensions.c.student == student))
            if until is not None:
                c.execute(extensions.insert().values(student=student, until=until, granted_at=now()))

    def students(self) -> dict[str, str]:
        """Every student with a token or a submission: student -> "yes" (a live token), "revoked"
        (tokens, all revoked) or "no"."""
        with self.engine.connect() as c:
            out: dict[str, str] = {}
            for student, revoked in c.execute(sa.select(tokens.c.student, tokens.c.revoked_at)
                                              .where(tokens.c.student.is_not(None))).all():
                out[student] = "yes" if revoked is None or out.get(student) == "yes" else "revoked"
            for student in c.execute(sa.select(submissions.c.student).distinct()).scalars():
                out.setdefault(student, "no")
        return out

    # -- regrade requests ------------------------------------------------------------------------
    def ask_regrade(self, student: str, sub_id: int, reason: str) -> dict:
        """A new request; ValueError (the sentence) where one for this hand-in is still open."""
        with self.write, self.engine.begin() as c:
            open_one = c.execute(sa.select(regrades.c.id).where(
                regrades.c.student == student, regrades.c.submission_id == sub_id,
                regrades.c.answered_at.is_(None))).scalar()
            if open_one is not None:
                raise ValueError(f"you asked for a regrade of hand-in #{sub_id} already (request #{open_one}), and "
                                 "your instructor has not answered yet: the answer will show here")
            new_id = c.execute(regrades.insert().values(student=student, submission_id=sub_id, asked_at=now(),
                                                        reason=reason)).inserted_primary_key[0]
        return self.regrade(new_id)

    def regrade(self, req_id: int) -> dict | None:
        with self.engine.connect() as c:
            row = c.execute(sa.select(regrades).where(regrades.c.id == req_id)).mappings().first()
        return None if row is None else dict(row)

    def regrades(self, student: str | None = None) -> list[dict]:
        """Requests newest first (one student's, or everyone's)."""
        query = sa.select(regrades).order_by(regrades.c.id.desc())
        if student is not None:
            query = query.where(regrades.c.student == student)
        with self.engine.connect() as c:
            return [dict(r) for r in c.execute(query).mappings()]

    def answer_regrade(self, req_id: int, answer: str) -> dict:
        with self.write, self.engine.begin() as c:
            done = c.execute(regrades.update().where(regrades.c.id == req_id).values(
                answered_at=now(), answer=answer)).rowcount
        if not done:
            raise ValueError(f"no regrade request #{req_id}")
        return self.regrade(req_id)

    # -- hand-ins: every one kept; one counts ------------------------------------------------
    def hand_ins(self, student: str) -> list[dict]:
        """A student's hand-ins, oldest first, each with `counts` (the one grade-all grades)."""
        with self.engine.connect() as c:
            rows = [dict(r) for r in c.execute(sa.select(*_listed).where(
                submissions.c.student == student, submissions.c.kind == "hand-in").order_by(submissions.c.id))
                .mappings()]
            chosen = c.execute(sa.select(counted.c.submission_id).where(counted.c.student == student)).scalar()
        which = chosen if chosen is not None else (rows[-1]["id"] if rows else None)
        for row in rows:
            row["counts"] = row["id"] == which
        return rows

    def _hold_hand_ins(self, c, student: str) -> None:
        """Hold the student's hand-ins (which counts, and the folder that holds it) until this
        transaction ends, against the service and `grader hand-ins` in other processes alike:
        on PostgreSQL an advisory lock, on SQLite the database's write lock, taken by a write."""
        if c.dialect.name == "postgresql":
            c.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext(:key))"), {"key": f"hand-ins:{student}"})
        else:
            c.execute(counted.delete().where(counted.c.student == student, sa.false()))

    def counted(self, student: str) -> dict | None:
        return next((r for r in self.hand_ins(student) if r["counts"]), None)

    def counted_all(self) -> dict[str, dict]:
        """student -> the hand-in that counts, for every student with one."""
        newest = sa.select(sa.func.max(submissions.c.id)).where(submissions.c.kind == "hand-in") \
            .group_by(submissions.c.student)
        with self.engine.connect() as c:
            chosen = dict(c.execute(sa.select(counted.c.student, counted.c.submission_id)).all())
            ids = set(c.execute(newest).scalars())
            ids = {i for i in ids} | set(chosen.values())
            rows = [dict(r) for r in c.execute(sa.select(*_listed).where(submissions.c.id.in_(ids))).mappings()]
        out: dict[str, dict] = {}
        for row in sorted(rows, key=lambda r: r["id"]):
            student = row["student"]
            if student in chosen and chosen[student] != row["id"]:
                continue
            out[student] = dict(row, counts=True)
        return out

    def choose(self, student: str, sub_id: int, write_folder=None) -> dict:
        """Make hand-in `sub_id` the student's one that counts. `write_folder(row, data)` runs in
        the same step (the course folder's copy). ValueError says why it cannot be."""
        with self.write, self.engine.begin() as c:
            self._hold_hand_ins(c, student)
            row = c.execute(sa.select(*_listed, submissions.c.data).where(submissions.c.id == sub_id)).mappings().first()
            if row is None or row["student"] != student or row["kind"] != "hand-in":
                raise ValueError(f"#{sub_id} is not a hand-in of {student}'s")
            c.execute(counted.delete().where(counted.c.student == student))
            if write_folder is not None:
                write_folder(dict(row), row["data"])
            c.execute(counted.insert().values(student=student, submission_id=sub_id, chosen_at=now()))
        return self.counted(student)

    def done_checks(self) -> list[dict]:
        """Every graded check, with its report (the leaderboard's material)."""
        with self.engine.connect() as c:
            return [dict(r) for r in c.execute(sa.select(
                submissions.c.id, submissions.c.student, submissions.c.score, submissions.c.max_score,
                submissions.c.report).where(submissions.c.kind == "check", submissions.c.status == "done"))
                .mappings()]

    def gradings_of(self, sub_id: int) -> list[dict]:
        with self.engine.connect() as c:
            return [dict(r) for r in c.execute(sa.select(gradings).where(gradings.c.submission_id == sub_id)
                                               .order_by(gradings.c.id)).mappings()]

    # -- the graders' side --------------------------------------------------------------
    def claim(self) -> Claim | None:
        """The next submission to grade, marked as grading; None when none may start."""
        with self.write, self.engine.begin() as c:
            busy = sa.select(submissions.c.student).where(submissions.c.status == "grading")
            row = c.execute(sa.select(submissions.c.id, submissions.c.student, submissions.c.kind,
                                      submissions.c.data, submissions.c.sha256)
                            .where(submissions.c.status == "queued", submissions.c.student.not_in(busy))
                            .order_by(submissions.c.turn, submissions.c.id).limit(1)).first()
            if row is None:
                return None
            t = now()
            c.execute(submissions.update().where(submissions.c.id == row.id)
                      .values(status="grading", started_at=t))
            grading = c.execute(gradings.insert().values(submission_id=row.id, started_at=t)).inserted_primary_key[0]
        return Claim(row.id, row.student, row.kind, row.data, row.sha256, grading)

    def finish(self, claim: Claim, report: dict) -> None:
        t = now()
        with self.write, self.engine.begin() as c:
            c.execute(submissions.update().where(submissions.c.id == claim.id).values(
                status="done", finished_at=t, score=float(report.get("score", 0.0)),
                max_score=float(report.get("max_score", 0.0)), report=json.dumps(report), error=None))
            c.execute(gradings.update().where(gradings.c.id == claim.grading).values(ended_at=t, outcome="report"))

    def fail(self, claim: Claim, why: str) -> bool:
        """The grader produced no report: queued again the first time (True), an error after."""
        t = now()
        with self.write, self.engine.begin() as c:
            failures = c.execute(sa.select(submissions.c.failures).where(submissions.c.id == claim.id)).scalar() + 1
            again = failures < MAX_FAILURES
            values = dict(status="queued", failures=failures) if again else dict(
                status="error", failures=failures, finished_at=t, error=why)
            c.execute(submissions.update().where(submissions.c.id == claim.id).values(**values))
            c.execute(gradings.update().where(gradings.c.id == claim.grading).values(
                ended_at=t, outcome="failed", detail=why[-20000:]))
        return again

    def interrupt(self, claim: Claim, why: str) -> None:
        """The service stopped this grading (shutting down): back to the queue, in its turn."""
        t = now()
        with self.write, self.engine.begin() as c:
            c.execute(submissions.update().where(submissions.c.id == claim.id).values(status="queued"))
            c.execute(gradings.update().where(gradings.c.id == claim.grading).values(
                ended_at=t, outcome="interrupted", detail=why))

    def recover(self) -> int:
        """At start: gradings a killed service left in flight go back to the queue. How many."""
        t = now()
        with self.write, self.engine.begin() as c:
            c.execute(gradings.update().where(gradings.c.outcome.is_(None)).values(
                ended_at=t, outcome="interrupted", detail="the service stopped during the grading"))
            return c.execute(submissions.update().where(submissions.c.status == "grading")
                             .values(status="queued")).rowcount


# What a listing carries: everything but the bytes and the report.
_listed = [submissions.c[name] for name in ("id", "student", "kind", "sha256", "submitted_at", "late", "turn", "status",
                                            "failures", "started_at", "finished_at", "score", "max_score", "error")] \
    + [sa.func.length(submissions.c.data).label("size")]
