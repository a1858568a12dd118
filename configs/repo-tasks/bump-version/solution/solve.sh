#!/bin/bash
set -e
echo 1.2.4 > VERSION
python3 - <<'PY'
text = open("CHANGELOG.md").read()
open("CHANGELOG.md", "w").write(text.replace("## 1.2.3", "## 1.2.4\n- Patch release.\n\n## 1.2.3", 1))
PY
