"""One static page on how a class did on an assignment: COURSE/summary/index.html.

Built from the reports grade-all left in the course folder: the score
histogram, the pass rate of each rubric area and of each hidden test, the
failure hints seen most often, the performance area's distribution where it
was graded, identical submissions, the pairs of similar hand-ins (with their
matching lines on a page of their own, grader/summary/similarity_report.py), and every
student with links to their report and feedback. Plots are PNG files beside the page (matplotlib, no
display needed), so the folder can be copied or served as it is.
"""
from __future__ import annotations

import argparse
import html
import os
import re
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path
from urllib.parse import quote

from ..grading import report_reader
from . import similarity, similarity_report
from ..assignment import Assignment, AssignmentError
from ..course.folder import SUMMARY, Course, StudentRow, course_folder
from ..files import atomic_write, cannot_write

PLOTS = ("scores.png", "areas.png", "performance.png")
TOP_HINTS = 12

CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px auto; max-width: 1100px; color: #222; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 28px; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 8px 0; } td, th { padding: 3px 8px; border-bottom: 1px solid #eee; }
th { text-align: left; background: #f4f4f4; } td.nowrap { white-space: nowrap; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.bar { display: inline-block; height: 10px; background: #4a7fb5; vertical-align: middle; }
.status-graded { color: #1a6b1a; } .status-missing, .status-error, .status-stale, .status-pending { color: #a33; }
img { max-width: 100%; border: 1px solid #eee; } .note { color: #666; font-size: 12px; }
td.ident { color: #a33; font-weight: 600; }
table.students { width: 100%; table-layout: fixed; }
table.students th { overflow-wrap: anywhere; vertical-align: bottom; }
table.students td { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
col.student { width: 13em; } col.status { width: 5.5em; } col.score { width: 7.5em; } col.area { width: 5.5em; }
col.files { width: 11em; }
"""


def build(course: Course, out: Path, similarity_threshold: float | None = None, progress: bool = False,
          roster_rows: list[dict] | None = None) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    for name in PLOTS + (similarity_report.PAGE,):     # a page that has no data this time must not linger
        (out / name).unlink(missing_ok=True)
    rows = course.rows()
    reports = [r for r in rows if r.report is not None and r.status in ("graded", "stale")]
    parts = [_header(course, rows, reports)]
    if reports:
        parts.append(_scores(course, reports, out))
        parts.append(_areas(course, reports, out))
        parts.append(_performance(course, reports, out))
        parts.append(_leaderboard(course, reports))
        parts.append(_hints(reports))
        parts.append(_identical(reports))
    else:
        parts.append("<p>No graded submissions yet: run grade-all first.</p>")
    parts.append(_similar(course, out, similarity_threshold, progress))
    parts.append(_students(course, rows, out))
    if roster_rows is not None:
        parts.append(_roster_section(roster_rows))
    if reports:
        parts.append(_tests(reports))      # long: last
    title = html.escape(f"{course.assignment.title}: class summary")
    page = (f"<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title>"
            f"<style>{CSS}</style></head>\n<body>\n<h1>{title}</h1>\n" + "\n".join(p for p in parts if p)
            + "\n</body></html>\n")
    index = out / "index.html"
    atomic_write(index, page)
    return index


def _similar(course: Course, out: Path, threshold: float | None, progress: bool = False) -> str:
    """Pairs of hand-ins that share code beyond the template; needs no grading, only the files."""
    try:
        result = similarity.detect_course(course, threshold if threshold is not None else similarity.THRESHOLD,
                                          progress=progress)
    except similarity.SimilarityError as exc:
        return similarity_report.index_section(str(exc))
    similarity_report.write_page(result, course.assignment.title, out)
    return similarity_report.index_section(result)


def _header(course: Course, rows: list[StudentRow], reports: list[StudentRow]) -> str:
    counts = Counter(r.status for r in rows)
    told = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    line = f"{len(rows)} students ({told or 'none'})."
    if reports:
        scores = [r.score for r in reports]
        line += (f" Over the {len(reports)} graded: mean {statistics.mean(scores):.1f}, "
                 f"median {statistics.median(scores):.1f} of {reports[0].max_score:g}.")
    devices = Counter(report_reader.device(r.report) or "?" for r in reports)
    if devices:
        line += " Graded on " + ", ".join(f"{d} ({n})" for d, n in devices.items()) + "."
    return f"<p>{html.escape(line)}</p>"


def _figure(height: float = 3.2, ncols: int = 1):
    from matplotlib.figure import Figure     # no pyplot: Agg draws the PNG, no display or global state
    from matplotlib.ticker import MaxNLocator
    fig = Figure(figsize=(9, height), dpi=100, layout="constrained")
    axes = fig.subplots(1, ncols)
    for ax in (axes if ncols > 1 else [axes]):
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))     # counts of students
    return fig, axes


def _save(fig, out: Path, name: str) -> str:
    fig.savefig(out / name)
    return f'<img src="{quote(name)}" alt="{html.escape(name)}">'


def _scores(course: Course, reports: list[StudentRow], out: Path) -> str:
    top = max(r.max_score or 0 for r in reports) or course.assignment.total_points
    fig, ax = _figure()
    ax.hist([r.score for r in reports], bins=20, range=(0, top), color="#4a7fb5", edgecolor="white")
    ax.set_xlabel(f"score (of {top:g})")
    ax.set_ylabel("students")
    ax.set_title("Scores of graded submissions")
    return "<h2>Scores</h2>" + _save(fig, out, "scores.png")


def _areas(course: Course, reports: list[StudentRow], out: Path) -> str:
    names, rates, labels = [], [], []
    for name in course.assignment.areas:
        graded = [report_reader.areas(r.report).get(name) for r in reports]
        graded = [a for a in graded if a and a.get("graded") and a.get("total")]
        if not graded:
            continue
        full = sum(a["passed"] == a["total"] and not a.get("gated_by") for a in graded)
        names.append(name)
        rates.append(100 * full / len(graded))
        labels.append(f"{full}/{len(graded)}")
    if not names:
        return ""
    fig, ax = _figure(0.8 + 0.4 * len(names))
    bars = ax.barh(names[::-1], rates[::-1], color="#4a7fb5")
    ax.bar_label(bars, labels=labels[::-1], padding=3)
    ax.set_xlim(0, 110)
    ax.set_xlabel("% of graded students with the area's full points")
    skipped = [n for n in course.assignment.areas if n not in names]
    note = (f'<p class="note">Not graded on this machine, for anyone: {html.escape(_elsewhere(course, skipped))}.'
            "</p>" if skipped else "")
    return "<h2>Pass rate per area</h2>" + _save(fig, out, "areas.png") + note


def _elsewhere(course: Course, names: list[str]) -> str:
    """"gpu_only (GPU only)" for areas graded on one device only, else the name alone."""
    def only(name: str) -> str:
        device = course.assignment.areas[name].device
        return f" ({'GPU' if device == 'cuda' else device} only)" if device else ""
    return ", ".join(name + only(name) for name in names)


def _performance(course: Course, reports: list[StudentRow], out: Path) -> str:
    timed = course.assignment.timed_area
    graded = [(r, report_reader.areas(r.report).get(timed)) for r in reports] if timed else []
    graded = [(r, a) for r, a in graded if a and a.get("graded")]
    if not graded:
        return ""
    measures = [statistics.median(m) for m in (_measures(r, timed) for r, _ in graded) if m]
    fig, axes = _figure(ncols=2 if measures else 1)
    points = graded[0][1]["points"]
    ax = axes[0] if measures else axes
    ax.hist([a["score"] for _, a in graded], bins=15, range=(0, points), color="#b5824a", edgecolor="white")
    ax.set_xlabel(f"{timed} points (of {points:g})")
    ax.set_ylabel("students")
    if measures:
        axes[1].hist(measures, bins=15, color="#b5824a", edgecolor="white")
        axes[1].set_xlabel("measure, median over the area's tests")
    return f"<h2>{html.escape(timed.capitalize())} ({len(graded)} graded)</h2>" + _save(fig, out, "performance.png")


def _leaderboard(course: Course, reports: list[StudentRow]) -> str:
    """The leaderboard the reports carry, ranked by its first column (only where the assignment has one)."""
    columns = course.assignment.leaderboard
    if not columns:
        return ""
    entries = []
    for r in reports:
        values = {e.get("name"): e.get("value") for e in r.report.get("leaderboard") or []}
        if isinstance(values.get(columns[0].name), (int, float)):
            entries.append((r.student, values))
    if not entries:
        return ("<h2>Leaderboard</h2><p class=note>No report has a leaderboard entry yet: it is filled on "
                "GPU gradings whose timed test passed.</p>")
    first = columns[0]
    entries.sort(key=lambda e: e[1][first.name], reverse=first.order == "desc")
    head = "".join(f"<th>{html.escape(c.name)}</th>" for c in columns)
    body = "".join(
        f"<tr><td class=num>{rank}</td><td>{html.escape(student)}</td>"
        + "".join(f"<td class=num>{_value(values.get(c.name))}</td>" for c in columns) + "</tr>"
        for rank, (student, values) in enumerate(entries, start=1))
    return (f"<h2>Leaderboard</h2><p class=note>Ranked by {html.escape(first.name)} "
            f"({'larger' if first.order == 'desc' else 'smaller'} first); students whose timed test did not "
            f"pass are not ranked.</p><table><tr><th>rank</th><th>student</th>{head}</tr>{body}</table>")


def _value(v) -> str:
    if isinstance(v, (int, float)):
        return f"{v:,.3g}" if abs(v) < 100 else f"{v:,.0f}"
    return "–" if v is None else html.escape(str(v))


def _measures(row: StudentRow, area: str) -> list[float]:
    details = [report_reader.test_detail(t) for t in row.report.get("tests", []) if area in t.get("tags", [])]
    return [d["measure"] for d in details
            if d.get("outcome") == "passed" and isinstance(d.get("measure"), (int, float))]


def _tests(reports: list[StudentRow]) -> str:
    seen: dict[tuple, list[int]] = defaultdict(lambda: [0, 0])
    for r in reports:
        areas = report_reader.areas(r.report)
        nodeids = ((r.report.get("extra_data") or {}).get("instructor") or {}).get("tests") or {}
        for t in r.report.get("tests", []):
            graded = all((areas.get(tag) or {}).get("graded") for tag in t.get("tags", []))
            if "status" not in t or not graded:     # not graded on that device
                continue
            name = t["name"] + _param(nodeids.get(str(t["number"])))
            key = (tuple(int(x) for x in str(t["number"]).split(".") if x.isdigit()), t["number"], name)
            seen[key][0] += t["status"] == "passed"
            seen[key][1] += 1
    body = "".join(
        f"<tr><td>{html.escape(number)}</td><td>{html.escape(name)}</td><td class=num>{p}/{n}</td>"
        f"<td class=nowrap><span class=bar style=\"width:{round(100 * p / n)}px\"></span> {100 * p / n:.0f}%</td></tr>"
        for (_, number, name), (p, n) in sorted(seen.items()))
    return ("<h2>Pass rate per hidden test</h2><table><tr><th>#</th><th>test</th><th>passed</th><th>rate</th></tr>"
            + body + "</table>")


# report.py's prefix on a test of a gated area: the gate is the cause, counted where it failed
GATED = re.compile(r"^No points for this area until .*? passes completely\.\s*")


def _hint(test: dict) -> str:
    """What a failed test tells, without the gate's prefix: "" for a test that passed but
    earned nothing because its area's gate failed."""
    if report_reader.test_detail(test).get("outcome") == "passed":
        return ""
    return GATED.sub("", " ".join(str(test.get("output", "")).split()))


def _param(nodeid) -> str:
    """" [case]" for a parametrised test's node id (the suite's names repeat over its cases)."""
    if not isinstance(nodeid, str) or not nodeid.endswith("]") or "[" not in nodeid:
        return ""
    return f" [{nodeid[nodeid.index('[') + 1:-1]}]"


def _hints(reports: list[StudentRow]) -> str:
    tests, students = Counter(), defaultdict(set)
    for r in reports:
        texts = [text for text in (_hint(t) for t in r.report.get("tests", []) if t.get("status") == "failed")
                 if text]
        # A stale row's note says to grade again: not a hint of what the file got wrong.
        if r.status == "graded" and r.note and r.note not in texts:
            texts.append(r.note)
        for text in texts:
            tests[text] += 1
            students[text].add(r.student)
    if not tests:
        return "<h2>Most common failure hints</h2><p>No test failed.</p>"
    body = "".join(f"<tr><td class=num>{len(students[t])}</td><td class=num>{n}</td><td>{html.escape(t)}</td></tr>"
                   for t, n in tests.most_common(TOP_HINTS))
    return ("<h2>Most common failure hints</h2><table><tr><th>students</th><th>tests</th><th>hint</th></tr>"
            + body + "</table>")


def _identical(reports: list[StudentRow]) -> str:
    groups = defaultdict(list)
    for r in reports:
        groups[r.sha256].append(r.student)
    shared = sorted((sorted(g) for g in groups.values() if len(g) > 1), key=lambda g: (-len(g), g))
    if not shared:
        return ""
    items = "".join(f"<li>{len(g)} students: {html.escape(', '.join(g))}</li>" for g in shared)
    return ("<h2>Identical submissions</h2><p class=note>Same file, byte for byte: graded once, the report "
            f"copied to each.</p><ul>{items}</ul>")


def _link(path: Path, out: Path, text: str) -> str:
    if not path.is_file():
        return ""
    return f'<a href="{quote(os.path.relpath(path, out))}">{text}</a>'


def _students(course: Course, rows: list[StudentRow], out: Path) -> str:
    """One line a student, within the page's width: a long name or note is cut short on the
    line and whole in its tooltip (and in the error log it links to)."""
    areas = list(course.assignment.areas)
    # Areas no report graded (GPU-only ones, on the CPU) are "–" for students without a report
    # too, not the 0 that Course.rows gives them there.
    graded_rows = [r for r in rows if r.report is not None]
    nowhere = {a for a in areas if graded_rows and all(r.areas.get(a) is None for r in graded_rows)}
    head = "".join(f"<th title=\"{html.escape(a)}\">{html.escape(a)}</th>" for a in areas)
    cols = ("<colgroup><col class=student><col class=status><col class=score>" + "<col class=area>" * len(areas)
            + "<col class=files><col></colgroup>")
    body = []
    for r in rows:
        cells = "".join("<td class=num>–</td>" if r.areas.get(a) is None or (r.report is None and a in nowhere)
                        else f"<td class=num>{r.areas[a]:.1f}</td>" for a in areas)
        links = " ".join(filter(None, [_link(course.report_path(r.student), out, "report"),
                                       _link(course.feedback_path(r.student), out, "feedback"),
                                       _link(course.error_path(r.student), out, "error log")]))
        note = html.escape(r.note.splitlines()[0]) if r.note else ""
        student = html.escape(r.student)
        body.append(f"<tr><td title=\"{student}\">{student}</td><td class=status-{r.status}>{r.status}</td>"
                    f"<td class=num>{r.score:.1f} / {r.max_score or 0:g}</td>{cells}<td>{links}</td>"
                    f"<td class=note title=\"{note}\">{note}</td></tr>")
    return (f"<h2>Students</h2><table class=students>{cols}<tr><th>student</th><th>status</th><th>score</th>{head}"
            f"<th>files</th><th>note</th></tr>" + "".join(body) + "</table>")


# -- command line ----------------------------------------------------------------
def add_parser(sub) -> None:
    p = sub.add_parser("summary", help="one HTML page on how the class did (COURSE/summary/index.html)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--course", required=True, type=course_folder, help="course folder graded by grade-all")
    p.add_argument("--assignment", help="assignment folder (default: the only one under assignment/)")
    p.add_argument("--out", help="folder for the page and its images (default: COURSE/summary)")
    p.add_argument("--similarity-threshold", type=similarity_report.fraction, default=similarity.THRESHOLD,
                   help=f"list similar hand-ins at this similarity or more, 0 to 1 (default {similarity.THRESHOLD:g})")
    p.add_argument("--db", help="the grading service's database, for its roster (default: COURSE/service.db where "
                                "it exists)")
    p.add_argument("--deadline", help="the course's deadline for the roster's deadline column (default: the one "
                                      "the service was last started with)")
    p.set_defaults(run=main)


def main(args) -> int:
    try:
        assignment = Assignment.find(args.assignment)
    except AssignmentError as exc:
        print(f"grader: {exc}", file=sys.stderr)
        return 2
    course = Course(args.course, assignment)
    out = Path(args.out) if args.out else course.root / SUMMARY
    why = cannot_write(out / "index.html")
    if why:
        print(f"grader: cannot write the summary in {out}: {why}", file=sys.stderr)
        return 2
    try:
        table = _service_roster(course, args.db, args.deadline)
    except ValueError as exc:
        print(f"grader: {exc}", file=sys.stderr)
        return 2
    index = build(course, out, args.similarity_threshold, progress=True, roster_rows=table)
    print(f"summary written to {index}")
    if table is not None:
        from ..service import roster
        atomic_write(out / "roster.csv", roster.to_csv(table))
        print(f"the service's roster ({len(table)} students), also in {out / 'roster.csv'}:")
        print(roster.terminal(table))
    return 0


def _service_roster(course: Course, db: str | None, deadline: str | None):
    """The grading service's roster of the course (grader/service/roster.py), where it has a
    database; None where it has none. Needs the service's stack (the instructor's install)."""
    if db is None and not (course.root / "service.db").is_file():
        return None
    try:
        from ..service import roster
        from ..service.store import parse_deadline
    except ImportError:
        return None
    import sqlalchemy as sa
    try:
        return roster.service_rows(course.root, db, parse_deadline(deadline))
    except sa.exc.SQLAlchemyError as exc:
        raise ValueError(f"cannot read the service's database: {str(exc).splitlines()[0]}") from None


def _roster_section(table: list[dict]) -> str:
    from ..service import roster
    head = "".join(f"<th>{html.escape(c)}</th>" for c in roster.COLUMNS if c != "counted_sha256")
    body = "".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for c, v in roster.flat(r).items()
                                    if c != "counted_sha256") + "</tr>" for r in table)
    return (f"<h2>The grading service's roster</h2><p class=note>Every student with a token, in the gradebook or "
            f"with a submission, as the service's instructor page shows them (also in roster.csv).</p>"
            f"<table class=roster><tr>{head}</tr>{body}</table>")
