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
