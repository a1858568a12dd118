#!/bin/bash
# The package's behaviour on titles drawn at random now, judged by an interpreter that never
# imports it (test_slug.py); `-I` in both: nothing of the working folder's or the environment's
# Python settings is read. A package that patches unittest or exits 0 as it is imported has
# nothing to patch here.
exec python3 -I "$AGENTEVAL_TESTS_DIR/test_slug.py"
