"""Adversarial: allocates and touches up to 64 GiB in every call, and never returns in between.

Unlike memory_hog (once per grading), each call of each function fills memory 256 MiB at
a time, so every call meets the memory limit: killed by the watchdog or refused an
allocation. A grader that replaces the worker and carries on costs seconds per call
for every test; it must give up after a few calls that end this way. Bounded at 64 GiB.
Otherwise useless. Deserves 0, and its grading must be quick.
"""
import torch

BOUND = 64 << 30
CHUNK = 256 << 20


def _hog():
    held = []
    while len(held) * CHUNK < BOUND:
        held.append(torch.empty(CHUNK, dtype=torch.uint8).fill_(1))


def slot_mapping(block_table, seq_idx, positions, block_size):
    _hog()


def reshape_and_cache_kernel(*args, **kwargs):
    return None


def reshape_and_cache(key, value, k_cache, v_cache, slot_mapping):
    _hog()
