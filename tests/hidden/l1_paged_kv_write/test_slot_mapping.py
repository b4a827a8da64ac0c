"""slot_mapping: slot = block_table[seq, pos // block_size] * block_size + pos % block_size,
as int64 (widened before the multiply: int32 tables hold blocks whose slot passes 2**31),
vectorised (judged by the work it is counted doing on two million tokens; a generous bound on its
time against one gather, timed on the same input in the same run, is the backstop)."""
import os
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


def test_an_empty_batch(submission, rng, device, record_property):
    """A step with no new tokens (T = 0) maps to an empty int64 tensor"""
    # Only beside an ordinary batch: an answer that ignores its input gets T = 0 right.
    ordinary = random_batch(rng, num_seqs=3, width=8, block_size=16, num_blocks=48,
                            new_tokens=lambda s: 5, shuffle=True)
    _check_values(_slots(submission, ordinary, device, record_property), ordinary, record_property)
    b = Batch(torch.tensor([[4, 11, 2]], dtype=torch.int32), torch.empty(0, dtype=torch.int64),
              torch.empty(0, dtype=torch.int64), 16)
    result = _slots(submission, b, device, record_property)
    record_property("detail", f"shape {list(result.shape)} dtype {result.dtype}")
    assert tuple(result.shape) == (0,) and result.dtype == torch.int64, (
        f"with no tokens slot_mapping must return an empty int64 tensor of shape [0], not "
        f"{str(result.dtype).replace('torch.', '')} of shape {list(result.shape)}: the one gather "
        "over all T tokens handles T = 0 by itself.")


# block ids drawn from [LOW_BLOCK, 2**31): block * block_size passes 2**31 for every block size here
LOW_BLOCK = 2**27


@pytest.mark.parametrize("block_size", [16, 32])
def test_slots_past_2_31(block_size, submission, rng, device, record_property):
    """An int32 block table whose block * block_size passes 2**31: the slots are exact int64"""
    # No cache is needed: a slot is only a number. vLLM's tables are int32; a large cache pool
    # (or one shared across devices) gives block ids whose slot does not fit in int32.
    S, W, T = 4, 8, 48
    table = torch.randint(LOW_BLOCK, 2**31 - 1, (S, W), generator=rng, dtype=torch.int64).to(torch.int32)
    si = torch.randint(0, S, (T,), generator=rng)
    pos = torch.randint(0, W * block_size, (T,), generator=rng)
    b = Batch(table, si, pos, block_size)
    result = _slots(submission, b, device, record_property)
    want = expected_slots(b)
    if isinstance(result, torch.Tensor) and tuple(result.shape) == (T,):
        got = result.cpu().long()
        wrapped = ((want + 2**31) % 2**32) - 2**31          # the same sum in int32
        if not torch.equal(got, want) and torch.equal(got, wrapped):
            record_property("detail", f"{int((got != want).sum())} of {T} slots wrapped at 2**32")
            fail("the slots wrapped around 2**32: block_table is int32, and block * block_size was "
                 "multiplied in int32 before being widened. Widen first, then multiply: "
                 "block_table[seq_idx, positions // block_size].long() * block_size + ...")
    _check_values(result, b, record_property)
    assert result.dtype == torch.int64, "slots past 2**31 need int64: return them as int64."


