"""pytest plugin for hidden suites: fixtures that reach the sandboxed submission,
one rubric area per test, and the per-test record the report is built from.

Registered by grader/grading/session.py, with a SessionPlugin that carries the session's spec and
workers. The test process never imports the submission; see grader/sandbox.
"""
from __future__ import annotations

import contextlib
import json
import os
import time
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ..gpu import machines
from . import state_records
from ..assignment import Assignment
from .scoring import DETAIL_CHARS, NEIGHBOURS, SHARED_FIGURE, WORKER_START
from ..sandbox import SandboxFailure, Submission, SubmissionError, SubmissionUnavailable
from .workers import confinement_for, started

if TYPE_CHECKING:
    import torch

    from .session_spec import SessionSpec
# torch is imported once the submission's worker is spawned (SessionPlugin.start, then
# grader/grading/session.py), so that the worker's imports and ours overlap: each takes seconds.


class Grading:
    """Run-wide state, one per pytest session: the spec it runs (grader/grading/session.py) and the
    workers it is handed (grader/grading/workers.py)."""

    def __init__(self, spec: SessionSpec, assignment: Assignment, workers):
        self.assignment = assignment
        self.submission_path = Path(spec.submission)
        self.device: str = spec.device
        self.seed = spec.seed
        self.state = Path(spec.state)
        self.want_uid = spec.drop_privileges
        self.protect = list(spec.protect)
        self.roots = spec.roots()
        self.workers = workers
        self.failed_areas: set[str] = set()        # areas with a test that failed so far
        self.current: str | None = None             # the node id of the test being set up or run
        # node id -> area (or NEIGHBOURS, SHARED_FIGURE, WORKER_START) -> seconds: charge_time's
        # and set_aside's, moved out of the test's own area by report.build
        self.charged: dict[str, dict[str, float]] = {}
        self._spare = workers.spare_for(self)
        if self._spare is not None:
            self.confinement = self._spare.conf
            self.confinement.close_paths(self.closed_paths())
            self.confinement.keep_out_paths(self.protect)
        else:
            self.confinement = confinement_for(assignment, self.device, self.closed_paths(), self.want_uid,
                                               keep_out=self.protect)
        self._submission: Submission | None = None
        self._reference: Submission | None = None
        workers.began(self)

    def closed_paths(self) -> list[Path]:
        """Closed by their mode to a worker of its own uid: the assignment's (reference, hidden
        tests). The course's folders (`self.protect`) are kept out by the worker's view alone:
        a course folder's mode is the instructor's, never changed by a grading."""
        return self.assignment.protected_paths()

    def submission(self) -> Submission:
        if self._submission is None and self._spare is not None:
            self._spare.adopt(self.submission_path)      # its worker is up and has not imported
            self._submission, self._spare = self._spare, None
        if self._submission is None:
            self._submission = started(self.submission_path, self.assignment, self.device, self.confinement,
                                       self.roots, self.assignment.time_budget_s)   # imports while pytest collects
        return self._turned(self._submission)

    def reference(self) -> Submission | None:
        if self._reference is None and self.assignment.reference.is_file():
            self._reference = self.workers.reference(self)
        return self._turned(self._reference)

    def _turned(self, sub: Submission | None) -> Submission | None:
        """On a GPU, each call first passes the GPU turn's checkpoint (gpu_turns.checkpoint)."""
        if sub is not None and self.device == "cuda":
            from ..gpu import turns as gpu_turns
            sub.between_calls = gpu_turns.checkpoint
        return sub

    def ours(self) -> set[int]:
        """The processes of this grading: what may use its GPU while it times a kernel."""
        pids = {os.getpid()}
        for sub in (self._submission, self._reference, *self.workers.others()):
            if sub is not None:
                pids |= sub.pids()
        return pids

    @property
    def measures_here(self) -> bool:
        """Whether an area graded on this device is scored on a measure (a curve)."""
        return any(a.curve and a.applies_on(self.device) for a in self.assignment.areas.values())

    def write(self, name: str, data) -> None:
        tmp = self.state / f".{name}.tmp"
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, self.state / name)

    def close(self) -> None:
        if self._reference is not None:
            self.workers.after(self._reference)
        if self._submission is not None:
            sub = self._submission
            self.write(state_records.WORKER, {"restarts": sub.restarts, "failures": sub.failures[-20:],
                                       "import_error": sub.unavailable, "timings": sub.timings,
                                       "log_tail": sub.log_tail()})
            sub.close()
        if self._spare is not None:     # taken, but the run never asked for the submission
            self._spare.close()
        self.confinement.release()      # its workers are gone: a grading host may hand the uid on
        self.workers.ended(self)


