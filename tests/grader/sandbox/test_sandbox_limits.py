"""The sandbox's give-up rule and the GPU turns, exercised directly (no pytest run, no GPU)."""
import fcntl
import multiprocessing as mp
import os
import time
from pathlib import Path

import pytest
import torch

from grader.gpu import turns as gpu_turns
from grader.sandbox import (Confinement, SandboxFailure, Submission, SubmissionError, SubmissionUnavailable, WorkerCrashed,
                            WorkerTimeout, isolate)
from grader.sandbox.proxy import AFTER_A_TIMEOUT, MEMORY_TO_GIVE_UP, TIMEOUTS_TO_GIVE_UP

TOY = Path(__file__).parent.parent / "toy" / "submissions"


def _timed(call) -> float:
    started = time.monotonic()
    call()
    return time.monotonic() - started


def _times_out(sub, x) -> float:
    """Seconds until a hanging call timed out."""
    def hang():
        with pytest.raises(WorkerTimeout):
            sub.add_into(x, torch.full((4,), 13.0))
    return _timed(hang)


@pytest.mark.slow
def test_a_submission_that_keeps_hanging_is_given_up_after_timeouts_in_a_row():
    conf = Confinement.prepare("cpu", [], want_uid=False)
    sub = Submission(TOY / "hangs_on_thirteen.py", ["add_into", "echo"], torch.device("cpu"), conf, timeout=60)
    try:
        x = torch.zeros(4)
        sub.add_into(x, torch.ones(4))                 # a good call first: the count is of calls in a row
        # After the import, which takes seconds on a busy machine; a restarted worker's start and
        # import keep the full timeout, only the calls after a timeout get AFTER_A_TIMEOUT of it.
        # The time of a call after a timeout includes the restart of the worker (seconds).
        sub.timeout = 12
        assert x.tolist() == [1.0] * 4
        assert _times_out(sub, x) >= 12
        for _ in range(TIMEOUTS_TO_GIVE_UP - 2):
            assert 12 * AFTER_A_TIMEOUT <= _times_out(sub, x) < 11
        sub.add_into(x, torch.ones(4))                 # an answer resets the count
        assert _times_out(sub, x) >= 12                # ... and the full timeout
        for _ in range(TIMEOUTS_TO_GIVE_UP - 1):
            _times_out(sub, x)
        started = time.monotonic()
        with pytest.raises(SubmissionUnavailable, match="calls in a row"):
            sub.echo(1)
        assert time.monotonic() - started < 1.0
    finally:
        sub.close()


def _hold(folder, exclusive, hold_s, log, name, go):
    log.put((name, "ready", time.monotonic()))
    go.wait(60)
    with gpu_turns.turn("gpu-test", exclusive, Path(folder)):
        log.put((name, "in", time.monotonic()))
        time.sleep(hold_s)
        log.put((name, "out", time.monotonic()))


@pytest.mark.slow
def test_a_timing_test_is_alone_on_the_gpu_and_not_starved(tmp_path):
    """Sharers overlap each other, never the exclusive holder; a sharer that arrives
    while the exclusive one waits goes after it."""
    ctx = mp.get_context("spawn")
    log = ctx.Queue()
    plan = {"s0": (False, 3.0), "s1": (False, 3.0), "x": (True, 0.5), "late": (False, 0.2)}
    go = {name: ctx.Event() for name in plan}
    procs = {name: ctx.Process(target=_hold, args=(tmp_path, ex, hold, log, name, go[name]))
             for name, (ex, hold) in plan.items()}
    for p in procs.values():
        p.start()
    events = []

    def wait_for(name, what):
        while not any(e[:2] == (name, what) for e in events):
            events.append(log.get(timeout=60))

    for name in plan:                      # every process started (torch imported) before any turn
        wait_for(name, "ready")
    go["s0"].set()
    go["s1"].set()
    wait_for("s0", "in")
    wait_for("s1", "in")
    go["x"].set()                          # waits for the sharers to leave
    time.sleep(1.0)
    go["late"].set()                       # arrives while x waits
    for p in procs.values():
        p.join(60)
        assert p.exitcode == 0
    while len(events) < 3 * len(plan):
        events.append(log.get(timeout=10))
    spans = {}
    for name, what, at in events:
        spans.setdefault(name, {})[what] = at
    x = spans["x"]
    for name in ("s0", "s1", "late"):
        s = spans[name]
        assert s["out"] <= x["in"] or s["in"] >= x["out"], f"{name} overlapped the exclusive turn"
    assert spans["late"]["in"] >= x["out"], "a sharer overtook the waiting timing test"
    assert spans["s0"]["in"] < spans["s1"]["out"] and spans["s1"]["in"] < spans["s0"]["out"], \
        "two sharers did not overlap"


