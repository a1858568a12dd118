#!/bin/bash
# The package's behaviour on inputs drawn at random now, judged by an interpreter that never
# imports it (test_stats.py): the package runs only in a child interpreter whose one say is the
# numbers it printed. `python3 -I`: nothing of the working folder or the environment stands in
# for Python's own modules, in either interpreter. A package that patches unittest or pytest, exits
# 0 as it is imported, or announces a plugin has nothing to patch here.
check() { [ "$(python3 -I /tests/test_stats.py 2>/dev/null | tail -n 1)" = "all passed" ]; }
mkdir -p /logs/verifier
if check; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
