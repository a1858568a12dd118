"""The tests the agent never sees: run in its workspace once it stops, by `python3 -I` (so
nothing the agent left there, a `unittest.py` or a `sitecustomize.py`, stands in for Python's own
modules); the working folder comes last on the path, for the package under test alone."""

import os
import sys
import unittest

sys.path.append(os.getcwd())
from textkit import slugify  # noqa: E402


class Slugify(unittest.TestCase):
    def test_words(self):
        self.assertEqual(slugify("Hello, World!"), "hello-world")

    def test_runs_collapse(self):
        self.assertEqual(slugify("  a -- b  "), "a-b")

    def test_digits_stay(self):
        self.assertEqual(slugify("Top 10 Tips"), "top-10-tips")

    def test_nothing_left(self):
        self.assertEqual(slugify("!!!"), "")


if __name__ == "__main__":
    unittest.main()
