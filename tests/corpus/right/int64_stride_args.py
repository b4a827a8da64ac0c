"""Right: every stride is an argument annotated tl.int64 (vLLM's addressing: block, offset
in block), and all offsets are products with the int64 slot or program id.

The caches are addressed through their own strides, not slot*H*D, and the slot is split into
(block, offset) in the kernel. Errors are ValueError, raised before the launch.
"""
import torch
import triton
import triton.language as tl


def slot_mapping(block_table, seq_idx, positions, block_size):
    idx = (seq_idx.long(), torch.div(positions.long(), block_size, rounding_mode="floor"))
    return block_table[idx].long() * block_size + positions.long() % block_size


@triton.jit
def reshape_and_cache_kernel(key_ptr, value_ptr, k_cache_ptr, v_cache_ptr, slot_ptr,
                             key_stride: tl.int64, value_stride: tl.int64,
                             block_stride: tl.int64, row_stride: tl.int64,
                             block_size, HD, BLOCK: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + t).to(tl.int64)
    block = slot // block_size
    offset = slot % block_size
    cols = tl.arange(0, BLOCK)
    mask = cols < tl.where(slot >= 0, HD, 0)
    dst = block * block_stride + offset * row_stride + cols
    k = tl.load(key_ptr + t * key_stride + cols, mask=mask)
    v = tl.load(value_ptr + t * value_stride + cols, mask=mask)
    tl.store(k_cache_ptr + dst, k, mask=mask)
    tl.store(v_cache_ptr + dst, v, mask=mask)


def reshape_and_cache(key, value, k_cache, v_cache, slot_mapping):
    T, H, D = key.shape
    for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
        if not cache.is_contiguous():
            raise ValueError(f"{name} must be contiguous [num_blocks, block_size, H, D]")
    for name, x in (("key", key), ("value", value)):
        if x.stride(2) != 1 or x.stride(1) != D:
            raise ValueError(f"{name}'s [H, D] must be contiguous; only the token stride may differ")
    if T == 0:
        return
    HD = H * D
    reshape_and_cache_kernel[(T,)](key, value, k_cache, v_cache, slot_mapping,
                                   key.stride(0), value.stride(0), k_cache.stride(0), k_cache.stride(1),
                                   k_cache.shape[1], HD, BLOCK=triton.next_power_of_2(HD))
