"""The performance area's check of a timed batch (timing.Batch.check) runs on the GPU, over
caches of gigabytes, without a temporary of their size: these tests hold it to what it must
find on small CPU batches of both layouts, a right write and each kind of wrong one."""
import importlib.util
from pathlib import Path

import pytest
import torch

TIMING = Path(__file__).resolve().parents[1] / "hidden" / "l1_paged_kv_write" / "timing.py"


@pytest.fixture(scope="module")
def timing():
    spec = importlib.util.spec_from_file_location("l1_timing", TIMING)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.CASES["fused-small"] = (64, 2, 8, torch.float16, "fused", 3)
    module.CASES["plain-odd-hd"] = (64, 2, 5, torch.bfloat16, "plain", 3)
    return module


class _Exchange:
    @staticmethod
    def empty(shape, dtype):
        return torch.empty(shape, dtype=dtype)


class _Proxy:
    exchange = _Exchange()


def _write(b, mistake=None):
    b.refill()
    k, v = b.k_cache.view(-1, b.HD), b.v_cache.view(-1, b.HD)
    for i in range(b.n):
        k[b.slot_table[i]] = b.keys[i].reshape(-1, b.HD)
        v[b.slot_table[i]] = b.values[i].reshape(-1, b.HD)
    if mistake == "stray value":
        used = set(b.slot_table.reshape(-1).tolist())
        v[next(s for s in range(k.shape[0]) if s not in used), 3] = 1.0
    elif mistake == "one row skipped":
        k[b.slot_table[2, 5]] = 0
    elif mistake == "one launch swapped":
        k[b.slot_table[1]] = b.values[1].reshape(-1, b.HD)
    elif mistake == "last launch skipped":
        k[b.slot_table[-1]] = 0
        v[b.slot_table[-1]] = 0


@pytest.mark.parametrize("case", ["fused-small", "plain-odd-hd"])
def test_a_right_batch_passes_and_every_wrong_one_fails(timing, case):
    b = timing.Batch(_Proxy(), case, 7)
    _write(b)
    assert b.check(), "a batch written exactly was refused"
    assert b.settled(), "the check left the watched rows changed: round_trip's look would wait in vain"
    for mistake in ("stray value", "one row skipped", "one launch swapped", "last launch skipped"):
        _write(b, mistake)
        assert not b.check(), f"a batch with {mistake} passed the check"
    _write(b)
    assert b.check(), "the check after a refill depends on the batch before"


@pytest.mark.parametrize("case", ["fused-small", "plain-odd-hd"])
def test_the_sampled_check_passes_a_right_batch_and_sees_a_launch_skipped_or_swapped(timing, case):
    """The check after a window that is not its series' last compares rows drawn by the grader
    (on these 64-token launches, every row), so a launch skipped, swapped or missing one row is
    seen; a stray write elsewhere is left to the whole check at the end. With fewer rows drawn
    than a launch has, a launch skipped is still seen."""
    b = timing.Batch(_Proxy(), case, 11)
    _write(b)
    assert b.check(whole=False), "a batch written exactly was refused by the sampled check"
    for mistake in ("one row skipped", "one launch swapped", "last launch skipped"):
        _write(b, mistake)
        assert not b.check(whole=False), f"a batch with {mistake} passed the sampled check"
    _write(b, "stray value")
    assert b.check(whole=False) and not b.check(whole=True)
    timing.SAMPLED_ROWS, before = 3 * 8, timing.SAMPLED_ROWS          # 8 of 64 rows a launch
    try:
        _write(b)
        assert b.check(whole=False)
        _write(b, "last launch skipped")
        assert not b.check(whole=False)
    finally:
        timing.SAMPLED_ROWS = before
