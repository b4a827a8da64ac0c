"""The similarity report in its three forms (JSON, CSV, and a page of the class summary with the
matching lines side by side), and `python -m grader similarity`.

Every form says the same: pairs of students above the threshold, most similar first, and the
students whose file is close to the reference solution. It is evidence for a person to read,
never a grade: the page says so at its top.
"""
from __future__ import annotations

import argparse
import csv
import html
import io
import json
import sys
from pathlib import Path

from ..assignment import Assignment, AssignmentError
from ..course.folder import SUMMARY, Course, course_folder
from ..files import atomic_write, cannot_write
from .similarity import REFERENCE, THRESHOLD, Match, Result, SimilarityError, detect_course

PAGE = "similarity.html"          # beside the class summary's index.html
SHOWN_SIDE_BY_SIDE = 100          # the page shows the files of this many matches; the rest are listed
INDEX_ROWS = 10                   # pairs listed on the class page itself
WHAT_IT_IS = ("Evidence for a person to read, never a grade: a pair here shares code beyond the template "
              "(renamed names, moved functions and changed comments do not hide it), and only a reading of "
              "both files says why. Honest answers to a short kernel share idioms, and a kernel rewritten by "
              "hand or by a language model is not found.")


# -- data ------------------------------------------------------------------------------------
def entries(result: Result) -> list[dict]:
    """Pairs and reference matches as one list, most similar first (identical bytes on top)."""
    rows = [_entry(p.a, p.b, "pair", p.match, p.identical) for p in result.pairs]
    rows += [_entry(n.student, REFERENCE, "reference", n.match, False) for n in result.near_reference]
    rows.sort(key=lambda e: (not e["identical"], -e["similarity"], e["kind"] != "reference", e["a"], e["b"]))
    return rows


def _entry(a: str, b: str, kind: str, match: Match, identical: bool) -> dict:
    return {"a": a, "b": b, "kind": kind, "similarity": round(match.similarity, 4), "identical": identical,
            "share_a": round(match.share_a, 4), "share_b": round(match.share_b, 4),
            "lines_a": [list(r) for r in match.lines_a], "lines_b": [list(r) for r in match.lines_b]}


def to_json(result: Result) -> str:
    return json.dumps(entries(result), indent=1) + "\n"


def to_csv(result: Result) -> str:
    out = io.StringIO()
    fields = ["rank", "a", "b", "kind", "similarity", "identical", "share_a", "share_b", "lines_a", "lines_b"]
    writer = csv.DictWriter(out, fields, lineterminator="\n")
    writer.writeheader()
    for rank, e in enumerate(entries(result), start=1):
        writer.writerow({**e, "rank": rank, "lines_a": _ranges(e["lines_a"]), "lines_b": _ranges(e["lines_b"])})
    return out.getvalue()


def _ranges(ranges) -> str:
    return " ".join(f"{a}-{b}" if a != b else str(a) for a, b in ranges)


def terminal(result: Result, rows: int = 20) -> str:
    found = entries(result)
    lines = [f"{result.compared} hand-ins compared; {len(result.pairs)} pairs and "
             f"{len(result.near_reference)} close to the reference at similarity >= {result.threshold:g}"]
    for e in found[:rows]:
        what = "identical" if e["identical"] else f"{e['similarity']:.2f}"
        lines.append(f"  {what:>9}  {e['a']}  {e['b']}")
    if len(found) > rows:
        lines.append(f"  ... and {len(found) - rows} more")
    lines += [f"  not compared: {s.student}: {s.reason}" for s in result.skipped]
    return "\n".join(lines)


