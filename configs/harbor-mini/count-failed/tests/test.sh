#!/bin/bash
# Four jobs have the status `failed` exactly (`failed_retry` is another status).
check() { [ "$(tr -d ' \n' < /app/count.txt 2>/dev/null)" = "4" ]; }
mkdir -p /logs/verifier
if check; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
