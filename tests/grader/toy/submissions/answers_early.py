"""Answers before its work is done: add_into returns at once and a thread adds 0.4 s later,
as a GPU submission whose patched synchronize answers before its kernels finish."""
import threading
import time


def _later(seconds, x, y):
    def late():
        time.sleep(seconds)
        x.add_(y)
    threading.Thread(target=late, daemon=True).start()


def add_into(x, y):
    _later(0.4, x, y)


def add_into_much_later(x, y):
    """Its work lands 5 s after the answer: past any window the grader gives an answer that took
    even a quarter of a second, on a machine however busy."""
    _later(5.0, x, y)


def echo(value):
    return value
