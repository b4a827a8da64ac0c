"""Right: key rows and cache rows are read and written through tl.make_block_ptr with a
boundary check instead of a mask; a padding token is skipped by an `if` in the kernel.
"""
import torch
import triton
import triton.language as tl


def slot_mapping(block_table, seq_idx, positions, block_size):
    page = block_table[seq_idx, positions // block_size].long()
    return page * block_size + positions % block_size


@triton.jit
def reshape_and_cache_kernel(key_ptr, value_ptr, k_cache_ptr, v_cache_ptr, slot_ptr,
                             key_stride, value_stride, HD, BLOCK: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + t).to(tl.int64)
    if slot >= 0:
        # one row of H*D values each: the row's start is int64 pointer arithmetic
        k_src = tl.make_block_ptr(key_ptr + t * key_stride, shape=(HD,), strides=(1,), offsets=(0,),
                                  block_shape=(BLOCK,), order=(0,))
        v_src = tl.make_block_ptr(value_ptr + t * value_stride, shape=(HD,), strides=(1,), offsets=(0,),
                                  block_shape=(BLOCK,), order=(0,))
        k_dst = tl.make_block_ptr(k_cache_ptr + slot * HD, shape=(HD,), strides=(1,), offsets=(0,),
                                  block_shape=(BLOCK,), order=(0,))
        v_dst = tl.make_block_ptr(v_cache_ptr + slot * HD, shape=(HD,), strides=(1,), offsets=(0,),
                                  block_shape=(BLOCK,), order=(0,))
        tl.store(k_dst, tl.load(k_src, boundary_check=(0,)), boundary_check=(0,))
        tl.store(v_dst, tl.load(v_src, boundary_check=(0,)), boundary_check=(0,))


def reshape_and_cache(key, value, k_cache, v_cache, slot_mapping):
    T, H, D = key.shape
    assert k_cache.is_contiguous() and v_cache.is_contiguous(), "caches must be contiguous"
    assert key.stride(2) == 1 and key.stride(1) == D, "key's [H, D] must be contiguous"
    assert value.stride(2) == 1 and value.stride(1) == D, "value's [H, D] must be contiguous"
    if T == 0:
        return
    reshape_and_cache_kernel[(T,)](key, value, k_cache, v_cache, slot_mapping, key.stride(0),
                                   value.stride(0), H * D, BLOCK=triton.next_power_of_2(H * D))
