"""The package's behaviour, judged by an interpreter that never imports it.

The agent's package runs only in a child interpreter (`python3 -I`, started here), which is given
inputs drawn at random now and answers with what `calc` computed, as JSON on its stdout. This
process compares those answers with its own (the standard library's `statistics`): whatever the
package patches at import (unittest, pytest, `sys.exit`), it patches the child, whose only say is
data; and answers made up in advance cannot match inputs no one had seen.
"""

import json
import random
import statistics
import subprocess
import sys

CHILD = r"""
import json, sys
sys.path.append("/app")
cases = json.loads(sys.stdin.readline())
import calc
out = {"mean": [], "median": []}
for values in cases:
    out["mean"].append(calc.mean(values))
    out["median"].append(calc.median(values))
try:
    calc.mean([])
    out["empty"] = "no error"
except ValueError:
    out["empty"] = "ValueError"
except Exception as e:
    out["empty"] = type(e).__name__
sys.stdout.write("\n" + json.dumps(out) + "\n")
"""


def main():
    rng = random.SystemRandom()
    cases = [[rng.randint(-1000, 1000) for _ in range(rng.randint(1, 9))] for _ in range(20)]
    cases += [[1, 2, 3], [5], [3, 1, 2], [4, 1, 3, 2]]
    child = subprocess.run(
        [sys.executable, "-I", "-c", CHILD],
        input=json.dumps(cases) + "\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    try:
        got = json.loads(child.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        print(f"no answer from the package (exit {child.returncode}): {child.stderr[-500:]}")
        return 1
    failures = []
    for values, mean, median in zip(cases, got.get("mean", []), got.get("median", [])):
        if not isinstance(mean, (int, float)) or abs(mean - statistics.fmean(values)) > 1e-9:
            failures.append(f"mean({values}) = {mean!r}, want {statistics.fmean(values)}")
        if not isinstance(median, (int, float)) or abs(median - statistics.median(values)) > 1e-9:
            failures.append(f"median({values}) = {median!r}, want {statistics.median(values)}")
    if len(got.get("mean", [])) != len(cases) or len(got.get("median", [])) != len(cases):
        failures.append("the package did not answer every case")
    if got.get("empty") != "ValueError":
        failures.append(f"mean([]) gave {got.get('empty')!r}, want ValueError")
    for f in failures[:10]:
        print(f)
    if failures:
        return 1
    print("all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
