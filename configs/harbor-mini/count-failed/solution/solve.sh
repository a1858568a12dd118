#!/bin/bash
awk -F, 'NR > 1 && $3 == "failed"' /app/jobs.csv | wc -l > /app/count.txt
