"""Right: one program per (token, head), each moving one head's D values.

slot_mapping: one advanced-indexing gather; the block number is widened before the multiply.
"""
import torch
import triton
import triton.language as tl


def slot_mapping(block_table, seq_idx, positions, block_size):
    return block_table[seq_idx, positions // block_size].long() * block_size + positions % block_size


@triton.jit
def reshape_and_cache_kernel(key_ptr, value_ptr, k_cache_ptr, v_cache_ptr, slot_ptr,
                             key_stride, value_stride, H, D, BLOCK_D: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1).to(tl.int64)
    slot = tl.load(slot_ptr + t).to(tl.int64)
    d = tl.arange(0, BLOCK_D)
    mask = d < tl.where(slot >= 0, D, 0)
    src = h * D + d
    dst = (slot * H + h) * D + d
    tl.store(k_cache_ptr + dst, tl.load(key_ptr + t * key_stride + src, mask=mask), mask=mask)
    tl.store(v_cache_ptr + dst, tl.load(value_ptr + t * value_stride + src, mask=mask), mask=mask)


def reshape_and_cache(key, value, k_cache, v_cache, slot_mapping):
    T, H, D = key.shape
    assert k_cache.is_contiguous() and v_cache.is_contiguous(), "caches must be contiguous"
    for name, x in (("key", key), ("value", value)):
        assert (x.stride(1), x.stride(2)) == (D, 1), f"{name}'s [H, D] must be contiguous"
    if T == 0:
        return
    reshape_and_cache_kernel[(T, H)](key, value, k_cache, v_cache, slot_mapping,
                                     key.stride(0), value.stride(0), H, D,
                                     BLOCK_D=triton.next_power_of_2(D))
