"""write: every token's H*D values land at slot*H*D in both caches; nothing else changes.

The shapes follow vLLM's cache tests (head sizes 64-256, block sizes 8/16/32, up to
10,000 blocks, fp16/bf16/fp32), spread over a few cases instead of the full cross
product, because the CPU interpreter runs one program at a time. Every case keeps
num_blocks*block_size*H*D below 2**31: overflow is the int64_overflow area's question."""
import pytest
import torch

from paged import (DTYPES, GuardedCache, fail, general_case_first, random_slots,
                   same_bits, token_rows, write_and_compare)

pytestmark = pytest.mark.area("write")

# id: (dtype, H, D, block_size, num_blocks, T)
CASES = {
    "fp16-h8-d128-b16": ("fp16", 8, 128, 16, 1024, 42),      # vLLM's defaults
    "bf16-h4-d64-b8": ("bf16", 4, 64, 8, 512, 64),
    "fp32-h2-d256-b32": ("fp32", 2, 256, 32, 128, 64),
    "bf16-h2-d256-b8": ("bf16", 2, 256, 8, 256, 32),
    "fp16-h3-d80-b16": ("fp16", 3, 80, 16, 256, 48),         # H*D = 240
    "bf16-h2-d96-b32": ("bf16", 2, 96, 32, 128, 48),         # H*D = 192
    "fp32-h1-d112-b8": ("fp32", 1, 112, 8, 512, 48),         # H = 1, H*D = 112
    "fp16-h2-d120-b8": ("fp16", 2, 120, 8, 256, 48),         # H*D = 240
    "fp32-h5-d96-b16": ("fp32", 5, 96, 16, 256, 40),         # H*D = 480
    "bf16-h1-d80-b32": ("bf16", 1, 80, 32, 64, 40),          # H = 1, H*D = 80
    "fp16-h6-d112-b32": ("fp16", 6, 112, 32, 64, 40),        # H*D = 672
    "fp32-h4-d120-b16": ("fp32", 4, 120, 16, 128, 40),       # H*D = 480
    "fp16-h8-d128-b16-T1": ("fp16", 8, 128, 16, 64, 1),
    "fp32-h1-d64-b16-nb10000-T2048": ("fp32", 1, 64, 16, 10_000, 2048),
}


def _setup(rng, shared, device, dtype, H, D, bs, nb, T, **slot_kw):
    dt = DTYPES[dtype]
    kc = GuardedCache(rng, shared, device, nb, bs, H, D, dt)
    vc = GuardedCache(rng, shared, device, nb, bs, H, D, dt)
    key, value = token_rows(rng, T, H, D, dt, device)
    slots = random_slots(rng, T, nb * bs, **slot_kw)
    return kc, vc, key, value, slots


@pytest.mark.parametrize("case", list(CASES))
def test_tokens_land_at_their_slots(case, submission, rng, shared, device, record_property):
    """Each token's H*D values land at slot*H*D in both caches, and nothing else changes"""
    dtype, H, D, bs, nb, T = CASES[case]
    kc, vc, key, value, slots = _setup(rng, shared, device, dtype, H, D, bs, nb, T)
    msg = write_and_compare(submission, key, value, kc, vc, slots, record_property)
    assert msg is None, msg


def test_every_slot_of_a_small_cache(submission, rng, shared, device, record_property):
    """A batch that fills a small cache in shuffled order writes every one of its tokens"""
    H, D, bs, nb = 2, 64, 8, 4
    # slot 0 stays out: a token at slot 0 is the padding area's question
    T = nb * bs - 1
    kc, vc, key, value, slots = _setup(rng, shared, device, "bf16", H, D, bs, nb, T)
    msg = write_and_compare(submission, key, value, kc, vc, slots, record_property)
    assert msg is None, msg


def test_second_call_keeps_the_first(submission, rng, shared, device, record_property):
    """A second call (the next decode step) adds its tokens and leaves the first call's alone"""
    H, D, bs, nb, T = 4, 128, 16, 64, 24
    dt = torch.float16
    kc = GuardedCache(rng, shared, device, nb, bs, H, D, dt)
    vc = GuardedCache(rng, shared, device, nb, bs, H, D, dt)
    slots = random_slots(rng, 2 * T, nb * bs)
    first, second = slots[:T], slots[T:]
    k1, v1 = token_rows(rng, T, H, D, dt, device)
    msg = write_and_compare(submission, k1, v1, kc, vc, first, record_property)
    assert msg is None, msg
    # the state after the first step becomes the baseline of the second
    kc.before, vc.before = kc.buf.clone(), vc.buf.clone()
    k2, v2 = token_rows(rng, T, H, D, dt, device)
    msg = write_and_compare(submission, k2, v2, kc, vc, second, record_property)
    assert msg is None, msg


def test_an_empty_batch_changes_nothing(submission, rng, shared, device, record_property):
    """A step with no new tokens (T = 0) returns without error and leaves both caches as they were"""
    H, D, bs, nb = 8, 128, 16, 32
    general_case_first(submission, rng, shared, device, record_property, H, D, torch.float16)
    kc = GuardedCache(rng, shared, device, nb, bs, H, D, torch.float16)
    vc = GuardedCache(rng, shared, device, nb, bs, H, D, torch.float16)
    key, value = token_rows(rng, 0, H, D, torch.float16, device)
    msg = write_and_compare(submission, key, value, kc, vc, torch.empty(0, dtype=torch.int64), record_property)
    assert msg is None, ("with no tokens there is nothing to write (grid (0,) launches no program): "
                         + msg)


@pytest.mark.parametrize("case", ["fp16-h8-d128-b16", "fp32-h5-d96-b16"])
def test_key_and_value_are_not_modified(case, submission, rng, shared, device, record_property):
    """key and value are only read: after the call they hold exactly what they held before"""
    dtype, H, D, bs, nb, T = CASES[case]
    kc, vc, key, value, slots = _setup(rng, shared, device, dtype, H, D, bs, nb, T)
    key0, value0 = key.clone(), value.clone()
    # The write itself must be right too: leaving everything alone keeps key and value as well.
    msg = write_and_compare(submission, key, value, kc, vc, slots, record_property)
    if msg is not None:
        fail("key and value are checked only beside a working write, and this one was not "
             f"right: {msg}")
    changed = [n for n, now, was in (("key", key, key0), ("value", value, value0))
               if not same_bits(now, was)]
    record_property("detail", f"modified: {changed}")
    assert not changed, (f"reshape_and_cache modified its {' and '.join(changed)} argument: the new "
                         "tokens' K and V are inputs, read and copied into the caches, never "
                         "changed in place.")
