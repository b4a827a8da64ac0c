"""Command line: `python -m grader grade --submission FILE --report OUT [--device auto|cpu|cuda]`,
`python -m grader validate --out FILE` (the kill matrix over the corpus), grade-all, summary, similarity, the
grading service (serve, tokens) and its client (submit; each `--help` says more)."""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from .grading.report import terminal_table
from .assignment import Assignment, AssignmentError
from .files import cannot_write
from .gpu.machines import DeviceUnavailable, resolve_device
from .grading.grade_one import grade, process_age
from .warm.hosts import HOST_ENV


def _fail(message: str) -> int:
    print(f"grader: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m grader", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)
    g = sub.add_parser("grade", help="grade one submission and write its report")
    g.add_argument("--assignment", help="assignment folder (default: the only one under assignment/)")
    g.add_argument("--submission", help="the submitted .py file, or a student's hand-in folder, which must hold "
                   "the assignment's file name exactly (default: the reference)")
    g.add_argument("--report", default="build/report.json", help="where to write results.json")
    g.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    g.add_argument("--seed", type=int, help="input seed (default: drawn afresh)")
    g.add_argument("--no-privilege-drop", action="store_true", help="run workers as the grader's user")
    g.add_argument("--quiet", action="store_true", help="no per-test progress")
    g.add_argument("--protect", action="append", default=[], metavar="PATH",
                   help="a further path closed to the submission's worker (grade-all passes the course folder)")
    g.add_argument("--warm-host", metavar="SOCKET", default=os.environ.get(HOST_ENV) or None,
                   help=f"run the suites in this warm grading host (default ${HOST_ENV}; grade-all and "
                        "validate --jobs start one per slot); without one they run in a fresh process")
    v = sub.add_parser("validate", help="grade the reference and the wrong/adversarial corpus, "
                                        "print the kill matrix")
    v.add_argument("--assignment", help="assignment folder (default: the only one under assignment/)")
    v.add_argument("--out", default="build/validate.json", help="where to write the matrix as JSON")
    v.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    pick = v.add_mutually_exclusive_group()
    pick.add_argument("--only", nargs="+", metavar="NAME", help="only these entries (name or kind/name)")
    pick.add_argument("--fast", action="store_true", help="a small subset, for `make test`")
    v.add_argument("--no-privilege-drop", action="store_true", help="run workers as the grader's user")
    v.add_argument("--jobs", type=int, help="entries validated at once (default: as grade-all, half the "
                                            "cores on the CPU; on a GPU machine as many as the GPUs' memory and "
                                            "cores allow, four a GPU at most, timing tests taking turns)")
    v.add_argument("--cold", action="store_true", help="every grading starts its own test process (default: "
                                                        "a warm host per slot, as grade-all)")
    v.add_argument("--under-load", action="store_true",
                   help="keep the GPU's memory busy with a copy loop of another process meanwhile (GPU "
                        "only): scores must not move, and a timing is full or not measured")
    v.add_argument("--reports-dir", help=argparse.SUPPRESS)     # where --jobs puts each entry's report
    from .course import grade_all
    from .summary import similarity_report, page as summary
    from .service import cli as service
    grade_all.add_parser(sub)   # grade-all
    summary.add_parser(sub)     # summary
    similarity_report.add_parser(sub)   # similarity
    service.add_parsers(sub)    # serve and tokens: the grading service (docs/service.md)
    from .service import submit_client
    submit_client.add_parsers(sub, prefix="submit-")   # submit, submit-status, -history, -download, -regrade
    args = ap.parse_args(argv)
    if args.command in ("submit", "submit-status", "submit-history", "submit-download", "submit-regrade"):
        return submit_client.run(args)
    if args.command in ("grade-all", "summary", "similarity", "serve", "tokens", "hand-ins", "extend"):
        try:
            return args.run(args)
        except ModuleNotFoundError as exc:
            # The instructor's commands stand on packages a student's environment lacks (the
            # service's web and database stack, the similarity report's): name the one missing.
            package = (exc.name or "grader").split(".")[0]
            if package == "grader":
                raise
            return _fail(f"`{args.command}` needs the Python package {package!r}, which is not installed "
                         "here: pip install -r requirements/instructor.txt")
    if args.command == "validate":
        from .validate.matrix import main as validate
        return validate(args)

    from .warm.leftovers import PARENT_ENV, die_with_parent
    die_with_parent(os.environ.pop(PARENT_ENV, None))       # a grading of grade-all's, or of a cluster task's
    try:
        assignment = Assignment.find(args.assignment)
    except AssignmentError as exc:
        return _fail(str(exc))
    submission = Path(args.submission) if args.submission else assignment.reference
    # Only a path that names nothing is the command line's fault; a link, a device or a hand-in
    # folder without the right file is the submission's, and gets a report that says why.
    if not os.path.lexists(submission):
        return _fail(f"no submission file at {submission}")
    try:
        device = resolve_device(args.device)
    except DeviceUnavailable as exc:
        return _fail(str(exc))
    report_path = Path(args.report)
    why = cannot_write(report_path)
    if why:
        return _fail(f"cannot write the report at {report_path}: {why}")
    graded = grade(assignment, submission, report_path, device, args.seed,
                   drop_privileges=not args.no_privilege_drop, quiet=args.quiet,
                   protect=[Path(p) for p in args.protect], started=time.monotonic() - process_age(),
                   host=args.warm_host)
    print()
    print(terminal_table(graded.areas))
    if graded.problem:
        print(f"note: {graded.problem}")
    print(f"report written to {report_path}")
    return 0
