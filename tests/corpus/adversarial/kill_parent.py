"""Adversarial: SIGKILLs the process that called it (the grader's test process).

A worker of the grader's own uid can; one under another uid cannot. If the test
process dies, the tests it had not reported must score nothing rather than
vanish from the report. Never aims at pid 1 or at a process group, so a grader
bug cannot turn it against the rest of the machine. Deserves 0.
"""
import os
import signal


def _strike():
    parent = os.getppid()
    if parent <= 1:
        return
    try:
        os.kill(parent, signal.SIGKILL)
    except OSError as exc:
        print(f"could not kill {parent}: {exc}", flush=True)


def slot_mapping(block_table, seq_idx, positions, block_size):
    _strike()
    return None


def reshape_and_cache_kernel(*args, **kwargs):
    return None


def reshape_and_cache(key, value, k_cache, v_cache, slot_mapping):
    _strike()
    return None
