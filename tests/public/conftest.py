"""Loads the submission under test and picks the device.

Which file is tested, first match wins:
  --submission PATH, the environment variable L1_SUBMISSION,
  l1_paged_kv_write.py beside this tests/ folder, l1_paged_kv_write.py in the
  current directory.
"""
import importlib.util
import os
import sys
import traceback
from pathlib import Path

import pytest

try:
    import torch
except ImportError:  # reported once the session starts, as one line
    torch = None

# Triton chooses between the GPU and its CPU interpreter when a kernel is
# decorated, so the switch must be set before the submission imports triton.
HAS_CUDA = torch is not None and torch.cuda.is_available()
if torch is not None and not HAS_CUDA:
    os.environ["TRITON_INTERPRET"] = "1"

FILENAME = "l1_paged_kv_write.py"
FUNCTIONS = ("slot_mapping", "reshape_and_cache_kernel", "reshape_and_cache")
_MODULE_KEY = pytest.StashKey()


def pytest_addoption(parser):
    parser.addoption("--submission", metavar="PATH", default=None,
                     help=f"the file to test (default: $L1_SUBMISSION, else {FILENAME})")


def _submission_path(config) -> Path:
    given = config.getoption("--submission") or os.environ.get("L1_SUBMISSION")
    if given:
        return Path(given).expanduser().resolve()
    candidates = [Path(__file__).resolve().parent.parent / FILENAME, Path.cwd() / FILENAME]
    return next((p for p in candidates if p.is_file()), candidates[-1])


def _line_in(path: Path, exc: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename) == path]
    return f" (line {frames[-1].lineno})" if frames else ""


def _load(path: Path):
    """The submission as a module, or pytest.exit with one line saying why not."""
    if torch is None:
        pytest.exit("torch is not installed: pip install torch triton pytest", returncode=2)
    if not path.is_file():
        pytest.exit(f"no submission at {path}: pass --submission PATH or set L1_SUBMISSION",
                    returncode=2)
    name = "l1_submission"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        pytest.exit(f"{path.name} does not compile: line {exc.lineno}: {exc.msg}", returncode=2)
    except (Exception, SystemExit) as exc:  # whatever the file raises at import, in one line
        first_line = next(iter(str(exc).splitlines()), "")
        pytest.exit(f"importing {path.name} raised {type(exc).__name__}: {first_line}"
                    f"{_line_in(path, exc)}", returncode=2)
    missing = [f for f in FUNCTIONS if not callable(getattr(module, f, None))]
    if missing:
        pytest.exit(f"{path.name} does not define {', '.join(missing)}; "
                    f"the tests need {', '.join(FUNCTIONS)}", returncode=2)
    return module


def pytest_configure(config):
    # Long tracebacks bury the one line that matters; an explicit --tb still wins.
    if config.option.tbstyle == "auto":
        config.option.tbstyle = "short"


def pytest_sessionstart(session):
    path = _submission_path(session.config)
    session.config.stash[_MODULE_KEY] = _load(path)


def pytest_report_header(config):
    where = "CUDA" if HAS_CUDA else "CPU (TRITON_INTERPRET=1)"
    return f"L1 submission: {_submission_path(config)} on {where}"


@pytest.fixture(scope="session")
def sub(request):
    """The student's module: sub.slot_mapping, sub.reshape_and_cache, ..."""
    return request.config.stash[_MODULE_KEY]


@pytest.fixture(scope="session")
def device():
    return torch.device("cuda" if HAS_CUDA else "cpu")
