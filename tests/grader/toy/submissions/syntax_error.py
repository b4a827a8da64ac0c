def add_into(x, y)
    x.add_(y)