def test_lock_dir_is_private(tmp_path, monkeypatch):
    monkeypatch.setenv(gpu_turns.LOCK_DIR_ENV, str(tmp_path / "turns"))
    folder = gpu_turns.lock_dir()
    assert folder.is_dir() and (folder.stat().st_mode & 0o077) == 0


@pytest.mark.parametrize("made_first", ["open to all", "a link to another folder"])
def test_a_lock_dir_someone_else_made_first_is_refused(tmp_path, monkeypatch, made_first):
    """Whoever makes the turns' folder under /tmp first could remove or hold the locks in it, and
    so take a timing test's turn: the grader uses only a folder that is its own, closed to others."""
    turns = tmp_path / "turns"
    if made_first == "open to all":
        turns.mkdir(mode=0o777)
        turns.chmod(0o777)
    else:
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        turns.symlink_to(tmp_path / "elsewhere")
    monkeypatch.setenv(gpu_turns.LOCK_DIR_ENV, str(turns))
    with pytest.raises(RuntimeError, match="not a private folder"):
        gpu_turns.lock_dir()


def test_file_descriptors_ride_with_a_message_and_only_where_sent():
    """GPU memory reaches a worker of another uid as descriptors sent with the request."""
    import socket

    from grader.sandbox import wire
    a, b = socket.socketpair()
    r, w = os.pipe()
    try:
        wire.send(a, {"op": "call", "fds": [7]}, [b"xy"], fds=[w])
        wire.send(a, {"op": "go"})
        header, blobs, fds = wire.recv_with_fds(b)
        assert header == {"op": "call", "fds": [7]} and blobs == [b"xy"] and len(fds) == 1
        os.write(fds[0], b"!")
        os.close(fds[0])
        assert os.read(r, 1) == b"!"
        header, blobs, fds = wire.recv_with_fds(b)
        assert header == {"op": "go"} and fds == []
    finally:
        for s in (a, b):
            s.close()
        os.close(r)
        os.close(w)


@pytest.mark.slow
def test_the_files_copied_into_the_sandbox_import_on_their_own(tmp_path):
    """The worker sees only the files the proxy copies beside it, never the grader package."""
    import shutil
    import subprocess
    import sys

    from grader.sandbox import proxy
    here = Path(proxy.__file__).parent
    copied = proxy.WORKER_FILES
    for name in copied:
        shutil.copy(here / name, tmp_path / name)
    names = ", ".join(Path(n).stem for n in copied)
    run = subprocess.run([sys.executable, "-s", "-c", f"import {names}; print(vmm.available() in (True, False))"],
                         cwd=tmp_path, capture_output=True, text=True, env={"PATH": os.environ["PATH"]})
    assert run.returncode == 0 and run.stdout.strip() == "True", run.stderr[-2000:]


def test_a_timing_test_waits_only_so_long_for_a_stuck_sharer(tmp_path):
    """A sharer stuck behind a hung worker must not hold a timing test for minutes: after
    the bounded wait it goes ahead, says it was not alone, and keeps newcomers out."""
    with gpu_turns.turn("gpu-test", False, tmp_path):               # stuck: never leaves
        started = time.monotonic()
        with gpu_turns.turn("gpu-test", True, tmp_path, wait_s=0.3) as alone:
            assert not alone and 0.3 <= time.monotonic() - started < 3
            gate = os.open(tmp_path / "gpu-test.gate", os.O_RDWR)
            try:
                with pytest.raises(BlockingIOError):                 # a newcomer would wait
                    fcntl.flock(gate, fcntl.LOCK_EX | fcntl.LOCK_NB)
            finally:
                os.close(gate)
    with gpu_turns.turn("gpu-test", True, tmp_path, wait_s=0.3) as alone:
        assert alone.alone is True


def test_a_sharer_stuck_past_its_share_steps_aside_and_the_timing_test_says_so(tmp_path):
    """A sharer stuck in a call (a file that sleeps until its timeout) holds a timing test only
    for the sharer's share of the GPU, not for the timing test's whole bounded wait; the timing
    test then says it was not alone. Once the stuck sharer is gone, timing tests are alone again."""
    with gpu_turns.turn("gpu-test", False, tmp_path, share_s=0.3) as sharer:
        started = time.monotonic()
        with gpu_turns.turn("gpu-test", True, tmp_path, wait_s=30) as timing:
            waited = time.monotonic() - started
        assert 0.2 <= waited < 3 and not timing.alone and not sharer.lost
    with gpu_turns.turn("gpu-test", True, tmp_path, wait_s=0.3) as timing:
        assert timing.alone


