"""Adversarial: answers that ignore their input.

slot_mapping returns zeros of the right shape and dtype, which is the right answer for an
empty batch; reshape_and_cache raises AssertionError, which is the right answer for a layout
the kernel cannot address. Neither depends on the input, so it deserves 0.
"""
import torch


def slot_mapping(block_table, seq_idx, positions, block_size):
    return torch.zeros(positions.shape, dtype=torch.long, device=positions.device)


def reshape_and_cache_kernel(*args, **kwargs):
    raise NotImplementedError


def reshape_and_cache(key, value, k_cache, v_cache, slot_mapping):
    raise AssertionError("not implemented")
