#!/bin/bash
# Active, strictly older than 30, sorted: bo, lee, zoe.
check() {
  # -I: a json.py (or any module) in the working folder is not Python's own.
  python3 -I - <<'PY'
import json, sys
try:
    got = json.load(open("/app/report.json"))
except Exception as e:
    sys.exit(f"no report: {e}")
sys.exit(0 if got == {"active_over_30": ["bo", "lee", "zoe"]} else f"wrong report: {got}")
PY
}
mkdir -p /logs/verifier
if check; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
