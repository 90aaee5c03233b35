#!/usr/bin/env bash
# The main job on the embedded default: a simulated Atlas 800 A2 node (8 x 910B) in a local
# podman container, site.yml against it with inventories/local, then the node's preflight report.
#   scripts/local-deploy.sh [--fresh] [ansible-playbook options, e.g. --tags preflight --check]
# --fresh replaces the simulated node with a new, clean one; otherwise it is kept between runs,
# so a second run shows that nothing changes.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NODE=ascend-local-a2
cd "$ROOT"

fresh=0
if [ "${1:-}" = "--fresh" ]; then fresh=1; shift; fi

bash scripts/bootstrap.sh
# shellcheck disable=SC1091
source .venv/bin/activate

state=$(podman container inspect --format '{{.State.Status}}' "$NODE" 2>/dev/null || echo absent)
if [ "$fresh" = 1 ] || [ "$state" = absent ]; then
  echo "[local-deploy] starting simulated Atlas 800 A2 node $NODE"
  PYTHONPATH="$ROOT/molecule" python -m ascend_sim node up "$NODE" --model atlas800-a2 >/dev/null
elif [ "$state" != running ]; then
  podman start "$NODE" >/dev/null
fi

ansible-playbook site.yml -i inventories/local/hosts.yml "$@"

echo "[local-deploy] preflight report of $NODE:"
podman exec "$NODE" cat /var/lib/ascend-serve/preflight.json | ascend-serve preflight report -
