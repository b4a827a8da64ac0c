"""Real gradings that several tests read, each made once per test run.

- The kill matrix: `make test` grades the whole corpus first (build/validate.json, stamped by
  tools/matrix_stamp.py). A test that needs corpus entries graded reads their rows and reports
  from it when the stamp says it was made from the tree as it is now; otherwise (a test run
  alone, a matrix from another tree) the entries it needs are graded here, by the same
  `python -m grader validate --only ...`, once per session.
- The reference graded cold (`python -m grader grade`, no warm host) with a given seed, once
  per seed and test process.
"""
from __future__ import annotations

import atexit
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from functools import lru_cache
from pathlib import Path

from grader.assignment import REPO, Assignment
from grader.gpu.machines import resolve_device
from grader.warm.hosts import HOST_ENV

L1 = Assignment.load(REPO / "assignment/l1_paged_kv_write")
MATRIX = REPO / os.environ.get("GRADER_TEST_MATRIX", "build/validate.json")


def _stamp_tool():
    spec = importlib.util.spec_from_file_location("matrix_stamp", REPO / "tools/matrix_stamp.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Matrix:
    """Rows of a kill matrix by label (`reference`, `wrong/NAME`, `adversarial/NAME`), with
    where they came from: "make test's matrix" or "graded for this test"."""

    def __init__(self, data: dict, source: str, started: float):
        self.data, self.source, self.started = data, source, started
        self.rows = {r["name"] if r["kind"] == "reference" else f"{r['kind']}/{r['name']}": r for r in data["rows"]}

    def row(self, label: str) -> dict:
        return self.rows[label]

    def report(self, label: str) -> dict:
        return json.loads((REPO / self.rows[label]["report"]).read_text())


@lru_cache(maxsize=1)
def full_matrix() -> Matrix | None:
    """make test's matrix, where it is the current tree's and graded on this machine's device."""
    data = _stamp_tool().current(MATRIX)
    if data is None or data.get("assignment") != L1.id or data.get("device") != resolve_device("auto"):
        return None
    return Matrix(data, f"make test's matrix ({MATRIX.relative_to(REPO)})", data["stamp"]["started"])


@lru_cache(maxsize=None)
def _graded(labels: tuple[str, ...], jobs: int) -> tuple[Matrix, str]:
    import time
    folder = tempfile.mkdtemp(prefix="grader-test-matrix-")
    # Its reports are read until the test process ends (Matrix.report); then nothing needs them.
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    out = Path(folder) / "validate.json"
    started = time.time()
    run = subprocess.run([sys.executable, "-m", "grader", "validate", "--out", str(out), "--jobs", str(jobs),
                          "--only", *labels], cwd=REPO, capture_output=True, text=True, timeout=1800)
    if not out.exists():
        raise AssertionError(f"validate wrote no matrix (exit {run.returncode}):\n"
                             f"{run.stdout[-3000:]}{run.stderr[-3000:]}")
    return Matrix(json.loads(out.read_text()), "graded for this test", started), run.stdout


def corpus_rows(labels: list[str], jobs: int = 2) -> Matrix:
    """A matrix holding at least `labels`: make test's when current, else graded now."""
    full = full_matrix()
    if full is not None and all(label in full.rows for label in labels):
        return full
    return _graded(tuple(labels), jobs)[0]


@lru_cache(maxsize=None)
def _cold_reference(seed: int, out_dir: str) -> str:
    report = Path(out_dir) / f"reference-cold-{seed}.json"
    env = {k: v for k, v in os.environ.items() if k != HOST_ENV}
    done = subprocess.run([sys.executable, "-m", "grader", "grade", "--assignment", str(L1.folder),
                           "--submission", str(L1.reference), "--report", str(report), "--device",
                           resolve_device("auto"), "--seed", str(seed), "--quiet"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0 and report.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    return report.read_text()


def cold_reference(seed: int, out_dir: Path) -> dict:
    """The reference graded cold with `seed`: one grading per seed in this test process."""
    return json.loads(_cold_reference(seed, str(out_dir)))
