"""The benchmark's scorer: the final number of an answer against the dataset's `#### N`.

Kept apart from benchmark.py as a dataset's own scoring module usually is; the config lists it in
`benchmark.files` so that agents cannot read it.
"""
import re

NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def reference(answer_field):
    """The number after `####` in a GSM8K-style answer."""
    return answer_field.rsplit("####", 1)[-1].strip().replace(",", "")


def final_number(text):
    """The last number in a model's answer (`$1,234.` reads 1234), or None."""
    found = NUMBER.findall(str(text))
    if not found:
        return None
    return found[-1].replace(",", "").rstrip(".")


def score(expected, answer):
    """(score, passed, reason) for one answer."""
    got = final_number(answer)
    if got is None:
        return 0.0, False, "no number in the answer"
    try:
        same = float(got) == float(expected)
    except ValueError:
        same = False
    return (1.0, True, f"{got} is right") if same else (0.0, False, f"{got}, expected {expected}")
