"""Right: @triton.heuristics computes BLOCK from the row length, stacked on @triton.jit.

slot_mapping widens the block table to int64 before indexing it.
"""
import torch
import triton
import triton.language as tl


def slot_mapping(block_table, seq_idx, positions, block_size):
    table = block_table.long()
    pos = positions.long()
    return table[seq_idx.long(), pos // block_size] * block_size + pos % block_size


@triton.heuristics({"BLOCK": lambda args: triton.next_power_of_2(args["HD"])})
@triton.jit
def reshape_and_cache_kernel(key_ptr, value_ptr, k_cache_ptr, v_cache_ptr, slot_ptr,
                             key_stride, value_stride, HD, BLOCK: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + t).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < tl.where(slot >= 0, HD, 0)
    k = tl.load(key_ptr + t * key_stride + offs, mask=mask)
    v = tl.load(value_ptr + t * value_stride + offs, mask=mask)
    tl.store(k_cache_ptr + slot * HD + offs, k, mask=mask)
    tl.store(v_cache_ptr + slot * HD + offs, v, mask=mask)


def reshape_and_cache(key, value, k_cache, v_cache, slot_mapping):
    T, H, D = key.shape
    assert k_cache.is_contiguous() and v_cache.is_contiguous(), "caches must be contiguous"
    assert key.stride(1) == D and key.stride(2) == 1, "key's [H, D] must be contiguous"
    assert value.stride(1) == D and value.stride(2) == 1, "value's [H, D] must be contiguous"
    if T == 0:
        return
    reshape_and_cache_kernel[(T,)](key, value, k_cache, v_cache, slot_mapping,
                                   key.stride(0), value.stride(0), H * D)
