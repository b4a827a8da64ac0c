def add_into(x, y):
    if x.shape != y.shape:
        raise ValueError("shapes differ")
    x.add_(y)


def echo(value):
    return value