# Two million tokens, judged by the work slot_mapping does, counted in its worker (WorkCount in
# grader/sandbox/worker.py), not by how long it took: a count is the same on an idle machine and a
# busy one. What tells a vectorised form from a slow one:
# - calls into PyTorch: the reference makes 6 whatever T, a loop over the tokens makes several per
#   token, a loop over the sequences several per sequence (SPEED_S of them);
# - lines of the file run: a list comprehension or a map over a lambda over plain Python numbers
#   makes no PyTorch call per token, but runs a line per token;
# - tensor elements turned into Python numbers (.tolist()): the data a loop of that kind walks;
# - Python objects alive at once: a list of a Python number per token, walked by map() over
#   builtins (no line of the file per step), is millions of them; the reference holds a few;
# - the largest tensor it allocates, against its inputs: block_table[seq_idx] is every token's
#   whole row, 2,000,000 x 256 int32 (2 GiB) here against 32.5 MB of inputs; the reference's
#   largest is one int64 per token (16 MB).
# The worker stops the call at the first count past its limit, so a loop costs milliseconds, not
# the minute of a call timeout. Limits are constants far below T and SPEED_S: a vectorised form's
# counts do not grow with either, a loop's grow with one of them.
SPEED_T, SPEED_S, SPEED_W, SPEED_BS = 2_000_000, 512, 256, 16
OPS_LIMIT = 100            # calls into PyTorch
LINES_LIMIT = 200          # lines of the submission's file run (checks, helpers: tens at most)
ITEMS_LIMIT = 100          # tensor elements turned into Python numbers by .tolist()
OBJECTS_LIMIT = 250_000    # Python objects alive at once (a torch.compile'd form compiling: 14,208)
ALLOC_FACTOR = 4           # largest tensor allocated / bytes of block_table, seq_idx and positions
assert max(OPS_LIMIT, LINES_LIMIT, ITEMS_LIMIT) <= SPEED_S // 2 and OBJECTS_LIMIT <= SPEED_T // 8
# The clock stays as a backstop for what the count cannot see (a file that switches the count
# off, a loop in C over numpy's Python numbers, work in a thread of its own), so generous that no
# load reaches it: BACKSTOP_FACTOR times a trusted gather on the same input, plus BACKSTOP_S. On
# a 2-core CPU the gather took 0.03-0.22 s a call and a vectorised form through the sandbox
# 0.1-0.73 s (idle to three gradings at once); a loop of tensor lookups runs past the call
# timeout (60 s). A call over the bound is timed once more on a fresh batch (a torch.compile'd
# form compiles again in its first call on two million tokens).
BACKSTOP_FACTOR = 30
BACKSTOP_S = 5.0
TURNS = 2
# The grader's own slowdown of one side of the timing, for the project's tests that show a busy
# machine cannot move the verdict: "submission:x5" (each call takes five times as long),
# "baseline:stall=0.2" (a random pause of up to 0.2 s per call). Read from the environment of
# this trusted test process, which a submission never reaches (its worker's environment is made
# from scratch); a grading under it says so in the test's figures.
SLOWDOWN_ENV = "GRADER_TEST_SLOWDOWN"


def _slowdown() -> dict:
    """side -> ("x", factor) or ("stall", seconds), from SLOWDOWN_ENV; a malformed value is an
    error of the run, not a slowdown nobody asked for."""
    raw = os.environ.get(SLOWDOWN_ENV, "").strip()
    out = {}
    for part in filter(None, (p.strip() for p in raw.split(","))):
        side, _, how = part.partition(":")
        try:
            if side not in ("submission", "baseline"):
                raise ValueError(side)
            if how.startswith("x"):
                out[side] = ("x", float(how[1:]))
            elif how.startswith("stall="):
                out[side] = ("stall", float(how[len("stall="):]))
            else:
                raise ValueError(how)
            if not out[side][1] >= 0:
                raise ValueError(how)
        except ValueError:
            raise RuntimeError(f"{SLOWDOWN_ENV}={raw!r}: expected side:xFACTOR or side:stall=SECONDS, "
                               "side being submission or baseline") from None
    return out


def _slowed(side: str, timed):
    """`timed` (a function returning (seconds, ...)) with SLOWDOWN_ENV's slowdown of `side` put
    inside its window, as a busy machine would."""
    how = _slowdown().get(side)
    if how is None:
        return timed
    import random

    def slowed(*a):
        t0 = time.perf_counter()
        if how[0] == "stall":
            time.sleep(random.uniform(0, how[1]))
        out = timed(*a)
        if how[0] == "x":
            time.sleep(max(0.0, (how[1] - 1) * (time.perf_counter() - t0)))
        took = time.perf_counter() - t0
        return (took, *out[1:]) if isinstance(out, tuple) else took
    return slowed


def _speed_inputs(side, table, si_cpu, pos_cpu, device):
    """The inputs in this side's shared memory, so no call pays for copying them in."""
    si, pos = side.exchange.empty((SPEED_T,), torch.int64), side.exchange.empty((SPEED_T,), torch.int64)
    return _refill((table.to(device), si, pos, SPEED_BS), si_cpu, pos_cpu)


def _refill(inputs, si_cpu, pos_cpu):
    """The same shared inputs, holding another batch."""
    inputs[1].copy_(si_cpu)
    inputs[2].copy_(pos_cpu)
    return inputs


def _speed_batch(rng):
    """A new batch of SPEED_T tokens on the one table: (seq_idx, positions), on the CPU."""
    return (torch.randint(0, SPEED_S, (SPEED_T,), generator=rng),
            torch.randint(0, SPEED_W * SPEED_BS, (SPEED_T,), generator=rng))


