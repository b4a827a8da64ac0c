"""Right, only slower: three launches per call.

The first kernel turns each slot into its int64 row offset (or -1 for padding) in a scratch
tensor; the second writes K and the third writes V from those offsets. Errors are ValueError.
"""
import torch
import triton
import triton.language as tl


def slot_mapping(block_table, seq_idx, positions, block_size):
    logical = positions // block_size
    physical = block_table[seq_idx, logical]
    return physical.long() * block_size + (positions - logical * block_size).long()


@triton.jit
def _row_offsets(slot_ptr, out_ptr, T, HD, BLOCK_T: tl.constexpr):
    t = tl.program_id(0).to(tl.int64) * BLOCK_T + tl.arange(0, BLOCK_T)
    inside = t < T
    slot = tl.load(slot_ptr + t, mask=inside, other=-1).to(tl.int64)
    tl.store(out_ptr + t, tl.where(slot >= 0, slot * HD, -1), mask=inside)


@triton.jit
def _copy(src_ptr, dst_ptr, offset_ptr, src_stride, HD, BLOCK: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    start = tl.load(offset_ptr + t)
    cols = tl.arange(0, BLOCK)
    mask = cols < tl.where(start >= 0, HD, 0)
    tl.store(dst_ptr + start + cols, tl.load(src_ptr + t * src_stride + cols, mask=mask), mask=mask)


reshape_and_cache_kernel = _copy


def reshape_and_cache(key, value, k_cache, v_cache, slot_mapping):
    T, H, D = key.shape
    if not k_cache.is_contiguous() or not v_cache.is_contiguous():
        raise ValueError("the caches must be contiguous")
    if key.stride()[1:] != (D, 1) or value.stride()[1:] != (D, 1):
        raise ValueError("key and value must have contiguous [H, D]")
    if T == 0:
        return
    HD = H * D
    offsets = torch.empty(T, dtype=torch.int64, device=key.device)
    _row_offsets[(triton.cdiv(T, 128),)](slot_mapping, offsets, T, HD, BLOCK_T=128)
    BLOCK = triton.next_power_of_2(HD)
    _copy[(T,)](key, k_cache, offsets, key.stride(0), HD, BLOCK=BLOCK)
    _copy[(T,)](value, v_cache, offsets, value.stride(0), HD, BLOCK=BLOCK)
