"""Loads the submission under test and picks the device.

Which file is tested, first match wins:
  --submission PATH, the environment variable L1_SUBMISSION,
  l1_paged_kv_write.py beside this tests/ folder, l1_paged_kv_write.py in the
  current directory.
"""
import importlib.util
import os
import signal
import sys
import traceback
import warnings
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
KERNEL = "reshape_and_cache_kernel"
_MODULE_KEY = pytest.StashKey()


def pytest_addoption(parser):
    parser.addoption("--submission", metavar="PATH", default=None,
                     help=f"the file to test (default: $L1_SUBMISSION, else {FILENAME})")
    parser.addoption("--overflow", action="store_true", default=False,
                     help="also run the GPU-only int64 test on two 13 GB caches (or set L1_OVERFLOW=1)")


def _submission_path(config) -> Path:
    given = config.getoption("--submission") or os.environ.get("L1_SUBMISSION")
    if given:
        return Path(given).expanduser().resolve()
    candidates = [Path(__file__).resolve().parent.parent / FILENAME, Path.cwd() / FILENAME]
    return next((p for p in candidates if p.is_file()), candidates[-1])


def _line_in(path: Path, exc: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename) == path]
    return f" (line {frames[-1].lineno})" if frames else ""


def _usable(name: str, obj) -> bool:
    """A function, or for the kernel anything Triton launches: a JITFunction, or the
    Autotuner and Heuristics objects that @triton.autotune and @triton.heuristics make
    (they are launched with kernel[grid](...) or .run, and are not callable)."""
    if name == KERNEL:
        return callable(obj) or hasattr(obj, "run") or hasattr(type(obj), "__getitem__")
    return callable(obj)


def _autotune_without_benchmarks() -> None:
    """Under the interpreter @triton.autotune cannot time its configs (there is no GPU
    driver: "0 active drivers"), and on a CPU the timing would mean nothing. Every config
    computes the same result, so the first is taken, as the grader does on the CPU."""
    try:
        from triton.runtime.autotuner import Autotuner
    except ImportError:      # no triton, or one without autotune: the import below says so
        return
    if getattr(Autotuner, "_bench", None) is not None:
        Autotuner._bench = lambda self, *args, config, **meta: [0.0, 0.0, 0.0]


def _compile_runs_eagerly() -> None:
    """Under the interpreter a kernel is Python over numpy, and Dynamo, asked to trace a
    @torch.compile'd wrapper around its launch, traces into the interpreter and fails there
    ("KeyError(torch.uint64)"). Compiling means nothing on the CPU: the wrapper runs as
    written, as it does in the grader's CPU worker; on a GPU it is compiled."""
    compiler = getattr(torch, "compiler", None)
    if compiler is not None and hasattr(compiler, "set_stance"):
        compiler.set_stance("force_eager")


def _load(path: Path):
    """The submission as a module, or pytest.exit with one line saying why not."""
    if torch is None:
        pytest.exit("torch is not installed: pip install torch triton numpy pytest", returncode=2)
    if not path.is_file():
        pytest.exit(f"no submission at {path}: pass --submission PATH or set L1_SUBMISSION",
                    returncode=2)
    name = "l1_submission"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    if not HAS_CUDA:
        _autotune_without_benchmarks()
        _compile_runs_eagerly()
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        pytest.exit(f"{path.name} does not compile: line {exc.lineno}: {exc.msg}", returncode=2)
    except ModuleNotFoundError as exc:
        if exc.name in ("numpy", "triton"):
            # Not the file's fault: Triton's CPU interpreter runs kernels with numpy, which
            # `pip install torch triton` does not bring.
            pytest.exit(f"{exc.name} is missing: pip install {exc.name}", returncode=2)
        pytest.exit(f"importing {path.name} raised ModuleNotFoundError: {exc}{_line_in(path, exc)}",
                    returncode=2)
    except (Exception, SystemExit) as exc:  # whatever the file raises at import, in one line
        first_line = next(iter(str(exc).splitlines()), "")
        pytest.exit(f"importing {path.name} raised {type(exc).__name__}: {first_line}"
                    f"{_line_in(path, exc)}", returncode=2)
    missing = [f for f in FUNCTIONS if not _usable(f, getattr(module, f, None))]
    if missing:
        pytest.exit(f"{path.name} does not define {', '.join(missing)}; "
                    f"the tests need {', '.join(FUNCTIONS)}", returncode=2)
    return module


def pytest_configure(config):
    # Long tracebacks bury the one line that matters; an explicit --tb still wins.
    if config.option.tbstyle == "auto":
        config.option.tbstyle = "short"


class _CrashWitness:
    """Names the test in flight when the Python process dies under it.

    The interpreter does not check bounds: a store far outside a tensor kills the process
    (SIGSEGV, or glibc's abort: "Fatal Python error: Aborted"), and under -q the dump that
    follows names no test. A forked child that only reads a pipe outlives its parent: it
    is told each test's id as the test starts, and prints the last one if the pipe closes
    before the run said it was over. Where fork is missing it does nothing."""

    def __init__(self):
        self.fd = None
        if not hasattr(os, "fork"):
            return
        read, write = os.pipe()
        with warnings.catch_warnings():
            # Python 3.12+ warns about fork in a process with threads; the child calls
            # nothing but os.read and os.write, which is what that warning allows.
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:                                  # the witness: no torch, no pytest
            os.close(write)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            last, buf = "", b""
            while chunk := os.read(read, 4096):
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    last = line.decode(errors="replace")
            if last and last != "done":
                os.write(2, (f"\nThe Python process died while running {last}.\nA kernel read or "
                             f"wrote far outside its tensors, which the CPU interpreter does not check: "
                             f"an offset built from the wrong H, D or stride, or one computed in int32 "
                             f"that wrapped. Start from what that test checks.\n").encode())
            os._exit(0)
        os.close(read)
        self.fd = write

    def say(self, what: str) -> None:
        if self.fd is not None:
            try:
                os.write(self.fd, what.encode() + b"\n")
            except OSError:
                self.fd = None

    def close(self) -> None:
        self.say("done")
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


_witness = None


def pytest_sessionstart(session):
    global _witness
    path = _submission_path(session.config)
    _witness = _CrashWitness()
    _witness.say(f"the import of {path.name}")
    session.config.stash[_MODULE_KEY] = _load(path)
    _witness.say("the collection of the tests")


def pytest_runtest_logstart(nodeid, location):
    if _witness is not None:
        _witness.say(nodeid)


def pytest_unconfigure(config):
    if _witness is not None:
        _witness.close()


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


@pytest.fixture(scope="session")
def submission_path(request) -> Path:
    return _submission_path(request.config)


@pytest.fixture(scope="session")
def overflow_requested(request) -> bool:
    return request.config.getoption("--overflow") or os.environ.get("L1_OVERFLOW") == "1"
