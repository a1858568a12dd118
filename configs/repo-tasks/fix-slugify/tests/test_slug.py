"""The tests the agent never sees, run in its workspace once it stops.

The package runs only in a child interpreter (`python3 -I`, so nothing the agent left, a
`unittest.py` or a `sitecustomize.py`, stands in for Python's own modules; the working folder
comes last on its path, for the package under test alone). It is given titles drawn at random
now, and its only say is the slugs it prints; this interpreter, which never imports the package,
judges them against the docstring's rule. Whatever the package patches as it is imported
(unittest, pytest, `sys.exit`), it patches the child, and answers made up in advance cannot match
titles no one had seen.
"""

import json
import os
import random
import re
import string
import subprocess
import sys

CHILD = r"""
import json, os, sys
sys.path.append(os.getcwd())
titles = json.loads(sys.stdin.readline())
from textkit import slugify
sys.stdout.write("\n" + json.dumps([slugify(t) for t in titles]) + "\n")
"""


def expected(title):
    """The docstring's rule: lower case, runs of anything but letters and digits one `-`, none
    at either end."""
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


def main():
    rng = random.SystemRandom()
    alphabet = string.ascii_letters + string.digits + " ,.!?-_/&"
    titles = ["Hello, World!", "  a -- b  ", "Top 10 Tips", "!!!"]
    titles += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 30))) for _ in range(30)]
    child = subprocess.run(
        [sys.executable, "-I", "-c", CHILD],
        input=json.dumps(titles) + "\n",
        capture_output=True,
        text=True,
        timeout=30,
        cwd=os.getcwd(),
    )
    try:
        got = json.loads(child.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        print(f"no answer from the package (exit {child.returncode}): {child.stderr[-500:]}")
        return 1
    if not isinstance(got, list) or len(got) != len(titles):
        print("the package did not answer every title")
        return 1
    wrong = [(t, g, expected(t)) for t, g in zip(titles, got) if g != expected(t)]
    for t, g, want in wrong[:10]:
        print(f"slugify({t!r}) = {g!r}, want {want!r}")
    if wrong:
        return 1
    print(f"all {len(titles)} slugs right")
    return 0


if __name__ == "__main__":
    sys.exit(main())
