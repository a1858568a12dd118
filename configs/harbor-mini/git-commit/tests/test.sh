#!/bin/bash
# The last commit is "update notes", it holds both lines, and nothing is left uncommitted.
check() {
  cd /app || return 1
  [ "$(git log -1 --format=%s)" = "update notes" ] || return 1
  [ "$(git show HEAD:notes.txt)" = "$(printf 'first\nsecond')" ] || return 1
  [ -z "$(git status --porcelain)" ]
}
mkdir -p /logs/verifier
if check; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
