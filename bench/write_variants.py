"""Other shapes of the L1 write, measured beside the reference by the bench, so that
docs/performance.md shows what was tried on the way to the copy ceiling and what each
shape costs. Each keeps the reference's contract (int64 offsets, slot -1 skipped, key
and value read with their own row strides); they differ only in how the work is cut.
"""
from __future__ import annotations

import types

import triton
import triton.language as tl


@triton.jit
def _write(key_ptr, value_ptr, k_cache_ptr, v_cache_ptr, slot_ptr, key_stride, value_stride, T, HD,
           BLOCK: tl.constexpr, TOKENS: tl.constexpr, EARLY_LOADS: tl.constexpr,
           STREAM_STORES: tl.constexpr, EVICT_LOADS: tl.constexpr):
    t = tl.program_id(0).to(tl.int64) * TOKENS + tl.arange(0, TOKENS).to(tl.int64)
    slot = tl.load(slot_ptr + t, mask=t < T, other=-1).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    store_mask = offs[None, :] < tl.where(slot >= 0, HD, 0)[:, None]
    if EARLY_LOADS:     # rows are read without waiting for the slot (padding rows read too)
        load_mask = (offs[None, :] < HD) & (t[:, None] < T)
    else:
        load_mask = store_mask
    if EVICT_LOADS:
        k = tl.load(key_ptr + t[:, None] * key_stride + offs[None, :], mask=load_mask, eviction_policy="evict_first")
        v = tl.load(value_ptr + t[:, None] * value_stride + offs[None, :], mask=load_mask,
                    eviction_policy="evict_first")
    else:
        k = tl.load(key_ptr + t[:, None] * key_stride + offs[None, :], mask=load_mask)
        v = tl.load(value_ptr + t[:, None] * value_stride + offs[None, :], mask=load_mask)
    dst = slot[:, None] * HD + offs[None, :]
    if STREAM_STORES:
        tl.store(k_cache_ptr + dst, k, mask=store_mask, cache_modifier=".cs")
        tl.store(v_cache_ptr + dst, v, mask=store_mask, cache_modifier=".cs")
    else:
        tl.store(k_cache_ptr + dst, k, mask=store_mask)
        tl.store(v_cache_ptr + dst, v, mask=store_mask)

def _variant(tokens=1, warps=1, early_loads=False, stream_stores=False, evict_loads=False):
    def reshape_and_cache(key, value, k_cache, v_cache, slot_mapping):
        T, H, D = key.shape
        _write[(triton.cdiv(T, tokens),)](key, value, k_cache, v_cache, slot_mapping, key.stride(0),
                                          value.stride(0), T, H * D, BLOCK=1 << (H * D - 1).bit_length(),
                                          TOKENS=tokens, EARLY_LOADS=early_loads, STREAM_STORES=stream_stores,
                                          EVICT_LOADS=evict_loads, num_warps=warps)
    return types.SimpleNamespace(reshape_and_cache=reshape_and_cache)


# name -> (what differs from the reference, the module to measure)
VARIANTS = {
    "2 warps": ("one token per program, two warps", _variant(warps=2)),
    "early loads": ("key/value loads do not wait for the slot; padding rows are read too",
                    _variant(early_loads=True)),
    "streaming stores": ("stores marked .cs (evict first)", _variant(stream_stores=True)),
    "evict-first loads": ("loads marked evict_first", _variant(evict_loads=True)),
    "2 tokens, 2 warps": ("two tokens per program", _variant(tokens=2, warps=2)),
    "4 tokens, 4 warps, early loads": ("four tokens per program, loads not waiting for the slot",
                                       _variant(tokens=4, warps=4, early_loads=True)),
}
