"""A tiny calculator."""


def mean(values):
    """The arithmetic mean of values."""
    return sum(values) / len(values)
