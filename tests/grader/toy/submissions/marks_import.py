"""Notes each import in ~/imports (the worker's home) and keeps a thread busy from then on."""
import os
import threading

with open(os.path.expanduser("~/imports"), "a") as f:
    f.write(f"{os.getpid()}\n")


def _spin():
    while True:
        pass


threading.Thread(target=_spin, daemon=True).start()


def echo(value):
    return value
