"""The Triton seed (grader/sandbox/triton_seed.py): built once, whole or not at all, by a grader
process; copied into a worker's fresh cache; never taken from a folder someone else could write."""
import fcntl
import os
import tempfile
import time

import pytest

from grader.sandbox import triton_seed


@pytest.fixture(autouse=True)
def own_tmp(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv(triton_seed.SWITCH, raising=False)
    return tmp_path


def helpers(cache):
    (cache / "key1").mkdir()
    (cache / "key1" / "cuda_utils.so").write_bytes(b"built")


def test_a_built_seed_is_copied_into_each_new_cache(tmp_path):
    assert triton_seed.build(helpers)
    for name in ("worker-a", "worker-b"):
        cache = tmp_path / name
        cache.mkdir()
        assert triton_seed.seed_into(cache), "a seed was built: the new cache must get it"
        assert (cache / "key1" / "cuda_utils.so").read_bytes() == b"built"


def test_no_seed_no_copy_and_the_switch_turns_it_off(tmp_path, monkeypatch):
    cache = tmp_path / "worker"
    cache.mkdir()
    assert not triton_seed.seed_into(cache)
    triton_seed.build(helpers)
    monkeypatch.setenv(triton_seed.SWITCH, "off")
    assert not triton_seed.seed_into(cache)
    assert list(cache.iterdir()) == []


def test_the_seed_is_built_once_and_not_beside_a_running_build():
    assert triton_seed.build(helpers)
    assert not triton_seed.build(lambda cache: pytest.fail("the seed is there: nothing to build"))
    (triton_seed.root() / triton_seed.tag()).rename(triton_seed.root() / "old")
    with open(triton_seed.root() / "build.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        assert not triton_seed.build(lambda cache: pytest.fail("another build holds the lock"))


def test_a_failed_build_leaves_nothing_to_copy(tmp_path):
    def breaks(cache):
        helpers(cache)
        raise RuntimeError("no GPU")

    with pytest.raises(RuntimeError):
        triton_seed.build(breaks)
    assert sorted(p.name for p in triton_seed.root().iterdir()) == ["build.lock", f"{triton_seed.tag()}.failed"]
    cache = tmp_path / "worker"
    cache.mkdir()
    assert not triton_seed.seed_into(cache)


def test_a_seed_folder_others_may_write_is_never_read(tmp_path):
    triton_seed.build(helpers)
    os.chmod(triton_seed.root(), 0o777)
    cache = tmp_path / "worker"
    cache.mkdir()
    assert not triton_seed.seed_into(cache), "anyone could have planted code there"
    triton_seed.ensure()            # nor is a build started in it
    assert not (triton_seed.root() / "build.log").exists()


def test_a_build_that_fails_is_one_builder_and_is_not_retried_at_each_grading(own_tmp):
    """On this machine the real builder fails (its warm-up needs a GPU): the class's first
    gradings asking at once start one builder, and once it failed, later ones start none."""
    import torch
    if torch.cuda.is_available():
        pytest.skip("the builder succeeds where there is a GPU")
    triton_seed.ensure()
    triton_seed.ensure()            # the first builder holds the lock from its start
    failed = triton_seed.root() / f"{triton_seed.tag()}.failed"
    deadline = time.monotonic() + 120
    while not failed.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert failed.exists(), (triton_seed.root() / "build.log").read_text()
    time.sleep(0.5)                 # the builder's traceback is written as it exits
    log = (triton_seed.root() / "build.log").read_text()
    assert log.count("Traceback") == 1, log
    triton_seed.ensure()
    time.sleep(1)
    assert (triton_seed.root() / "build.log").read_text() == log, "a failed build was tried again at once"
    assert not (triton_seed.root() / triton_seed.tag()).exists()


def test_a_seed_folder_someone_planted_as_a_link_is_never_read(tmp_path):
    """Under /tmp anyone may make the name first: a link to a folder of theirs is refused."""
    theirs = tmp_path / "theirs"
    (theirs / triton_seed.tag() / "key1").mkdir(parents=True)
    (theirs / triton_seed.tag() / "key1" / "cuda_utils.so").write_bytes(b"planted")
    triton_seed.root().symlink_to(theirs)
    cache = tmp_path / "worker"
    cache.mkdir()
    assert not triton_seed.seed_into(cache) and list(cache.iterdir()) == []


@pytest.mark.slow
@pytest.mark.parametrize("own_uid", [True, False], ids=["own uid", "grader's uid"])
def test_a_worker_can_neither_read_nor_change_the_seed(own_uid):
    """A submission's process looks for the seed where the grader keeps it: it must not be able
    to read it (nothing to learn there, but nothing to find either) nor plant code in it."""
    import torch
    from pathlib import Path

    from grader.sandbox import Confinement, Submission, isolate
    conf = Confinement.prepare("cpu", [], want_uid=own_uid)
    if own_uid and conf.uid is None:
        pytest.skip(f"no uid of its own here: {conf.reason}")
    if not own_uid and not isolate.available()[0]:
        pytest.skip("a worker of the grader's uid with no private /tmp can alter the grader's files "
                    "(docs/threat-model.md, 'What it does not defend against')")
    triton_seed.build(helpers)
    seed = triton_seed.root() / triton_seed.tag()
    toy = Path(__file__).parent.parent / "toy" / "submissions" / "looks_around.py"
    sub = Submission(toy, ["read", "listing", "write"], torch.device("cpu"), conf, timeout=60)
    try:
        assert sub.listing(str(triton_seed.root())) is None, "the worker listed the seed folder"
        assert sub.read(str(seed / "key1" / "cuda_utils.so")) is None, "the worker read the seed"
        assert not sub.write(str(seed / "key1" / "planted.so")), "the worker wrote into the seed"
        assert not sub.write(str(triton_seed.root() / "x")), "the worker wrote into the seed folder"
    finally:
        sub.close()
    assert sorted(p.name for p in (seed / "key1").iterdir()) == ["cuda_utils.so"]
