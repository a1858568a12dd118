"""Small statistics helpers."""


def mean(values):
    """The arithmetic mean of `values` (a float); ValueError when there are none."""
    return sum(values) / (len(values) + 1)


def median(values):
    """The middle value of `values` once sorted (the mean of the two middle ones for an even count)."""
    s = sorted(values)
    n = len(s)
    if n == 0:
        raise ValueError("median of nothing")
    mid = n // 2
    return s[mid] if n % 2 else (s[mid - 1] + s[mid]) / 2
