"""Public tests for L1, the paged KV-cache write.

    python -m pytest tests -q                       # tests ./l1_paged_kv_write.py
    python -m pytest tests -q --submission FILE.py  # or any other file

Every area of the grade has at least one test here, named in its docstring or the comment in
it; the statement's "What only the grader checks" lists the rest. Sizes are kept small so that
the whole suite runs on a CPU through the Triton interpreter in seconds; the graded suite uses
other, random inputs.

Every cache sits between two guard blocks of memory the test owns: a store at slot -1
(an unskipped padding token) or one value past the last slot lands there and fails the
test with a hint, instead of crashing the interpreter or going unseen.
"""
import os
import subprocess
import sys
import tempfile
import textwrap

import pytest
import torch

from l1_watch import watched

HAS_CUDA = torch.cuda.is_available()

# What each test calls: while one of these is still the template's stub, the test does not
# run (conftest.py prints "not written yet: ..." instead).
SLOT_MAPPING = pytest.mark.needs("slot_mapping")
CHECKS = pytest.mark.needs("reshape_and_cache")
WRITE = pytest.mark.needs("reshape_and_cache", "reshape_and_cache_kernel")

# The lesson's hand-computed example: block_size 4, two sequences, three new tokens.
LESSON_BLOCK_SIZE = 4
LESSON_TABLE = [[9, 3, 7], [2, 5, 0]]
LESSON_TOKENS = [(0, 5), (0, 9), (1, 2)]  # (sequence, position inside that sequence)
LESSON_SLOTS = [13, 29, 10]


def fail(message):
    pytest.fail(message, pytrace=False)


def how_slot_is_found(table, seq, pos, block_size):
    logical = pos // block_size
    physical = table[seq][logical]
    return (f"logical block {pos}//{block_size}={logical} -> physical block {physical} "
            f"-> {physical}*{block_size}+{pos % block_size}")