# -- the page --------------------------------------------------------------------------------
# The class summary's look (grader/summary/page.py), and the two files side by side.
PAGE_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px auto; max-width: 1100px; color: #222; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 28px; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 8px 0; } td, th { padding: 3px 8px; border-bottom: 1px solid #eee; }
th { text-align: left; background: #f4f4f4; } .note { color: #666; font-size: 12px; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.pair { margin: 18px 0 28px; }
.sides { display: grid; grid-template-columns: minmax(0, 1fr) minmax(0, 1fr); gap: 10px; } .sides > div { min-width: 0; }
.sides pre { margin: 0; padding: 6px; background: #fafafa; border: 1px solid #eee; overflow-x: auto;
  font: 12px/1.35 ui-monospace, monospace; }
.sides .same { background: #ffe3a3; display: block; } .sides .n { color: #999; user-select: none; }
.sides h3 { font-size: 13px; margin: 4px 0; }
td.ident { color: #a33; font-weight: 600; }
"""


def page(result: Result, title: str) -> str:
    found = entries(result)
    anchors = {(e["a"], e["b"]): f"m{i}" for i, e in enumerate(found[:SHOWN_SIDE_BY_SIDE], start=1)}
    parts = [f"<p class=note>{html.escape(WHAT_IT_IS)}</p>", _counts(result),
             "<p><a href=\"index.html\">Back to the class summary</a></p>"]
    near = [e for e in found if e["kind"] == "reference"]
    pairs = [e for e in found if e["kind"] == "pair"]
    parts.append("<h2>Close to the reference solution</h2>"
                 + (_table(near, anchors) if near else "<p>No hand-in is above the threshold.</p>"))
    parts.append("<h2>Pairs of students</h2>"
                 + (_table(pairs, anchors) if pairs else "<p>No pair is above the threshold.</p>"))
    if found:
        parts.append("<h2>Matching lines side by side</h2>"
                     + (f"<p class=note>The first {SHOWN_SIDE_BY_SIDE} of {len(found)}.</p>"
                        if len(found) > SHOWN_SIDE_BY_SIDE else ""))
        parts += [_sides(e, anchors[(e["a"], e["b"])], result.texts) for e in found[:SHOWN_SIDE_BY_SIDE]]
    heading = html.escape(f"{title}: similar hand-ins")
    return (f"<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{heading}</title>"
            f"<style>{PAGE_CSS}</style></head>\n<body>\n<h1>{heading}</h1>\n" + "\n".join(parts)
            + "\n</body></html>\n")


def _counts(result: Result) -> str:
    line = (f"{result.compared} hand-ins compared, each pair once and each against the reference solution; "
            f"listed at similarity {result.threshold:g} or more (0 to 1: the mean share of each file's own "
            "code, beyond the template, found in the other).")
    skipped = "".join(f"<li>{html.escape(s.student)}: {html.escape(s.reason)}</li>" for s in result.skipped)
    return f"<p>{html.escape(line)}</p>" + (f"<p>Not compared:</p><ul>{skipped}</ul>" if skipped else "")


def _table(rows: list[dict], anchors: dict) -> str:
    body = []
    for rank, e in enumerate(rows, start=1):
        anchor = anchors.get((e["a"], e["b"]))
        shown = f"<a href=\"#{anchor}\">lines</a>" if anchor else ""
        what = ("<td class=ident>identical</td>" if e["identical"]
                else f"<td class=num>{e['similarity']:.2f}</td>")
        body.append(f"<tr><td class=num>{rank}</td><td>{html.escape(e['a'])}</td><td>{html.escape(e['b'])}</td>"
                    f"{what}<td class=num>{e['share_a']:.2f} / {e['share_b']:.2f}</td><td>{shown}</td></tr>")
    return ("<table class=pairs><tr><th>#</th><th>a</th><th>b</th><th>similarity</th><th>share of a / of b</th>"
            "<th></th></tr>" + "".join(body) + "</table>")


def _sides(e: dict, anchor: str, texts: dict[str, str]) -> str:
    what = "identical bytes" if e["identical"] else f"similarity {e['similarity']:.2f}"
    return (f"<div class=pair id=\"{anchor}\"><h3>{html.escape(e['a'])} and {html.escape(e['b'])}: {what}</h3>"
            f"<div class=sides>{_file(e['a'], texts.get(e['a'], ''), e['lines_a'])}"
            f"{_file(e['b'], texts.get(e['b'], ''), e['lines_b'])}</div></div>")


def _file(name: str, text: str, ranges) -> str:
    same = {n for a, b in ranges for n in range(a, b + 1)}
    lines = text.splitlines() or [""]
    width = len(str(len(lines)))
    body = "".join(
        f"<span class=\"{'same' if n in same else 'other'}\"><span class=n>{n:>{width}}</span> "
        f"{html.escape(line)}\n</span>" for n, line in enumerate(lines, start=1))
    return f"<div><h3>{html.escape(name)}</h3><pre>{body}</pre></div>"


def index_section(result: Result | str) -> str:
    """The class page's own section: the first pairs and the reference's matches, with a link to
    the page that shows their lines. A string is why there is nothing to compare."""
    head = "<h2>Similar hand-ins</h2>"
    if isinstance(result, str):
        return f"{head}<p>Not compared: {html.escape(result)}</p>"
    found = entries(result)
    near = [e for e in found if e["kind"] == "reference"]
    pairs = [e for e in found if e["kind"] == "pair"]
    parts = [head, f"<p class=note>{html.escape(WHAT_IT_IS)}</p>", _counts(result)]
    if near:
        names = ", ".join(e["a"] for e in near[:INDEX_ROWS * 2])
        more = f" and {len(near) - INDEX_ROWS * 2} more" if len(near) > INDEX_ROWS * 2 else ""
        parts.append(f"<p>Close to the reference solution: {html.escape(names + more)}.</p>")
    if pairs:
        more = f" (the first {INDEX_ROWS} of {len(pairs)})" if len(pairs) > INDEX_ROWS else ""
        parts.append(f"<p>Pairs of students{more}:</p>" + _table(pairs[:INDEX_ROWS], {}))
    else:
        parts.append("<p>No pair of students is above the threshold.</p>")
    parts.append(f"<p><a href=\"{PAGE}\">The matching lines side by side</a></p>")
    return "".join(parts)


def write_page(result: Result, title: str, out: Path) -> Path:
    path = out / PAGE
    atomic_write(path, page(result, title))
    return path


# -- command line ----------------------------------------------------------------------------
def add_parser(sub) -> None:
    p = sub.add_parser("similarity", help="pairs of hand-ins that are one file handed in several times",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # Checked in main, not by argparse, so that a wrong path is one line and not a usage text too.
    p.add_argument("--course", required=True, help="course folder in nbgrader's layout")
    p.add_argument("--assignment", help="assignment folder (default: the only one under assignment/)")
    p.add_argument("--threshold", type=fraction, default=THRESHOLD,
                   help=f"list pairs at this similarity or more, 0 to 1 (default {THRESHOLD:g})")
    p.add_argument("--out", metavar="FILE.json", help="write the pairs as JSON, most similar first")
    p.add_argument("--csv", metavar="FILE.csv", help="write the pairs as CSV")
    p.add_argument("--page", help=f"where to write the page (default: COURSE/{SUMMARY}/{PAGE})")
    p.add_argument("--skip-unreadable", action="store_true",
                   help="compare the others when a hand-in is not UTF-8 source (a binary, a link)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(run=main)


def fraction(value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not 0 <= x <= 1:
        raise argparse.ArgumentTypeError(f"{value} is not between 0 and 1")
    return x


def main(args) -> int:
    def fail(message: str) -> int:
        print(f"grader: {message}", file=sys.stderr)
        return 2
    try:
        course_folder(args.course)
        assignment = Assignment.find(args.assignment)
    except (argparse.ArgumentTypeError, AssignmentError) as exc:
        return fail(str(exc))
    course = Course(args.course, assignment)
    page_path = Path(args.page) if args.page else course.root / SUMMARY / PAGE
    outputs = [Path(p) for p in (args.out, args.csv) if p] + [page_path]
    for path in outputs:
        why = cannot_write(path)
        if why:
            return fail(f"cannot write {path}: {why}")
    try:
        result = detect_course(course, args.threshold, progress=not args.quiet,
                               skip_unreadable=args.skip_unreadable)
    except SimilarityError as exc:
        return fail(str(exc))
    if args.out:
        atomic_write(Path(args.out), to_json(result))
    if args.csv:
        atomic_write(Path(args.csv), to_csv(result))
    atomic_write(page_path, page(result, assignment.title))
    print(terminal(result))
    print(f"page written to {page_path}" + "".join(f"; {p}" for p in (args.out, args.csv) if p))
    return 0
