#!/bin/sh
# A stand-in for the operator's load-balancer command: appends "ACTION HOST" to the log file.
# Called by the rollout role as: lb-hook.sh LOG ACTION HOST
set -eu
printf '%s %s\n' "$2" "$3" >> "$1"
