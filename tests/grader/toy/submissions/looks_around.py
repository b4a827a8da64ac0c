"""Probes the worker's file system from inside: what it can read, list and write."""
import os


def add_into(x, y):
    x.add_(y)


def read(path):
    """The file's first 4 KB as text, or None where it cannot be read."""
    try:
        with open(path, errors="replace") as f:
            return f.read(4096)
    except OSError:
        return None


def listing(path):
    """The names in a folder, sorted, or None where it cannot be listed."""
    try:
        return sorted(os.listdir(path))
    except OSError:
        return None


def write(path):
    """True if a file could be created at path (and is removed again)."""
    try:
        with open(path, "x") as f:
            f.write("x")
        os.unlink(path)
        return True
    except OSError:
        return False


def where():
    return os.getcwd()


def bytecode_prefix():
    import sys
    return sys.pycache_prefix


def import_writing_bytecode(name):
    """Import `name` with bytecode writing turned back on: where would its bytecode go?"""
    import importlib
    import sys
    sys.dont_write_bytecode = False
    module = importlib.import_module(name)
    return importlib.util.cache_from_source(module.__file__)
