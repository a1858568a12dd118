#!/bin/bash
# The package's unit tests, from the tests' folder (copied in only after the agent stopped);
# `-I`: nothing of the working folder's or the environment's Python settings is read.
exec python3 -I -m unittest discover -s "$AGENTEVAL_TESTS_DIR" -t "$AGENTEVAL_TESTS_DIR" -v
