"""Assemble the student bundle for one assignment.

    python tools/make_release.py --assignment assignment/l1_paged_kv_write --out build/release

writes OUT/<assignment id>/ afresh: the template under the name students
submit, both statements, the public tests as tests/, bench_mine.py (from the
public tests' folder) beside them, the performance figures the statements cite
as performance.md (docs/performance.md, with the names of the course's own
scripts taken out), the grading service's client as submit.py
(grader/service/submit_client.py, standard library only, copied as it is), a Makefile
and a README.
Only files named here are copied, so nothing of the reference, the hidden
tests, the corpus or the grader can leak in; and no file the bundle lacks is
named in what it ships (the statements' generated-block markers, comments for
their maintainers, are left out).
"""
import argparse
import re
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from grader.assignment import Assignment  # noqa: E402
STATEMENTS = ("statement.en.md", "statement.zh.md")
CLIENT = REPO / "grader" / "service" / "submit_client.py"
PERFORMANCE = REPO / "docs" / "performance.md"
BENCH = "bench_mine.py"                 # in the public tests' folder; shipped at the bundle's top
SOLUTION_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")

MAKEFILE = """\
PYTHON ?= python3
SUBMISSION ?= {submission}

.PHONY: test bench check submit status history
test:
\t$(PYTHON) -m pytest tests -q

# On a machine with an NVIDIA GPU: your kernel's bandwidth and the points it would get.
bench:
\t$(PYTHON) bench_mine.py --submission $(SUBMISSION)

# The grading service: the server and token come from GRADER_SERVER and GRADER_TOKEN,
# or from a file .grader here or in the home folder (README.md says how).
check:
\t@$(PYTHON) submit.py submit $(SUBMISSION)
submit:
\t@$(PYTHON) submit.py submit $(SUBMISSION) --hand-in $(if $(LATE),--late)
status:
\t@$(PYTHON) submit.py status
history:
\t@$(PYTHON) submit.py history
"""

README = """\
# {title}

Write your solution in `{submission}`; `statement.en.md` (English) and
`statement.zh.md` (中文) say what each function must do.

Install the tools once: `pip install torch triton numpy pytest` (Triton ships
for Linux; its CPU interpreter needs numpy, which the other packages do not
bring; on a machine without a GPU the CPU build of torch is enough:
`pip install torch --index-url https://download.pytorch.org/whl/cpu`).
Then run the public tests with `make test` (or `python -m pytest tests -q`).
While a function is still the template's stub, the run opens with one line,
`not written yet: ...`, naming it, and skips the tests that need it.

With an NVIDIA GPU the kernel runs on it. Without one the tests set
`TRITON_INTERPRET=1` themselves, and Triton runs the kernel on the CPU.
To test another file: `python -m pytest tests -q --submission other.py`.
On a GPU with 28 GB free, `--overflow` adds the test of offsets past 2^31
(on a CPU that test runs on sparse files, always).

How each area is graded, the graded shapes, the performance curve and the timed
cases are at the end of the statements ("How it is graded"). On a machine with
an NVIDIA GPU, `make bench` (`python bench_mine.py`) times your kernel as the
grader does and estimates the points of the performance area from the
reference's figures in `performance.md`.

## Checking on the course's GPU and handing in

The public tests run on your machine; the grading service runs the hidden tests
on the GPU your work is graded on. Your instructor gives you the service's
address and a token of your own. Put them in a file named `.grader` in this
folder (or in your home folder), and keep it to yourself and out of any
repository: anyone with the token can submit as you.

    server = https://the-address-your-instructor-gave
    token = the-token-your-instructor-gave

(Or set `GRADER_SERVER` and `GRADER_TOKEN` in the environment, or pass
`--server` and `--token` to `python submit.py`.)

- `make check` sends `{submission}` as a check: you see your place in the
  queue, then the feedback (areas, points and hints, as much as your instructor
  chose to show before the deadline) and a last line `score: X / Y`. Checks are
  limited per hour; beyond that the service says when you can check again.
- `make submit` hands `{submission}` in: that is the copy that is graded, and
  it is graded as a check too, so you see its feedback (and it counts as one of
  the hour's checks: once they are used, a hand-in is still accepted, but graded
  only after the deadline). You may hand in again: every hand-in is kept, and the
  latest is the one graded. After the deadline a hand-in is refused with a sentence
  naming the on-time hand-in it would replace, unless you confirm with
  `make submit LATE=1` (`--late`); it is then kept, marked late, and counts.
  Each accepted submission shows its receipt (sha256, size, time), and
  `python submit.py download ID` fetches exactly what was filed.
  `python submit.py regrade "what you think was graded wrong"` asks for a
  regrade of the hand-in that counts; `python submit.py regrade` shows the answer.
- `make status` shows who the token belongs to, the checks left this hour and
  the deadline; `make history` lists your submissions, and
  `python submit.py history ID` shows one report again.

To send another file: `make check SUBMISSION=other.py` (the service always stores
it as `{submission}`). Files are limited to 1 MiB. `python submit.py --help`
says the rest, including the exit codes.
"""


