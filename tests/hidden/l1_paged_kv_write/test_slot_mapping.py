"""slot_mapping: slot = block_table[seq, pos // block_size] * block_size + pos % block_size,
as int64, vectorised."""
import time

import pytest
import torch

from paged import (Batch, call, error_hint, expected_slots, fail, random_batch, raised_message,
                   raised_type, slot_mistake)

pytestmark = pytest.mark.area("slot_mapping")

INDEX_DTYPES = {"int32": torch.int32, "int64": torch.int64}


def _slots(submission, b: Batch, device, record_property):
    """The submission's slots, or a failed test with the reason."""
    result, err = call(submission.slot_mapping, b.block_table.to(device), b.seq_idx.to(device),
                       b.positions.to(device), b.block_size)
    if err is not None:
        record_property("detail", f"raised {raised_type(err)}: {raised_message(err, 1000)}")
        fail(error_hint("slot_mapping", err))
    if not isinstance(result, torch.Tensor):
        fail(f"slot_mapping must return a tensor of T slots, not {type(result).__name__}.")
    return result


def _check_values(result, b: Batch, record_property):
    want = expected_slots(b)
    if not isinstance(result, torch.Tensor):
        fail(f"slot_mapping must return a tensor of slots, not {type(result).__name__}.")
    if tuple(result.shape) != tuple(want.shape):
        fail(f"slot_mapping must return one slot per token, shape [T] = {list(want.shape)}, "
             f"not {list(result.shape)}.")
    got = result.cpu().long()
    if not torch.equal(got, want):
        wrong = int((got != want).sum())
        record_property("detail", f"{wrong} of {len(want)} slots wrong")
        why = slot_mistake(got, b) or ("slot = block_table[seq, pos // block_size] * block_size "
                                       "+ pos % block_size, per token.")
        fail(f"wrong slots: {why}")


def _lesson_table(table_dtype, index_dtype):
    return Batch(torch.tensor([[9, 3, 7], [2, 5, 0]], dtype=table_dtype),
                 torch.tensor([0, 0, 1], dtype=index_dtype),
                 torch.tensor([5, 9, 2], dtype=index_dtype), 4)


@pytest.mark.parametrize("table_dtype,index_dtype",
                         [("int32", "int64"), ("int64", "int64"), ("int32", "int32")])
def test_lesson_table(table_dtype, index_dtype, submission, device, record_property):
    """The lesson's worked example: block_size 4, tokens (0,5), (0,9), (1,2) go to slots 13, 29, 10"""
    b = _lesson_table(INDEX_DTYPES[table_dtype], INDEX_DTYPES[index_dtype])
    result = _slots(submission, b, device, record_property)
    assert expected_slots(b).tolist() == [13, 29, 10]   # the lesson's own answer: guards this file
    _check_values(result, b, record_property)


def test_lesson_self_test_1(submission, device, record_property):
    """Self-test 1: block_size 16, block table [4, 11, 2], position 40 is slot 40"""
    b = Batch(torch.tensor([[4, 11, 2]], dtype=torch.int32), torch.tensor([0]), torch.tensor([40]), 16)
    _check_values(_slots(submission, b, device, record_property), b, record_property)


# block size, dtype of seq_idx/positions: each size once, both dtypes across the list
RANDOM_CASES = [(1, "int64"), (3, "int32"), (5, "int64"), (8, "int64"), (16, "int32"), (32, "int64"),
                ("any", "int32")]


