"""Shared pieces for the tests of the assignment package (template, public suite, bundle)."""
import importlib.util
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ASSIGNMENT_DIR = REPO / "assignment" / "l1_paged_kv_write"
if str(REPO / "tests" / "grader") not in sys.path:
    sys.path.insert(0, str(REPO / "tests" / "grader"))
import shared_gradings  # noqa: E402  (the gradings tests/grader shares: the kill matrix, one per run)
from pytest_forks import PytestForks  # noqa: E402


@pytest.fixture(scope="session")
def corpus_matrix():
    """corpus_matrix(labels): the kill matrix's rows for those corpus entries (tests/grader/shared_gradings.py)."""
    return shared_gradings.corpus_rows


@pytest.fixture(scope="session")
def load_tool():
    """tools/ is a folder of scripts, not a package: load one by path."""
    def load(name):
        spec = importlib.util.spec_from_file_location(f"tool_{name}", REPO / "tools" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    return load


@pytest.fixture(scope="session")
def assignment():
    with open(ASSIGNMENT_DIR / "assignment.toml", "rb") as f:
        return tomllib.load(f)


def _student_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "L1_SUBMISSION"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # leave no __pycache__ beside the public tests
    return env


@pytest.fixture(scope="session")
def run_pytest():
    """Run pytest in a fresh Python process, as a student would, and return the CompletedProcess."""
    env = _student_env()

    def run(*args, cwd=REPO, extra_env=None):
        return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                              cwd=cwd, env={**env, **(extra_env or {})}, capture_output=True, text=True,
                              timeout=300)
    return run


@pytest.fixture(scope="session")
def run_pytest_forked():
    """run_pytest's run, forked from a process that imported torch, triton and pytest once
    (pytest_forks.py): for the corpus sweep, which asks what the public tests say about a file,
    not how a fresh interpreter starts."""
    forks, env = PytestForks(), _student_env()

    def run(*args, cwd=REPO):
        # Under the suite's own 300 s per test, so that the fork server answers before
        # pytest-timeout ends the test and leaves that answer for the next run to read.
        return forks.run(["-p", "no:cacheprovider", *args], cwd=cwd, env=env, timeout=240)
    yield run
    forks.close()


@pytest.fixture(scope="session")
def run_kernel_check():
    """Run a script that launches Triton kernels in a child process from the repository root,
    on the GPU if there is one and through the Triton interpreter if not (the interpreter is
    chosen when triton is imported, hence the process of its own)."""
    import torch
    env = dict(os.environ)
    env.setdefault("TRITON_INTERPRET", "0" if torch.cuda.is_available() else "1")

    def run(script: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True,
                              text=True, timeout=300)
    return run
