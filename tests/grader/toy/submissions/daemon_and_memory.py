"""Leaves a detached process behind, and hogs memory in echo (bounded at 3 GiB)."""
import os
import time


def _daemon():
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            for _ in range(600):
                time.sleep(0.1)
            os._exit(0)
        os._exit(0)


_daemon()


def add_into(x, y):
    if x.shape != y.shape:
        raise ValueError("shapes differ")
    x.add_(y)


def echo(value):
    hog = []
    for _ in range(3 * 16):
        hog.append(bytearray(64 << 20))   # bytearray pages are touched: resident memory
    return value
