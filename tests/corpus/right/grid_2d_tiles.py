"""Right: a 2-D grid (token, tile of H*D) as vLLM's Triton write does; no early return for T = 0 (the launch is guarded instead).

TILE is min(1024, next_pow2(H*D)); each program copies one tile of one token's row.
"""
import torch
import triton
import triton.language as tl


def slot_mapping(block_table, seq_idx, positions, block_size):
    blocks = block_table[seq_idx, positions // block_size].to(torch.int64)
    return blocks * block_size + positions % block_size


@triton.jit
def reshape_and_cache_kernel(key_ptr, value_ptr, k_cache_ptr, v_cache_ptr, slot_ptr,
                             key_stride, value_stride, HD, TILE: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    tile = tl.program_id(1).to(tl.int64)
    slot = tl.load(slot_ptr + token).to(tl.int64)
    cols = tile * TILE + tl.arange(0, TILE)
    mask = cols < tl.where(slot >= 0, HD, 0)
    k = tl.load(key_ptr + token * key_stride + cols, mask=mask)
    v = tl.load(value_ptr + token * value_stride + cols, mask=mask)
    tl.store(k_cache_ptr + slot * HD + cols, k, mask=mask)
    tl.store(v_cache_ptr + slot * HD + cols, v, mask=mask)


def reshape_and_cache(key, value, k_cache, v_cache, slot_mapping):
    T, H, D = key.shape
    assert k_cache.is_contiguous() and v_cache.is_contiguous(), "caches must be contiguous"
    assert key.stride(2) == 1 and key.stride(1) == D, "key's [H, D] must be contiguous"
    assert value.stride(2) == 1 and value.stride(1) == D, "value's [H, D] must be contiguous"
    HD = H * D
    TILE = min(1024, triton.next_power_of_2(HD))
    grid = (T, triton.cdiv(HD, TILE))
    if T > 0:
        reshape_and_cache_kernel[grid](key, value, k_cache, v_cache, slot_mapping,
                                       key.stride(0), value.stride(0), HD, TILE=TILE)