def _grading(config) -> Grading:
    return config.stash[_KEY]


_KEY = pytest.StashKey[Grading]()


class SessionPlugin:
    """The grading of one session, registered beside this module by grader/grading/session.py."""

    def __init__(self, spec: SessionSpec, assignment: Assignment, workers):
        self.spec, self.assignment, self.workers = spec, assignment, workers
        self.grading: Grading | None = None

    def start(self) -> None:
        """The grading's workers spawned, before pytest starts (grader/grading/session.py): pytest
        imports the suites' conftest.py (and torch with it) ahead of any configure hook, and the
        workers' own imports are to overlap that one. Workers started in pytest_configure began
        after it, and a fresh machine's first grading waited for them (docs/instructor.md)."""
        grading = self.grading = Grading(self.spec, self.assignment, self.workers)
        grading.write(state_records.SANDBOX, grading.confinement.describe())
        if not self.spec.collect_only:
            grading.submission()
            if grading.measures_here:
                # A measured area is timed against the reference before the first test (see a
                # suite's conftest), so its worker starts now, beside the submission's.
                grading.reference()

    def close(self) -> None:
        """The grading's workers ended, once pytest has (grader/grading/session.py)."""
        grading, self.grading = self.grading, None
        if grading is not None:
            grading.close()

    def pytest_configure(self, config):
        grading = config.stash[_KEY] = self.grading
        if grading.device == "cuda":
            import torch
            grading.write(state_records.DEVICE, {"device_name": torch.cuda.get_device_name(0),
                                           "cuda": torch.version.cuda or "",
                                           "uuid": machines.device_uuid(torch.cuda.get_device_properties(0))})


def pytest_configure(config):
    config.addinivalue_line("markers", "area(name): the rubric area this test grades")


def pytest_runtest_setup(item):
    """A submission that failed to import, or was given up on (it hung or crashed on calls in
    a row), fails its remaining tests here, before their fixtures build inputs or take a
    turn on the GPU. Neither first nor last: after the skipping plugin's own (a skipped test
    stays skipped), before the runner's, which sets up the fixtures (registered earlier,
    called later)."""
    if _KEY not in item.config.stash:
        return
    _grading(item.config).current = item.nodeid
    if "submission" not in item.fixturenames:
        return
    sub = _grading(item.config)._submission
    if sub is not None and sub.unavailable:
        raise SubmissionUnavailable(sub.unavailable)
    grading = _grading(item.config)
    area = grading.assignment.areas.get(area_of(item))
    if area is not None and area.curve:
        failed = [req for req in grading.assignment.requirements(area.name) if req in grading.failed_areas]
        if failed:
            raise NotTimed(f"not timed: {', '.join(failed)} failed, and speed is scored only on a "
                           f"submission that passes {'it' if len(failed) == 1 else 'them'} completely; "
                           "the time of a wrong answer says nothing. Those tests' hints say what to fix.")


class NotTimed(SandboxFailure):
    """A measured area's test is not run when an area it requires has failed already: it could
    score nothing, and timing a wrong answer costs the class the GPU."""
    outcome = "failed"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed and report.when in ("setup", "call") and _KEY in item.config.stash:
        _grading(item.config).failed_areas.add(area_of(item))
    return report


