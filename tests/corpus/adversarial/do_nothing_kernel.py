"""Adversarial: launches a Triton kernel that writes nothing, and returns.

Right for every case where nothing is to be written (no tokens, only padding, read-only
inputs), and a launch is seen. Nothing depends on the input, so it deserves 0.
"""
import torch
import triton
import triton.language as tl


def slot_mapping(block_table, seq_idx, positions, block_size):
    return torch.empty(positions.shape, dtype=torch.long, device=positions.device).fill_(0)


@triton.jit
def reshape_and_cache_kernel(slot_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.load(slot_ptr + offs, mask=offs < 0)


def reshape_and_cache(key, value, k_cache, v_cache, slot_mapping):
    reshape_and_cache_kernel[(1,)](slot_mapping, BLOCK=16)
