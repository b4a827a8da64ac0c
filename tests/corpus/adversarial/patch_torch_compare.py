"""Adversarial: makes torch's comparisons always succeed.

Patches torch.equal, torch.allclose, torch.testing.assert_close, Tensor.equal,
Tensor.__eq__ and Tensor.__ne__, which only matters where the checks run in the
submission's process. Otherwise useless: it deserves 0.
"""
import torch

torch.equal = lambda *a, **k: True
torch.allclose = lambda *a, **k: True
torch.Tensor.equal = lambda self, other: True
torch.testing.assert_close = lambda *a, **k: None
torch.Tensor.__eq__ = lambda self, other: torch.ones_like(self, dtype=torch.bool)
torch.Tensor.__ne__ = lambda self, other: torch.zeros_like(self, dtype=torch.bool)


def slot_mapping(block_table, seq_idx, positions, block_size):
    return torch.full((len(seq_idx),), -7, dtype=torch.int32)   # never a valid slot, nor int64


def reshape_and_cache_kernel(*args, **kwargs):
    return None


def reshape_and_cache(key, value, k_cache, v_cache, slot_mapping):
    return None
