#!/bin/bash
cd /app && git add notes.txt && git commit -q -m "update notes"