def _timed(side, inputs):
    t0 = time.perf_counter()
    result, err = call(side.slot_mapping, *inputs)
    # Less what the call waited, before it began, for a neighbouring grading's timing on the GPU
    # (gpu_turns.checkpoint): the neighbour's time, not this call's.
    return time.perf_counter() - t0 - side.last_call_waited_s, result, err


def _trusted_gather(table, si, pos, device):
    """One vectorised gather run here, in the trusted test process, with its result crossing a
    socket as a worker's answer does: on a 2-core CPU, 0.06-0.17 s a call against 0.05-0.15 s
    for the reference's gather through the sandbox, idle and beside a busy core alike."""
    import socket
    import threading
    t0 = time.perf_counter()
    slots = table[si, pos // SPEED_BS].long() * SPEED_BS + pos % SPEED_BS
    if slots.is_cuda:
        torch.cuda.synchronize()
    data = slots.cpu().numpy().tobytes()
    ours, theirs = socket.socketpair()
    sender = threading.Thread(target=lambda: (theirs.sendall(data), theirs.close()))
    sender.start()
    chunks = []
    while chunk := ours.recv(1 << 20):
        chunks.append(chunk)
    sender.join()
    ours.close()
    torch.frombuffer(bytearray(b"".join(chunks)), dtype=torch.int64).to(device)
    return time.perf_counter() - t0


def _machine_load() -> str:
    """How busy this machine was, in the trusted process's words, for a hint that blames time."""
    try:
        one, _, _ = os.getloadavg()
    except OSError:
        return "its load unknown"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"the machine's load average at {one:.1f} on {cores} cores"


def _counted_mistake(counted: dict, input_bytes: int) -> str | None:
    """The hint for counted work that is not vectorised, naming what was counted; None where the
    counts are within the limits."""
    T = f"{SPEED_T:,}"
    ops, lines, items, alloc, objects = (counted[k] for k in ("ops", "lines", "items", "max_alloc_bytes",
                                                            "python_objects"))
    stopped = " before the grader stopped it" if counted["capped"] else ""
    if ops > OPS_LIMIT:
        return (f"on {T} tokens slot_mapping made more than {OPS_LIMIT} calls into PyTorch{stopped} "
                f"({ops:,} counted; the one gather makes about 6, whatever the number of tokens): "
                "a Python loop over the tokens (or over the sequences) calls PyTorch on every step. "
                "Gather the whole batch at once with block_table[seq_idx, positions // block_size].")
    if items > ITEMS_LIMIT:
        return (f"slot_mapping turned {items:,} tensor elements into Python numbers with .tolist(){stopped}, "
                f"on {T} tokens: walking them one at a time (a list comprehension, a loop, map) is one "
                "Python step per token, however cheap each step. Keep the data in tensors and gather "
                "the whole batch at once with block_table[seq_idx, positions // block_size].")
    if lines > LINES_LIMIT:
        return (f"on {T} tokens slot_mapping ran more than {LINES_LIMIT} lines of Python in your file"
                f"{stopped} ({lines:,} counted; the one gather is a line or three): a loop of some kind "
                "(for, while, a list comprehension, map over a lambda) steps through the tokens. Gather "
                "the whole batch at once with block_table[seq_idx, positions // block_size].")
    if objects > OBJECTS_LIMIT:
        return (f"slot_mapping held {objects:,} Python objects at once{stopped} on {T} tokens "
                "(the one gather holds a handful): a list of a Python number per token (.tolist() of a "
                "tensor or a numpy array, walked with map, zip or a comprehension) is one Python step per "
                "token, however it is written. Keep the data in tensors and gather the whole batch at once "
                "with block_table[seq_idx, positions // block_size].")
    if alloc > ALLOC_FACTOR * input_bytes:
        return (f"slot_mapping allocated a tensor of {alloc / 2**20:,.0f} MiB on {T} tokens, "
                f"{alloc / input_bytes:.0f} times the {input_bytes / 2**20:.1f} MiB of its three inputs: "
                f"a T x blocks intermediate ({T} x {SPEED_W} entries here; block_table[seq_idx] is every "
                "token's whole row of the table) built before one entry per token is picked. Index "
                "both dimensions at once: block_table[seq_idx, positions // block_size].")
    return None


def test_two_million_tokens_as_fast_as_one_gather(submission, shared, rng, device, record_property):
    """Two million tokens are mapped by vectorised work: no Python step per token, no T x blocks intermediate"""
    table = torch.randperm(SPEED_S * SPEED_W + 1000, generator=rng)[: SPEED_S * SPEED_W]
    table = table.view(SPEED_S, SPEED_W).int()
    si_cpu, pos_cpu = _speed_batch(rng)
    small = random_batch(rng, num_seqs=2, width=4, block_size=SPEED_BS, num_blocks=8,
                         new_tokens=lambda s: 2, shuffle=False)
    # The clock is a backstop only, so the baseline is a gather in this trusted process wherever the
    # grading runs: no reference worker is needed, and nothing a submission does brings one about.
    table_on_device = table.to(device)
    slowdown = _slowdown()
    record_property("figures", {f"slowdown_{side}": how[1] for side, how in slowdown.items()})

    def time_baseline(si, pos):
        return _trusted_gather(table_on_device, si.to(device), pos.to(device), device)
    time_baseline = _slowed("baseline", time_baseline)
    time_submission = _slowed("submission", _timed)
    _slots(submission, small, device, record_property)     # its first call: imports, no count
    inputs = _speed_inputs(submission, table, si_cpu, pos_cpu, device)    # `shared` frees them
    input_bytes = sum(t.numel() * t.element_size() for t in inputs[:3])
    figures: dict = {f"slowdown_{side}": how[1] for side, how in slowdown.items()}
    submission.count_work = {"ops": OPS_LIMIT, "lines": LINES_LIMIT, "items": ITEMS_LIMIT,
                             "python_objects": OBJECTS_LIMIT, "max_alloc_bytes": ALLOC_FACTOR * input_bytes}
    try:
        t_refs, tooks = [time_baseline(si_cpu, pos_cpu)], []
        for turn in range(TURNS):
            if turn:
                si_cpu, pos_cpu = _speed_batch(rng)
                _refill(inputs, si_cpu, pos_cpu)
            t_refs.append(time_baseline(si_cpu, pos_cpu))
            took, result, err = time_submission(submission, inputs)
            counted = submission.last_counted
            tooks.append(took)
            t_ref = min(t_refs)
            limit = BACKSTOP_FACTOR * t_ref + BACKSTOP_S
            if counted is not None:
                figures.update({k: float(counted[k]) for k in ("ops", "lines", "items", "python_objects")},
                               max_alloc_mib=round(counted["max_alloc_bytes"] / 2**20, 1))
            figures.update(took_s=round(min(tooks), 4), baseline_s=round(t_ref, 4), limit_s=round(limit, 4),
                           rounds=float(len(tooks)))
            record_property("figures", dict(figures))
            record_property("detail", f"counted {counted}, {input_bytes:,} bytes of inputs")
            mistake = _counted_mistake(counted, input_bytes) if counted is not None else None
            if mistake is not None:
                fail(mistake)
            if counted is None or not counted["intact"]:
                fail("the count of slot_mapping's work was switched off while it ran (sys.settrace, "
                     "PyTorch's dispatch mode or Tensor.tolist replaced), so the grader could not see "
                     "whether it is vectorised. Leave the interpreter's hooks alone and gather the whole "
                     "batch at once with block_table[seq_idx, positions // block_size].")
            if err is not None:
                record_property("detail", f"raised {raised_type(err)}: {raised_message(err, 1000)}")
                fail(error_hint("slot_mapping", err))
            assert isinstance(result, torch.Tensor) and torch.equal(
                result.cpu().long(), expected_slots(Batch(table, si_cpu, pos_cpu, SPEED_BS))), (
                "wrong slots on a large batch: slot = block_table[seq, pos // block_size] * block_size "
                "+ pos % block_size, per token.")
            if min(tooks) <= limit:
                break
    finally:
        submission.count_work = None
    record_property("detail", f"took {min(tooks):.3f}s, a trusted gather {t_ref:.3f}s, limit {limit:.3f}s")
    if min(tooks) > limit:
        fail(f"slot_mapping took {min(tooks):.1f} s for {SPEED_T:,} tokens at best of {len(tooks)} calls, "
             f"over the limit of {BACKSTOP_FACTOR}x the {t_ref:.2f} s of one vectorised gather plus "
             f"{BACKSTOP_S:g} s, with {_machine_load()}. Its counted work looked vectorised "
             f"({counted['ops']} calls into PyTorch, {counted['lines']} lines of your file), so the time "
             "is the only evidence: work the count does not see (a thread of its own, a loop in C "
             "over numpy's elements) is still one step per token. Gather the whole batch at once "
             "with block_table[seq_idx, positions // block_size].")