def area_of(item) -> str | None:
    marks = list(item.iter_markers("area"))
    return marks[0].args[0] if marks else None


def contract_of(item) -> str:
    doc = getattr(item.function, "__doc__", None) or ""
    return doc.strip().splitlines()[0] if doc.strip() else item.originalname


def pytest_collection_modifyitems(session, config, items):
    grading = _grading(config)
    areas = grading.assignment.areas
    problems = []
    for item in items:
        marks = [m.args[0] for m in item.iter_markers("area")]
        if len(marks) != 1 or marks[0] not in areas:
            problems.append(f"{item.nodeid}: needs exactly one area marker from {sorted(areas)}, has {marks}")
            continue
        area = areas[marks[0]]
        if not area.applies_on(grading.device):
            item.add_marker(pytest.mark.skip(reason=f"area {area.name} is graded only on {area.device}"))
    if problems:
        raise pytest.UsageError("hidden suite is malformed:\n" + "\n".join(problems))
    # Measured areas last, so that what they require has been graded when they start (see
    # pytest_runtest_setup); the order is otherwise the suite's.
    items[:] = ([i for i in items if not areas[area_of(i)].curve]
                + [i for i in items if areas[area_of(i)].curve])
    runnable = [i for i in items if not i.get_closest_marker("skip")]
    if not config.option.collectonly and any("reference" in i.fixturenames for i in runnable):
        grading.reference()         # its worker imports while the other tests run
    grading.write(state_records.COLLECTED, [{"nodeid": i.nodeid, "area": area_of(i), "contract": contract_of(i)}
                                     for i in items])


# -- fixtures ------------------------------------------------------------------
@pytest.fixture(scope="session")
def submission(request):
    return _grading(request.config).submission()


@pytest.fixture(scope="session")
def submission_source(request) -> str:
    return _grading(request.config).submission_path.read_text(errors="replace")


@pytest.fixture(scope="session")
def device(request) -> torch.device:
    import torch
    return torch.device(_grading(request.config).device)


@pytest.fixture(scope="session")
def run_seed(request) -> int:
    """The grader's seed for this run, for inputs made once per run (see seed)."""
    return _grading(request.config).seed


@pytest.fixture
def seed(request) -> int:
    """Drawn per run by the grader, mixed with the test's id: inputs differ every run."""
    return zlib.crc32(f"{_grading(request.config).seed}:{request.node.nodeid}".encode())


@pytest.fixture
def rng(seed) -> torch.Generator:
    import torch
    return torch.Generator().manual_seed(seed)


@pytest.fixture(scope="session")
def reference(request):
    """The instructor solution behind the same sandbox, for comparisons made in the same run."""
    ref = _grading(request.config).reference()
    if ref is None:
        pytest.skip("the reference solution is not installed on this machine, so nothing to compare with")
    return ref


_MEASURE = pytest.StashKey[float]()
_TURN = pytest.StashKey["gpu_turns.Turn"]()
_WAITS = pytest.StashKey[dict]()
_QUIET_FROM = pytest.StashKey[tuple]()


@pytest.fixture(scope="session")
def quiet_gpu(request, device):
    """quiet_gpu.measure(fn) runs fn (a timing) in a window where no process outside this
    grading used the GPU, made again beside foreign work; past its bound it raises Busy, and
    the test is not measured (see grader/gpu/quiet.py). On the CPU it just runs fn."""
    from ..gpu import quiet as gpu_quiet
    if device.type != "cuda":
        return gpu_quiet.Unchecked()
    grading = _grading(request.config)
    quiet = gpu_quiet.QuietGpu(device.index or 0, grading.ours)
    grading.write(state_records.QUIET, {"checked": not quiet.unchecked, "problem": quiet.problem})
    return quiet


