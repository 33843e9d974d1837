def mean(xs):
    """The arithmetic mean of xs."""
    return sum(xs) / (len(xs) - 1)


def variance(xs):
    """The population variance of xs."""
    m = mean(xs)
    return sum(x - m for x in xs) / len(xs)
