"""A correct but slow write: one program per (token, head) moving 64 values per step.

Expected: every correctness area passes; performance earns partial credit at best.
"""
import torch, triton, triton.language as tl

def slot_mapping(block_table, seq_idx, positions, block_size):
    """int64 slot of each new token: physical block * block_size + offset.

    block_table[s, i] is the physical block that holds logical block i of
    sequence s; positions are counted inside each token's own sequence.
    Advanced indexing gathers all T entries at once: no Python loop."""
    logical_block = positions // block_size                     # which page of its sequence
    physical_block = block_table[seq_idx, logical_block].long()  # one gather for all T tokens
    return physical_block * block_size + positions % block_size


@triton.jit
def reshape_and_cache_kernel(key_ptr, value_ptr, k_cache_ptr, v_cache_ptr, slot_ptr,
                             key_stride, value_stride, HD, D, BLOCK_D: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1).to(tl.int64)
    slot = tl.load(slot_ptr + t).to(tl.int64)
    n_valid = tl.where(slot >= 0, D, 0)
    for start in range(0, D, 64):          # 64-wide pieces: many small loads per head
        offs = start + tl.arange(0, 64)
        mask = offs < n_valid
        k = tl.load(key_ptr + t * key_stride + h * D + offs, mask=mask)
        v = tl.load(value_ptr + t * value_stride + h * D + offs, mask=mask)
        tl.store(k_cache_ptr + slot * HD + h * D + offs, k, mask=mask)
        tl.store(v_cache_ptr + slot * HD + h * D + offs, v, mask=mask)


def reshape_and_cache(key, value, k_cache, v_cache, slot_mapping):
    """Correct but slow: one program per (token, head), 64 values at a time."""
    T, H, D = key.shape
    assert k_cache.is_contiguous() and v_cache.is_contiguous(), "caches must be contiguous"
    for name, x in (("key", key), ("value", value)):
        assert x.stride(2) == 1 and x.stride(1) == D, f"{name}'s [H, D] must be contiguous"
    if T == 0:
        return
    reshape_and_cache_kernel[(T, H)](key, value, k_cache, v_cache, slot_mapping,
                                     key.stride(0), value.stride(0), H * D, D, BLOCK_D=64)
