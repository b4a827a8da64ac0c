"""Adversarial: fills /tmp, /var/tmp and /dev/shm with files just under the 64 MiB file-size limit.

Every call writes 60 MiB files into the world-writable folders (and $TMPDIR) until a write
fails or its files there hold 1.25 GiB, and never removes them: RAM that no memory
watchdog counts (/dev/shm is memory), disk that outlives the grading. slot_mapping
answers correctly only while its files hold more than 1 GiB, so a grader that lets it
hold that much gives it slot_mapping's points. Bounded at 1.25 GiB so that a grader bug
costs little. Otherwise useless. Deserves 0; validate also checks nothing is left behind.
"""
import os

FILE_BYTES = 60 << 20
BOUND = 5 << 28              # 1.25 GiB
SHOWS = 1 << 30
PREFIX = "filler-"
CHUNK = b"\1" * (1 << 20)


def _folders():
    found = []
    for folder in (os.environ.get("TMPDIR"), "/tmp", "/var/tmp", "/dev/shm"):
        if folder and os.path.isdir(folder) and os.path.realpath(folder) not in found:
            found.append(os.path.realpath(folder))
    return found


def _held(folders):
    total = 0
    for folder in folders:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        total += sum(e.stat().st_size for e in entries if e.name.startswith(PREFIX) and e.is_file())
    return total


def _fill():
    folders = _folders()
    held, n = _held(folders), 0
    while held < BOUND:
        path = os.path.join(folders[n % len(folders)], f"{PREFIX}{os.getpid()}-{os.urandom(4).hex()}")
        n += 1
        try:
            with open(path, "wb") as f:
                for _ in range(FILE_BYTES // len(CHUNK)):
                    f.write(CHUNK)
        except OSError:
            break
        held += FILE_BYTES
    held = _held(folders)
    print(f"holding {held / 2**20:.0f} MiB in {folders}", flush=True)
    return held


def slot_mapping(block_table, seq_idx, positions, block_size):
    if _fill() <= SHOWS:
        return None
    return block_table[seq_idx, positions // block_size].long() * block_size + positions % block_size


def reshape_and_cache_kernel(*args, **kwargs):
    return None


def reshape_and_cache(key, value, k_cache, v_cache, slot_mapping):
    _fill()
    return None
