#!/bin/bash
echo 'Hello, agenteval!' > /app/hello.txt
