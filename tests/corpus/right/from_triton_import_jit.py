"""Right: `from triton import jit` and `import triton.language as tl` only; `@jit` kernel.

slot_mapping uses torch.div / torch.remainder and widens the gathered blocks before the multiply.
"""
import torch
from triton import jit, next_power_of_2
import triton.language as tl


def slot_mapping(block_table, seq_idx, positions, block_size):
    logical = torch.div(positions, block_size, rounding_mode="floor")
    offset = torch.remainder(positions, block_size)
    physical = block_table[seq_idx.long(), logical.long()].to(torch.int64)
    return physical * block_size + offset.to(torch.int64)


@jit
def reshape_and_cache_kernel(k_in, v_in, k_out, v_out, slot_of, k_step, v_step, n, BLOCK: tl.constexpr):
    i = tl.program_id(axis=0).to(tl.int64)
    slot = tl.load(slot_of + i).to(tl.int64)
    j = tl.arange(0, BLOCK)
    m = j < tl.where(slot >= 0, n, 0)
    k_row = tl.load(k_in + i * k_step + j, mask=m)
    v_row = tl.load(v_in + i * v_step + j, mask=m)
    tl.store(k_out + slot * n + j, k_row, mask=m)
    tl.store(v_out + slot * n + j, v_row, mask=m)


def reshape_and_cache(key, value, k_cache, v_cache, slot_mapping):
    T, H, D = key.shape
    if not (k_cache.is_contiguous() and v_cache.is_contiguous()):
        raise ValueError("k_cache and v_cache must be contiguous")
    for t in (key, value):
        assert t.stride()[1:] == (D, 1), "each token's [H, D] must be contiguous"
    if T:
        reshape_and_cache_kernel[(T,)](key, value, k_cache, v_cache, slot_mapping,
                                       key.stride(0), value.stride(0), H * D,
                                       BLOCK=next_power_of_2(H * D))
