"""Ignores the polite signals and spins on one input."""
import signal

signal.signal(signal.SIGALRM, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)


def add_into(x, y):
    if x.shape != y.shape:
        raise ValueError("shapes differ")
    while y.numel() and float(y.flatten()[0]) == 13.0:
        pass
    x.add_(y)


def echo(value):
    return value
