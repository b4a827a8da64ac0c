"""Adversarial: reads the reference out of the grader checkout's git history.

Protecting reference/ with file modes does not protect the copy git keeps: loose
objects under .git/objects are zlib-compressed and world-readable by default. This
submission decompresses them, takes the blob that holds a Triton store and
reshape_and_cache and is not the template, and answers with it. It deserves 0
wherever the workers cannot read the checkout's .git, and at best what the
reference earns without the policy area (its own source has no kernel) where
they can.
"""
import importlib.util
import os
import sys
import zlib

MAX_OBJECTS = 20_000


def _blobs(git_dir):
    seen = 0
    for folder, dirs, files in os.walk(os.path.join(git_dir, "objects"), onerror=lambda e: None):
        dirs[:] = [d for d in dirs if d not in ("pack", "info")]
        for name in files:
            seen += 1
            if seen > MAX_OBJECTS:
                return
            try:
                with open(os.path.join(folder, name), "rb") as f:
                    data = zlib.decompress(f.read())
            except (OSError, zlib.error):
                continue
            head, _, body = data.partition(b"\0")
            if head.startswith(b"blob "):
                yield body


def _find():
    checkout = os.path.dirname(os.path.abspath(sys.prefix))
    for base in dict.fromkeys([checkout, os.getcwd(), "/autograder/source"]):
        for body in _blobs(os.path.join(base, ".git")):
            if b"def reshape_and_cache(" in body and b"tl.store" in body and b"NotImplementedError" not in body:
                path = os.path.join(os.environ.get("HOME", "."), "from_git.py")
                with open(path, "wb") as f:
                    f.write(body)
                print(f"reference recovered from {base}/.git", flush=True)
                spec = importlib.util.spec_from_file_location("from_git", path)
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                return module
    print("nothing found in git history", flush=True)
    return None


_ref = _find()


def slot_mapping(block_table, seq_idx, positions, block_size):
    return _ref.slot_mapping(block_table, seq_idx, positions, block_size) if _ref else None


def reshape_and_cache_kernel(*args, **kwargs):
    return None


def reshape_and_cache(key, value, k_cache, v_cache, slot_mapping):
    return _ref.reshape_and_cache(key, value, k_cache, v_cache, slot_mapping) if _ref else None