@pytest.fixture
def measure(request, quiet_gpu):
    """measure(x) records the figure an area with a curve is scored on. On a GPU each figure
    must be backed by a quiet_gpu.measure (one may back several: its `serves`), so a timing
    beside foreign work never scores."""
    windows = len(quiet_gpu.windows)
    request.node.stash[_QUIET_FROM] = (quiet_gpu, windows, quiet_gpu.waited_s, quiet_gpu.redone_s)

    def record(value: float) -> None:
        if quiet_gpu.serving <= 0 and not quiet_gpu.unchecked:
            raise RuntimeError("the suite recorded a measure not timed through quiet_gpu.measure")
        quiet_gpu.serving -= 1
        request.node.stash[_MEASURE] = float(value)
    # Where the test's area's curve gives full credit: a suite may check a measure short of it
    # more closely before recording it (the L1 suite times the reference again).
    marker = request.node.get_closest_marker("area")
    area = _grading(request.config).assignment.areas.get(marker.args[0]) if marker else None
    record.full_credit_from = area.full_credit_from() if area is not None else None
    return record


class _NoTurn:
    """The CPU's stand-in for a GPU turn: nothing is shared, everything is alone."""
    alone, lost, exclusive_s = True, False, 0.0

    def exclusive(self, **_):
        return contextlib.nullcontext(True)


@pytest.fixture(scope="session")
def charge_time(request):
    """charge_time(area) is a context manager whose seconds count in `area`'s time rather than
    in the test it runs under: a session fixture set up for one area (the reference's timing,
    for performance) runs in the setup of whichever test comes first. What it waited for other
    gradings meanwhile (set_aside) counts in no area: report.build shows it as a phase."""
    grading = _grading(request.config)
    return lambda area: charged(grading, area)


def set_aside(grading: Grading, pseudo: str, seconds: float) -> None:
    """Seconds of the test being set up or run that are no area's (NEIGHBOURS: waits for other
    gradings on a shared GPU that no test's figures hold), shown as a phase."""
    if seconds > 0:
        spent = grading.charged.setdefault(grading.current or "", {})
        spent[pseudo] = spent.get(pseudo, 0.0) + seconds


@contextlib.contextmanager
def charged(grading: Grading, area: str):
    """The block's seconds count in `area` for the test being set up or run (charge_time), less
    what was charged or set aside within it: charges nest, so that a figure made for the whole
    GPU inside the reference's timing (SHARED_FIGURE) or a wait for the neighbours is not
    counted again in the area around it."""
    spent = grading.charged.setdefault(grading.current or "", {})
    start, before = time.monotonic(), sum(spent.values())
    try:
        yield
    finally:
        inside = sum(spent.values()) - before
        spent[area] = spent.get(area, 0.0) + max(0.0, time.monotonic() - start - inside)


@pytest.fixture(scope="session", autouse=True)
def worker_started(request, charge_time):
    """Before the first test: the submission's worker up (torch imported, the CUDA context made),
    so that the first test, whichever area it grades, does not pay for it. A worker that does not
    start is left for the tests to report."""
    if any("submission" in item.fixturenames for item in request.session.items):
        with charge_time(WORKER_START), contextlib.suppress(SandboxFailure):
            _grading(request.config).submission().wait_idle()


