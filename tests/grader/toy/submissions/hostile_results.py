"""Right on add; echo returns things the grader must refuse or neutralise."""
import os

import torch


class AlwaysEqual(torch.Tensor):
    def __eq__(self, other):
        return True


class Payload:
    def __reduce__(self):
        return (os.system, ("touch /tmp/toy-pwned",))


def add_into(x, y):
    if x.shape != y.shape:
        raise ValueError("shapes differ")
    x.add_(y)


def echo(value):
    if isinstance(value, torch.Tensor):
        return torch.zeros_like(value).as_subclass(AlwaysEqual)
    return Payload()
