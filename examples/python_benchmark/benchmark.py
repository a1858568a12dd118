#!/usr/bin/env python3
"""A Hugging-Face-style JSONL dataset as an agenteval benchmark (`benchmark: {kind: command}`).

    benchmark.py DATASET list    one task per line on stdout: {"id", "input", "expected", ...}
    benchmark.py DATASET grade   {"task", "result", "trace"} on stdin -> {"score", "passed", "reason"}

The protocol is in docs/benchmarks.md ("Benchmarks in any language"). Any language works; this
one reads a GSM8K-style file (`question`, `answer` ending in `#### N`) and scores with scorer.py.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scorer  # noqa: E402


def list_tasks(dataset):
    with open(dataset, encoding="utf-8") as f:
        for i, line in enumerate(f):
            if not line.strip():
                continue
            row = json.loads(line)
            task = {
                "id": f"gsm8k-{i:04d}",
                "input": row["question"],
                "expected": scorer.reference(row["answer"]),
                "tags": ["math"],
            }
            print(json.dumps(task))


def grade():
    doc = json.load(sys.stdin)
    answer = doc["result"].get("final_answer")
    value, passed, reason = scorer.score(doc["task"]["expected"], "" if answer is None else answer)
    print(json.dumps({"score": value, "passed": passed, "reason": reason}))


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in ("list", "grade"):
        print("usage: benchmark.py DATASET list|grade", file=sys.stderr)
        return 2
    if sys.argv[2] == "list":
        list_tasks(sys.argv[1])
    else:
        grade()
    return 0


if __name__ == "__main__":
    sys.exit(main())
