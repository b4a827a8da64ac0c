"""Adversarial: allocates and touches up to 64 GiB on the first reshape_and_cache call.

Memory is filled 256 MiB at a time, so it is resident, not merely reserved, and
held for two minutes. Bounded at 64 GiB and two minutes so a grader bug cannot
hold a machine for long. A marker in HOME keeps it to the first call of a
grading run (HOME is the sandbox's, kept across worker restarts): one kill
proves the watchdog, and later calls return at once. Deserves 0.
"""
import os
import time

import torch

BOUND = 64 << 30
CHUNK = 256 << 20
HOLD_S = 120


def _hog():
    marker = os.path.join(os.environ.get("HOME", "."), ".memory_hog_ran")
    if os.path.exists(marker):
        return
    try:
        open(marker, "w").close()
    except OSError:
        pass
    held, total = [], 0
    end = time.monotonic() + HOLD_S
    while total < BOUND and time.monotonic() < end:
        try:
            held.append(torch.empty(CHUNK, dtype=torch.uint8).fill_(1))
        except (RuntimeError, MemoryError):
            break
        total += CHUNK
    print(f"holding {total >> 30} GiB", flush=True)
    time.sleep(max(0.0, end - time.monotonic()))


def slot_mapping(block_table, seq_idx, positions, block_size):
    return None


def reshape_and_cache_kernel(*args, **kwargs):
    return None


def reshape_and_cache(key, value, k_cache, v_cache, slot_mapping):
    _hog()
    return None
