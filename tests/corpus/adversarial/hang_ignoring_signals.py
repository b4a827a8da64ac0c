"""Adversarial: ignores the signals a timeout would send and never returns from reshape_and_cache.

SIGALRM (pytest-timeout's signal method), SIGTERM, SIGINT, SIGHUP, SIGXCPU and
SIGVTALRM are ignored; the loop also swallows any exception a handler could
raise. Only SIGKILL ends it. It sleeps rather than spins so that a grading run
costs wall time, not a shared machine's cores, and it gives up after 20 minutes
so a grader bug cannot leave it behind forever. Deserves 0.
"""
import signal
import time

GIVE_UP_S = 1200

for _sig in (signal.SIGALRM, signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGXCPU,
             signal.SIGVTALRM, signal.SIGPROF, signal.SIGUSR1, signal.SIGUSR2):
    signal.signal(_sig, signal.SIG_IGN)


def slot_mapping(block_table, seq_idx, positions, block_size):
    return None


def reshape_and_cache_kernel(*args, **kwargs):
    return None


def reshape_and_cache(key, value, k_cache, v_cache, slot_mapping):
    end = time.monotonic() + GIVE_UP_S
    while time.monotonic() < end:
        try:
            time.sleep(0.2)
        except BaseException:
            pass
    return None
