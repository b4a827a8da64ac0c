"""The kill matrix as a result the project's own tests may read: `make test` grades the corpus
once (`python -m grader validate`), and the tests that need a corpus entry's grading read it
from build/validate.json instead of grading it again, but only when the matrix was made from
the files they would grade with.

    python tools/matrix_stamp.py run OUT -- python -m grader validate ... --out OUT

runs the command and, when it wrote OUT and no file a grading reads changed meanwhile, writes
OUT.stamp.json: the digest of those files (`tree_digest`), when the run began and ended, and
the command. `current(OUT)` (used by the tests' `corpus_matrix` fixture) gives the matrix only
where its stamp matches the tree as it is now; a matrix from `make validate` alone, an older
tree or an interrupted run has no valid stamp, and the tests grade for themselves.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Everything a grading reads: the engine, the assignments, the reference, the hidden suites,
# the corpus and the pinned stack. The project's own tests and docs are not among them.
INPUTS = ("grader", "assignment", "reference", "tests/hidden", "tests/corpus", "requirements")


def tree_digest(root: Path = REPO) -> str:
    """sha256 over the path and bytes of every file under INPUTS (tracked or not), the Python
    version and the installed torch and triton."""
    h = hashlib.sha256()
    for folder in INPUTS:
        for parent, dirs, files in os.walk(root / folder):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
            for name in sorted(files):
                if name.endswith((".pyc", ".pyo")):
                    continue
                path = Path(parent) / name
                h.update(str(path.relative_to(root)).encode() + b"\0")
                try:
                    h.update(path.read_bytes())
                except OSError:
                    h.update(b"unreadable")
                h.update(b"\0")
    h.update(sys.version.encode())
    for package in ("torch", "triton"):
        try:
            h.update(f"{package}=={importlib.metadata.version(package)}".encode())
        except importlib.metadata.PackageNotFoundError:
            h.update(f"{package} absent".encode())
    return h.hexdigest()


def stamp_path(out: Path) -> Path:
    return out.with_name(out.name + ".stamp.json")


def run(out: Path, cmd: list[str]) -> int:
    stamp = stamp_path(out)
    stamp.unlink(missing_ok=True)
    before, started = tree_digest(), time.time()
    code = subprocess.call(cmd)
    ended = time.time()
    after = tree_digest()
    if before != after:
        print(f"matrix_stamp: files a grading reads changed during the run; {out} is left unstamped "
              "(the tests grade for themselves)", file=sys.stderr)
    elif out.is_file() and out.stat().st_mtime >= started:
        stamp.write_text(json.dumps({"tree": after, "started": started, "ended": ended, "returncode": code,
                                     "command": cmd}, indent=1) + "\n")
    return code


def current(out: Path) -> dict | None:
    """The matrix at `out` with its stamp (under "stamp"), or None unless it was made from the
    tree as it is now and not rewritten since."""
    try:
        stamp = json.loads(stamp_path(out).read_text())
        if out.stat().st_mtime > stamp["ended"] or stamp["tree"] != tree_digest():
            return None
        matrix = json.loads(out.read_text())
    except (OSError, ValueError, KeyError, TypeError):
        return None
    matrix["stamp"] = stamp
    return matrix


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[0] != "run" or argv[2] != "--":
        print(__doc__, file=sys.stderr)
        return 2
    return run(Path(argv[1]), argv[3:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
