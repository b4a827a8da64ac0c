"""Right: the kernel is made with triton.jit(f), no decorator, and launched through an alias.

slot_mapping flattens the block table and gathers with index_select.
"""
import torch
import triton
import triton.language as tl


def slot_mapping(block_table, seq_idx, positions, block_size):
    seq = seq_idx.long()
    pos = positions.long()
    flat = seq * block_table.shape[1] + pos // block_size       # row-major index into the table
    blocks = block_table.reshape(-1).index_select(0, flat).long()
    return blocks * block_size + pos % block_size


def _copy_rows(k_src, v_src, k_dst, v_dst, slots, k_row_stride, v_row_stride, row_len,
               BLOCK: tl.constexpr):
    tok = tl.program_id(0).to(tl.int64)
    s = tl.load(slots + tok).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    keep = cols < tl.where(s >= 0, row_len, 0)
    base = s * row_len
    tl.store(k_dst + base + cols, tl.load(k_src + tok * k_row_stride + cols, mask=keep), mask=keep)
    tl.store(v_dst + base + cols, tl.load(v_src + tok * v_row_stride + cols, mask=keep), mask=keep)


copy_rows = triton.jit(_copy_rows)
reshape_and_cache_kernel = copy_rows


def reshape_and_cache(key, value, k_cache, v_cache, slot_mapping):
    n_tokens, heads, head_size = key.shape
    assert k_cache.is_contiguous(), "k_cache must be contiguous"
    assert v_cache.is_contiguous(), "v_cache must be contiguous"
    assert key.stride(2) == 1 and key.stride(1) == head_size, "key's heads must be contiguous"
    assert value.stride(2) == 1 and value.stride(1) == head_size, "value's heads must be contiguous"
    if n_tokens == 0:
        return
    row = heads * head_size
    launch = reshape_and_cache_kernel
    launch[(n_tokens,)](key, value, k_cache, v_cache, slot_mapping, key.stride(0), value.stride(0), row,
                        BLOCK=triton.next_power_of_2(row))
