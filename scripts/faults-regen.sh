#!/usr/bin/env bash
# Regenerate the fault classifier's vendor table and its generated docs page.
#
#   scripts/faults-regen.sh MIND_CLUSTER_GIT_DIR COMMIT
#
# MIND_CLUSTER_GIT_DIR: a clone or bare mirror of https://github.com/Ascend/mind-cluster; COMMIT:
# the commit to read faultCode.json and SwitchFaultCode.json at (recorded in the data file).
# Then review the diff of data/faults/vendor_codes.json and
# docs/fault-codes.md, and run tests/unit/test_faults.py (its counts name the commit read).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -ne 2 ]; then
    echo "usage: $0 MIND_CLUSTER_GIT_DIR COMMIT" >&2
    exit 2
fi
python -m ascend_serve.doctor.faults.vendor_import --git-dir "$1" --commit "$2"
python -m ascend_serve.doctor.faults.docs tests/data/corpus > docs/fault-codes.md
echo "regenerated docs/fault-codes.md"
