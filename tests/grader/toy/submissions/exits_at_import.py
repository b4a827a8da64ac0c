import os

os._exit(0)


def add_into(x, y):
    x.add_(y)


def echo(value):
    return value
