"""int64_overflow: offsets are int64, because slot*H*D passes 2**31 on a 100,000-block cache
(vLLM issue #1486: reshape_and_cache overflowed at 64k blocks with H=32, D=128).

Two fp16 caches of 100,000 blocks x 16 x 32 heads x 128 (13 GB each) come from the
`shared` allocator. Each test touches only a few windows of 256 consecutive slots (2 MiB of
one cache), and names them: on the GPU only those windows get memory, so any store outside
them is an illegal memory access; on the CPU the caches are sparse files. With H*D = 4096:
  slot*H*D >= 2**31 from slot 524,288 on, and >= 2**32 from slot 1,048,576 on.
An int32 offset for a slot in [2**20, 1.5 * 2**20) wraps to slot*H*D - 2**32, a row that
lies inside the cache, so the damage can be seen there (its window is backed too); for the
other slots past 2**31 it wraps to a negative offset, before the cache: a segmentation fault
of the worker on the CPU, an illegal memory access on the GPU. Every backed row that no token
maps to is checked to be still zero."""
import pytest
import torch

from paged import bits, call, error_hint, fail, raised_message, raised_type

pytestmark = pytest.mark.area("int64_overflow")

NB, BS, H, D = 100_000, 16, 32, 128
HD = H * D
NUM_SLOTS = NB * BS
DTYPE = torch.float16
WRAP = 2**32 // HD   # a wrapped int32 offset of slot s points at row s - WRAP
LOW = 2**31 // HD    # first slot whose offset passes 2**31


WINDOW = 256          # slots per window: 2 MiB of one cache at H*D = 4096 in fp16
WRAP_W = WRAP // WINDOW


def _windows(rng, lo, hi, n, avoid):
    """n distinct window numbers in [lo, hi) that are not in `avoid`."""
    out = []
    while len(out) < n:
        w = int(torch.randint(lo, hi, (1,), generator=rng))
        if w not in avoid and w not in out:
            out.append(w)
    return out


def _slots_in(rng, windows, per_window, skip=(0,)):
    """per_window distinct slots in each window, never one of `skip` (slot 0 is padding's question)."""
    out = []
    for w in windows:
        rows = (torch.randperm(WINDOW, generator=rng) + w * WINDOW).tolist()
        out += [r for r in rows if r not in skip][:per_window]
    return out


def _backed(windows):
    """The byte ranges of one cache the test may touch."""
    row = HD * DTYPE.itemsize
    return [(w * WINDOW * row, (w + 1) * WINDOW * row) for w in sorted(set(windows))]


def _run(submission, rng, shared, device, slots, windows, record_property):
    """Write T tokens at `slots` into two zeroed 13 GB caches, with memory behind `windows`
    only; return copies of key and value as they were before the call, and the caches."""
    T = len(slots)
    k_cache = shared.zeros((NB, BS, H, D), DTYPE, backed=_backed(windows))
    v_cache = shared.zeros((NB, BS, H, D), DTYPE, backed=_backed(windows))
    key = torch.randn((T, H, D), generator=rng).to(DTYPE).to(device)
    value = torch.randn((T, H, D), generator=rng).to(DTYPE).to(device)
    key0, value0 = key.clone(), value.clone()
    slot_t = torch.tensor(slots, dtype=torch.int64)
    _, err = call(submission.reshape_and_cache, key, value, k_cache, v_cache, slot_t.to(device))
    if err is not None:
        record_property("detail", f"raised {raised_type(err)}: {raised_message(err, 1000)}")
        fail(error_hint("reshape_and_cache", err))
    return key0, value0, k_cache, v_cache


def _rows(cache, idx):
    return bits(cache.view(-1, HD)[torch.as_tensor(idx, dtype=torch.int64, device=cache.device)])


def _written_ok(cache, src, slots):
    """Which tokens' rows hold exactly their values."""
    return (_rows(cache, slots) == bits(src).reshape(-1, HD).to(cache.device)).all(1).cpu()


def _nonzero_rows(cache, idx):
    return int((_rows(cache, idx) != 0).any(1).sum()) if len(idx) else 0


def _untouched_rows(windows, written):
    """Every backed row that no token maps to."""
    written = set(written)
    return [r for w in sorted(set(windows)) for r in range(w * WINDOW, (w + 1) * WINDOW) if r not in written]


OVERFLOW_HINT = ("slot*H*D passed 2**31 and the offset overflowed int32: the values went to "
                 "the wrong place. Convert the slot to int64 before multiplying "
                 "(slot.to(tl.int64) * HD), so every offset is computed in int64.")


