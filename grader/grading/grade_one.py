"""Grade one submission: check the file, run the hidden suites in a pytest
subprocess (which reaches the submission only through the sandbox), then score
what came back against what was collected and write the report once."""
from __future__ import annotations

import ast
import importlib.metadata
import math
import os
import platform
import secrets
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ..warm import leftovers
from . import seeds, state_records, submission_file
from .report import build, write_atomically
from ..warm import hosts as warm
from ..assignment import REPO, Assignment
from ..gpu.machines import resolve_device
from .report_reader import INTERRUPTED
from ..sandbox.processes import become_subreaper, kill_tree
from .scoring import DETAIL_CHARS, OUTCOMES, AreaResult, TestResult, score
from .session_spec import SessionSpec

SUITE_TIMEOUT_S = 3600


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def environment(device: str) -> dict:
    """What this process knows without importing torch; the test process adds the GPU's
    name (state_records.DEVICE), since it is the one that opens the GPU."""
    return {"device": device, "python": platform.python_version(), "torch": _version("torch"),
            "triton": _version("triton"), "platform": platform.platform(),
            "triton_interpreter": device == "cpu",
            "device_name": platform.processor() or platform.machine() if device == "cpu"
            else "unknown: the test run did not report it"}


def gpu_of(device: str) -> str | dict:
    """Which GPU the grading ran on (extra_data.instructor.gpu): "cpu" on the CPU; on a GPU the
    CUDA_VISIBLE_DEVICES this process was given (grade-all gives each slot one GPU,
    grader/gpu/machines.py) and the uuid of the device the test process opened, None until it
    reports one (read_state)."""
    if device != "cuda":
        return "cpu"
    return {"visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "uuid": None}


def precheck(submission: "Path | submission_file.Accepted", assignment: Assignment) -> str | None:
    """Why the file cannot be graded at all, or None. Runs no submitted code."""
    picked = submission_file.read(submission) if isinstance(submission, Path) else submission
    if isinstance(picked, submission_file.Refused):
        return picked.reason
    try:
        tree = ast.parse(picked.source, filename=assignment.submission)
    except SyntaxError as exc:
        return f"the submission does not parse as Python: line {exc.lineno}: {exc.msg}"
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    defined |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    missing = [f for f in assignment.functions if f not in defined]
    if missing and len(missing) == len(assignment.functions):
        return f"the submission defines none of {', '.join(assignment.functions)}"
    stubs = submission_file.unwritten(picked.source, assignment.functions)
    if stubs and len(stubs) + len(missing) == len(assignment.functions):
        return not_written_line(stubs)          # nothing written: nothing to run
    return None


def not_written_line(stubs: list[str]) -> str:
    return submission_file.NOT_WRITTEN + ", ".join(stubs)


def process_age() -> float:
    """Seconds since this process started (Linux); 0 where /proc cannot tell."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")
        return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - started)
    except (OSError, ValueError, IndexError, AttributeError):
        return 0.0


@dataclass(frozen=True)
class Graded:
    """A grading's outcome: the report as written, and the typed results it was built from."""
    report: dict
    areas: dict[str, AreaResult]
    problem: str | None


def grade(assignment: Assignment, submission: Path, report_path: Path, device: str = "auto",
          seed: int | None = None, drop_privileges: bool = True, quiet: bool = False,
          protect: list[Path] = (), started: float | None = None, host: str | None = None) -> Graded:
    """`started`: time.monotonic() when the grading began, if before this call (the CLI
    passes its process's start, so that start-up counts the interpreter and the imports).
    `host`: a warm grading host's address (grader/warm/hosts.py) to run the suites' session in."""
    t0 = time.monotonic() if started is None else started
    become_subreaper()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _raise_interrupted)
    device = resolve_device(device)
    # Read once, here: the suites get a copy of these bytes, never the path the caller gave.
    picked = submission_file.pick(submission, assignment.submission)
    if seed is None:
        seed = seeds.listed(picked.sha256)
    seed = secrets.randbits(31) if seed is None else seed
    meta = {"file": picked.name, "sha256": picked.sha256, "bytes": len(picked.data)}
    env = environment(device)
    phases = {"startup_s": time.monotonic() - t0}
    instructor: dict = {"seed": seed, "gpu": gpu_of(device)}
    problem = precheck(picked, assignment)
    results: list[TestResult] = []
    sandbox: dict = {}
    if problem is None:
        with leftovers.removed_at_end(leftovers.own_folder) as copy:
            # Under the assignment's file name, as Python reads it (no BOM, LF line ends): the
            # worker imports the module by that name, and the suites read the source as text.
            handed = copy / assignment.submission
            handed.write_text(picked.source, encoding="utf-8")
            began = time.time()
            results, sandbox, problem = _run_suites(assignment, handed, device, seed, drop_privileges,
                                                    instructor, quiet, env, protect, host)
            phases.update(_session_split(instructor.pop("pytest_wall", None), began, time.time()))
        # Some functions written, some still the template's: the report opens with the line that
        # names them, and the tests of the written ones count as they came out.
        stubs = submission_file.unwritten(picked.source, assignment.functions)
        if stubs:
            problem = not_written_line(stubs) + (f"; {problem}" if problem else "")
    else:
        results = _collect_only(assignment, problem)
    phases["suites_s"] = time.monotonic() - t0 - phases["startup_s"]
    phases["total_s"] = time.monotonic() - t0
    areas = score(assignment, results, device)
    report = build(assignment, areas, results, submission=meta, environment=env, sandbox=sandbox,
                   phases=phases, instructor=instructor, problem=problem)
    write_atomically(report, report_path)
    _count(assignment, meta, device)
    return Graded(report, areas, problem)


