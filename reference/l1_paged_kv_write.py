"""L1 - paged KV-cache write, the step vLLM runs before every forward pass.

k_cache and v_cache are contiguous [num_blocks, block_size, H, D]. Because they
are contiguous, (physical block, offset in block) folds into a single "slot"
index, and slot s owns the H*D values at flat offsets [s*H*D, (s+1)*H*D).
Writing one token therefore needs nothing but its slot; slot -1 marks a padding
token that must be skipped.

  slot_mapping              block-table lookup, pure PyTorch     (lines 15-25)
  reshape_and_cache_kernel  one Triton program per token         (lines 28-46)
  reshape_and_cache         host-side checks, then the launch    (lines 49-62)
"""
import torch, triton, triton.language as tl

def slot_mapping(block_table, seq_idx, positions, block_size):
    """int64 slot of each new token: physical block * block_size + offset.

    block_table[s, i] is the physical block that holds logical block i of
    sequence s; positions are counted inside each token's own sequence.
    Advanced indexing gathers all T entries at once: no Python loop."""
    ### BEGIN SOLUTION
    logical_block = positions // block_size                     # which page of its sequence
    physical_block = block_table[seq_idx, logical_block].long()  # one gather for all T tokens
    return physical_block * block_size + positions % block_size
    ### END SOLUTION


@triton.jit
def reshape_and_cache_kernel(key_ptr, value_ptr, k_cache_ptr, v_cache_ptr, slot_ptr,
                             key_stride, value_stride, HD, BLOCK: tl.constexpr):
    ### BEGIN SOLUTION
    t = tl.program_id(0).to(tl.int64)             # this program's token
    slot = tl.load(slot_ptr + t).to(tl.int64)     # int64 before any multiply
    # Not `mask = (offs < HD) & (slot >= 0)`: that ANDs a scalar with a vector,
    # which the CPU interpreter (TRITON_INTERPRET=1) rejects. Folding the slot
    # test into the bound means the same thing and runs on both back ends.
    n_valid = tl.where(slot >= 0, HD, 0)          # padding (-1) moves nothing
    offs = tl.arange(0, BLOCK)                    # the token's H*D values as 1-D
    mask = offs < n_valid
    # key may be a view of a fused QKV tensor: rows key_stride apart, each contiguous.
    k = tl.load(key_ptr + t * key_stride + offs, mask=mask)
    v = tl.load(value_ptr + t * value_stride + offs, mask=mask)
    dst = slot * HD + offs                        # slot*H*D can pass 2**31
    tl.store(k_cache_ptr + dst, k, mask=mask)
    tl.store(v_cache_ptr + dst, v, mask=mask)
    ### END SOLUTION


def reshape_and_cache(key, value, k_cache, v_cache, slot_mapping):
    """Copy key/value [T, H, D] into k_cache/v_cache at the slots in slot_mapping [T]."""
    ### BEGIN SOLUTION
    T, H, D = key.shape
    assert k_cache.is_contiguous() and v_cache.is_contiguous(), "caches must be contiguous"
    for name, x in (("key", key), ("value", value)):
        assert x.stride(2) == 1 and x.stride(1) == D, f"{name}'s [H, D] must be contiguous"
    if T == 0:
        return
    HD = H * D                                # one token's values, copied as one row
    reshape_and_cache_kernel[(T,)](key, value, k_cache, v_cache, slot_mapping,
                                   key.stride(0), value.stride(0), HD, BLOCK=triton.next_power_of_2(HD),
                                   num_warps=max(1, HD // 4096))  # one warp streams up to 4096 values best (measured)
    ### END SOLUTION
