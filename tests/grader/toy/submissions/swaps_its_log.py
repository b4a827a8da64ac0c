"""Puts a link to another file in the place of its own log, then dies, so that the grader
opens the link for the next worker (and reads it into the report)."""
import os

print("swaps_its_log imported", flush=True)


def add_into(x, y):
    x.add_(y)


def echo(value):
    return value


def swap(target):
    log = os.path.join(os.path.dirname(os.getcwd()), "worker.log")
    os.unlink(log)
    os.symlink(target, log)
    os._exit(3)
