#!/usr/bin/env bash
# Run every test: lint (yamllint, ansible-lint production profile, ruff, mypy), then pytest, which
# holds the unit tests, the molecule scenarios (podman containers) and the local main job.
# Extra arguments go to pytest, e.g.  scripts/test.sh -m "not molecule"  for the quick part.
# ASCEND_TEST_WORKERS=N runs N pytest-xdist workers (molecule scenarios and vLLM servers then run
# N at a time, each worker with its own apt archive cache); default 2 (this machine kind has 2
# cores and much of a scenario's time is spent waiting on apt, pip and containers); 0 runs
# everything in one process.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

bash scripts/bootstrap.sh
# shellcheck disable=SC1091
source .venv/bin/activate
export ANSIBLE_FORCE_COLOR=0 PY_COLORS=0

echo "== yamllint";    yamllint --strict .
echo "== ansible-lint"; ansible-lint --profile production
echo "== ruff";        ruff check .
echo "== mypy";        mypy
echo "== pytest"
exec pytest -n "${ASCEND_TEST_WORKERS:-2}" --dist loadgroup "$@"
