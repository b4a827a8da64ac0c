"""Correct, and it starts a thread at import that counts while it runs. echo() returns the
count, so the grader can tell whether the thread ran between two calls."""
import threading
import time

import torch

TICKS = 0


def _tick():
    global TICKS
    while True:
        TICKS += 1
        time.sleep(0.001)


threading.Thread(target=_tick, daemon=True).start()


def add_into(x: torch.Tensor, y: torch.Tensor) -> None:
    x.add_(y)


def echo(value):
    return TICKS
