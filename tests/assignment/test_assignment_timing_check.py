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
    # Seven launches of 4 KiB moved each (64 tokens, H*D = 8, fp16, read and written) over three
    # sets of rows: a set read again 8 KiB after it was last, in place of a GPU's gigabyte.
    module.CASES["fused-shared-rows"] = (64, 2, 4, torch.float16, "fused", 7)
    module.REUSE_GAP_BYTES = 8 << 10
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


@pytest.mark.parametrize("case", ["fused-small", "plain-odd-hd", "fused-shared-rows"])
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


@pytest.mark.parametrize("case", ["fused-small", "plain-odd-hd", "fused-shared-rows"])
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


def test_launches_that_share_rows_still_each_write_their_own_slots(timing):
    """The launches of a batch read their rows from a few sets in turn (the GPU memory a grading
    holds), never from the set the launch before read, and each writes slots of its own: a launch
    skipped, or one that wrote its rows where the launch sharing them wrote, still fails."""
    b = timing.Batch(_Proxy(), "fused-shared-rows", 5)
    assert b.sets == 3 and b.rows.shape[0] == 3
    assert all(b.keys[i].data_ptr() == b.keys[i + 3].data_ptr() for i in range(4))
    assert all(b.keys[i].data_ptr() != b.keys[i + 1].data_ptr() for i in range(6))
    b.refill()
    assert b.slot_table.unique().numel() == b.slot_table.numel(), "two launches share a slot"
    assert b.k_cache.shape[0] * timing.BLOCK_SIZE >= b.slot_table.numel() * 9 // 8
    _write(b)
    assert b.check() and b.check(whole=False)
    for skipped in (3, 6):
        _write(b)
        k, v = b.k_cache.view(-1, b.HD), b.v_cache.view(-1, b.HD)
        k[b.slot_table[skipped]] = 0
        v[b.slot_table[skipped]] = 0
        assert not b.check() and not b.check(whole=False), f"launch {skipped} skipped passed"
    _write(b)
    k = b.k_cache.view(-1, b.HD)
    k[b.slot_table[4]] = 0                        # launch 4 wrote its rows at launch 1's slots
    k[b.slot_table[1]] = b.keys[4].reshape(-1, b.HD)
    assert not b.check(), "a launch that wrote at the slots of the launch sharing its rows passed"