@pytest.mark.slow
def test_the_submission_is_imported_at_its_first_call_and_hold_stops_it():
    """hold() is what lets a suite time the reference with none of the submission's code
    running beside it: before the first call the worker is up but has not imported the
    file; after it, hold() stops the worker (and what the file started) and the next call
    imports the file in a new one."""
    conf = Confinement.prepare("cpu", [], want_uid=False)
    sub = Submission(TOY / "marks_import.py", ["echo"], torch.device("cpu"), conf, timeout=60)
    imports = sub.scratch / "home" / "imports"
    try:
        sub.start()
        sub.wait_idle()
        assert not sub.loaded and not imports.exists(), "the file was imported before any call"
        assert sub.echo(3) == 3
        assert sub.loaded
        first = imports.read_text().split()
        assert len(first) == 1
        sub.wait_idle()
        assert not sub.loaded
        assert not Path(f"/proc/{first[0]}").exists(), "hold() left the importing worker running"
        assert sub.echo(4) == 4
        second = imports.read_text().split()
        assert len(second) == 2 and second[1] != first[0]
    finally:
        sub.close()


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="a worker gets a uid of its own only when the grader is root")
def test_a_uid_s_first_worker_proves_it_and_one_that_cannot_start_there_falls_back_to_root(tmp_path):
    """No probe runs ahead of a uid's first worker: its start (torch, Triton and, on the GPU, a
    CUDA context, before any of the submission runs) is the probe, and its hello is remembered.
    A worker that cannot start under the uid (here: a data limit too small to import torch)
    makes the grader ask the probe, and the report says why workers then run as root."""
    conf = Confinement.prepare("cpu", [])
    assert conf.uid is not None, conf.reason
    conf.unproven = record = tmp_path / "probe-record"       # as on a machine where none worked yet
    sub = Submission(TOY / "marks_import.py", ["echo"], torch.device("cpu"), conf, timeout=60)
    try:
        assert sub.echo(3) == 3
        assert record.exists() and conf.unproven is None and conf.uid is not None
        assert sub.failures == []
    finally:
        sub.close()
        conf.release()

    conf = Confinement.prepare("cpu", [])
    conf.unproven, conf.memory_limit = tmp_path / "probe-record-2", 64 << 20
    sub = Submission(TOY / "marks_import.py", ["echo"], torch.device("cpu"), conf, timeout=60)
    try:
        with pytest.raises(SandboxFailure, match="did not start"):
            sub.echo(3)
        assert conf.uid is None and "cannot work here" in conf.reason, conf.reason
        assert conf.describe()["privilege_drop"] is False
        assert not (tmp_path / "probe-record-2").exists()
    finally:
        sub.close()
        conf.release()


@pytest.mark.slow
def test_a_submission_can_neither_vouch_for_a_uid_nor_unmake_its_record(tmp_path):
    """Where the uid records live (the grader's private folder under the temporary folder) is out of
    a worker's reach: a file that deletes every record it can find, to make the next gradings ask
    the probe again, or writes one of its own, changes nothing the grader reads."""
    from grader.sandbox import confine
    conf = Confinement.prepare("cpu", [])
    if not conf.namespaces:
        conf.release()
        pytest.skip(f"no private /tmp here ({conf.namespaces_why}): the folder's mode alone keeps it")
    records = confine._private_dir()
    before = {p.name for p in records.glob("probe-*")}
    forged = f"probe-forged-{os.getpid()}-{tmp_path.name}"
    attack = tmp_path / "attack.py"
    attack.write_text(
        "import glob, os, tempfile\n"
        "folders = {'/tmp/grader-uids', os.path.join(tempfile.gettempdir(), 'grader-uids')}\n"
        "for folder in folders:\n"
        "    for path in glob.glob(os.path.join(folder, '*')):\n"
        "        try:\n"
        "            os.remove(path)\n"
        "        except OSError:\n"
        "            pass\n"
        "    try:\n"
        "        os.makedirs(folder, exist_ok=True)\n"
        f"        open(os.path.join(folder, {forged!r}), 'w').close()\n"
        "    except OSError:\n"
        "        pass\n"
        "def echo(x):\n"
        "    return x\n")
    sub = Submission(attack, ["echo"], torch.device("cpu"), conf, timeout=60)
    try:
        assert sub.echo(5) == 5          # the file ran its attack at import
    finally:
        sub.close()
        conf.release()
    after = {p.name for p in records.glob("probe-*")}
    assert forged not in after, "a worker wrote into the grader's uid records"
    assert before <= after, f"a worker removed uid records: {sorted(before - after)}"


