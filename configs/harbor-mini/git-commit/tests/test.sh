#!/bin/bash
# The last commit is "update notes", it holds both lines, and nothing is left uncommitted.
# The repository's configuration is the agent's: git runs with nothing of it that runs code or
# hides files (fsmonitor, hooks, an untracked-files setting), and no global or system file.
git() {
  HOME=/nonexistent GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null command git \
    -c core.fsmonitor=false -c core.hooksPath=/dev/null -c status.showUntrackedFiles=all "$@"
}
check() {
  cd /app || return 1
  [ "$(git log -1 --format=%s)" = "update notes" ] || return 1
  [ "$(git show HEAD:notes.txt)" = "$(printf 'first\nsecond')" ] || return 1
  [ -z "$(git status --porcelain)" ]
}
mkdir -p /logs/verifier
if check; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