def _verdict(slots, k_ok, v_ok, past, stray, overflow_hint, wrapped_hits=0):
    """Fail with the most telling hint, or return when every checked row is right."""
    bad = ~(k_ok & v_ok)
    if bad.nonzero().flatten().tolist() == [len(slots) - 1]:
        fail("the last token of the batch was not written: launch one program per token, grid (T,).")
    if bool(bad[~past].any()):
        fail("tokens at small slots (offset below 2**31) were not copied exactly: the write itself "
             "is wrong, before any overflow question.")
    if wrapped_hits:
        fail(overflow_hint + " Here the rows landed 2**32 elements early, on other slots' data, "
             "as in a silent int32 wrap-around.")
    if bool(bad.any()):
        fail(overflow_hint)
    if stray:
        fail("rows that no token maps to were written on the large cache: offsets must be "
             "slot*H*D computed in int64.")


def test_offsets_past_2_32_land_in_their_rows(submission, rng, shared, device, record_property):
    """Slots whose offset slot*H*D passes 2**32 are written at their own rows, not at a wrapped offset"""
    high_w = _windows(rng, WRAP_W, WRAP_W + 2**19 // WINDOW, 4, set())
    wrapped_w = [w - WRAP_W for w in high_w]
    low_w = _windows(rng, 0, LOW // WINDOW, 2, set(wrapped_w))   # below 2**31: right even in int32
    spare_w = _windows(rng, 0, NUM_SLOTS // WINDOW, 2, set(high_w + wrapped_w + low_w))
    high = _slots_in(rng, high_w, 6)
    wrapped = [s - WRAP for s in high]
    slots = high + _slots_in(rng, low_w, 4)
    order = torch.randperm(len(slots), generator=rng).tolist()
    slots = [slots[i] for i in order]
    windows = high_w + wrapped_w + low_w + spare_w
    key, value, kc, vc = _run(submission, rng, shared, device, slots, windows, record_property)

    k_ok, v_ok = _written_ok(kc, key, slots), _written_ok(vc, value, slots)
    is_high = torch.tensor([s >= WRAP for s in slots])
    hits = _nonzero_rows(kc, wrapped) + _nonzero_rows(vc, wrapped)
    others = _untouched_rows(windows, slots)
    stray = _nonzero_rows(kc, others) + _nonzero_rows(vc, others)
    record_property("detail", f"high rows ok k={int(k_ok[is_high].sum())}/{int(is_high.sum())} "
                    f"v={int(v_ok[is_high].sum())}; low rows ok k={int(k_ok[~is_high].sum())}/"
                    f"{int((~is_high).sum())}; int32-wrapped rows written={hits}; stray={stray} "
                    f"of {len(others)} rows no token maps to")
    _verdict(slots, k_ok, v_ok, is_high, stray, OVERFLOW_HINT, wrapped_hits=hits)


def test_offsets_between_2_31_and_2_32(submission, rng, shared, device, record_property):
    """Slots whose offset slot*H*D lies between 2**31 and 2**32 (and the last slot) are written exactly"""
    last_w = NUM_SLOTS // WINDOW - 1
    mid_w = _windows(rng, LOW // WINDOW, WRAP_W, 3, set())
    top_w = _windows(rng, WRAP_W + 2**19 // WINDOW, last_w, 2, set()) + [last_w]
    low_w = _windows(rng, 0, LOW // WINDOW, 2, set())
    spare_w = _windows(rng, 0, NUM_SLOTS // WINDOW, 2, set(mid_w + top_w + low_w))
    top = _slots_in(rng, top_w, 4, skip=(0, NUM_SLOTS - 1))[:11] + [NUM_SLOTS - 1]
    slots = _slots_in(rng, mid_w, 4) + top + _slots_in(rng, low_w, 4)
    order = torch.randperm(len(slots), generator=rng).tolist()
    slots = [slots[i] for i in order]
    windows = mid_w + top_w + low_w + spare_w
    key, value, kc, vc = _run(submission, rng, shared, device, slots, windows, record_property)

    k_ok, v_ok = _written_ok(kc, key, slots), _written_ok(vc, value, slots)
    past = torch.tensor([s >= LOW for s in slots])
    others = _untouched_rows(windows, slots)
    stray = _nonzero_rows(kc, others) + _nonzero_rows(vc, others)
    record_property("detail", f"rows past 2**31 ok k={int(k_ok[past].sum())}/{int(past.sum())} "
                    f"v={int(v_ok[past].sum())}; below ok k={int(k_ok[~past].sum())}/"
                    f"{int((~past).sum())}; stray={stray} of {len(others)} rows no token maps to")
    _verdict(slots, k_ok, v_ok, past, stray,
             OVERFLOW_HINT + " In int32 these offsets wrap to negative numbers, before the start "
             "of the cache.")
