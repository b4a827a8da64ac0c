"""Public tests for L1, the paged KV-cache write.

    python -m pytest tests -q                       # tests ./l1_paged_kv_write.py
    python -m pytest tests -q --submission FILE.py  # or any other file

Sizes are kept small so that the whole suite runs on a CPU through the Triton
interpreter. The graded suite uses other, random inputs.

Every cache sits between two guard blocks of memory the test owns: a store at slot -1
(an unskipped padding token) or one value past the last slot lands there and fails the
test with a hint, instead of crashing the interpreter or going unseen.
"""
import subprocess
import sys
import textwrap

import pytest
import torch

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

@pytest.mark.parametrize("table_dtype", [torch.int32, torch.int64], ids=["int32", "int64"])
def test_slot_mapping_lesson_table(sub, device, table_dtype):
    got = call_slot_mapping(sub, device, LESSON_TABLE, LESSON_TOKENS, LESSON_BLOCK_SIZE,
                            table_dtype=table_dtype)
    check_slots(got, LESSON_TABLE, LESSON_TOKENS, LESSON_BLOCK_SIZE)
    assert got.tolist() == LESSON_SLOTS


def test_slot_mapping_self_test_1(sub, device):
    # block_size 16, block table [4, 11, 2], position 40: slot 40, equal to the
    # position only by coincidence.
    got = call_slot_mapping(sub, device, [[4, 11, 2]], [(0, 40)], 16)
    check_slots(got, [[4, 11, 2]], [(0, 40)], 16)


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


def test_slot_mapping_positions_are_per_sequence(sub, device):
    # A mixed batch: a prefill of 7 tokens for sequence 2 and one decode token for
    # each of the others. A position counts inside its own sequence, never in the batch.
    block_size = 8
    table = [[12, 4, 30, 0], [7, 19, 0, 0], [3, 25, 0, 0], [21, 9, 14, 1]]
    tokens = [(0, 20), (1, 8)] + [(2, p) for p in range(5, 12)] + [(3, 31)]
    got = call_slot_mapping(sub, device, table, tokens, block_size)
    check_slots(got, table, tokens, block_size)


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


def write(sub, key, value, k, v, slots):
    try:
        result = sub.reshape_and_cache(key, value, k.cache, v.cache, slots)
    except Exception as exc:
        text = f"{type(exc).__name__}: {exc}"
        if "power of 2" in text or "power of two" in text:
            fail(f"reshape_and_cache raised on H*D = {key.shape[1] * key.shape[2]}, which is not a "
                 f"power of two: tl.arange needs a power-of-two length, so launch with "
                 f"BLOCK = triton.next_power_of_2(H*D) and mask offs < H*D ({text.splitlines()[0]})")
        raise
    if result is not None:
        fail(f"reshape_and_cache writes the caches in place and returns None, "
             f"not {type(result).__name__}")


def write_and_check(sub, key, value, slots, hint="", dtype=torch.float16):
    H, D = key.shape[1], key.shape[2]
    k, v = random_caches(H, D, key.device, dtype)
    # What must land comes from copies: a write that also changes key or value in place is
    # test_inputs_are_read_only's finding, not a wrong cache.
    key0, value0, slots0 = key.clone(), value.clone(), slots.clone()
    write(sub, key, value, k, v, slots)
    check_cache("k_cache", k, key0, slots0, hint)
    check_cache("v_cache", v, value0, slots0, hint)


@pytest.mark.parametrize("H, D, T", [(2, 64, 5), (4, 128, 16), (8, 128, 9)],
                         ids=["H2-D64-T5", "H4-D128-T16", "H8-D128-T9"])
def test_write_small(sub, device, H, D, T):
    torch.manual_seed(H * D + T)
    key = torch.randn(T, H, D, dtype=torch.float16, device=device)
    value = torch.randn(T, H, D, dtype=torch.float16, device=device)
    write_and_check(sub, key, value, distinct_slots(T, device))


