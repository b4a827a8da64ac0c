"""Adversarial: os._exit(0) while being imported.

A grader that imports submissions into its test process dies with status 0 and,
if it trusts that status, passes. Deserves 0.
"""
import os

os._exit(0)


def slot_mapping(block_table, seq_idx, positions, block_size):
    return None


def reshape_and_cache_kernel(*args, **kwargs):
    return None


def reshape_and_cache(key, value, k_cache, v_cache, slot_mapping):
    return None
