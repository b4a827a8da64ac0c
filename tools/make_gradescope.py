"""Build the Gradescope autograder zip of one assignment.

    python tools/make_gradescope.py [--assignment assignment/l1_paged_kv_write] [--out build/gradescope]

writes OUT/<assignment id>_autograder.zip holding setup.sh and run_autograder
at its root, then the grader package, the assignment's own files, its hidden
tests and the requirements, at the paths assignment.toml names (Gradescope
unpacks it into /autograder/source). The zip is byte-for-byte reproducible.

The reference solution stays out unless --with-reference: a zip carrying it
hands the answer to anyone who can read the image. The grader needs it only
where a hidden test compares with it in the same run, as a GPU-only
performance area does; on Gradescope's usual machines, which have no GPU,
such areas are not graded. For an image with a GPU, build --with-reference:
the grader closes the reference's folder to the uid that runs student code.
"""
from __future__ import annotations

import argparse
import hashlib
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from grader.assignment import Assignment  # noqa: E402
from grader.files import replacing  # noqa: E402
REQUIREMENTS = ("requirements/runtime.txt", "requirements/gpu-stack.txt", "requirements/constraints.txt")
FIXED_TIME = (1980, 1, 1, 0, 0, 0)

SETUP_SH = """\
#!/usr/bin/env bash
# Gradescope runs this once, from the unpacked zip, when it builds the autograder image.
# The grader needs Python 3.11 or newer. To grade on a GPU the image must already have a
# CUDA build of torch and triton: they are kept as they are and only the small extras are
# added. Without them this installs the pinned stack from requirements/constraints.txt, torch
# as PyTorch's CPU build; on a machine without a GPU the kernels then run in Triton's CPU
# interpreter. With PIP_NO_INDEX=1 and PIP_FIND_LINKS=<folder>, pip takes the wheels there.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "setup.sh: the grader needs Python 3.11 or newer; choose a base image that has it" >&2
    exit 1
fi
if ! "$PYTHON" -m pip --version >/dev/null 2>&1; then
    apt-get update && apt-get install -y python3-pip
fi
# The image serves this grader alone, so pip may install into the system Python.
export PIP_BREAK_SYSTEM_PACKAGES=1 PIP_DISABLE_PIP_VERSION_CHECK=1
if "$PYTHON" -c 'import torch, triton, triton.language' 2>/dev/null; then
    "$PYTHON" -m pip install -r requirements/runtime.txt
    exit 0
fi
if [ -z "${PIP_NO_INDEX:-}" ]; then
    # PyPI's torch of that version is the CUDA build, gigabytes of CUDA libraries a CPU image
    # never loads; PyTorch's CPU index has the same version without them. Installed first, it
    # satisfies the pin below (a local label such as +cpu does not count against ==).
    "$PYTHON" -m pip install --index-url @TORCH_CPU_INDEX@ "@TORCH_PIN@"
fi
"$PYTHON" -m pip install -c requirements/constraints.txt -r requirements/gpu-stack.txt -r requirements/runtime.txt
"""

RUN_AUTOGRADER = """\
#!/usr/bin/env bash
# Gradescope runs this once per submission, as root. The grader drops privileges by itself:
# the student's code runs in worker processes under a spare uid (results.json's
# extra_data.sandbox says whether that was possible here), and only the grader, which
# never imports the submission, writes results.json.
# AUTOGRADER_ROOT (default /autograder) and PYTHON (default python3) exist for testing.
set -uo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
PYTHON="${PYTHON:-python3}"
FILE=@SUBMISSION@
RESULTS="$ROOT/results/results.json"
mkdir -p "$ROOT/results"
rm -f "$RESULTS"
# Whatever goes wrong below, Gradescope gets a results.json: without one it shows the student
# an error and no score. The message is fixed text, so it needs no quoting and no Python.
no_grade() {
    local say="The autograder failed before it could grade your file ($1)."
    say="$say This is not a judgement of your file: tell your instructor."
    printf '{"score": 0, "output": "%s", "tests": [], "extra_data": {"problem": "run_autograder: %s"}}\\n' \\
        "$say" "$1" > "$RESULTS"
}
cd "$ROOT/source" || { no_grade "its source folder is missing"; exit 0; }
# The grader applies the hand-in rule every way in shares (grader/grading/submission_file.py): the
# file named $FILE exactly; a link, a folder or a misnamed file gets 0 points and says why.
# Links are copied as links, never followed: as root, following one would grade whatever it
# names (the reference, a classmate's file). The grader's own check then refuses it.
if [ -L "$ROOT/submission/$FILE" ]; then
    echo "run_autograder: $FILE is a symbolic link; it is copied as one, for the grader to refuse" >&2
fi
work="$(mktemp -d)"
mkdir -p "$ROOT/submission"
cp -RP -- "$ROOT/submission" "$work/submission"
"$PYTHON" -m grader grade --assignment @ASSIGNMENT@ --submission "$work/submission" \\
    --report "$RESULTS" --device auto --quiet
status=$?
rm -rf "$work"
if [ "$status" -ne 0 ] || [ ! -s "$RESULTS" ]; then
    echo "run_autograder: the grader exited with status $status" >&2
    no_grade "the grader exited with status $status"
fi
exit 0
"""

TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _torch_pin() -> str:
    pins = [line.strip() for line in (REPO / "requirements/constraints.txt").read_text().splitlines()
            if line.strip().startswith("torch==")]
    if len(pins) != 1:
        raise SystemExit("make_gradescope: requirements/constraints.txt must pin torch exactly once")
    return pins[0]


def _sources(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                  and p.suffix != ".pyc")


def contents(assignment_dir: Path, with_reference: bool = False) -> tuple[Assignment, dict[str, Path]]:
    """(the assignment, {path in the zip: file here})."""
    assignment_dir = assignment_dir.resolve()
    assignment = Assignment.load(assignment_dir)
    files: dict[str, Path] = {}
    for path in _sources(REPO / "grader"):
        files[path.relative_to(REPO).as_posix()] = path
    # The assignment folder's own files only: a folder below it may hold solutions.
    for path in sorted(p for p in assignment_dir.iterdir() if p.is_file()):
        files[path.relative_to(REPO).as_posix()] = path
    for path in _sources(assignment.hidden_tests):
        files[path.relative_to(REPO).as_posix()] = path
    for name in REQUIREMENTS:
        files[name] = REPO / name
    reference = assignment.reference.read_bytes()
    leaked = [name for name, path in files.items() if path.read_bytes() == reference]
    if leaked:
        raise SystemExit(f"make_gradescope: the reference would be in the zip as {', '.join(leaked)}")
    if with_reference:
        files[assignment.reference.relative_to(REPO).as_posix()] = assignment.reference
    return assignment, files


def build(assignment_dir: Path, out: Path, with_reference: bool = False) -> Path:
    assignment, files = contents(assignment_dir, with_reference)
    gpu_only = [name for name, area in assignment.areas.items() if area.device == "cuda"]
    if gpu_only and not with_reference:
        print(f"make_gradescope: no reference in the zip; on an image with a GPU, areas {', '.join(gpu_only)} "
              f"may need it (build --with-reference)", file=sys.stderr)
    rel = assignment_dir.resolve().relative_to(REPO).as_posix()
    scripts = {"setup.sh": SETUP_SH.replace("@TORCH_CPU_INDEX@", TORCH_CPU_INDEX).replace("@TORCH_PIN@", _torch_pin()),
               "run_autograder": RUN_AUTOGRADER.replace("@SUBMISSION@", _shell_word(assignment.submission))
                                               .replace("@ASSIGNMENT@", _shell_word(rel))}
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{assignment.id}_autograder.zip"
    with replacing(target, "wb") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, text in scripts.items():
            _add(zf, name, text.encode(), 0o755)
        for name, path in sorted(files.items()):
            _add(zf, name, path.read_bytes(), 0o644)
    return target


def _add(zf: zipfile.ZipFile, name: str, data: bytes, mode: int) -> None:
    info = zipfile.ZipInfo(name, FIXED_TIME)
    info.external_attr = (0o100000 | mode) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    zf.writestr(info, data)


def _shell_word(text: str) -> str:
    if not all(c.isalnum() or c in "._-/" for c in text):
        raise SystemExit(f"make_gradescope: {text!r} is not a plain file or folder name")
    return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--assignment", type=Path,
                        help="folder holding assignment.toml, inside the repository (default: the only one "
                             "under assignment/)")
    parser.add_argument("--out", type=Path, default=Path("build/gradescope"), help="where the zip goes")
    parser.add_argument("--with-reference", action="store_true",
                        help="ship the reference, for a GPU image whose hidden tests time against it")
    args = parser.parse_args(argv)
    if args.assignment is None:
        assignment = Assignment.find().folder
    else:
        assignment = args.assignment if args.assignment.is_absolute() else REPO / args.assignment
    out = args.out if args.out.is_absolute() else REPO / args.out
    target = build(assignment, out, args.with_reference)
    digest = hashlib.sha256(target.read_bytes()).hexdigest()[:12]
    print(f"wrote {target.relative_to(REPO) if target.is_relative_to(REPO) else target} (sha256 {digest}…)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
