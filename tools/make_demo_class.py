"""Write a demonstration class in nbgrader's layout from the validation corpus, to try
`grade-all`, `summary` and the gradebook on a realistic mix before a real class arrives.

    python tools/make_demo_class.py --out build/demo-class [--reference-copies 20]
    python -m grader grade-all --course build/demo-class ...
    python tools/make_demo_class.py --check build/demo-class


Every student hands in a distinct file, as in a real class: copies of the reference
(each with its own closing comment, so each is graded), every wrong submission of
the corpus's wrong.toml, every adversarial one and the slow correct one; besides
them, a student with an empty folder and one who handed in a binary under the right
name. `expected.json` beside the course says what each student must score: full marks
for the reference copies, all but the listed areas for a wrong one, at most what an
adversarial one deserves (where the workers ran as another user; else what it
deserves without that). `--check` compares the graded class with it.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grader.grading import report_reader  # noqa: E402
from grader.assignment import Assignment  # noqa: E402
from grader.course.folder import Course  # noqa: E402
from grader.validate.corpus import EPS, load_corpus  # noqa: E402
from grader.validate.matrix import area_passed, columns  # noqa: E402


def build(out: Path, assignment: Assignment, reference_copies: int) -> dict[str, dict]:
    """Write the course under `out`; return student -> what they must score."""
    if (out / "submitted").exists():
        raise SystemExit(f"{out}/submitted already exists: give a new folder")
    # Twenty copies of the solution: closed to everyone else, or a submission graded later
    # on this machine could find and import one.
    out.mkdir(mode=0o700, parents=True, exist_ok=True)
    out.chmod(0o700)
    mutants = Path(tempfile.mkdtemp(prefix="demo-mutants-"))
    try:
        entries = load_corpus(assignment, mutants=mutants)
        files: dict[str, tuple[bytes, dict]] = {}
        reference = assignment.reference.read_bytes()
        for i in range(reference_copies):
            files[f"ref_{i:02d}"] = (reference + f"\n# copy {i}\n".encode(), {"kind": "reference"})
        for e in entries:
            if e.kind == "wrong":
                files[f"wrong_{e.name}"] = (e.file.read_bytes(), {"kind": "wrong", "fails": list(e.fails),
                                                                   "fails_on": {d: list(a) for d, a in e.fails_on}})
            elif e.kind == "adversarial":
                files[f"adv_{e.name}"] = (e.file.read_bytes(), {"kind": "adversarial", "deserves": e.deserves,
                                                                 "deserves_without_drop": e.deserves_without_drop})
        for path in sorted((assignment.corpus / "slow").glob("*.py")):
            files[f"slow_{path.stem}"] = (path.read_bytes(), {"kind": "slow"})
    finally:
        shutil.rmtree(mutants, ignore_errors=True)
    expected = {}
    for student, (data, what) in files.items():
        folder = out / "submitted" / student / assignment.id
        folder.mkdir(parents=True)
        (folder / assignment.submission).write_bytes(data)
        expected[student] = what
    (out / "submitted" / "empty_folder" / assignment.id).mkdir(parents=True)
    expected["empty_folder"] = {"kind": "missing"}
    binary = out / "submitted" / "binary_file" / assignment.id
    binary.mkdir(parents=True)
    (binary / assignment.submission).write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)))
    expected["binary_file"] = {"kind": "adversarial", "deserves": 0.0, "deserves_without_drop": 0.0}
    return expected


def check(course: Course, expected: dict[str, dict]) -> list[str]:
    """What differs between the graded class and what each student must score."""
    problems = []
    rows = {r.student: r for r in course.rows()}
    for student, what in expected.items():
        row = rows.get(student)
        if row is None:
            problems.append(f"{student}: not in the course")
            continue
        if what["kind"] == "missing":
            if row.status != "missing":
                problems.append(f"{student}: status {row.status}, expected missing")
            continue
        report = row.report
        if row.status != "graded" or report is None:
            problems.append(f"{student}: status {row.status} ({row.note.splitlines()[0] if row.note else ''})")
            continue
        device = report_reader.device(report) or "cpu"
        cols = columns(course.assignment, device)
        passed = area_passed(report, cols)
        if what["kind"] == "reference" and report["score"] < report["max_score"] - EPS:
            problems.append(f"{student}: {report['score']:g}/{report['max_score']:g}, expected full marks")
        elif what["kind"] == "wrong":
            # as validate does (Entry.fails_here): areas it fails only on this device count too
            fails = what["fails"] + [a for a in what.get("fails_on", {}).get(device, []) if a not in what["fails"]]
            must_fail = [a for a in fails if a in cols]
            misses = [a for a in must_fail if passed[a]]
            extras = [a for a in cols if a not in fails and not passed[a]]
            if misses or extras:
                problems.append(f"{student}: passes {misses} it must fail, fails {extras} it must pass")
        elif what["kind"] == "adversarial":
            drop = report_reader.sandbox(report).get("privilege_drop") is True
            allowed = what["deserves"] if drop else what["deserves_without_drop"]
            if allowed is not None and report["score"] > allowed + EPS:
                problems.append(f"{student}: {report['score']:g} points, deserves at most {allowed:g}")
            elif what["deserves"] is not None and report["score"] > what["deserves"] + EPS:
                print(f"WARNING {student}: {report['score']:g} points, deserves {what['deserves']:g}; allowed "
                      f"only because the workers had no uid of their own "
                      f"({report_reader.sandbox(report).get('why_not') or 'the report does not say why'})",
                      file=sys.stderr)
        elif what["kind"] == "slow" and not passed.get("write", True):
            problems.append(f"{student}: a slow but correct file fails write")
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--out", help="the course folder to create")
    what.add_argument("--check", metavar="COURSE", help="compare a graded demo class with its expected.json")
    ap.add_argument("--assignment", help="assignment folder (default: the only one under assignment/)")
    ap.add_argument("--reference-copies", type=int, default=20)
    args = ap.parse_args(argv)
    assignment = Assignment.find(args.assignment)
    if args.check:
        root = Path(args.check)
        problems = check(Course(root, assignment), json.loads((root / "expected.json").read_text()))
        for p in problems:
            print(p)
        print(f"{len(problems)} students differ from expected.json" if problems else "every student as expected")
        return 1 if problems else 0
    out = Path(args.out)
    expected = build(out, assignment, args.reference_copies)
    (out / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    print(f"{len(expected)} students in {out}/submitted; expectations in {out}/expected.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