@pytest.mark.parametrize("H, D, dtype", [(3, 80, torch.float16), (3, 80, torch.bfloat16),
                                         (3, 80, torch.float32), (2, 96, torch.float16)],
                         ids=["H3-D80-fp16", "H3-D80-bf16", "H3-D80-fp32", "H2-D96-fp16"])
def test_write_when_hd_is_not_a_power_of_two(sub, device, H, D, dtype):
    # H*D = 240 and 192: tl.arange runs over the next power of two, and the mask keeps the
    # extra lanes away from the next slot.
    torch.manual_seed(H * D)
    T = 12
    key = torch.randn(T, H, D, device=device).to(dtype)
    value = torch.randn(T, H, D, device=device).to(dtype)
    write_and_check(sub, key, value, distinct_slots(T, device), dtype=dtype)


@pytest.mark.parametrize("slots", [[-1, 5, 0, -1, 17, -1], [-1, -1, -1]],
                         ids=["mixed", "all-padding"])
def test_padding_token_writes_nothing(sub, device, slots):
    torch.manual_seed(1)
    H, D = 2, 64
    T = len(slots)
    key = torch.randn(T, H, D, dtype=torch.float16, device=device)
    value = torch.randn(T, H, D, dtype=torch.float16, device=device)
    slots = torch.tensor(slots, dtype=torch.int64, device=device)
    hint = " (slot -1 is not the last slot; slot 0 is a real slot)"
    write_and_check(sub, key, value, slots, hint)


def test_key_value_are_views_of_fused_qkv(sub, device):
    torch.manual_seed(2)
    T, H, D = 7, 4, 64
    qkv = torch.randn(T, 3, H, D, dtype=torch.float16, device=device)
    key, value = qkv[:, 1], qkv[:, 2]  # token stride 3*H*D, each [H, D] contiguous
    hint = (f"; key is qkv[:, 1], whose tokens are key.stride(0) = 3*H*D = {key.stride(0)} "
            f"elements apart: read token t at t*key.stride(0), not t*H*D")
    write_and_check(sub, key, value, distinct_slots(T, device), hint)


@pytest.mark.parametrize("strided", ["key", "value"])
def test_key_and_value_with_different_token_strides(sub, device, strided):
    # One of them a view of a fused QKV tensor (stride 3*H*D), the other contiguous
    # (stride H*D): each must be read with its own stride. The contiguous one is the front
    # of a larger buffer, so that reading it with the other's stride stays in owned memory.
    torch.manual_seed(5)
    T, H, D = 9, 2, 64
    view = torch.randn(T, 3, H, D, dtype=torch.float16, device=device)[:, 1]
    plain = torch.randn(3 * T, H, D, dtype=torch.float16, device=device)[:T]
    key, value = (view, plain) if strided == "key" else (plain, view)
    hint = (f"; key.stride(0) = {key.stride(0)} and value.stride(0) = {value.stride(0)} differ: "
            f"pass both to the kernel and read token t of value at t*value.stride(0)")
    write_and_check(sub, key, value, distinct_slots(T, device), hint)


def test_inputs_are_read_only(sub, device):
    torch.manual_seed(6)
    T, H, D = 8, 2, 64
    key = torch.randn(T, H, D, dtype=torch.float16, device=device)
    value = torch.randn(T, H, D, dtype=torch.float16, device=device)
    slots = distinct_slots(T, device)
    slots[3] = -1
    before = {name: x.clone() for name, x in (("key", key), ("value", value), ("slot_mapping", slots))}
    write_and_check(sub, key, value, slots)
    changed = [name for name, x in (("key", key), ("value", value), ("slot_mapping", slots))
               if not torch.equal(bits(x), bits(before[name]))]
    if changed:
        fail(f"reshape_and_cache changed its {' and '.join(changed)} argument: key, value and "
             f"slot_mapping are inputs, only read and copied (a softmax scale, say, belongs to "
             f"the attention kernel)")


