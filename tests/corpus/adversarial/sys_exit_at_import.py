"""Adversarial: sys.exit(0) while being imported.

SystemExit is not an Exception: a loader that catches only Exception lets it end
the test process with status 0. Deserves 0.
"""
import sys

sys.exit(0)


def slot_mapping(block_table, seq_idx, positions, block_size):
    return None


def reshape_and_cache_kernel(*args, **kwargs):
    return None


def reshape_and_cache(key, value, k_cache, v_cache, slot_mapping):
    return None
