"""The command lines of `serve` and `tokens`, apart from what they run: `python -m grader grade`
parses every subcommand, and must not import the service's web and database stack to do so
(a student's environment has neither)."""
from __future__ import annotations

from ..course.folder import course_folder

SERVE = ("The grading service for one assignment of one course (docs/service.md): students send checks and "
         "hand-ins over HTTP, graded as grade-all grades. One service per course.")


def add_parsers(sub) -> None:
    _serve_parser(sub)
    _tokens_parser(sub)
    _hand_ins_parser(sub)
    _extend_parser(sub)


def _serve_parser(sub) -> None:
    p = sub.add_parser("serve", help="the grading service: students send checks and hand-ins over HTTP",
                       description=SERVE)
    p.add_argument("--course", required=True, type=course_folder,
                   help="course folder (nbgrader layout); hand-ins go to its submitted/")
    p.add_argument("--assignment", help="assignment folder (default: the only one under assignment/)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--jobs", type=int, help="gradings at once (default: as grade-all, half the cores on the CPU, on a GPU "
                                           "machine what the GPUs' memory and the cores allow, four a GPU at most; "
                                           "with --executor slurm, Slurm tasks at once, default 4)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: put a TLS "
                                                       "reverse proxy in front, docs/service.md)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--db", help="database URL (default: sqlite:///COURSE/service.db; PostgreSQL: "
                                "postgresql+psycopg://user:password@host/db)")
    p.add_argument("--deadline", help="ISO-8601 time after which checks are refused and hand-ins are marked late "
                                      "(a time without a zone is UTC), e.g. 2026-03-01T23:59:00+01:00")
    p.add_argument("--timezone", help="the course's time zone, for every time the pages and sentences show (an IANA "
                                      "name such as Europe/Berlin, or +01:00; default: the deadline's offset, else UTC)")
    p.add_argument("--checks-per-hour", type=int, default=6,
                   help="checks one student may send in any hour (default 6; 0: no limit)")
    p.add_argument("--timeout", type=float, help="seconds one grading may take (default: 2 x time budget + 300)")
    p.add_argument("--cold", action="store_true", help="every grading starts its own test process (default: a "
                                                        "warm host per slot, as grade-all)")
    p.add_argument("--executor", default="local", choices=["local", "slurm"],
                   help="local: gradings as subprocesses here (default); slurm: each grading one Slurm task, "
                        "--jobs of them at once (the course folder on a filesystem the nodes share, "
                        "docs/cluster.md)")
    from ..course.grade_all import add_slurm_options
    add_slurm_options(p)
    p.set_defaults(run=_serve)


def _tokens_parser(sub) -> None:
    p = sub.add_parser("tokens", help="make or revoke the grading service's tokens (prints STUDENT TOKEN lines)",
                       description="Tokens are shown once, here, and stored only as their SHA-256.")
    p.add_argument("--course", required=True, type=course_folder,
                   help="course folder (the service's database is in it by default)")
    p.add_argument("--db", help="the service's database URL (default: sqlite:///COURSE/service.db)")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--add", nargs="+", metavar="STUDENT", help="one new token for each of these students")
    what.add_argument("--from-gradebook", action="store_true",
                      help="one new token for every student in nbgrader's gradebook (COURSE/gradebook.db)")
    what.add_argument("--revoke", nargs="+", metavar="STUDENT", help="revoke every token of these students")
    what.add_argument("--instructor", action="store_true", help="a new instructor token (sees every student)")
    p.add_argument("--gradebook", help="nbgrader gradebook URL for --from-gradebook (default: "
                                       "sqlite:///COURSE/gradebook.db)")
    p.set_defaults(run=_tokens)


def _hand_ins_parser(sub) -> None:
    p = sub.add_parser("hand-ins", help="list every kept hand-in, or choose the one that counts",
                       description="Every hand-in the service accepted is kept. The one that counts (what grade-all "
                                   "grades, in submitted/STUDENT/ASSIGNMENT/) is the newest, unless chosen here.")
    p.add_argument("--course", required=True, type=course_folder, help="course folder")
    p.add_argument("--assignment", help="assignment folder (default: the only one under assignment/)")
    p.add_argument("--db", help="the service's database URL (default: sqlite:///COURSE/service.db)")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--list", nargs="*", metavar="STUDENT", help="every hand-in of these students (none: everyone's), "
                                                                   "the one that counts marked COUNTS")
    what.add_argument("--activate", nargs=2, metavar=("STUDENT", "ID"),
                      help="make hand-in ID (the # of --list) the one of STUDENT's that counts")
    p.set_defaults(run=_hand_ins)


def _extend_parser(sub) -> None:
    p = sub.add_parser("extend", help="give one student a deadline of their own (checks, lateness and what "
                                      "reports show follow it)")
    p.add_argument("--course", required=True, type=course_folder, help="course folder")
    p.add_argument("--db", help="the service's database URL (default: sqlite:///COURSE/service.db)")
    p.add_argument("student", help="the student's id")
    when = p.add_mutually_exclusive_group(required=True)
    when.add_argument("--until", help="ISO-8601 time (a time without a zone is UTC), e.g. 2026-03-04T23:59:00+01:00")
    when.add_argument("--remove", action="store_true", help="back to the course's deadline")
    p.set_defaults(run=_extend)


def _extend(args) -> int:
    from .roster import extend_main
    return extend_main(args)


def _hand_ins(args) -> int:
    from .counting import main
    return main(args)


def _serve(args) -> int:
    from .serve import main
    return main(args)


def _tokens(args) -> int:
    from .tokens import main
    return main(args)
