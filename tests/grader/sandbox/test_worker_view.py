"""The worker's file system is an allow-list (grader/sandbox/rootfs.py): what the test plants
world-readable outside it, /root's other contents and the checkout are not there to be read."""
import os
import shutil
import sys
import uuid
from pathlib import Path

import pytest
import torch

from grader.sandbox import Confinement, Submission, isolate

TOY = Path(__file__).parent.parent / "toy" / "submissions"
REPO = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.skipif(not isolate.available()[0], reason="this machine gives no namespaces")


@pytest.fixture
def planted():
    """World-readable files in folders the allow-list leaves out, removed afterwards."""
    made, files = [], []
    for top in ("/srv", "/opt", "/var"):
        if not os.path.isdir(top) or not os.access(top, os.W_OK):
            continue
        folder = Path(top) / f"grader-view-test-{uuid.uuid4().hex[:8]}"
        folder.mkdir(mode=0o755)
        folder.chmod(0o755)
        made.append(folder)
        file = folder / "secret.txt"
        file.write_text("planted by the test\n")
        file.chmod(0o644)
        files.append(file)
    if not files:
        pytest.skip("no folder outside the allow-list to plant a file in")
    yield files
    for folder in made:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(params=["own uid", "grader's uid"])
def looking(request):
    conf = Confinement.prepare("cpu", [], want_uid=request.param == "own uid")
    if request.param == "own uid" and conf.uid is None:
        pytest.skip(f"no uid of its own here: {conf.reason}")
    sub = Submission(TOY / "looks_around.py", ["read", "listing", "write", "where"], torch.device("cpu"),
                     conf, timeout=60)
    yield conf, sub
    sub.close()


@pytest.mark.slow
def test_a_worker_sees_nothing_outside_its_allow_list(planted, looking):
    conf, sub = looking
    assert conf.describe()["file_system"]["view"] == "allow-list", conf.describe()["file_system"]
    for file in planted:
        assert file.read_text() and sub.read(str(file)) is None, f"the worker read {file}"
        assert sub.listing(str(file.parent)) is None
    assert sub.listing("/home") is None and sub.listing("/srv") is None
    # /root holds only the way to the interpreter where it lives there (pyenv), nothing else of it.
    seen = sub.listing("/root") or []
    on_the_way = {Path(p).relative_to("/root").parts[0] for p in conf.view.read_only if p.startswith("/root/")}
    assert set(seen) <= on_the_way, f"/root shows {sorted(set(seen) - on_the_way)}"
    assert sub.read(str(REPO / "reference" / "l1_paged_kv_write.py")) is None
    assert sub.listing(str(REPO / "tests")) is None and sub.listing(str(REPO / "grader")) is None
    assert sub.read(str(REPO / "README.md")) is None
    assert sub.where() == str(sub.scratch / "home")
    assert not sub.write("/usr/grader-view-test") and not sub.write("/grader-view-test")
    assert sub.write(str(sub.scratch / "home" / "mine")) and sub.write("/tmp/mine")


@pytest.mark.slow
def test_a_worker_under_its_own_uid_cannot_reach_the_machine_through_proc(looking):
    """No pid namespace: /proc/PID/root of the grader's processes would lead to the machine's
    root. Closed to another uid (and with an own /proc those processes are not even listed)."""
    conf, sub = looking
    if conf.uid is None:
        pytest.skip("a worker of the grader's uid can open its /proc/PID/root (docs/threat-model.md)")
    assert sub.listing(f"/proc/{os.getpid()}/root") is None
    assert sub.listing("/proc/1/root") is None


@pytest.mark.slow
def test_a_link_put_in_place_of_the_log_is_neither_written_nor_read(tmp_path):
    """The scratch folder is the worker's: a worker that leaves a link to another file where
    its log was, then dies, must not get the next worker's output written there (as root), nor
    that file's contents read into the report. The log starts again instead."""
    from grader.sandbox import WorkerCrashed
    victim = tmp_path / "victim"
    victim.write_text("not the worker's\n")
    conf = Confinement.prepare("cpu", [], want_uid=True)
    sub = Submission(TOY / "swaps_its_log.py", ["swap", "echo"], torch.device("cpu"), conf, timeout=60)
    try:
        assert sub.echo(1) == 1
        with pytest.raises(WorkerCrashed):
            sub.swap(str(victim))
        assert sub.echo(2) == 2                      # a new worker, which imports the file again
        assert victim.read_text() == "not the worker's\n"
        log = sub.scratch / "worker.log"
        assert not log.is_symlink() and "swaps_its_log imported" in sub.log_tail()
        assert "not the worker's" not in sub.log_tail()
        log.unlink()
        log.symlink_to(victim)                       # as the worker leaves it: never read through
        assert sub.log_tail() == ""
    finally:
        sub.close()


@pytest.fixture
def bytecode_folder(monkeypatch):
    """A grader's bytecode folder in use by this process (grader/bytecode.py), with the worker's
    view worked out again for it."""
    from grader import bytecode
    from grader.sandbox import confine
    folder = Path(f"/tmp/grader-bytecode-test-{uuid.uuid4().hex[:8]}")
    monkeypatch.setattr(bytecode, "folder", lambda: folder)
    monkeypatch.setenv(bytecode.SWITCH, "on")
    assert bytecode.chosen() == folder
    monkeypatch.setattr(sys, "pycache_prefix", str(folder))
    confine.python_paths.cache_clear()
    yield folder
    confine.python_paths.cache_clear()
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.parametrize("own_uid", [True, False], ids=["own uid", "grader's uid"])
def test_a_worker_reads_the_graders_bytecode_and_cannot_write_it(bytecode_folder, own_uid):
    """Bytecode is code: a worker that could put a file in the folder would run code in every
    later grading that reads it. It is in the worker's view, read-only, and named to it."""
    conf = Confinement.prepare("cpu", [], want_uid=own_uid)
    if own_uid and conf.uid is None:
        pytest.skip(f"no uid of its own here: {conf.reason}")
    if conf.view is None:
        pytest.skip(f"no allow-list view here: {conf.view_why}")
    assert str(bytecode_folder) in conf.view.read_only
    sub = Submission(TOY / "looks_around.py", ["listing", "write", "bytecode_prefix", "import_writing_bytecode"],
                     torch.device("cpu"), conf, timeout=60)
    try:
        assert sub.bytecode_prefix() == str(bytecode_folder)
        assert sub.listing(str(bytecode_folder)) is not None
        assert not sub.write(str(bytecode_folder / "planted.pyc"))
        target = sub.import_writing_bytecode("colorsys")
        assert target.startswith(str(bytecode_folder))
    finally:
        sub.close()
    assert not Path(target).exists(), f"the worker wrote {target}"
    assert not (bytecode_folder / "planted.pyc").exists()
