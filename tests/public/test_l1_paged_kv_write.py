"""Public tests for L1, the paged KV-cache write.

    python -m pytest tests -q                       # tests ./l1_paged_kv_write.py
    python -m pytest tests -q --submission FILE.py  # or any other file

Sizes are kept small so that the whole suite runs on a CPU through the Triton
interpreter. The graded suite uses other, random inputs.
"""
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
            fail(f"slot {want} expected for token {t} (seq {seq}, position {pos}): "
                 f"{how_slot_is_found(table, seq, pos, block_size)}; got {slot}")


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


def random_caches(H, D, device, dtype=torch.float16):
    # Random rather than zero contents, so that a stray write shows up.
    shape = (NUM_BLOCKS, BLOCK_SIZE, H, D)
    return (torch.randn(shape, dtype=dtype, device=device),
            torch.randn(shape, dtype=dtype, device=device))


def distinct_slots(T, device):
    return torch.randperm(NUM_SLOTS, device=device)[:T].to(torch.int64)


def check_cache(name, cache, before, src, slots, hint=""):
    """Each real token's [H, D] sits at its slot; every other slot is untouched."""
    H, D = cache.shape[2], cache.shape[3]
    now = cache.reshape(NUM_SLOTS, H, D)
    expected = before.reshape(NUM_SLOTS, H, D).clone()
    slots = slots.tolist()
    for t, slot in enumerate(slots):
        if slot < 0:
            continue
        expected[slot] = src[t]
        if not torch.equal(now[slot], src[t]):
            fail(f"{name}: token {t} belongs at slot {slot} (block {slot // BLOCK_SIZE}, "
                 f"offset {slot % BLOCK_SIZE}), flat offsets [{slot}*H*D, {slot + 1}*H*D) "
                 f"with H*D={H * D}, but that slot holds other values{hint}")
    changed = (now != expected).flatten(1).any(dim=1).nonzero().flatten().tolist()
    if changed:
        fail(f"{name}: slots {changed[:8]} changed although no token maps to them{hint}")


def write(sub, key, value, k_cache, v_cache, slots):
    result = sub.reshape_and_cache(key, value, k_cache, v_cache, slots)
    if result is not None:
        fail(f"reshape_and_cache writes the caches in place and returns None, "
             f"not {type(result).__name__}")


@pytest.mark.parametrize("H, D, T", [(2, 64, 5), (4, 128, 16), (8, 128, 9)],
                         ids=["H2-D64-T5", "H4-D128-T16", "H8-D128-T9"])
def test_write_small(sub, device, H, D, T):
    torch.manual_seed(H * D + T)
    key = torch.randn(T, H, D, dtype=torch.float16, device=device)
    value = torch.randn(T, H, D, dtype=torch.float16, device=device)
    k_cache, v_cache = random_caches(H, D, device)
    k_before, v_before = k_cache.clone(), v_cache.clone()
    slots = distinct_slots(T, device)
    write(sub, key, value, k_cache, v_cache, slots)
    check_cache("k_cache", k_cache, k_before, key, slots)
    check_cache("v_cache", v_cache, v_before, value, slots)


@pytest.mark.parametrize("slots", [[-1, 5, 0, -1, 17, -1], [-1, -1, -1]],
                         ids=["mixed", "all-padding"])
def test_padding_token_writes_nothing(sub, device, slots):
    torch.manual_seed(1)
    H, D = 2, 64
    T = len(slots)
    key = torch.randn(T, H, D, dtype=torch.float16, device=device)
    value = torch.randn(T, H, D, dtype=torch.float16, device=device)
    k_cache, v_cache = random_caches(H, D, device)
    k_before, v_before = k_cache.clone(), v_cache.clone()
    slots = torch.tensor(slots, dtype=torch.int64, device=device)
    write(sub, key, value, k_cache, v_cache, slots)
    hint = ("; a token with slot -1 is padding and moves nothing "
            "(slot -1 is not the last slot; slot 0 is a real slot)")
    check_cache("k_cache", k_cache, k_before, key, slots, hint)
    check_cache("v_cache", v_cache, v_before, value, slots, hint)


def test_key_value_are_views_of_fused_qkv(sub, device):
    torch.manual_seed(2)
    T, H, D = 7, 4, 64
    qkv = torch.randn(T, 3, H, D, dtype=torch.float16, device=device)
    key, value = qkv[:, 1], qkv[:, 2]  # token stride 3*H*D, each [H, D] contiguous
    k_cache, v_cache = random_caches(H, D, device)
    k_before, v_before = k_cache.clone(), v_cache.clone()
    slots = distinct_slots(T, device)
    write(sub, key, value, k_cache, v_cache, slots)
    hint = (f"; key is qkv[:, 1], whose tokens are key.stride(0) = 3*H*D = {key.stride(0)} "
            f"elements apart: read token t at t*key.stride(0), not t*H*D")
    check_cache("k_cache", k_cache, k_before, key, slots, hint)
    check_cache("v_cache", v_cache, v_before, value, slots, hint)


def test_zero_tokens_is_a_no_op(sub, device):
    H, D = 2, 64
    key = torch.empty(0, H, D, dtype=torch.float16, device=device)
    value = torch.empty(0, H, D, dtype=torch.float16, device=device)
    k_cache, v_cache = random_caches(H, D, device)
    k_before, v_before = k_cache.clone(), v_cache.clone()
    slots = torch.empty(0, dtype=torch.int64, device=device)
    write(sub, key, value, k_cache, v_cache, slots)
    if not (torch.equal(k_cache, k_before) and torch.equal(v_cache, v_before)):
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
    k_cache, v_cache = random_caches(H, D, device)
    k_before, v_before = k_cache.clone(), v_cache.clone()
    expect_rejected(
        lambda: sub.reshape_and_cache(key, value, k_cache, v_cache, distinct_slots(T, device)),
        f"key has strides {key.stride()}: its [H, D] is not one contiguous run of H*D values")
    if not (torch.equal(k_cache, k_before) and torch.equal(v_cache, v_before)):
        fail("the caches changed before the bad key was rejected; "
             "check the inputs before launching the kernel")
