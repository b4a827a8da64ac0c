"""The scripts that start the test services' daemons (tools/postgres_local.sh, tools/slurm_one_node.sh)
return to a caller that reads their output to its end, as `export URL=$(bash tools/postgres_local.sh)`
does: a daemon started with a descriptor on that pipe would hold the reader open for as long as it
lives. That hung CI once, until the runner killed it without a word."""
import contextlib
import ctypes
import os
import shutil
import subprocess
import time

import pytest

from grader.assignment import REPO
from grader.sandbox.processes import PR_SET_CHILD_SUBREAPER, become_subreaper, describe, proc_table
from service_server import PG_ENV

START_DAEMON = REPO / "tools/start_daemon.sh"
PR_GET_CHILD_SUBREAPER = 37


def _capture(script: str, timeout: float) -> tuple[float, str]:
    """Run `script` as `$(...)` runs it (its output on a pipe with an extra descriptor on it, read
    to its end), and return how long the read took and what it read."""
    begun = time.monotonic()
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr
    return time.monotonic() - begun, done.stdout


def _daemon(pidfile) -> str:
    """A stand-in daemon: forks, leaves its parent, sends its output to a log as a daemon does
    (here /dev/null), lives 60 s and keeps the other descriptors it was given."""
    return f"(setsid sleep 60 >/dev/null 2>&1 & echo $! > {pidfile})"


def test_a_daemon_started_through_start_daemon_leaves_the_callers_pipe(tmp_path):
    pidfile = tmp_path / "pid"
    script = f"exec 3>&1 1>&2; bash {START_DAEMON} bash -c '{_daemon(pidfile)}'; echo url >&3"
    try:
        took, out = _capture(script, timeout=30)
        assert out == "url\n" and took < 10, f"the read took {took:.1f} s"
    finally:
        os.kill(int(pidfile.read_text()), 9)


def test_without_it_the_same_daemon_holds_the_read_open(tmp_path):
    """The failure start_daemon.sh prevents, shown: the stand-in keeps fd 3 and the read never ends."""
    pidfile = tmp_path / "pid"
    script = f"exec 3>&1 1>&2; bash -c '{_daemon(pidfile)}'; echo url >&3"
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            _capture(script, timeout=3)
    finally:
        os.kill(int(pidfile.read_text()), 9)


@contextlib.contextmanager
def _adopting_no_orphans():
    """While open, this process is no child subreaper, so that a daemon leaving its parent goes to
    init, as it does under .ci/run. A test process becomes a subreaper with its first Confinement
    (grader/sandbox/confine.py); a server it adopted is then one of "our children that are no
    live worker", which a later test's worker stop kills and a worker's freeze stops with it."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    was = ctypes.c_int(0)
    prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(was), 0, 0, 0)
    prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
    try:
        yield
    finally:
        prctl(PR_SET_CHILD_SUBREAPER, was.value, 0, 0, 0)


@pytest.mark.slow
@pytest.mark.xdist_group("postgres")   # stops the one server that test_service_restart's databases are on
def test_postgres_local_returns_when_it_starts_the_server():
    """The real script from a stopped server, read as .ci/run reads it: only the URL, promptly."""
    url = os.environ.get(PG_ENV)
    if not url or os.geteuid() != 0 or shutil.which("pg_ctlcluster") is None:
        pytest.skip(f"needs root and the server of tools/postgres_local.sh ({PG_ENV} set)")
    # as every test process is once it has made a Confinement; the server must not become ours
    become_subreaper()
    with _adopting_no_orphans():
        subprocess.run(["bash", str(REPO / "tools/postgres_local.sh"), "--stop"], check=True, timeout=60)
        took, out = _capture(f"bash {REPO / 'tools/postgres_local.sh'}", timeout=120)
    assert out.strip() == url and took < 60, (took, out)
    ours = [describe(pid) for pid, (parent, _) in proc_table().items() if parent == os.getpid()]
    adopted = [p for p in ours if "postgres" in p]
    assert not adopted, (f"the restarted server is this test process's child ({adopted}): a later test's "
                         "worker stop would kill it, and the other tests' databases with it")
