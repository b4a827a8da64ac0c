"""Right: a 2-D grid from `lambda meta:` (token, tile of H*D), with the tile size passed as a
meta-parameter and no autotune.
"""
import torch
import triton
import triton.language as tl


def slot_mapping(block_table, seq_idx, positions, block_size):
    page = block_table[seq_idx, positions // block_size].long()
    return page * block_size + positions % block_size


@triton.jit
def reshape_and_cache_kernel(key_ptr, value_ptr, k_cache_ptr, v_cache_ptr, slot_ptr,
                             key_stride, value_stride, HD, TILE: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * TILE + tl.arange(0, TILE)
    slot = tl.load(slot_ptr + t).to(tl.int64)
    mask = offs < tl.where(slot >= 0, HD, 0)
    tl.store(k_cache_ptr + slot * HD + offs, tl.load(key_ptr + t * key_stride + offs, mask=mask), mask=mask)
    tl.store(v_cache_ptr + slot * HD + offs, tl.load(value_ptr + t * value_stride + offs, mask=mask), mask=mask)


def reshape_and_cache(key, value, k_cache, v_cache, slot_mapping):
    T, H, D = key.shape
    assert k_cache.is_contiguous() and v_cache.is_contiguous(), "caches must be contiguous"
    assert key.stride(2) == 1 and key.stride(1) == D, "key's [H, D] must be contiguous"
    assert value.stride(2) == 1 and value.stride(1) == D, "value's [H, D] must be contiguous"
    if T == 0:
        return
    HD = H * D
    grid = lambda meta: (T, triton.cdiv(HD, meta["TILE"]))  # noqa: E731
    reshape_and_cache_kernel[grid](key, value, k_cache, v_cache, slot_mapping, key.stride(0),
                                   value.stride(0), HD, TILE=min(1024, triton.next_power_of_2(HD)))
