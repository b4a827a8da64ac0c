"""Right: a small class holds the kernel and launches it with `.run(...)`.

slot_mapping splits each position with divmod-style arithmetic in int64 first.
"""
import torch
import triton
import triton.language as tl


def slot_mapping(block_table, seq_idx, positions, block_size):
    pos = positions.long()
    logical, offset = pos // block_size, pos - (pos // block_size) * block_size
    return block_table[seq_idx.long(), logical].long() * block_size + offset


@triton.jit
def reshape_and_cache_kernel(key_ptr, value_ptr, k_cache_ptr, v_cache_ptr, slot_ptr,
                             key_stride, value_stride, HD, BLOCK: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + t).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < tl.where(slot >= 0, HD, 0)
    tl.store(k_cache_ptr + slot * HD + offs, tl.load(key_ptr + t * key_stride + offs, mask=mask), mask=mask)
    tl.store(v_cache_ptr + slot * HD + offs, tl.load(value_ptr + t * value_stride + offs, mask=mask), mask=mask)


class CacheWriter:
    """Checks the layout, then launches one program per token."""

    def __init__(self, kernel):
        self.kernel = kernel

    @staticmethod
    def check(key, value, k_cache, v_cache):
        D = key.shape[2]
        assert k_cache.is_contiguous() and v_cache.is_contiguous(), "caches must be contiguous"
        assert key.stride(2) == 1 and key.stride(1) == D, "key's [H, D] must be contiguous"
        assert value.stride(2) == 1 and value.stride(1) == D, "value's [H, D] must be contiguous"

    def __call__(self, key, value, k_cache, v_cache, slots):
        self.check(key, value, k_cache, v_cache)
        T, H, D = key.shape
        if T == 0:
            return
        self.kernel.run(key, value, k_cache, v_cache, slots, key.stride(0), value.stride(0), H * D,
                        BLOCK=triton.next_power_of_2(H * D), grid=(T,), warmup=False)


_writer = CacheWriter(reshape_and_cache_kernel)


def reshape_and_cache(key, value, k_cache, v_cache, slot_mapping):
    _writer(key, value, k_cache, v_cache, slot_mapping)