COUNT_ENV = "GRADER_GRADINGS_LOG"


def _count(assignment: Assignment, meta: dict, device: str) -> None:
    """One line per grading in the file GRADER_GRADINGS_LOG names, where it is set: how the
    project's own test runs count the gradings they make (one short O_APPEND write, whole
    even with many graders at once)."""
    path = os.environ.get(COUNT_ENV)
    if not path:
        return
    line = f"{assignment.id} {meta['sha256'][:12]} {device} {os.getpid()}\n".encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    except OSError:
        pass


class Interrupted(Exception):
    """SIGINT or SIGTERM reached the grader: stop the suites, still write a report."""


def _raise_interrupted(signum, frame):
    raise Interrupted(signal.Signals(signum).name)


def _session(spec_path: Path, quiet: bool, host: str | None) -> tuple[int, str, dict]:
    """The suites' pytest session (grader/grading/session.py): in the warm host at `host` if it takes
    it, else in a fresh process. (exit code, output tail, how it ran)."""
    if host:
        tail: list[str] = []
        how: dict = {}
        try:
            got = warm.run_session(host, spec_path, quiet, SUITE_TIMEOUT_S, tail, how)
        except Interrupted as exc:
            got = INTERRUPTED, how
            tail.append(f"interrupted by {exc}\n")
        if got is not None:
            cut = got[0] in (INTERRUPTED, warm.SESSION_CUT)
            if cut and not warm.wait_session_ended(how):
                how["host_outlived_cut"] = True       # its folders are removed all the same
            how.pop("host_identity", None)
            return got[0], "".join(tail), {"warm": True, **how}
    code, tail_text = _pytest(spec_path, quiet)
    return code, tail_text, {"warm": False}


