"""Warm grading hosts (grader/warm/hosts.py): a grading in a host that has already graded others,
hostile ones included, gets the report a cold grading gets; a grading that goes away takes
its host's session down with it; a host takes only the sessions it was made for."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from grader.assignment import REPO, Assignment
from grader.gpu.machines import resolve_device
from grader.sandbox.processes import descendants, processes_of
from grader.warm.hosts import HOST_ENV, HostProcess
from toy_class import SUBMISSIONS, TOY

L1 = Assignment.load(REPO / "assignment/l1_paged_kv_write")
CORPUS = REPO / "tests/corpus"
SEED = 20261201


def _grade(assignment: Assignment, submission: Path, report: Path, device: str, host: HostProcess | None,
           wait: bool = True):
    cmd = [sys.executable, "-m", "grader", "grade", "--assignment", str(assignment.folder),
           "--submission", str(submission), "--report", str(report), "--device", device,
           "--seed", str(SEED), "--quiet"]
    env = dict(os.environ)
    env.pop(HOST_ENV, None)
    env.update(host.env() if host else {})
    if not wait:
        return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                start_new_session=True)
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(report.read_text())


def _handed_in(folder: Path, file: Path | str, assignment: Assignment = TOY) -> Path:
    """A file under the name a student hands it in as (a host's spare worker is started for a
    file of the last one's name). `file`: a path, or the name of a toy submission."""
    source = Path(file) if isinstance(file, Path) else SUBMISSIONS / file
    dest = folder / f"{source.stem}-{len(list(folder.iterdir()))}" / assignment.submission
    dest.parent.mkdir()
    dest.write_bytes(source.read_bytes())
    return dest


def _verdicts(report: dict, assignment: Assignment) -> list[tuple]:
    """What a grading decided, test by test: scores outside areas scored on a measured curve,
    whose figures differ between any two runs; outcome and hint everywhere."""
    curved = {name for name, area in assignment.areas.items() if area.curve}
    return [(t["name"], t.get("status"), t["extra_data"].get("outcome"))
            + ((None, None) if set(t["tags"]) & curved else (t["output"], t["score"])) for t in report["tests"]]


def _how(report: dict) -> dict:
    return report["extra_data"]["instructor"]["test_process"]


@pytest.fixture
def l1_host():
    device = resolve_device("auto")
    host = HostProcess(L1.folder, device, {}, spare=True)
    yield host, device
    host.close()


@pytest.mark.slow
def test_hostile_gradings_leave_nothing_for_the_next_in_the_same_host(tmp_path, l1_host, cold_reference):
    """The reference graded in a host right after a daemon forger and a parent killer, by the
    worker the host started while the parent killer was graded (its spare), gets the verdicts a
    cold grading of the reference gets with the same seed, and nothing of theirs (a process of
    their uid) outlives their grading."""
    host, device = l1_host
    cold = cold_reference(SEED)
    assert _how(cold) == {"warm": False}
    for name in ("detached_rewriter", "kill_parent"):
        hostile = _grade(L1, _handed_in(tmp_path, CORPUS / "adversarial" / f"{name}.py", L1), tmp_path / f"{name}.json",
                         device, host)
        assert hostile["score"] == 0, name
        uid = hostile["extra_data"]["sandbox"]["uid"]
        if uid is not None:
            assert not processes_of(uid), f"{name} left processes of its uid behind"
    warm = _grade(L1, _handed_in(tmp_path, L1.reference, L1), tmp_path / "warm.json", device, host)
    # in the host that graded them, with the worker it started beside the last of them (its spare)
    assert _how(warm)["warm"] is True and _how(warm)["session"] == 3 and _how(warm)["spare_worker"] is True
    assert warm["extra_data"]["problem"] is None and cold["extra_data"]["problem"] is None
    assert _verdicts(warm, L1) == _verdicts(cold, L1)


@pytest.mark.slow
def test_a_host_keeps_only_its_reference_between_gradings(tmp_path):
    """Between two gradings the host's processes are itself, the reference's worker and the
    spare started for the next grading: the submission's worker, and what it forked off, are
    gone; the next grading scores as a cold one."""
    host = HostProcess(TOY.folder, "cpu", {}, spare=True)
    try:
        first = _grade(TOY, _handed_in(tmp_path, "daemon_and_memory.py"), tmp_path / "a.json", "cpu", host)
        # the first grading's worker was started as the host started, ahead of it (HostWorkers.ahead)
        assert _how(first)["spare_worker"] is True
        # ... and it is told where the host's start went, step by step (a class's first wave)
        assert set(_how(first)["host_start"]) == {"before_start_s", "workers_ahead_s", "pytest_s", "torch_s",
                                                  "plugin_s"}
        left = descendants(host.proc.pid)
        uid = first["extra_data"]["sandbox"]["uid"]
        assert uid is None or not processes_of(uid)
        assert len(left) <= 2, f"the host kept {len(left)} processes between gradings"
        second = _grade(TOY, _handed_in(tmp_path, "good.py"), tmp_path / "b.json", "cpu", host)
        cold = _grade(TOY, SUBMISSIONS / "good.py", tmp_path / "c.json", "cpu", None)
        # the second grading's worker was started while the host waited for it (its spare)
        assert _how(second) == {"warm": True, "session": 2, "host_pid": host.proc.pid, "spare_worker": True}
        assert second["score"] == second["max_score"]
        assert "host_start" not in _how(second)
        # where its worker's start went, for the instructor: the wait for it, the worker's own
        # steps before it could take the file, and the import
        assert set(second["extra_data"]["instructor"]["worker"]["timings"]) == {
            "waited_for_worker_s", "worker_before_main_s", "worker_torch_s", "import_s"}
        assert _verdicts(second, TOY) == _verdicts(cold, TOY)
    finally:
        host.close()


@pytest.mark.slow
def test_a_grading_that_goes_away_takes_the_host_down_with_its_workers(tmp_path):
    """A grading killed mid-session (its batch timed it out) must not leave its session
    running in the host for the next grading to meet: the host ends, workers and all, and
    the next grading gets a fresh one. Nothing of the grading is left in the temporary
    folders either, although its worker writes files there until it is killed."""
    host = HostProcess(TOY.folder, "cpu", {})
    try:
        proc = _grade(TOY, SUBMISSIONS / "writes_while_hanging.py", tmp_path / "h.json", "cpu", host, wait=False)
        first_host = host.proc.pid
        # The hanging call is under way once its worker has begun filling its folder. Only that
        # says the worker is up: a process seen under the host before it may be a short-lived
        # helper (a check of the worker's file-system view), gone a moment later. A host's start
        # took seconds alone but over a minute once in a loaded full `make test`.
        deadline = time.monotonic() + 180
        while not any(Path(f).name.startswith("busy-") for f in _grading_folders(proc.pid)):
            if time.monotonic() > deadline or proc.poll() is not None:
                before = _states(first_host)
                os.kill(first_host, signal.SIGUSR1)      # its threads' stacks, into its log
                time.sleep(5)
                pytest.fail(f"the hanging call did not start within 180 s (host exit {host.proc.poll()}, grading "
                            f"exit {proc.poll()}, host threads {before}, 5 s later {_states(first_host)}, "
                            f"{len(descendants(first_host))} processes under the host, grading's threads "
                            f"{_states(proc.pid)} and {len(descendants(proc.pid))} processes under it: it ran "
                            f"cold if any):\n{host.log_tail()}")
            time.sleep(0.05)
        assert descendants(first_host), "the hanging call's worker is not the host's"
        os.killpg(proc.pid, signal.SIGTERM)      # as grade-all stops a grading past its time
        proc.wait(timeout=60)
        host.proc.wait(timeout=30)
        assert host.proc.returncode != 0, host.log_tail()
        assert not _grading_folders(proc.pid), f"left behind: {_grading_folders(proc.pid)}"
        report = _grade(TOY, SUBMISSIONS / "good.py", tmp_path / "g.json", "cpu", host)
        assert host.proc.pid != first_host and _how(report)["session"] == 1, _how(report)
        assert report["score"] == report["max_score"], [t["output"] for t in report["tests"] if t["output"]]
    finally:
        host.close()


def _states(pid: int) -> list[str]:
    """What each thread of pid is doing, for a message: its state, kernel wait channel, the CPU
    ticks it has used (user+system: a thread that spins gains them, one starved of the CPU does
    not) and its syscall (the first number; "running" when in user space)."""
    found = []
    for task in sorted(Path(f"/proc/{pid}/task").glob("*")):
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            syscall = (task / "syscall").read_text().split()[0] if os.access(task / "syscall", os.R_OK) else "?"
            found.append(f"{task.name}:{fields[0]}:{(task / 'wchan').read_text().strip()}:"
                         f"ticks={int(fields[11]) + int(fields[12])}:syscall={syscall}")
        except (OSError, IndexError, ValueError):
            continue
    return found


def _grading_folders(pid: int) -> list[str]:
    """The work roots (grader/grading/grade_one.py) that the grading process `pid` made and left, with what is
    inside: by their owner marker, so that another run's gradings on this machine do not count."""
    from grader.warm.leftovers import GRADING_PREFIX, OWNER_FILE
    from grader.sandbox.proxy import shared_tensor_root
    found = []
    for parent in {tempfile.gettempdir(), shared_tensor_root() or tempfile.gettempdir()}:
        for folder in Path(parent).glob(GRADING_PREFIX + "*"):
            try:
                owner = json.loads((folder / OWNER_FILE).read_text())["owner"]
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if str(owner).split(":")[0] == str(pid):
                found += [str(folder)] + [os.path.join(r, n) for r, ds, fs in os.walk(folder) for n in ds + fs]
    return sorted(found)


@pytest.mark.slow
def test_a_host_takes_only_sessions_of_its_assignment_and_device(tmp_path):
    """A grading of another assignment sent to a host runs cold, and right."""
    host = HostProcess(L1.folder, "cpu", {})
    try:
        report = _grade(TOY, SUBMISSIONS / "good.py", tmp_path / "t.json", "cpu", host)
        assert _how(report) == {"warm": False}
        assert report["score"] == report["max_score"]
    finally:
        host.close()


# pytest's own variables, as an instructor's shell or a CI runner sets them for other tests.
CALLERS_PYTEST_ENV = {
    "PYTEST_ADDOPTS": "-k add -x",              # deselected the echo tests: they scored nothing
    "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",      # left out the report plugin: 0 points
    "PYTEST_TIMEOUT": "0.001",
    "PYTHONWARNINGS": "error",
}


@pytest.mark.slow
def test_the_callers_pytest_settings_never_reach_the_hidden_suites(tmp_path, monkeypatch):
    """The hidden suites run as the grader runs them, whatever the grading's caller set for its
    own pytest: cold, and in a host started under the same environment, a correct file earns
    every point."""
    for name, value in CALLERS_PYTEST_ENV.items():
        monkeypatch.setenv(name, value)
    cold = _grade(TOY, SUBMISSIONS / "good.py", tmp_path / "cold.json", "cpu", None)
    host = HostProcess(TOY.folder, "cpu", {})
    try:
        warm = _grade(TOY, SUBMISSIONS / "good.py", tmp_path / "warm.json", "cpu", host)
    finally:
        host.close()
    assert _how(cold) == {"warm": False} and _how(warm)["warm"] is True
    for report in (cold, warm):
        assert report["score"] == report["max_score"] == 90.0, report["extra_data"].get("problem")