@pytest.mark.slow
def test_segfaults_cost_only_their_own_calls_however_many_in_a_row():
    """A kernel with a wrong offset crashes on some inputs and is right on others (the wrong
    corpus' layout_dims_misread crashes on every write test and must still pass validation):
    deaths other than at the memory limit are never given up on."""
    conf = Confinement.prepare("cpu", [], want_uid=False)
    sub = Submission(TOY / "segfault_on_seven.py", ["add_into", "echo"], torch.device("cpu"), conf, timeout=60)
    x = torch.zeros(4)
    try:
        for _ in range(MEMORY_TO_GIVE_UP + 1):
            with pytest.raises(WorkerCrashed, match="SIGSEGV"):
                sub.add_into(x, torch.full((4,), 7.0))
        assert sub.echo(1) == 1
    finally:
        sub.close()


@pytest.mark.slow
def test_memory_past_the_limit_is_refused_at_once_and_counts_as_the_same_failure():
    """On the CPU an allocation past the worker's memory limit fails at once (RLIMIT_DATA)
    instead of growing until the watchdog kills the worker; refusals in a row give up like
    kills there. Shared tensors are file mappings and do not count against it."""
    conf = Confinement.prepare("cpu", [], want_uid=False)
    conf.memory_limit = 1 << 30
    sub = Submission(TOY / "net_and_tmp.py", ["add_into", "grab"], torch.device("cpu"), conf, timeout=60)
    try:
        big = sub.exchange.zeros((3 << 28,), torch.uint8)      # 768 MiB shared: not counted
        sub.add_into(big[:4], torch.ones(4, dtype=torch.uint8))
        assert sub.grab(64 << 20) == 64 << 20
        for _ in range(MEMORY_TO_GIVE_UP):
            with pytest.raises(SubmissionError, match="MemoryError"):
                assert _timed(lambda: sub.grab(2 << 30)) < 5
        with pytest.raises(SubmissionUnavailable, match="memory limit on 3 calls in a row.*ran out of memory"):
            sub.grab(1)
    finally:
        sub.close()


needs_namespaces = pytest.mark.skipif(not isolate.available()[0], reason="this machine gives no namespaces")


@pytest.mark.slow
@needs_namespaces
def test_the_worker_reaches_no_network():
    """Not the grader's own listener on 127.0.0.1, nor anything outside."""
    import socket
    conf = Confinement.prepare("cpu", [], want_uid=False)
    assert conf.describe()["network"] == "own network namespace, loopback only"
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    sub = Submission(TOY / "net_and_tmp.py", ["connect", "datagram_out"], torch.device("cpu"), conf, timeout=60)
    try:
        assert sub.connect(port) is False
        assert sub.datagram_out() is False
        conf.namespaces = False                 # the same probes, undefended, do reach
        sub.wait_idle()
        assert sub.connect(port) is True
    finally:
        sub.close()
        listener.close()


@pytest.mark.slow
@needs_namespaces
def test_the_worker_writes_to_a_private_capped_tmp_that_dies_with_it(tmp_path):
    """/tmp, /var/tmp and /dev/shm are one tmpfs of the worker's, capped and gone with it;
    the shared tensors (in /dev/shm or /tmp) and the scratch folder stay visible."""
    conf = Confinement.prepare("cpu", [], want_uid=False)
    sub = Submission(TOY / "net_and_tmp.py", ["add_into", "fill"], torch.device("cpu"), conf, timeout=60)
    name = f"filled-by-test-{os.getpid()}"
    try:
        x = sub.exchange.zeros((4,), torch.float32)
        sub.add_into(x, torch.ones(4))
        assert x.tolist() == [1.0] * 4
        written = sum(sub.fill(folder, f"{name}-{i}", 60 << 20)
                      for i, folder in enumerate(["/tmp", "/dev/shm", "/var/tmp", "/tmp", "/dev/shm"]))
        assert 200 << 20 <= written <= isolate.PRIVATE_TMP_BYTES
        for folder in ("/tmp", "/dev/shm", "/var/tmp"):
            assert not list(Path(folder).glob(f"{name}-*")), f"the worker's file reached the real {folder}"
        assert sub.fill(str(sub.scratch / "home"), name, 1 << 20) == 1 << 20
        assert (sub.scratch / "home" / name).stat().st_size == 1 << 20
    finally:
        sub.close()


