"""`python -m grader serve`: the grading service for one assignment of one course
(docs/service.md). One service per course database: a second one on the same course is refused,
since both would take the same queued submissions."""
from __future__ import annotations

import datetime
import sys
from pathlib import Path

from ..assignment import Assignment, AssignmentError
from ..course.folder import Course
from ..course.lock import CourseBusy, CourseLock, LockUnavailable
from .store import parse_deadline

LOCK_NAME = ".grade-service.lock"


def parse_zone(text: str | None, deadline_text: str | None) -> datetime.tzinfo:
    """The course's time zone: --timezone (an IANA name such as Europe/Berlin, or an offset such
    as +01:00), else the deadline's own offset, else UTC. ValueError says what is wrong."""
    if text:
        text = text.strip()
        if text.upper() in ("UTC", "Z"):
            return datetime.timezone.utc
        if text[:1] in "+-":
            try:
                return datetime.datetime.fromisoformat(f"2000-01-01T00:00:00{text}").tzinfo
            except ValueError:
                raise ValueError(f"--timezone {text!r} is not an offset such as +01:00") from None
        import zoneinfo
        try:
            return zoneinfo.ZoneInfo(text)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"--timezone {text!r} is not a time zone this machine knows (an IANA name such as "
                             "Europe/Berlin, or an offset such as +01:00)") from None
    if deadline_text:
        t = datetime.datetime.fromisoformat(deadline_text.strip())
        if t.tzinfo is not None:
            return t.tzinfo
    return datetime.timezone.utc


def main(args) -> int:
    from ..course.batch import default_timeout
    from ..warm.leftovers import sweep
    from ..gpu.machines import DeviceUnavailable, default_jobs, resolve_device
    from ..course.grade_all import check_slurm_options
    try:
        check_slurm_options(args)
    except ValueError as exc:
        return _fail(str(exc))
    try:
        assignment = Assignment.find(args.assignment)
        deadline = parse_deadline(args.deadline)
        zone = parse_zone(args.timezone, args.deadline)
        device = resolve_device(args.device) if args.executor == "local" else None
    except (AssignmentError, ValueError, DeviceUnavailable) as exc:
        return _fail(str(exc))
    root = Path(args.course)
    if not root.is_dir():
        return _fail(f"no course folder at {root}")
    if args.executor == "slurm":
        from ..course.grade_all import slurm_batch
        try:       # made once here, so that a cluster that cannot take the gradings is said at start
            device = slurm_batch(args, Course(root, assignment), 60.0).device
        except ValueError as exc:
            return _fail(str(exc))
        args.device = device            # asked of sinfo once, not at every grading
    jobs = ((default_jobs(device, assignment.grading_gpu_bytes) if args.executor == "local" else 4)
            if args.jobs is None else args.jobs)
    if jobs < 1:
        return _fail("--jobs must be at least 1")
    if args.checks_per_hour < 0:
        return _fail("--checks-per-hour must be 0 (no limit) or more")
    if not 0 < args.port < 65536:
        return _fail(f"--port {args.port} is not a port number")
    lock = CourseLock(root)
    lock.path = root / LOCK_NAME
    try:
        lock.acquire()
    except CourseBusy:
        return _fail(f"another grading service serves this course ({lock.holder()})")
    except LockUnavailable as exc:
        return _fail(str(exc))
    try:
        return _serve(args, Course(root, assignment), device, jobs, deadline, zone, default_timeout, sweep)
    finally:
        lock.release()


def _serve(args, course: Course, device: str, jobs: int, deadline, zone, default_timeout, sweep) -> int:
    import sqlalchemy as sa
    import uvicorn

    from .app import create
    from .intake import Service
    from .queue import Graders
    from .store import Store, default_url, iso

    url = args.db or default_url(course.root)
    try:
        store = Store(url)
    except (sa.exc.SQLAlchemyError, ImportError) as exc:
        return _fail(f"cannot open the service's database {_safe(url)}: {str(exc).splitlines()[0]}")
    store.set_setting("deadline", iso(deadline) or "")       # for `summary`'s roster, read without the service
    swept = sweep(course.root)
    if swept:
        _say(f"removed what a service or grade-all that died left: {', '.join(swept)}")
    requeued = store.recover()
    if requeued:
        _say(f"{requeued} grading{'s were' if requeued != 1 else ' was'} in flight when the service stopped: "
             "queued again")
    timeout_s = args.timeout or default_timeout(course)
    cluster = None
    if args.executor == "slurm":
        from ..course.grade_all import slurm_batch
        cluster = lambda folder: slurm_batch(args, course, timeout_s, folder=folder)    # noqa: E731
    graders = Graders(course, store, device, jobs, timeout_s, warm=not args.cold, say=_say, cluster=cluster)
    if graders.note:
        _say(graders.note)
    from .guard import LoginGuard
    service = Service(course, store, deadline, args.checks_per_hour or None, graders, device, tz=zone,
                      guard=LoginGuard(say=_say))
    app = create(service, on_shutdown=[graders.stop, store.close])
    graders.start()
    how = "as Slurm tasks" if cluster else "here"
    _say(f"serving {course.assignment.id} of {course.root} on http://{args.host}:{args.port} ({device}, {jobs} "
         f"at once {how}; database {_safe(url)})")
    from .limits import MAX_HEAD
    from .protocol import JsonErrorsH11Protocol
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level="warning", access_log=False,
                            http=JsonErrorsH11Protocol, h11_max_incomplete_event_size=MAX_HEAD,
                            proxy_headers=True, forwarded_allow_ips="127.0.0.1", timeout_graceful_shutdown=10)
    try:
        uvicorn.Server(config).run()
    except KeyboardInterrupt:
        pass
    finally:
        if not graders.stopping:          # uvicorn never started (the port is taken): its shutdown did not run
            graders.stop()
            store.close()
    return 0


def _safe(url: str) -> str:
    """A URL as it may be printed: without its password."""
    from sqlalchemy.engine import make_url
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "(unreadable URL)"


def _say(text: str) -> None:
    print(f"grader serve: {text}", file=sys.stderr, flush=True)


def _fail(message: str) -> int:
    print(f"grader: {message}", file=sys.stderr)
    return 2
