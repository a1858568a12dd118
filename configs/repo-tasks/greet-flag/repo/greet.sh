#!/bin/bash
# Greets someone: greet.sh NAME
echo "Hello, $1!"