@pytest.fixture(scope="session")
def gpu_share(request, device):
    """gpu_share() is a context manager holding a shared turn on this GPU (see gpu_turn) for
    work outside a test, such as timing the reference before the first one; its
    `exclusive()` gives the GPU to this grading alone for a block. Inside a test it is the
    test's own turn (a second turn of this process would wait for the first to leave the GPU).
    On the CPU it does nothing."""
    if device.type != "cuda":
        return lambda: contextlib.nullcontext(_NoTurn())
    from ..gpu import turns as gpu_turns
    grading = _grading(request.config)

    @contextlib.contextmanager
    def outside_a_test():
        # Its waits are in no test's figures (gpu_turn records a test's): they are set aside,
        # out of the area charge_time charges.
        quiet = request.getfixturevalue("quiet_gpu")
        asked, quiet_before = time.monotonic(), quiet.waited_s + quiet.redone_s
        with gpu_turns.turn(gpu_turns.gpu_key(), exclusive=False) as held:
            taken = time.monotonic() - asked
            try:
                yield held
            finally:
                set_aside(grading, NEIGHBOURS,
                          taken + held.waited_s + quiet.waited_s + quiet.redone_s - quiet_before)

    def share():
        held = gpu_turns.current()
        return contextlib.nullcontext(held) if held is not None else outside_a_test()
    return share


@pytest.fixture(scope="session")
def gpu_memo(request, device):
    """gpu_memo.get(name, make, keep) -> Memo: a figure measured once per GPU and read by every
    grading on it for a while (grader/gpu/memo.py), such as the reference's timings. None on the
    CPU, where nothing is timed for points. GRADER_GPU_MEMO_TTL_S sets how long a figure is
    kept (0: every grading measures its own)."""
    if device.type != "cuda":
        return None
    from ..gpu import memo as gpu_memo, turns as gpu_turns
    ttl = float(os.environ.get("GRADER_GPU_MEMO_TTL_S", gpu_memo.TTL_S))
    grading = _grading(request.config)
    return _WaitsKept(gpu_memo.GpuMemo(gpu_turns.lock_dir(), gpu_turns.gpu_key(device.index or 0),
                                       gpu_memo.fingerprint(grading.assignment), ttl), grading)


class _WaitsKept:
    """A GpuMemo whose waits for another grading's making count as the grading's neighbours',
    and whose making here as the GPU's (SHARED_FIGURE), not the grading's own."""

    def __init__(self, memo, grading):
        self._memo, self._grading = memo, grading

    def get(self, name: str, make, *args, **kwargs):
        def made_for_the_gpu():
            with charged(self._grading, SHARED_FIGURE):
                return make()
        got = self._memo.get(name, made_for_the_gpu, *args, **kwargs)
        if got is not None:
            set_aside(self._grading, NEIGHBOURS, got.waited_s)
        return got


@pytest.fixture(autouse=True)
def gpu_turn(request, device):
    """On a GPU that other gradings may share, every test shares it; a test that measures has
    it to itself while quiet_gpu.measure runs (or, after a bounded wait for a stuck neighbour,
    goes ahead and its record says so). Building inputs and compiling happen beside the
    neighbours: a grading keeps the GPU from the others only for its measurements."""
    if device.type != "cuda":
        yield
        return
    from ..gpu import turns as gpu_turns
    timing = "measure" in request.fixturenames
    quiet = request.getfixturevalue("quiet_gpu") if timing else None
    asked = time.monotonic()
    with gpu_turns.turn(gpu_turns.gpu_key(), exclusive=False) as held:
        # Where a shared GPU's time goes (instructor detail): waiting for the turn, and below
        # for a quiet GPU (measure), so a slow class can be told from a slow grader.
        request.node.stash[_WAITS] = {"gpu_turn_wait_s": round(time.monotonic() - asked, 3)}
        request.node.stash[_TURN] = held
        if quiet is not None:
            quiet.window = lambda: held.exclusive(hold_s=gpu_turns.HOLD_S)
        try:
            yield
        finally:
            if quiet is not None:
                quiet.window = contextlib.nullcontext


class TurnLost(SandboxFailure):
    """The test held the GPU past its turn's deadline; its neighbours went on without it."""
    outcome = "timeout"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """A test that lost its GPU turn fails, whatever it found: it was no longer alone, or
    no longer entitled to the GPU, for part of the time."""
    result = yield
    held = item.stash.get(_TURN, None)
    if held is not None and held.lost:
        raise TurnLost(f"this test held the GPU past its turn's {held.hold_s:g} s, so it was given "
                       "to the other gradings sharing the GPU and the test does not count")
    return result