@pytest.mark.parametrize("block_size,index_dtype", RANDOM_CASES)
def test_random_tables(block_size, index_dtype, submission, rng, device, record_property):
    """Random block tables and batches: every token's slot follows the block table"""
    bs = int(torch.randint(1, 33, (1,), generator=rng)) if block_size == "any" else block_size
    S = int(torch.randint(4, 17, (1,), generator=rng))
    max_new = 12
    # wide enough that a wrong formula reads a real table entry rather than raising
    W = max(32, (S * max_new) // bs + 2)
    b = random_batch(rng, num_seqs=S, width=W, block_size=bs,
                     num_blocks=S * W + int(torch.randint(0, 100, (1,), generator=rng)),
                     new_tokens=lambda s: int(torch.randint(1, max_new + 1, (1,), generator=rng)),
                     shuffle=bool(torch.randint(0, 2, (1,), generator=rng)),
                     index_dtype=INDEX_DTYPES[index_dtype])
    bt, si, pos = b.block_table.to(device), b.seq_idx.to(device), b.positions.to(device)
    bt0, si0, pos0 = bt.clone(), si.clone(), pos.clone()
    result, err = call(submission.slot_mapping, bt, si, pos, bs)
    if err is not None:
        record_property("detail", f"raised {raised_type(err)}: {raised_message(err, 1000)}")
        fail(error_hint("slot_mapping", err))
    record_property("detail", f"block_size={bs} S={S} W={W} T={len(si0)}")
    _check_values(result, b, record_property)
    assert torch.equal(bt, bt0) and torch.equal(si, si0) and torch.equal(pos, pos0), (
        "slot_mapping modified one of its arguments: the block table, seq_idx and positions "
        "are read-only.")


def test_positions_are_inside_each_sequence(submission, rng, device, record_property):
    """A token's position is its place in its own sequence, not its index in the batch"""
    # A decode step: one new token per sequence, each at a position past T, so the
    # position never equals the batch index.
    S, bs, W = 24, 16, 16
    b = random_batch(rng, num_seqs=S, width=W, block_size=bs, num_blocks=S * W * 2,
                     new_tokens=lambda s: 1, shuffle=False)
    b.positions = torch.maximum(b.positions, torch.tensor(S))
    _check_values(_slots(submission, b, device, record_property), b, record_property)


@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_result_is_int64(index_dtype, submission, rng, device, record_property):
    """The slots come back as int64, whatever the integer type of the inputs"""
    dt = INDEX_DTYPES[index_dtype]
    b = random_batch(rng, num_seqs=4, width=8, block_size=16, num_blocks=64,
                     new_tokens=lambda s: 3, shuffle=True, table_dtype=torch.int32, index_dtype=dt)
    result = _slots(submission, b, device, record_property)
    record_property("detail", f"dtype {result.dtype}")
    assert result.dtype == torch.int64, (
        f"slot_mapping returned {str(result.dtype).replace('torch.', '')}: slots must be int64 "
        "(call .long() on the gathered block numbers), because slot * H * D is computed from them "
        "and passes 2**31 on large caches.")
    _check_values(result, b, record_property)


def test_two_million_tokens_is_fast(submission, rng, shared, device, record_property):
    """Two million tokens are mapped within a couple of seconds (one gather, no Python loop)"""
    T, S, W, bs = 2_000_000, 512, 256, 16
    table = torch.randperm(S * W + 1000, generator=rng)[: S * W].view(S, W).int()
    si_cpu = torch.randint(0, S, (T,), generator=rng)
    pos_cpu = torch.randint(0, W * bs, (T,), generator=rng)
    b = Batch(table, si_cpu, pos_cpu, bs)
    # shared memory: the worker reads the 16 MB index vectors without a copy per call
    si, pos = shared.empty((T,), torch.int64), shared.empty((T,), torch.int64)
    si.copy_(si_cpu)
    pos.copy_(pos_cpu)
    bt = table.to(device)

    # the first call pays for the worker's start and imports; it is not what we time
    small = random_batch(rng, num_seqs=2, width=4, block_size=bs, num_blocks=8,
                         new_tokens=lambda s: 2, shuffle=False)
    _slots(submission, small, device, record_property)

    t0 = time.perf_counter()
    want = expected_slots(b)
    t_ref = time.perf_counter() - t0
    t0 = time.perf_counter()
    result, err = call(submission.slot_mapping, bt, si, pos, bs)
    took = time.perf_counter() - t0
    limit = 2.0 + 10 * t_ref
    record_property("detail", f"took {took:.2f}s, limit {limit:.2f}s (trusted gather {t_ref:.3f}s)")
    if err is not None:
        fail(error_hint("slot_mapping", err))
    assert took <= limit, (
        f"slot_mapping took {took:.1f} s for two million tokens: gather the whole batch at once "
        "with block_table[seq_idx, positions // block_size]; a Python loop over tokens is far "
        "too slow.")
    assert isinstance(result, torch.Tensor) and torch.equal(result.cpu().long(), want), (
        "wrong slots on a large batch: slot = block_table[seq, pos // block_size] * block_size "
        "+ pos % block_size, per token.")