def test_a_turn_held_past_its_deadline_is_lost_and_its_neighbours_go_on(tmp_path):
    """A timing test whose worker hangs must not keep every neighbour off the GPU."""
    with gpu_turns.turn("gpu-test", True, tmp_path, hold_s=0.3) as stuck:
        started = time.monotonic()
        with gpu_turns.turn("gpu-test", False, tmp_path) as neighbour:
            waited = time.monotonic() - started
        assert neighbour.alone and 0.2 <= waited < 3
        assert stuck.lost
    with gpu_turns.turn("gpu-test", True, tmp_path, hold_s=5) as quick:
        pass
    assert not quick.lost


def _user_namespaces_allowed() -> bool:
    try:
        return int(Path("/proc/sys/user/max_user_namespaces").read_text()) > 0
    except (OSError, ValueError):
        return False


@pytest.mark.skipif(os.geteuid() != 0 or not _user_namespaces_allowed(),
                    reason="needs root to become another user, and user namespaces")
def test_an_unprivileged_grader_gets_the_namespaces_through_a_user_namespace():
    """Not root, the grader still gives its workers no network and a private /tmp."""
    import subprocess
    import sys
    repo = Path(__file__).resolve().parents[3]
    code = (f"import sys; sys.path.insert(0, {str(repo)!r}); from grader.sandbox import isolate; "
            "ok, why = isolate.available(); print(ok, why)")
    from grader.sandbox.confine import UID_RANGE
    uid = UID_RANGE.stop + 999        # outside the workers' pool: no grading running beside it takes it
    run = subprocess.run([sys.executable, "-s", "-c", code], user=uid, group=uid, extra_groups=[],
                         capture_output=True, text=True, cwd="/", env={"PATH": os.environ["PATH"]})
    assert run.stdout.startswith("True"), run.stdout + run.stderr[-2000:]


@pytest.mark.slow
def test_a_worker_starts_few_blas_threads_whatever_the_machine(tmp_path):
    """numpy's OpenBLAS maps a buffer per thread at import, a thread per core: on a 16-core GPU
    runner a CPU worker under a 1 GiB data limit could not even start. Its environment caps them."""
    (tmp_path / "env_probe.py").write_text(
        "import os\n\ndef add_into(x, y):\n    x.add_(y)\n\n"
        "def echo(name):\n    return os.environ.get(name)\n")
    conf = Confinement.prepare("cpu", [], want_uid=False)
    sub = Submission(tmp_path / "env_probe.py", ["add_into", "echo"], torch.device("cpu"), conf, timeout=60)
    try:
        threads = sub.echo("OPENBLAS_NUM_THREADS")
        assert threads is not None and 1 <= int(threads) <= 4
    finally:
        sub.close()


@pytest.mark.slow
def test_a_workers_threads_are_frozen_between_its_calls():
    """A thread the submission started at import runs only while the grader is calling it: one
    left running between calls would take the GPU from a neighbouring grading's timed window."""
    conf = Confinement.prepare("cpu", [], want_uid=False)
    sub = Submission(TOY / "ticks_between_calls.py", ["add_into", "echo"], torch.device("cpu"), conf, timeout=60)
    try:
        first = sub.echo(0)
        time.sleep(1.0)                       # the thread would tick ~1000 times in this second
        second = sub.echo(0)
        assert second - first < 200, f"the thread ran between calls: {first} -> {second}"
        assert sub._worker.frozen, "the worker was not frozen after answering"
    finally:
        sub.close()


@pytest.mark.slow
def test_a_workers_daemon_goes_with_it_and_the_callers_own_children_stay():
    """What a worker under its own uid leaves running (a double-forked daemon) is killed when it
    stops; the calling process's other children (here a plain `sleep`, as a test process's
    multiprocessing helper or a server it started) are not a worker's: not frozen with it
    between calls, and still running after."""
    import subprocess

    from grader.sandbox.processes import alive, processes_of, stopped
    bystander = subprocess.Popen(["sleep", "120"])
    conf = Confinement.prepare("cpu", [])
    assert conf.uid is not None, conf.reason
    uid = conf.uid
    sub = Submission(TOY / "daemon_and_memory.py", ["add_into"], torch.device("cpu"), conf, timeout=60)
    try:
        x = torch.zeros(4)
        sub.add_into(x, torch.ones(4))
        assert processes_of(uid), "the daemon should be running under the worker's uid"
        assert not stopped(bystander.pid), "the caller's own child was frozen with the worker"
    finally:
        sub.close()
        conf.release()
    try:
        assert not processes_of(uid), f"left running under uid {uid}: {processes_of(uid)}"
        assert alive(bystander.pid), "the caller's own child was killed with the worker"
    finally:
        bystander.kill()
        bystander.wait()