def public_test_files(folder: Path) -> list[Path]:
    # Only sources: a local run may have left caches or bytecode beside them.
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts and p.name != BENCH)


def without_markers(statement: str) -> str:
    """The statement as students read it: the generated blocks' marker comments, which name the
    course's tools and files, left out."""
    return re.sub(r"<!-- (BEGIN|END) GENERATED:[^>]*-->\n\n?", "", statement)


def performance_figures(text: str) -> str:
    """docs/performance.md for students: the figures as they are, the course's own scripts named
    in words (the bundle does not carry them)."""
    lines = text.splitlines(keepends=True)
    out = []
    for line in lines:
        if line.startswith("Generated by `"):
            line = ("Measured by the course's benchmark on the GPU the grader runs on. `bench_mine.py`, in "
                    "this bundle, times your kernel on a GPU of your own.\n")
        line = re.sub(r"^`bench/[\w./-]+`", "The course's benchmark", line)
        out.append(re.sub(r"`bench/[\w./-]+`", "the course's benchmark", line))
    return "".join(out)


def build(assignment_dir: Path, out: Path) -> Path:
    assignment = Assignment.load(assignment_dir)
    if assignment.template is None or assignment.public_tests is None:
        raise SystemExit(f"make_release: {assignment_dir}/assignment.toml needs `template` and `public_tests`")
    bundle = out / assignment.id
    if bundle.exists():
        shutil.rmtree(bundle)
    (bundle / "tests").mkdir(parents=True)

    shutil.copyfile(assignment.template, bundle / assignment.submission)
    for name in STATEMENTS:
        text = (assignment_dir / name).read_text(encoding="utf-8")
        (bundle / name).write_text(without_markers(text), encoding="utf-8")
    tests = assignment.public_tests
    for src in public_test_files(tests):
        dst = bundle / "tests" / src.relative_to(tests)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
    if (tests / BENCH).is_file():
        shutil.copyfile(tests / BENCH, bundle / BENCH)
    (bundle / "performance.md").write_text(performance_figures(PERFORMANCE.read_text(encoding="utf-8")),
                                           encoding="utf-8")
    shutil.copyfile(CLIENT, bundle / "submit.py")
    (bundle / "Makefile").write_text(MAKEFILE.format(submission=assignment.submission), encoding="utf-8")
    (bundle / "README.md").write_text(
        README.format(title=assignment.title, submission=assignment.submission), encoding="utf-8")

    # The template is generated from the reference; if generation ever went
    # wrong, better no bundle than a bundle with the solution in it.
    for path in bundle.rglob("*"):
        if path.is_file() and any(m in path.read_text(encoding="utf-8") for m in SOLUTION_MARKERS):
            shutil.rmtree(bundle)
            raise SystemExit(f"make_release: {path.relative_to(out)} carries a solution marker; "
                             f"regenerate the template (make template)")
    return bundle


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--assignment", required=True, type=Path,
                        help="folder holding assignment.toml, relative to the repository root")
    parser.add_argument("--out", required=True, type=Path,
                        help="where the bundle folder goes, relative to the repository root")
    args = parser.parse_args(argv)
    bundle = build(REPO / args.assignment, REPO / args.out)
    print(f"wrote {bundle.relative_to(REPO) if bundle.is_relative_to(REPO) else bundle}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
