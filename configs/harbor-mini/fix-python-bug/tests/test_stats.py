import sys
import unittest

sys.path.append("/app")
import calc  # noqa: E402


class Stats(unittest.TestCase):
    def test_mean(self):
        self.assertEqual(calc.mean([1, 2, 3]), 2.0)
        self.assertEqual(calc.mean([5]), 5.0)

    def test_mean_of_nothing(self):
        with self.assertRaises(ValueError):
            calc.mean([])

    def test_median_still_works(self):
        self.assertEqual(calc.median([3, 1, 2]), 2)
        self.assertEqual(calc.median([4, 1, 3, 2]), 2.5)


if __name__ == "__main__":
    result = unittest.main(exit=False, argv=[sys.argv[0], "-v"]).result
    # Read only now: nothing the package did at import time could have seen it.
    nonce = sys.stdin.readline().strip()
    if result.wasSuccessful() and result.testsRun == 3:
        print(f"all passed {nonce}")
