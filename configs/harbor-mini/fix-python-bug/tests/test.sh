#!/bin/bash
# The package's own tests, run where the agent left it. `python3 -I`: nothing of the working
# folder or the environment stands in for Python's own modules. The verdict is a nonce the tests
# print only once every test ran and passed, read from stdin after the package was imported: a
# package that exits 0 as it is imported (or kills its interpreter) cannot pass.
nonce=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
check() { [ "$(printf '%s\n' "$nonce" | python3 -I /tests/test_stats.py 2>/dev/null | tail -n 1)" = "all passed $nonce" ]; }
mkdir -p /logs/verifier
if check; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
