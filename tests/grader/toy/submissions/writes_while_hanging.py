"""Ignores the polite signals and, on one input, writes files in its folder until killed:
whoever removes its folders while it still runs meets a folder that keeps filling."""
import os
import signal

signal.signal(signal.SIGALRM, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)


def add_into(x, y):
    if x.shape != y.shape:
        raise ValueError("shapes differ")
    i = 0
    while y.numel() and float(y.flatten()[0]) == 13.0:
        name = f"busy-{i % 64}"
        with open(name, "w") as f:        # the worker's working folder: its scratch's home
            f.write("x")
        if i % 64 == 63:
            for k in range(64):
                os.unlink(f"busy-{k}")
        i += 1
    x.add_(y)


def echo(value):
    return value
