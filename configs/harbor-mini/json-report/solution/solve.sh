#!/bin/bash
python3 - <<'PY'
import json
users = json.load(open("/app/users.json"))
names = sorted(u["name"] for u in users if u["active"] and u["age"] > 30)
json.dump({"active_over_30": names}, open("/app/report.json", "w"))
PY