def _pytest(spec_path: Path, quiet: bool) -> tuple[int, str]:
    cmd = [sys.executable, "-m", "grader.grading.session", str(spec_path)]
    proc = subprocess.Popen(cmd, cwd=REPO, env=warm.test_process_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    tail: list[str] = []
    # A silent hang never yields a line, so the whole-run limit is a timer, not a check per line.
    watchdog = threading.Timer(SUITE_TIMEOUT_S, kill_tree, args=(os.getpid(),))
    watchdog.daemon = True
    watchdog.start()
    try:
        for line in proc.stdout:
            tail = (tail + [line])[-200:]
            if not quiet:
                sys.stdout.write(line)
                sys.stdout.flush()
        code = proc.wait()
        if not watchdog.is_alive():
            tail.append(f"stopped after {SUITE_TIMEOUT_S} s\n")
    except Interrupted as exc:
        tail.append(f"interrupted by {exc}\n")
        code = INTERRUPTED
    finally:
        watchdog.cancel()
        kill_tree(os.getpid())      # pytest, its workers, and whatever they left re-parented to us
    return code, "".join(tail)


def _collect_only(assignment: Assignment, problem: str) -> list[TestResult]:
    """The tests a run would have had, each failed with the same reason."""
    with leftovers.removed_at_end(leftovers.own_folder) as state:
        spec = SessionSpec(assignment=assignment.folder, submission=assignment.reference, device="cpu", seed=0,
                           state=state, drop_privileges=False, collect_only=True)
        _pytest(spec.write(), quiet=True)
        collected = state_records.read(state, state_records.COLLECTED, list) or []
    return [TestResult(c["nodeid"], c["area"], c["contract"], "failed", problem) for c in collected]


def _run_suites(assignment, submission, device, seed, drop_privileges, instructor, quiet, env, protect=(),
                host=None):
    with leftovers.removed_at_end(leftovers.own_folder) as state, \
            leftovers.removed_at_end(leftovers.grading_roots) as roots:
        spec = SessionSpec(assignment=assignment.folder, submission=submission.resolve(), device=device, seed=seed,
                           state=state, drop_privileges=drop_privileges,
                           protect=tuple(Path(p).resolve() for p in protect), **roots)
        code, tail, how = _session(spec.write(), quiet, host)
        return read_state(state, assignment, code, tail, instructor, env, how)


def read_state(state: Path, assignment: Assignment, code: int, tail: str, instructor: dict, env: dict,
               how: dict | None = None) -> tuple[list[TestResult], dict, str | None]:
    """(results, sandbox, problem) from what the test process left in `state` (grader/grading/state_records.py),
    trusting none of it: a test the records do not report in the expected shape, once, is an
    error row that scores nothing, and records that cannot be matched to the hidden tests give
    no points at all."""
    collected = state_records.read(state, state_records.COLLECTED, list)
    pytest_json = state_records.read(state, state_records.PYTEST, dict) or {}
    sandbox = state_records.read(state, state_records.SANDBOX, dict) or {}
    worker = state_records.read(state, state_records.WORKER, dict) or {}
    opened = state_records.read(state, state_records.DEVICE, dict) or {}
    quiet = state_records.read(state, state_records.QUIET, dict)
    instructor.update(pytest_exit=code, worker=worker, test_process=how or {})
    created, duration = _number(pytest_json.get("created")), _number(pytest_json.get("duration"))
    if created is not None and duration is not None and duration >= 0:
        instructor["pytest_wall"] = [created - duration, created]     # grade() turns it into phases
    if quiet is not None:
        # Whether a timing could tell a busy GPU (grader/gpu/quiet.py): without NVML it cannot.
        sandbox["gpu_quiet_checked"] = quiet.get("checked") is True
        if quiet.get("problem"):
            sandbox["gpu_quiet_problem"] = str(quiet["problem"])[:300]
    env.update({k: v for k, v in opened.items() if k in ("device_name", "cuda") and isinstance(v, str)})
    if isinstance(instructor.get("gpu"), dict) and isinstance(opened.get("uuid"), str) and opened["uuid"]:
        instructor["gpu"]["uuid"] = opened["uuid"][:100]
    if collected is None:
        instructor["pytest_tail"] = tail[-6000:]
        return [], sandbox, "the grader could not collect its hidden tests (see extra_data.instructor)"
    if not all(isinstance(c, dict) and {"nodeid", "area", "contract"} <= set(c) and isinstance(c["nodeid"], str)
               and c["area"] in assignment.areas for c in collected) \
            or len({c["nodeid"] for c in collected}) != len(collected):
        return [], sandbox, "the grader's record of its tests is damaged; no points can be given"
    reports_of: dict[str, list] = {}
    for t in pytest_json.get("tests", []) if isinstance(pytest_json.get("tests"), list) else []:
        if isinstance(t, dict):
            reports_of.setdefault(t.get("nodeid"), []).append(t)
    results, problem = [], None
    if worker.get("import_error"):
        problem = str(worker["import_error"])
    for c in collected:
        got = reports_of.get(c["nodeid"], [])
        if len(got) > 1:
            results.append(TestResult(c["nodeid"], c["area"], c["contract"], "error",
                                      "the grading run reported this test more than once; it scores nothing"))
            problem = problem or "the grader's record of a test is damaged; that test scores nothing"
            continue
        entry = got[0] if got else {}
        meta = entry.get("metadata") if isinstance(entry.get("metadata"), dict) else {}
        outcome = meta.get("outcome")
        if not got or outcome not in OUTCOMES:
            results.append(TestResult(c["nodeid"], c["area"], c["contract"], "error",
                                      "the grading run ended before this test reported"))
            problem = problem or "the grading run ended early; unreported tests score nothing"
            continue
        phases = [entry.get(w) for w in ("setup", "call", "teardown")]
        duration = sum(_number(p.get("duration")) or 0.0 for p in phases if isinstance(p, dict))
        figures = meta.get("figures")
        figures = {str(k): v for k, f in figures.items() if (v := _number(f)) is not None} \
            if isinstance(figures, dict) else None
        charged = meta.get("charged")
        charged = {str(a): v for a, s in charged.items() if (v := _number(s)) is not None and 0 <= v <= duration} \
            if isinstance(charged, dict) else {}
        results.append(TestResult(c["nodeid"], c["area"], c["contract"], outcome, str(meta.get("hint", "")),
                                  duration, _number(meta.get("measure")), figures, charged=charged,
                                  detail=str(meta["detail"])[:DETAIL_CHARS] if meta.get("detail") is not None else None))
    if code == INTERRUPTED:
        problem = "grading was interrupted; tests that had not reported score nothing"
    elif code not in (0, 1) and problem is None and not pytest_json:
        problem = f"the test run ended abnormally (exit {code})"
    return results, sandbox, problem


def _session_split(wall, began: float, ended: float) -> dict[str, float]:
    """The suites' seconds around pytest's session (pytest-json-report's start and end, wall
    clock): before it (the test process or host taking the session, pytest starting, its
    plugins and the grading's set-up) and after it (workers stopped, records written). The
    session itself holds the collection and the tests."""
    if not (isinstance(wall, list) and len(wall) == 2 and began <= wall[0] <= wall[1] <= ended + 1.0):
        return {}
    return {"before_session_s": wall[0] - began, "session_s": wall[1] - wall[0],
            "after_session_s": max(0.0, ended - wall[1])}


def _number(value) -> float | None:
    """A finite int or float from a record, else None: JSON's NaN and Infinity, and booleans, are no
    number (a NaN measure compares false against every point of a curve)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None
