#!/bin/bash
# The package's own tests, run where the agent left it.
check() { python3 /tests/test_stats.py -v; }
mkdir -p /logs/verifier
if check; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