def check_slots(got, table, tokens, block_size):
    if not isinstance(got, torch.Tensor):
        fail(f"slot_mapping must return a torch.Tensor, got {type(got).__name__}")
    if tuple(got.shape) != (len(tokens),):
        fail(f"slot_mapping must return one slot per token, shape [{len(tokens)}]; "
             f"got shape {list(got.shape)}")
    for t, ((seq, pos), slot) in enumerate(zip(tokens, got.tolist())):
        want = table[seq][pos // block_size] * block_size + pos % block_size
        if slot != want:
            wrapped = want >= 2 ** 31 and (slot - want) % 2 ** 32 == 0
            overflow = (f"; {want} does not fit in int32 and the result is off by a multiple of "
                        f"2**32: the multiply overflowed int32. Widen the gathered block with "
                        f".long() before multiplying by block_size" if wrapped else "")
            fail(f"slot {want} expected for token {t} (seq {seq}, position {pos}): "
                 f"{how_slot_is_found(table, seq, pos, block_size)}; got {slot}{overflow}")


def call_slot_mapping(sub, device, table, tokens, block_size,
                      table_dtype=torch.int32, index_dtype=torch.int64):
    block_table = torch.tensor(table, dtype=table_dtype, device=device)
    seq_idx = torch.tensor([s for s, _ in tokens], dtype=index_dtype, device=device)
    positions = torch.tensor([p for _, p in tokens], dtype=index_dtype, device=device)
    return sub.slot_mapping(block_table, seq_idx, positions, block_size)


# --- slot_mapping -------------------------------------------------------------

@SLOT_MAPPING
@pytest.mark.parametrize("table_dtype", [torch.int32, torch.int64], ids=["int32", "int64"])
def test_slot_mapping_lesson_table(sub, device, table_dtype):
    got = call_slot_mapping(sub, device, LESSON_TABLE, LESSON_TOKENS, LESSON_BLOCK_SIZE,
                            table_dtype=table_dtype)
    check_slots(got, LESSON_TABLE, LESSON_TOKENS, LESSON_BLOCK_SIZE)
    assert got.tolist() == LESSON_SLOTS


@SLOT_MAPPING
def test_slot_mapping_self_test_1(sub, device):
    # block_size 16, block table [4, 11, 2], position 40: slot 40, equal to the
    # position only by coincidence.
    got = call_slot_mapping(sub, device, [[4, 11, 2]], [(0, 40)], 16)
    check_slots(got, [[4, 11, 2]], [(0, 40)], 16)


@SLOT_MAPPING
def test_slot_mapping_self_test_2(sub, device):
    # A sequence 33 tokens long with block_size 16 holds ceil(33/16) = 3 blocks, 48 slots,
    # of which 15 are still empty (a contiguous reservation of 4096 would leave 4063).
    table = [[7, 2, 5]]
    tokens = [(0, p) for p in range(33)]
    got = call_slot_mapping(sub, device, table, tokens, 16)
    check_slots(got, table, tokens, 16)
    blocks = sorted({s // 16 for s in got.tolist()})
    assert blocks == [2, 5, 7], f"33 tokens of block_size 16 use 3 blocks, got {blocks}"
    assert 16 * len(blocks) - len(set(got.tolist())) == 15


@SLOT_MAPPING
def test_slot_mapping_leaves_its_inputs_alone(sub, device):
    table = torch.tensor(LESSON_TABLE, dtype=torch.int32, device=device)
    seq_idx = torch.tensor([s for s, _ in LESSON_TOKENS], dtype=torch.int64, device=device)
    positions = torch.tensor([p for _, p in LESSON_TOKENS], dtype=torch.int64, device=device)
    before = [x.clone() for x in (table, seq_idx, positions)]
    sub.slot_mapping(table, seq_idx, positions, LESSON_BLOCK_SIZE)
    changed = [name for name, x, x0 in zip(("block_table", "seq_idx", "positions"),
                                            (table, seq_idx, positions), before)
               if not torch.equal(x, x0)]
    if changed:
        fail(f"slot_mapping changed its {', '.join(changed)} argument: its inputs are read-only "
             f"(the scheduler reuses them)")


@SLOT_MAPPING
def test_slot_mapping_positions_are_per_sequence(sub, device):
    # A mixed batch: a prefill of 7 tokens for sequence 2 and one decode token for
    # each of the others. A position counts inside its own sequence, never in the batch.
    block_size = 8
    table = [[12, 4, 30, 0], [7, 19, 0, 0], [3, 25, 0, 0], [21, 9, 14, 1]]
    tokens = [(0, 20), (1, 8)] + [(2, p) for p in range(5, 12)] + [(3, 31)]
    got = call_slot_mapping(sub, device, table, tokens, block_size)
    check_slots(got, table, tokens, block_size)


@SLOT_MAPPING
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64], ids=["int32", "int64"])
def test_slot_mapping_is_int64(sub, device, index_dtype):
    # Physical block 2**28 with block_size 16 gives slot 2**32, which int32 cannot hold.
    table = [[5, 2 ** 28]]
    tokens = [(0, 3), (0, 17)]
    got = call_slot_mapping(sub, device, table, tokens, 16, index_dtype=index_dtype)
    if not isinstance(got, torch.Tensor) or got.dtype != torch.int64:
        dtype = getattr(got, "dtype", type(got).__name__)
        fail(f"slot_mapping returned {dtype}; slots must be int64 because slot*H*D passes "
             f"2**31 on a large cache (convert the gathered block with .long() before multiplying)")
    check_slots(got, table, tokens, 16)


@SLOT_MAPPING
@pytest.mark.parametrize("block_size", [1, 3, 32])
def test_slot_mapping_random_tables(sub, device, block_size):
    # area slot_mapping: the graded block sizes run from 1 to 32.
    gen = torch.Generator().manual_seed(block_size)
    S, W = 5, 6
    table = torch.randperm(S * W + 20, generator=gen)[:S * W].view(S, W).tolist()
    tokens = [(s, p) for s in range(S)
              for p in torch.randint(0, W * block_size, (4,), generator=gen).tolist()]
    got = call_slot_mapping(sub, device, table, tokens, block_size)
    check_slots(got, table, tokens, block_size)


# area slot_mapping, its speed: the grader maps 2,000,000 tokens and counts the work the call
# does, with these limits (tests/hidden: test_two_million_tokens_as_fast_as_one_gather). A count
# is the same on a laptop and on the grader's machine, where a time is not. Here the batch is
# 2**20 tokens and the table 64 blocks wide, so that a wrong form costs a laptop little memory.
SPEED_T, SPEED_S, SPEED_W, SPEED_BS = 1 << 20, 512, 64, 16
OPS_LIMIT = 100            # calls into PyTorch (one gather makes about 6)
LINES_LIMIT = 200          # lines of your file run
ITEMS_LIMIT = 100          # tensor elements turned into Python numbers by .tolist()
OBJECTS_LIMIT = 250_000    # Python objects alive at once
ALLOC_FACTOR = 4           # largest tensor allocated / bytes of the three inputs
GATHER = "Gather the whole batch at once with block_table[seq_idx, positions // block_size]."


def counted_mistake(counted, capped, input_bytes):
    """Why the counted work is not one vectorised gather, or None."""
    T = f"{SPEED_T:,}"
    stopped = " before the test stopped it" if capped else ""
    if counted["ops"] > OPS_LIMIT:
        return (f"on {T} tokens slot_mapping made more than {OPS_LIMIT} calls into PyTorch{stopped} "
                f"({counted['ops']:,} counted; one gather makes about 6, whatever the number of "
                f"tokens): a Python loop over the tokens (or the sequences) calls PyTorch on every "
                f"step. {GATHER}")
    if counted["items"] > ITEMS_LIMIT:
        return (f"slot_mapping turned {counted['items']:,} tensor elements into Python numbers with "
                f".tolist(){stopped}, on {T} tokens: walking them one at a time (a list "
                f"comprehension, a loop, map) is one Python step per token. {GATHER}")
    if counted["lines"] > LINES_LIMIT:
        return (f"on {T} tokens slot_mapping ran more than {LINES_LIMIT} lines of your file{stopped} "
                f"({counted['lines']:,} counted; one gather is a line or three): a loop of some kind "
                f"steps through the tokens. {GATHER}")
    if counted["python_objects"] > OBJECTS_LIMIT:
        return (f"slot_mapping held {counted['python_objects']:,} Python objects at once{stopped} on "
                f"{T} tokens: a list of a Python number per token is one Python step per token, "
                f"however it is walked. {GATHER}")
    if counted["max_alloc_bytes"] > ALLOC_FACTOR * input_bytes:
        alloc = counted["max_alloc_bytes"]
        return (f"slot_mapping allocated a tensor of {alloc / 2**20:,.0f} MiB on {T} tokens, "
                f"{alloc / input_bytes:.0f} times the {input_bytes / 2**20:.1f} MiB of its inputs: "
                f"a T x blocks intermediate (block_table[seq_idx] is every token's whole row of the "
                f"table) built before one entry per token is picked. Index both dimensions at once: "
                f"block_table[seq_idx, positions // block_size].")
    return None


@SLOT_MAPPING
def test_slot_mapping_is_vectorised(sub, device):
    """area slot_mapping: 2**20 tokens mapped by vectorised work, counted as the grader counts it"""
    gen = torch.Generator().manual_seed(11)
    table = torch.randperm(SPEED_S * SPEED_W + 1000, generator=gen)[:SPEED_S * SPEED_W]
    table = table.view(SPEED_S, SPEED_W).int().to(device)
    seq_idx = torch.randint(0, SPEED_S, (SPEED_T,), generator=gen).to(device)
    positions = torch.randint(0, SPEED_W * SPEED_BS, (SPEED_T,), generator=gen).to(device)
    sub.slot_mapping(table[:2], seq_idx[:4] % 2, positions[:4], SPEED_BS)   # a first call: not counted
    inputs = {"block_table": table, "seq_idx": seq_idx, "positions": positions, "block_size": SPEED_BS}
    input_bytes = sum(t.numel() * t.element_size() for t in (table, seq_idx, positions))
    caps = {"ops": OPS_LIMIT, "lines": LINES_LIMIT, "items": ITEMS_LIMIT,
            "python_objects": OBJECTS_LIMIT, "max_alloc_bytes": ALLOC_FACTOR * input_bytes}
    watch, result, error = watched(sub.slot_mapping, inputs, count=caps, source=sub.__file__)
    work = watch.work
    mistake = counted_mistake(work.counts, work.capped, input_bytes)
    if mistake:
        fail(mistake)
    if not work.intact:
        fail("the count of slot_mapping's work was switched off while it ran (sys.settrace, "
             "PyTorch's dispatch mode or Tensor.tolist replaced), and the grader fails that too. "
             "Leave the interpreter's hooks alone. " + GATHER)
    if error is not None:
        raise error
    want = table[seq_idx, positions // SPEED_BS].long() * SPEED_BS + positions % SPEED_BS
    if not (isinstance(result, torch.Tensor) and torch.equal(result.long(), want)):
        fail("wrong slots on a batch of 2**20 tokens: slot = block_table[seq, pos // block_size] "
             "* block_size + pos % block_size, per token")


# --- reshape_and_cache ----------------------------------------------------------

NUM_BLOCKS, BLOCK_SIZE = 8, 16
NUM_SLOTS = NUM_BLOCKS * BLOCK_SIZE
GUARD = BLOCK_SIZE           # slots of owned memory before and after each cache


class Cache:
    """A cache [NUM_BLOCKS, BLOCK_SIZE, H, D] of random values (a stray write shows) with a
    guard block on each side; `cache` is the contiguous middle the submission writes."""

    def __init__(self, H, D, device, dtype=torch.float16):
        self.buf = torch.randn(NUM_BLOCKS + 2, BLOCK_SIZE, H, D, device=device).to(dtype)
        self.cache = self.buf[1:-1]
        self.before = self.buf.clone()


def random_caches(H, D, device, dtype=torch.float16):
    return Cache(H, D, device, dtype), Cache(H, D, device, dtype)


def distinct_slots(T, device):
    # The last slot always among them: a row that runs past H*D then reaches the guard.
    slots = torch.randperm(NUM_SLOTS - 1)[:T] if T else torch.empty(0, dtype=torch.long)
    if T:
        slots[0] = NUM_SLOTS - 1
    return slots[torch.randperm(T)].to(torch.int64).to(device)


def bits(t):
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def check_cache(name, c, src, slots, hint=""):
    """Each real token's [H, D] sits at its slot; every other slot, and both guards, untouched."""
    H, D = c.buf.shape[2], c.buf.shape[3]
    now = bits(c.buf).reshape(-1, H * D)
    was = bits(c.before).reshape(-1, H * D)
    expected = was.clone()
    rows = bits(src.contiguous()).reshape(-1, H * D)
    slots = slots.tolist()
    for t, slot in enumerate(slots):
        if slot < 0:
            continue
        expected[GUARD + slot] = rows[t]
        if not torch.equal(now[GUARD + slot], rows[t]):
            wrong = (now[GUARD + slot] != rows[t]).nonzero().flatten().tolist()
            why = (": only its first value is wrong, overwritten by one value past the previous "
                   "slot's row; the mask must be offs < H*D, not offs <= H*D" if wrong == [0] else "")
            fail(f"{name}: token {t} belongs at slot {slot} (block {slot // BLOCK_SIZE}, "
                 f"offset {slot % BLOCK_SIZE}), flat offsets [{slot}*H*D, {slot + 1}*H*D) "
                 f"with H*D={H * D}, but that slot holds other values{why}{hint}")
    changed = (now != expected).any(dim=1)
    if bool(changed[:GUARD].any()):
        fail(f"{name}: memory just before the cache was written, at a negative slot: a token "
             f"with slot -1 is padding and must be skipped (mask everything off when slot < 0)"
             f"{hint}")
    if bool(changed[GUARD + NUM_SLOTS:].any()):
        fail(f"{name}: memory just past the cache's last slot was written: a token's row is "
             f"the H*D values [slot*H*D, (slot+1)*H*D) and nothing beyond (mask offs < H*D, "
             f"not offs <= H*D){hint}")
    stray = changed[GUARD:GUARD + NUM_SLOTS].nonzero().flatten().tolist()
    if stray:
        one_past = all(bool((now[GUARD + s] != was[GUARD + s]).nonzero().flatten().tolist() == [0])
                       for s in stray)
        why = (": only the first value of each changed, one value past the previous slot's row; "
               "the mask must be offs < H*D, not offs <= H*D" if one_past else "")
        fail(f"{name}: slots {stray[:8]} changed although no token maps to them{why}{hint}")


# The lesson's named pitfall (its kernel section): `(offs < HD) & (slot >= 0)` ANDs a vector
# with a scalar, which the GPU compiles and the CPU interpreter rejects with this message.
AND_MASK = "mask has unsupported dtype"


def triton_error(exc):
    """Whether the exception comes from Triton (compiling or interpreting a kernel), whose
    traceback runs through Triton's own code and says nothing the message does not."""
    return any(type(e).__module__.split(".")[0] == "triton" for e in (exc, exc.__cause__) if e is not None)


def line_in_submission(sub, exc):
    """' (line N of your file)' for the deepest frame of the submission in exc or its cause."""
    import traceback
    line = None
    for e in (exc, exc.__cause__, exc.__context__):
        if e is None:
            continue
        for frame in traceback.extract_tb(e.__traceback__):
            if frame.filename == sub.__file__:
                line = frame.lineno
    return f" (line {line} of your file)" if line else ""


def write(sub, key, value, k_cache, v_cache, slots):
    try:
        sub.reshape_and_cache(key, value, k_cache, v_cache, slots)
    except Exception as exc:
        explain(sub, exc, key)


def explain(sub, exc, key):
    """Fail with a hint for an error reshape_and_cache raised on valid input; an error of plain
    Python in your own code is raised again, with its traceback."""
    text = f"{type(exc).__name__}: {exc}"
    first = (text.splitlines() or [""])[0]
    where = line_in_submission(sub, exc)
    if AND_MASK in text:
        fail(f"the kernel's mask ANDs a vector condition with a scalar one, as "
             f"(offs < HD) & (slot >= 0) does: the pitfall the lesson names in its kernel "
             f"section. The GPU compiles it, but Triton's CPU interpreter rejects it "
             f"(\"{AND_MASK}\"){where}. Fold the padding test into the mask's bound instead, which "
             f"runs on both: a bound of 0 for a padding token and HD for the others, then "
             f"mask = offs < bound")
    if "power of 2" in text or "power of two" in text:
        fail(f"reshape_and_cache raised on H*D = {key.shape[1] * key.shape[2]}, which is not a "
             f"power of two: tl.arange needs a power-of-two length, so launch with "
             f"BLOCK = triton.next_power_of_2(H*D) and mask offs < H*D ({first}){where}")
    if triton_error(exc):
        # One line: the rest of such a traceback is Triton's own code.
        last = [ln for ln in text.splitlines() if ln.strip()]
        fail(f"the kernel failed in Triton{where}: {last[-1] if last else first}")
    raise exc


def write_and_check(sub, key, value, slots, hint="", dtype=torch.float16):
    H, D = key.shape[1], key.shape[2]
    k, v = random_caches(H, D, key.device, dtype)
    # What must land comes from copies: a write that also changes key or value in place is
    # test_key_and_value_are_read_only's finding, not a wrong cache.
    key0, value0, slots0 = key.clone(), value.clone(), slots.clone()
    write(sub, key, value, k.cache, v.cache, slots)
    check_cache("k_cache", k, key0, slots0, hint)
    check_cache("v_cache", v, value0, slots0, hint)


# area write: the graded H runs from 1 to 32, D from 64 to 256, H*D up to 4096, in fp16, bf16
# and fp32 (the statement's table of graded shapes).
@WRITE
@pytest.mark.parametrize("H, D, T, dtype", [(2, 64, 5, torch.float16), (4, 128, 16, torch.float16),
                                            (8, 128, 9, torch.bfloat16), (1, 256, 6, torch.float32),
                                            (32, 128, 3, torch.float16)],
                         ids=["H2-D64-T5", "H4-D128-T16", "H8-D128-T9-bf16", "H1-D256-T6-fp32",
                              "H32-D128-T3"])
def test_write_small(sub, device, H, D, T, dtype):
    torch.manual_seed(H * D + T)
    key = torch.randn(T, H, D, device=device).to(dtype)
    value = torch.randn(T, H, D, device=device).to(dtype)
    write_and_check(sub, key, value, distinct_slots(T, device), dtype=dtype)


@WRITE
@pytest.mark.parametrize("H, D, dtype", [(3, 80, torch.float16), (3, 80, torch.bfloat16),
                                         (3, 80, torch.float32), (2, 96, torch.float16)],
                         ids=["H3-D80-fp16", "H3-D80-bf16", "H3-D80-fp32", "H2-D96-fp16"])
def test_write_when_hd_is_not_a_power_of_two(sub, device, H, D, dtype):
    # area write: H*D = 240 and 192: tl.arange runs over the next power of two, and the mask
    # keeps the extra lanes away from the next slot.
    torch.manual_seed(H * D)
    T = 12
    key = torch.randn(T, H, D, device=device).to(dtype)
    value = torch.randn(T, H, D, device=device).to(dtype)
    write_and_check(sub, key, value, distinct_slots(T, device), dtype=dtype)


@WRITE
@pytest.mark.parametrize("slots", [[-1, 5, 0, -1, 17, -1], [-1, -1, -1]],
                         ids=["mixed", "all-padding"])
def test_padding_token_writes_nothing(sub, device, slots):
    # area padding
    torch.manual_seed(1)
    H, D = 2, 64
    T = len(slots)
    key = torch.randn(T, H, D, dtype=torch.float16, device=device)
    value = torch.randn(T, H, D, dtype=torch.float16, device=device)
    slots = torch.tensor(slots, dtype=torch.int64, device=device)
    if bool((slots == 0).any()):
        # Padding rows equal the slot-0 token's: a kernel that sends padding to slot 0 would race
        # that token on a GPU and pass or fail by chance; the all-padding case catches it always.
        zero = int((slots == 0).nonzero()[0])
        key[slots < 0], value[slots < 0] = key[zero].clone(), value[zero].clone()
    hint = " (slot -1 is not the last slot; slot 0 is a real slot)"
    write_and_check(sub, key, value, slots, hint)


@WRITE
def test_key_value_are_views_of_fused_qkv(sub, device):
    # area strided_qkv
    torch.manual_seed(2)
    T, H, D = 7, 4, 64
    qkv = torch.randn(T, 3, H, D, dtype=torch.float16, device=device)
    key, value = qkv[:, 1], qkv[:, 2]  # token stride 3*H*D, each [H, D] contiguous
    hint = (f"; key is qkv[:, 1], whose tokens are key.stride(0) = 3*H*D = {key.stride(0)} "
            f"elements apart: read token t at t*key.stride(0), not t*H*D")
    write_and_check(sub, key, value, distinct_slots(T, device), hint)


@WRITE
@pytest.mark.parametrize("strided", ["key", "value"])
def test_key_and_value_with_different_token_strides(sub, device, strided):
    # area strided_qkv: one of them a view of a fused QKV tensor (stride 3*H*D), the other
    # contiguous (stride H*D): each must be read with its own stride. The contiguous one is the
    # front of a larger buffer, so that reading it with the other's stride stays in owned memory.
    torch.manual_seed(5)
    T, H, D = 9, 2, 64
    view = torch.randn(T, 3, H, D, dtype=torch.float16, device=device)[:, 1]
    plain = torch.randn(3 * T, H, D, dtype=torch.float16, device=device)[:T]
    key, value = (view, plain) if strided == "key" else (plain, view)
    hint = (f"; key.stride(0) = {key.stride(0)} and value.stride(0) = {value.stride(0)} differ: "
            f"pass both to the kernel and read token t of value at t*value.stride(0)")
    write_and_check(sub, key, value, distinct_slots(T, device), hint)


@WRITE
def test_key_and_value_are_read_only(sub, device):
    # area write: key and value hold after the call what they held before.
    torch.manual_seed(6)
    T, H, D = 8, 2, 64
    key = torch.randn(T, H, D, dtype=torch.float16, device=device)
    value = torch.randn(T, H, D, dtype=torch.float16, device=device)
    slots = distinct_slots(T, device)
    slots[3] = -1
    before = {"key": key.clone(), "value": value.clone()}
    write_and_check(sub, key, value, slots)
    changed = [name for name, x in (("key", key), ("value", value))
               if not torch.equal(bits(x), bits(before[name]))]
    if changed:
        fail(f"reshape_and_cache changed its {' and '.join(changed)} argument: key and value are "
             f"inputs, only read and copied (a softmax scale, say, belongs to the attention kernel)")


@WRITE
def test_zero_tokens_is_a_no_op(sub, device):
    # area write
    H, D = 2, 64
    key = torch.empty(0, H, D, dtype=torch.float16, device=device)
    value = torch.empty(0, H, D, dtype=torch.float16, device=device)
    k, v = random_caches(H, D, device)
    write(sub, key, value, k.cache, v.cache, torch.empty(0, dtype=torch.int64, device=device))
    if not (torch.equal(k.buf, k.before) and torch.equal(v.buf, v.before)):
        fail("with T = 0 there is nothing to write, but the caches changed")


# --- validation -----------------------------------------------------------------

def expect_rejected(call, why):
    try:
        call()
    except (AssertionError, ValueError):
        return
    fail(f"{why}; reshape_and_cache must raise AssertionError or ValueError "
         f"before writing anything")


def bad_cache(kind, H, D, device):
    """(the tensor that owns the memory, a non-contiguous [NUM_BLOCKS, BLOCK_SIZE, H, D] view)"""
    if kind == "head_slice":
        # the lesson's example: k_cache[:, :, :H] of a cache with more heads
        base = torch.randn(NUM_BLOCKS, BLOCK_SIZE, 2 * H, D, dtype=torch.float16, device=device)
        return base, base[:, :, :H]
    # blocks not outermost: a [BLOCK_SIZE, NUM_BLOCKS, H, D] tensor seen transposed
    base = torch.randn(BLOCK_SIZE, NUM_BLOCKS, H, D, dtype=torch.float16, device=device)
    return base, base.transpose(0, 1)


@CHECKS
@pytest.mark.parametrize("kind", ["head_slice", "transposed"])
@pytest.mark.parametrize("which", ["k_cache", "v_cache"])
def test_non_contiguous_cache_is_rejected(sub, device, which, kind):
    # area validation
    torch.manual_seed(3)
    T, H, D = 4, 2, 64
    key = torch.randn(T, H, D, dtype=torch.float16, device=device)
    value = torch.randn(T, H, D, dtype=torch.float16, device=device)
    base, bad = bad_cache(kind, H, D, device)
    other = torch.randn(NUM_BLOCKS, BLOCK_SIZE, H, D, dtype=torch.float16, device=device)
    base_before, other_before = base.clone(), other.clone()
    caches = {which: bad, ("v_cache" if which == "k_cache" else "k_cache"): other}
    expect_rejected(
        lambda: sub.reshape_and_cache(key, value, caches["k_cache"], caches["v_cache"],
                                      distinct_slots(T, device)),
        f"{which} is a non-contiguous view ({kind}, strides {bad.stride()}), so slot*H*D does "
        f"not address its slots")
    if not (torch.equal(base, base_before) and torch.equal(other, other_before)):
        fail("the caches changed before the non-contiguous cache was rejected; "
             "check the inputs before launching the kernel")


@CHECKS
@pytest.mark.parametrize("kind", ["head_padded", "transposed"])
@pytest.mark.parametrize("which", ["key", "value"])
def test_non_contiguous_heads_are_rejected(sub, device, which, kind):
    # area validation: only the token dimension may have any stride, for key and value alike.
    torch.manual_seed(4)
    T, H, D = 4, 2, 64
    if kind == "head_padded":
        bad = torch.randn(T, H, 2 * D, dtype=torch.float16, device=device)[:, :, :D]
    else:
        bad = torch.randn(T, D, H, dtype=torch.float16, device=device).transpose(1, 2)
    good = torch.randn(T, H, D, dtype=torch.float16, device=device)
    key, value = (bad, good) if which == "key" else (good, bad)
    k, v = random_caches(H, D, device)
    expect_rejected(
        lambda: sub.reshape_and_cache(key, value, k.cache, v.cache, distinct_slots(T, device)),
        f"{which} has strides {bad.stride()} ({kind}): its [H, D] is not one contiguous run of "
        f"H*D values")
    if not (torch.equal(k.buf, k.before) and torch.equal(v.buf, v.before)):
        fail(f"the caches changed before the bad {which} was rejected; "
             f"check the inputs before launching the kernel")


# --- who writes the caches: kernel_write and policy -------------------------------

# A small call, made as the grader makes it: the caches start as zeros, and the call is watched
# (l1_watch.py) for the Triton launches it makes and the PyTorch operations that write the
# caches outside them.
POLICY_SHAPE = dict(T=6, H=2, D=32, BS=4, NB=8)
GATE = ("Until this passes, write, padding, strided_qkv and int64_overflow earn no points (60 in "
        "all): the assignment is a Triton kernel, and a PyTorch write of the caches is not one.")


def watched_write(sub, device, hold):
    T, H, D, BS, NB = (POLICY_SHAPE[k] for k in ("T", "H", "D", "BS", "NB"))
    gen = torch.Generator().manual_seed(8)
    key = torch.randn(T, H, D, generator=gen).to(device)
    value = torch.randn(T, H, D, generator=gen).to(device)
    slots = torch.randperm(NB * BS, generator=gen)[:T].to(device)
    k_cache = torch.zeros(NB, BS, H, D, device=device)
    v_cache = torch.zeros(NB, BS, H, D, device=device)
    args = {"key": key, "value": value, "k_cache": k_cache, "v_cache": v_cache, "slot_mapping": slots}
    watch, _, error = watched(sub.reshape_and_cache, args, hold=hold)
    if error is not None:
        explain(sub, error, key)
    if watch.launches is None:
        pytest.skip("this version of Triton offers no launch hook, so launches cannot be counted "
                    "here; the grader's Triton does")
    return watch, k_cache, v_cache


def cache_writes(watch):
    return ", ".join(f"{op} on {name}" for name, op in watch.writes if name in ("k_cache", "v_cache"))


@WRITE
def test_a_triton_kernel_writes_the_caches(sub, device):
    """area kernel_write: a Triton kernel is launched, and the caches come out the same with
    every PyTorch write of them held back"""
    _, k_cache, v_cache = watched_write(sub, device, hold=False)
    held, held_k, held_v = watched_write(sub, device, hold=True)
    if held.launches == 0:
        fail("reshape_and_cache returned without launching any Triton kernel: launch your "
             "@triton.jit kernel as kernel[grid](...). " + GATE)
    if not (k_cache.count_nonzero() or v_cache.count_nonzero()):
        fail("after the call both caches were still all zeros: nothing was written. Store each "
             "token's K and V rows with tl.store in your kernel. " + GATE)
    if not (torch.equal(k_cache, held_k) and torch.equal(v_cache, held_v)):
        fail(f"with PyTorch's writes of the caches held back ({cache_writes(held) or 'none seen'}) "
             f"the caches came out otherwise: those writes, not your kernel, stored the rows. Store "
             f"them with tl.store in the kernel. " + GATE)


@WRITE
def test_no_pytorch_operation_writes_the_caches(sub, device):
    """area policy: the caches are written by the Triton kernel launched from reshape_and_cache,
    and by no PyTorch operation"""
    watch, k_cache, v_cache = watched_write(sub, device, hold=False)
    if watch.launches == 0:
        fail("reshape_and_cache returned without launching any Triton kernel: launch your "
             "@triton.jit kernel as kernel[grid](...)")
    writes = cache_writes(watch)
    if writes:
        fail(f"PyTorch wrote the caches outside any Triton kernel: {writes}. The stores into "
             f"k_cache and v_cache must be tl.store in your kernel; a kernel launched beside a "
             f"PyTorch write does not make it a Triton write (a torch.library.custom_op or "
             f"triton_op whose body launches the kernel counts as the kernel's write)")
    if not (k_cache.count_nonzero() or v_cache.count_nonzero()):
        fail("after the call both caches were still all zeros: the kernel launched wrote nothing")


# --- int64 offsets: area int64_overflow ------------------------------------------

# The graded shape: 100,000 blocks x 16 x 32 heads x 128, so H*D = 4096 and slot*H*D passes
# 2**31 from slot 524,288 on and 2**32 from slot 1,048,576 on. No smaller cache can show an
# int32 offset. On a CPU the two 13 GB caches are sparse files: only the rows written take
# memory or disk. On a GPU they need 26 GB of its memory, so that test is opt-in.
OVERFLOW_SHAPE = (100_000, 16, 32, 128)


def sparse_cache(folder, name, numel):
    """A zeroed fp16 tensor of `numel` values backed by a sparse file, or None where the file
    system gives the file its whole size at once."""
    path = os.path.join(folder, name)
    with open(path, "wb") as f:
        f.truncate(2 * numel)
    if os.stat(path).st_blocks * 512 > 1 << 20:
        return None
    return torch.from_file(path, shared=True, size=numel, dtype=torch.float16)


def interpreter_copies_whole_tensors(folder):
    """Whether this Triton's interpreter copies a tensor argument back whole after a launch (some
    versions do): on a 13 GB sparse cache that would write 13 GB of zeros to disk."""
    import triton
    import triton.language as tl

    @triton.jit
    def touch_one(ptr):
        tl.store(ptr, tl.load(ptr) + 1)
    probe = sparse_cache(folder, "probe", 64 << 20)
    if probe is None:
        return True
    touch_one[(1,)](probe)
    return os.stat(os.path.join(folder, "probe")).st_blocks * 512 > 16 << 20


def int64_annotations(sub):
    """'kernel.param: tl.int64' for each parameter of a Triton kernel in the file annotated int64."""
    import inspect
    found = []
    for name, obj in vars(sub).items():
        fn = obj
        while hasattr(fn, "fn"):                      # JITFunction, and autotune/heuristics around it
            fn = fn.fn
        if not inspect.isfunction(fn) or fn is obj:
            continue
        for param, note in inspect.get_annotations(fn).items():
            if "int64" in str(note) or str(note) == "i64":
                found.append(f"{name}.{param}: tl.int64")
    return found


@WRITE
def test_offsets_past_2_32_on_sparse_caches(sub):
    """Writes 6 tokens into two zeroed fp16 caches of 100,000 x 16 x 32 x 128 (13 GB each, sparse
    files), three at slots whose offset slot*H*D passes 2**32, and checks that each row lands at
    its slot and nothing lands 2**32 values early, where an int32 offset wraps to. CPU only."""
    if HAS_CUDA:
        pytest.skip("on a GPU these caches take 26 GB of its memory: run with --overflow for "
                    "test_offsets_past_2_31_on_the_graded_cache")
    NB, BS, H, D = OVERFLOW_SHAPE
    HD, numel = H * D, NB * BS * H * D
    wrap = 2 ** 32 // HD                     # an int32 offset of slot s lands at row s - wrap
    # Slots whose int32 offset wraps back inside the cache (never before it, which would crash
    # the interpreter), one just below 2**31, and small ones right either way.
    slots = [wrap + 17, wrap + 40_000, wrap + 300_001, 2 ** 31 // HD - 1, 3, 1234]
    with tempfile.TemporaryDirectory() as folder:
        if interpreter_copies_whole_tensors(folder):
            pytest.skip("this file system or this Triton's interpreter would fill 26 GB for these "
                        "caches; the grader runs this check")
        k_cache, v_cache = (sparse_cache(folder, name, numel) for name in ("k", "v"))
        k_cache, v_cache = k_cache.view(NB, BS, H, D), v_cache.view(NB, BS, H, D)
        gen = torch.Generator().manual_seed(9)
        key = torch.randn(len(slots), H, D, generator=gen).half()
        value = torch.randn(len(slots), H, D, generator=gen).half()
        key0, value0 = key.clone(), value.clone()   # a key changed in place is another test's finding
        write(sub, key, value, k_cache, v_cache, torch.tensor(slots))
        bad, early = [], []
        for cache, src in ((k_cache.view(-1, HD), key0), (v_cache.view(-1, HD), value0)):
            bad += [s for t, s in enumerate(slots) if not torch.equal(cache[s], src[t].reshape(-1))]
            early += [s for s in slots if s >= wrap and bool(cache[s - wrap].any())]
        del k_cache, v_cache
    annotated = int64_annotations(sub)
    if (early or bad) and annotated:
        pytest.skip(f"your kernel makes its offsets int64 through an annotation ({', '.join(annotated)}): "
                    f"the GPU honours it, and the graded run on the H200 checks it, but the CPU "
                    f"interpreter ignores annotations, so this run cannot. Convert explicitly "
                    f"(slot.to(tl.int64)) to check it here, or run --overflow on a GPU")
    if early:
        fail(f"rows of slots {sorted(set(early))} landed 2**32 values early, on slots "
             f"{sorted({s - wrap for s in early})}: slot*H*D overflowed int32 and wrapped. Convert "
             f"the slot to int64 before multiplying: slot.to(tl.int64) * HD")
    if bad:
        fail(f"the rows of slots {sorted(set(bad))} are not where they belong on the 100,000-block "
             f"cache: offsets past 2**31 must be computed in int64 (slot.to(tl.int64) * HD)")


OVERFLOW_SCRIPT = textwrap.dedent('''
    import importlib.util, sys, torch
    spec = importlib.util.spec_from_file_location("l1_submission", sys.argv[1])
    sub = importlib.util.module_from_spec(spec); spec.loader.exec_module(sub)
    NB, BS, H, D = %r
    HD, WRAP = H * D, 2 ** 32 // (H * D)
    # slots whose int32 offset wraps inside the cache (WRAP rows early), past 2**31 only
    # (wraps negative), the last slot, and small ones that are right either way
    slots = [WRAP + 17, WRAP + 40_000, WRAP + 300_001, 2 ** 31 // HD + 5, 800_000, NB * BS - 1, 3, 1234]
    k_cache = torch.zeros(NB, BS, H, D, dtype=torch.float16, device="cuda")
    v_cache = torch.zeros_like(k_cache)
    key = torch.randn(len(slots), H, D, device="cuda").half()
    value = torch.randn(len(slots), H, D, device="cuda").half()
    s = torch.tensor(slots, dtype=torch.int64, device="cuda")
    sub.reshape_and_cache(key, value, k_cache, v_cache, s)
    torch.cuda.synchronize()
    k, v = k_cache.view(-1, HD), v_cache.view(-1, HD)
    bad = [t for t in range(len(slots)) if not (torch.equal(k[s[t]], key[t].reshape(-1))
                                                 and torch.equal(v[s[t]], value[t].reshape(-1)))]
    wrapped = [x - WRAP for x in slots if x >= WRAP]
    hits = int((k[wrapped] != 0).any(1).sum()) + int((v[wrapped] != 0).any(1).sum())
    print(f"bad={bad} wrapped_hits={hits}")
''' % (OVERFLOW_SHAPE,))


@WRITE
def test_offsets_past_2_31_on_the_graded_cache(submission_path, overflow_requested):
    """Writes 8 tokens into two zeroed fp16 caches of 100,000 x 16 x 32 x 128 (13 GB each),
    at slots whose offset slot*H*D passes 2**31 and 2**32, and checks that each row lands at
    its slot and nothing lands 2**32 values early, where an int32 offset wraps to."""
    if not torch.cuda.is_available():
        pytest.skip("GPU only: on a CPU, test_offsets_past_2_32_on_sparse_caches checks the same")
    if not overflow_requested:
        pytest.skip("opt-in (26 GB of GPU memory): run with --overflow or L1_OVERFLOW=1 to check "
                    "that offsets past 2**31 land where they belong")
    free, _ = torch.cuda.mem_get_info()
    if free < 28 * 2 ** 30:
        pytest.skip(f"needs 28 GB of free GPU memory, {free / 2 ** 30:.0f} GB free")
    # A process of its own: an illegal address poisons the CUDA context for every later test.
    proc = subprocess.run([sys.executable, "-c", OVERFLOW_SCRIPT, str(submission_path)],
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        last = next(iter(reversed([ln for ln in proc.stderr.splitlines() if ln.strip()])), "")
        fail(f"the write on the 100,000-block cache failed ({last}): an offset past 2**31 "
             f"computed in int32 wraps to a negative address. Convert the slot to int64 before "
             f"multiplying: slot.to(tl.int64) * HD")
    result = proc.stdout.strip().splitlines()[-1]
    if result != "bad=[] wrapped_hits=0":
        fail(f"rows past 2**31 are not where they belong ({result}): slot*H*D overflowed int32, so "
             f"rows landed 2**32 values early on other slots' data. Compute slot*H*D in int64 "
             f"(slot.to(tl.int64) * HD)")
