"""Adversarial: floods stdout and stderr while being imported.

Tries to write 2 GiB to each (4 GiB in all, then stops) in 1 MiB chunks, carrying
on past write errors: a grader that buffers a worker's output in memory or a
pipe, or lets it fill the disk, suffers. Python ignores SIGXFSZ, so an output
limit shows up here as failed writes, not a dead process. Deserves 0.
"""
import os

BOUND = 4 << 30
_CHUNK = b"flood " * ((1 << 20) // 6) + b"\n"


def _flood():
    attempted, written = 0, 0
    while attempted < BOUND:
        for fd in (1, 2):
            try:
                written += os.write(fd, _CHUNK)
            except OSError:
                pass
            attempted += len(_CHUNK)
    return written


_flood()


def slot_mapping(block_table, seq_idx, positions, block_size):
    return None


def reshape_and_cache_kernel(*args, **kwargs):
    return None


def reshape_and_cache(key, value, k_cache, v_cache, slot_mapping):
    return None