def test_zero_tokens_is_a_no_op(sub, device):
    H, D = 2, 64
    key = torch.empty(0, H, D, dtype=torch.float16, device=device)
    value = torch.empty(0, H, D, dtype=torch.float16, device=device)
    k, v = random_caches(H, D, device)
    write(sub, key, value, k, v, torch.empty(0, dtype=torch.int64, device=device))
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


@pytest.mark.parametrize("which", ["k_cache", "v_cache"])
def test_non_contiguous_cache_is_rejected(sub, device, which):
    torch.manual_seed(3)
    T, H, D = 4, 2, 64
    key = torch.randn(T, H, D, dtype=torch.float16, device=device)
    value = torch.randn(T, H, D, dtype=torch.float16, device=device)
    # A view that keeps the first H of 2H heads: every slot*H*D offset would be wrong.
    wide = torch.randn(NUM_BLOCKS, BLOCK_SIZE, 2 * H, D, dtype=torch.float16, device=device)
    other = torch.randn(NUM_BLOCKS, BLOCK_SIZE, H, D, dtype=torch.float16, device=device)
    wide_before, other_before = wide.clone(), other.clone()
    caches = {which: wide[:, :, :H], ("v_cache" if which == "k_cache" else "k_cache"): other}
    expect_rejected(
        lambda: sub.reshape_and_cache(key, value, caches["k_cache"], caches["v_cache"],
                                      distinct_slots(T, device)),
        f"{which} is wide[:, :, :{H}], a non-contiguous view (strides "
        f"{caches[which].stride()}), so slot*H*D does not address its slots")
    if not (torch.equal(wide, wide_before) and torch.equal(other, other_before)):
        fail("the caches changed before the non-contiguous cache was rejected; "
             "check the inputs before launching the kernel")


def test_key_with_non_contiguous_rows_is_rejected(sub, device):
    torch.manual_seed(4)
    T, H, D = 4, 2, 64
    key = torch.randn(T, H, 2 * D, dtype=torch.float16, device=device)[:, :, :D]
    value = torch.randn(T, H, D, dtype=torch.float16, device=device)
    k, v = random_caches(H, D, device)
    expect_rejected(
        lambda: sub.reshape_and_cache(key, value, k.cache, v.cache, distinct_slots(T, device)),
        f"key has strides {key.stride()}: its [H, D] is not one contiguous run of H*D values")
    if not (torch.equal(k.buf, k.before) and torch.equal(v.buf, v.before)):
        fail("the caches changed before the bad key was rejected; "
             "check the inputs before launching the kernel")


# --- int64 offsets (GPU only, opt-in) -----------------------------------------------

# The graded shape: 100,000 blocks x 16 x 32 heads x 128, so H*D = 4096 and slot*H*D passes
# 2**31 from slot 524,288 on and 2**32 from slot 1,048,576 on. No smaller cache can show an
# int32 offset, which is why every other test here passes with one.
OVERFLOW_SHAPE = (100_000, 16, 32, 128)
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


def test_offsets_past_2_31_on_the_graded_cache(submission_path, overflow_requested):
    """Writes 8 tokens into two zeroed fp16 caches of 100,000 x 16 x 32 x 128 (13 GB each),
    at slots whose offset slot*H*D passes 2**31 and 2**32, and checks that each row lands at
    its slot and nothing lands 2**32 values early, where an int32 offset wraps to."""
    if not torch.cuda.is_available():
        pytest.skip("GPU only: would write slots whose slot*H*D passes 2**31 and 2**32 into two "
                    "13 GB caches of 100,000 x 16 x 32 x 128 and check every row lands at its "
                    "slot (an int32 offset wraps); no CPU run of this suite can show that")
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
             f"computed in int32 wraps to a negative address. Convert the slot (and the token "
             f"index) to int64 before multiplying: slot.to(tl.int64) * HD")
    result = proc.stdout.strip().splitlines()[-1]
    if result != "bad=[] wrapped_hits=0":
        fail(f"rows past 2**31 are not where they belong ({result}): slot*H*D overflowed int32, so "
             f"rows landed 2**32 values early on other slots' data. Compute every offset in int64 "
             f"(slot.to(tl.int64) * HD)")
