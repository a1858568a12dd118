#!/bin/bash
# Writes the reward Harbor's way: 1 when every check holds, else the share that did.
ok=0
[ "$(bash greet.sh Ada)" = "Hello, Ada!" ] && ok=$((ok + 1))
[ "$(bash greet.sh --shout Ada)" = "HELLO, ADA!" ] && ok=$((ok + 1))
[ "$(bash greet.sh --shout 'ada lovelace')" = "HELLO, ADA LOVELACE!" ] && ok=$((ok + 1))
python3 -c "print($ok / 3)" > "$AGENTEVAL_VERIFIER_DIR/reward.txt"
