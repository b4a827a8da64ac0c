"""Right: the sum is built out of place and copied into x, which still changes x in place."""


def add_into(x, y):
    if tuple(x.shape) != tuple(y.shape):
        raise ValueError(f"x has shape {tuple(x.shape)}, y {tuple(y.shape)}")
    total = x + y
    x.copy_(total)


def echo(value):
    same = value
    return same
