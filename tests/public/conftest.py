"""Loads the submission under test and picks the device.

Which file is tested, first match wins:
  --submission PATH, the environment variable L1_SUBMISSION,
  l1_paged_kv_write.py beside this tests/ folder, l1_paged_kv_write.py in the
  current directory.

A function that is still the template's stub (it only raises NotImplementedError, or has no
body) is reported in one line, "not written yet: ...", and the tests that need it do not run:
each test names the functions it needs with @pytest.mark.needs(...).
"""
import ast
import importlib.util
import select
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
_UNWRITTEN_KEY = pytest.StashKey()
NOT_WRITTEN = "not written yet: "


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


def _is_stub(body: list) -> bool:
    """A body that is only a docstring, `pass`, `...`, `raise NotImplementedError(...)`, or an
    assertion of False (`tl.static_assert(False, ...)`, the template's kernel: a `raise` is not
    Triton)."""
    rest = [s for s in body if not (isinstance(s, ast.Pass) or (isinstance(s, ast.Expr)
                                                                 and isinstance(s.value, ast.Constant)
                                                                 and (s.value.value is Ellipsis
                                                                      or isinstance(s.value.value, str))))]
    if not rest:
        return True
    if len(rest) != 1:
        return False
    s = rest[0]
    if isinstance(s, ast.Raise):
        exc = s.exc.func if isinstance(s.exc, ast.Call) else s.exc
        return getattr(exc, "id", getattr(exc, "attr", None)) == "NotImplementedError"
    if isinstance(s, ast.Assert):
        return isinstance(s.test, ast.Constant) and s.test.value is False
    if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call):
        call = s.value
        name = getattr(call.func, "attr", getattr(call.func, "id", None))
        return (name == "static_assert" and bool(call.args) and isinstance(call.args[0], ast.Constant)
                and call.args[0].value is False)
    return False


def unwritten(source: str, names=FUNCTIONS) -> list[str]:
    """The functions of `names` whose last top-level definition in `source` is still a stub."""
    last = {}
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in names:
            last[node.name] = _is_stub(node.body)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                if isinstance(target, ast.Name) and target.id in names:
                    last[target.id] = False               # made some other way: taken as written
    return [n for n in names if last.get(n)]


def pytest_configure(config):
    # Long tracebacks bury the one line that matters; an explicit --tb still wins.
    if config.option.tbstyle == "auto":
        config.option.tbstyle = "short"
    config.addinivalue_line("markers", "needs(*functions): the test calls these functions of the "
                                       "submission; it does not run while one is not written yet")


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
            runner, last, buf = os.getppid(), "", b""
            while True:
                if not select.select([read], [], [], HANG_S)[0]:
                    # A store far outside a tensor can leave the process hung on memory it
                    # corrupted instead of dead: past HANG_S in one step, it is ended.
                    os.write(2, (f"\nThe Python process hung for {HANG_S:g} s while running {last}, and "
                                 f"was ended. A kernel that reads or writes far outside its tensors can do "
                                 f"that under the CPU interpreter, as can a loop that never ends. Start "
                                 f"from what that test checks.\n").encode())
                    os.kill(runner, signal.SIGKILL)
                    os._exit(0)
                if not (chunk := os.read(read, 4096)):
                    break
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
# Seconds one test (or the import, or the collection) may run before the witness ends the
# process as hung; the slowest test takes a few seconds on a laptop's CPU.
HANG_S = float(os.environ.get("L1_TEST_HANG_S", "120"))


def pytest_sessionstart(session):
    global _witness
    path = _submission_path(session.config)
    _witness = _CrashWitness()
    _witness.say(f"the import of {path.name}")
    session.config.stash[_MODULE_KEY] = _load(path)
    missing = unwritten(path.read_text(encoding="utf-8-sig"))
    session.config.stash[_UNWRITTEN_KEY] = missing
    if missing:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(NOT_WRITTEN + ", ".join(missing))
    _witness.say("the collection of the tests")


def pytest_collection_modifyitems(config, items):
    """Tests that need a function still unwritten do not run: each would fail with the same
    NotImplementedError, which the one line at the top already says."""
    missing = set(config.stash.get(_UNWRITTEN_KEY, ()))
    if not missing:
        return
    keep, drop = [], []
    for item in items:
        needs = {f for m in item.iter_markers("needs") for f in m.args}
        (drop if needs & missing else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    missing = config.stash.get(_UNWRITTEN_KEY, ())
    if missing:
        terminalreporter.write_line(f"{NOT_WRITTEN}{', '.join(missing)} (the tests that need "
                                    f"{'it' if len(missing) == 1 else 'them'} did not run)")


def pytest_sessionfinish(session, exitstatus):
    # A file with a function still to write is not finished, whatever the tests that ran said.
    if session.config.stash.get(_UNWRITTEN_KEY, ()) and exitstatus in (0, 5):
        session.exitstatus = 1


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
