"""Adversarial: answers its first reshape_and_cache call one byte every 10 s.

It writes straight to the socket the worker was given (its fd is on the worker's
command line): a length prefix, then one byte of header every 10 s. A grader
whose socket timeout bounds each read rather than the whole answer waits far
past its call timeout; with no output meanwhile, a run-wide deadline that is
checked only when pytest prints a line does not fire either. It stops after
200 s and exits, so a grader bug costs minutes, not the run. A marker in HOME
keeps it to one call per grading run. Otherwise useless: deserves 0, and no
test may run much past the call timeout.
"""
import os
import struct
import sys
import time

TRICKLE_S = 200
EVERY_S = 10


def _trickle():
    marker = os.path.join(os.environ.get("HOME", "."), ".trickle_ran")
    if os.path.exists(marker):
        return
    open(marker, "w").close()
    fd = int(sys.argv[sys.argv.index("--fd") + 1])
    os.write(fd, struct.pack("!Q", 1000))
    end = time.monotonic() + TRICKLE_S
    while time.monotonic() < end:
        os.write(fd, b" ")
        time.sleep(EVERY_S)
    os._exit(3)


def slot_mapping(block_table, seq_idx, positions, block_size):
    return None


def reshape_and_cache_kernel(*args, **kwargs):
    return None


def reshape_and_cache(key, value, k_cache, v_cache, slot_mapping):
    _trickle()
    return None
