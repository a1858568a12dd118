#!/bin/bash
# Passes when /app/hello.txt is exactly the one line asked for.
check() { [ "$(cat /app/hello.txt 2>/dev/null)" = "Hello, agenteval!" ] && [ "$(wc -l < /app/hello.txt)" -eq 1 ]; }
mkdir -p /logs/verifier
if check; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
