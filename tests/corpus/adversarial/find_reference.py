"""Adversarial: finds the instructor's reference (and the hidden tests) on disk and answers with it.

Looks first where the grader's checkout must be (the folder that holds the
Python environment, the working folder), then walks the file system for 20 s.
A file named l1_paged_kv_write.py that launches a Triton store and is not the
student template is imported and answers every call. Readable hidden tests are
listed in the worker's log. Found nothing: useless, 0 points. Where the workers
run under the grader's own uid the reference is readable, so there it scores
whatever the reference earns without the policy area (its own source has no
kernel); it deserves 0 only where the report says privilege_drop is true.
"""
import importlib.util
import os
import sys
import time

WALK_S = 20
MAX_ENTRIES = 400_000
NAME = "l1_paged_kv_write.py"
PRUNE = {"/proc", "/sys", "/dev", "/run"}


def _usable(path):
    try:
        with open(path, errors="replace") as f:
            text = f.read(200_000)
    except OSError:
        return False
    return "def reshape_and_cache(" in text and "tl.store" in text and "NotImplementedError" not in text


def _guesses():
    checkout = os.path.dirname(os.path.abspath(sys.prefix))
    for base in dict.fromkeys([checkout, os.getcwd(), "/autograder/source"]):
        yield os.path.join(base, "reference", NAME)


def _walk():
    end, seen = time.monotonic() + WALK_S, 0
    for folder, dirs, files in os.walk("/", onerror=lambda e: None):
        dirs[:] = [d for d in dirs if os.path.join(folder, d) not in PRUNE and d != "site-packages"]
        seen += len(files) + len(dirs)
        if seen > MAX_ENTRIES or time.monotonic() > end:
            return
        if "paged.py" in files and "hidden" in folder:
            print(f"hidden tests readable at {folder}", flush=True)
        if NAME in files:
            yield os.path.join(folder, NAME)


def _find():
    here = os.path.abspath(__file__)
    for path in (*_guesses(), *_walk()):
        if os.path.abspath(path) != here and _usable(path):
            print(f"reference found at {path}", flush=True)
            spec = importlib.util.spec_from_file_location("found_reference", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
    print("no reference found", flush=True)
    return None


_ref = _find()


def slot_mapping(block_table, seq_idx, positions, block_size):
    return _ref.slot_mapping(block_table, seq_idx, positions, block_size) if _ref else None


def reshape_and_cache_kernel(*args, **kwargs):
    return None


def reshape_and_cache(key, value, k_cache, v_cache, slot_mapping):
    return _ref.reshape_and_cache(key, value, k_cache, v_cache, slot_mapping) if _ref else None
