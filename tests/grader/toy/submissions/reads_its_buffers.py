"""Looks at the whole storage behind what it is given, past the tensor's own bytes."""
import torch


def storage_bytes(x):
    """Every byte of x's storage, the part x does not cover included."""
    return torch.empty(0, dtype=torch.uint8).set_(x.untyped_storage()).clone()


def fill(x, value):
    x.fill_(value)


def fill_past(x, value):
    """Writes the whole storage behind x, its bytes past x included."""
    torch.empty(0, dtype=torch.uint8).set_(x.untyped_storage()).fill_(value)