@pytest.fixture
def shared(submission):
    """Allocator for tensors the worker maps without a copy (huge caches)."""
    yield submission.exchange
    submission.exchange.release()


# -- the per-test record -------------------------------------------------------
def _hint(excinfo) -> tuple[str, str]:
    """(outcome, student-facing hint) for an exception raised in a test."""
    exc = excinfo.value
    if isinstance(exc, SandboxFailure):
        return exc.outcome, str(exc)
    if isinstance(exc, SubmissionError):
        return "failed", f"your code raised {exc.type_name}: {exc.message[:500]}"
    if isinstance(exc, AssertionError):
        text = str(exc)
        # pytest appends its introspection ("assert x == y ...") after the message.
        message = text.split("\nassert ")[0] if not text.startswith("assert ") else ""
        return "failed", message.strip() or "the result did not match the expected one"
    if excinfo.errisinstance(pytest.skip.Exception):
        return "skipped", str(getattr(exc, "msg", exc))
    return "error", f"{type(exc).__name__}: {str(exc)[:300]}"


def pytest_json_runtest_metadata(item, call):
    record = {}
    if call.when == "setup":
        record = {"area": area_of(item), "contract": contract_of(item)}
    grading = item.config.stash.get(_KEY, None)
    if grading is not None and grading.charged.get(item.nodeid):
        # Each phase's record replaces the last's: a charge made in the test's call (a figure
        # read when it is first needed) counts too.
        record["charged"] = {a: round(s, 3) for a, s in grading.charged[item.nodeid].items()}
    if call.excinfo is not None and call.when in ("setup", "call"):
        outcome, hint = _hint(call.excinfo)
        if call.when == "setup" and outcome != "skipped" and not isinstance(call.excinfo.value, SandboxFailure):
            outcome = "error"
        record.update(outcome=outcome, hint=hint)
    elif call.when == "call":
        record.update(outcome="passed", hint="")
    if call.when == "call" and _MEASURE in item.stash:
        record["measure"] = item.stash[_MEASURE]
    figures = dict(item.user_properties).get("figures") if call.when == "call" else None
    if isinstance(figures, dict):
        record["figures"] = dict(figures)      # numbers only: grade_one.py keeps nothing else
    detail = dict(item.user_properties).get("detail") if call.when == "call" else None
    if detail is not None:
        # what a hidden test saw (record_property("detail", ...)): the instructor's, never the student's
        record["detail"] = str(detail)[:DETAIL_CHARS]
    if call.when == "call" and _QUIET_FROM in item.stash:
        quiet, windows, waited, redone = item.stash[_QUIET_FROM]
        item.stash.setdefault(_WAITS, {}).update(
            gpu_quiet_wait_s=round(quiet.waited_s - waited, 3), gpu_quiet_redo_s=round(quiet.redone_s - redone, 3),
            gpu_quiet_attempts=float(sum(quiet.windows[windows:])))
    held = item.stash.get(_TURN, None)
    if call.when == "call" and held is not None:
        waits = item.stash.setdefault(_WAITS, {})
        if "measure" in item.fixturenames:
            waits["gpu_alone_s"] = round(held.exclusive_s, 3)
        if held.checkpoint_waited_s:
            waits["gpu_checkpoint_wait_s"] = round(held.checkpoint_waited_s, 3)
        waits["gpu_turn_wait_s"] = round(waits.get("gpu_turn_wait_s", 0.0) + held.waited_s, 3)
    if call.when == "call" and item.stash.get(_WAITS, None):
        record.setdefault("figures", {}).update(item.stash[_WAITS])
    if call.when == "call" and held is not None and not held.alone:
        # timed beside a neighbour's test that would not end (see gpu_turns)
        record.setdefault("figures", {})["gpu_had_alone"] = 0.0
    return record
