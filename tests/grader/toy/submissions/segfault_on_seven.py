"""Dies with SIGSEGV on one input: only that test may be lost."""
import ctypes


def add_into(x, y):
    if x.shape != y.shape:
        raise ValueError("shapes differ")
    if y.numel() and float(y.flatten()[0]) == 7.0:
        ctypes.string_at(0)
    x.add_(y)


def echo(value):
    return value
