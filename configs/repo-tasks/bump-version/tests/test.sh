#!/bin/bash
# The release after 1.2.3 (the commit the task is checked out at; the repository's later
# history says 2.0.0, which the agent must not take).
set -u
fail() { echo "FAIL: $*"; exit 1; }
[ "$(cat VERSION)" = "1.2.4" ] || fail "VERSION is $(cat VERSION), not 1.2.4"
[ "$(python3 -c 'import app; print(app.version())')" = "1.2.4" ] || fail "app.version() is not 1.2.4"
first=$(grep -m1 '^## ' CHANGELOG.md)
[ "$first" = "## 1.2.4" ] || fail "the changelog's first entry is '$first', not '## 1.2.4'"
grep -q '^## 1.2.3' CHANGELOG.md || fail "the 1.2.3 entry is gone"
echo ok
