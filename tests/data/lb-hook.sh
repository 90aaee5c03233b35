#!/bin/sh
# A stand-in for the operator's load-balancer command in the rollout tests, called by the rollout
# role as: lb-hook.sh LOG ACTION HOST. It appends "ACTION HOST" to LOG. A test plants a fault in
# the middle of a host's batch by leaving an executable LOG.d/ACTION-HOST: it runs once (and is
# removed) after the line is logged, i.e. right after that host was taken out of the balancer.
set -eu
printf '%s %s\n' "$2" "$3" >> "$1"
fault="$1.d/$2-$3"
if [ -x "$fault" ]; then
    mv "$fault" "$fault.ran"
    "$fault.ran"
fi
