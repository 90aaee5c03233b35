#!/usr/bin/env bash
# The main job on the embedded default: a simulated Atlas 800 A2 node (8 x 910B) in a local
# podman container, site.yml against it with inventories/local (preflight, OS packages, NPU driver
# and firmware, CANN, host tuning, swap, the Python environment with the CPU version set, a tiny
# DeepSeek-V3 model, vLLM under systemd and vllm-router in front of it), then the node's
# preflight report and npu-smi, and validate against the server and through the router.
#   scripts/local-deploy.sh [--fresh] [ascend-serve deploy options, e.g. --tags preflight --check]
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

# The simulated site's sources: the simulator plays the vendor, writing its download directory
# (vendor-format installers for the inventory's version set) and the sha256 it publishes for them;
# the tiny model the inventory stages is built offline (random weights).
read -r stack_set firmware < <(python -c '
import yaml
v = yaml.safe_load(open("inventories/local/group_vars/ascend_nodes/main.yml"))
print(v["ascend_stack_set"], v["npu_driver_firmware_version"])')
python -m ascend_sim packages .artifacts/local --set "$stack_set" --firmware "$firmware" \
  --vars-file .artifacts/vendor-sha256.yml >/dev/null
if [ ! -f .artifacts/models/tiny-deepseek-v3/ascend-serve-manifest.json ]; then
  rm -rf .artifacts/models/tiny-deepseek-v3
  ascend-serve model make-tiny --arch deepseek_v3 .artifacts/models/tiny-deepseek-v3 >/dev/null
fi
# The local artifact mirror, built from those sources by `ascend-serve mirror` (docs/mirror.md):
# the installers and the model files, each checked against its sha256 while copied, then verified
# again. The inventory's main.yml names the upstream sources (the simulated vendor's directory,
# the model built above); the generated group_vars file mirror.yml, which Ansible reads after
# main.yml, points the roles at the bundle instead, with the pins taken from it (the vendor's
# published sha256 are the source of truth here, so the previous file goes first; artifacts.yml
# is where earlier versions of this script wrote the pins).
# The node (a container: this machine's CPU) mounts the mirror at /srv/ascend-mirror. Wheels are
# not mirrored here: the node's environment installs the CPU set from the index and the host's
# wheelhouse (main.yml).
rm -f inventories/local/group_vars/ascend_nodes/{artifacts,mirror}.yml
ascend-serve mirror fetch .artifacts/local --pins .artifacts/vendor-sha256.yml \
  -i inventories/local/hosts.yml --arch "$(uname -m)" --kind vendor --kind model \
  --bundle .artifacts/mirror --write-vars inventories/local/group_vars/ascend_nodes/mirror.yml \
  --host-path /srv/ascend-mirror
ascend-serve mirror verify --bundle .artifacts/mirror -i inventories/local/hosts.yml \
  --arch "$(uname -m)"
# ... and a package mirror with the running kernel's headers, beside it.
python -m ascend_sim.mirror apt .artifacts/mirror/apt >/dev/null
# The host's wheelhouse (pip's find-links: the CPU build of torch), mounted on the node.
wheelhouse=$(python -m pip config get global.find-links 2>/dev/null || true)
wheelhouse=${wheelhouse:-${PIP_FIND_LINKS:-}}
wheelhouse=${wheelhouse%% *}
wheel_args=()
if [ -n "$wheelhouse" ] && [ -d "$wheelhouse" ]; then
  wheel_args=(--wheelhouse "$wheelhouse")
else
  mkdir -p .artifacts/wheelhouse
  wheel_args=(--wheelhouse "$ROOT/.artifacts/wheelhouse")
fi
# The CA bundle the host's pip trusts (a site CA or a TLS-inspecting proxy), mounted likewise.
ca_bundle=$(python -m pip config get global.cert 2>/dev/null || true)
ca_bundle=${ca_bundle:-${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}}
wheel_args+=(--ca-bundle "$ca_bundle")

state=$(podman container inspect --format '{{.State.Status}}' "$NODE" 2>/dev/null || echo absent)
# A node started before Ansible reached it over SSH lacks the authorized_keys mount: replace it.
if [ "$state" != absent ] && ! podman container inspect --format '{{range .Mounts}}{{.Destination}} {{end}}' \
    "$NODE" | grep -qw /root/.ssh/authorized_keys; then
  echo "[local-deploy] $NODE predates the SSH mount (.cache/test-ssh); starting a new node"
  fresh=1
fi
if [ "$fresh" = 1 ] || [ "$state" = absent ]; then
  echo "[local-deploy] starting simulated Atlas 800 A2 node $NODE"
  python -m ascend_sim node up "$NODE" --model atlas800-a2 --ssh --mirror "$ROOT/.artifacts/mirror" \
    "${wheel_args[@]}" >/dev/null
elif [ "$state" != running ]; then
  podman start "$NODE" >/dev/null
fi

ascend-serve deploy site.yml -i inventories/local/hosts.yml "$@"

echo "[local-deploy] preflight report of $NODE:"
podman exec "$NODE" cat /var/lib/ascend-serve/preflight.json | ascend-serve preflight report -
if podman exec "$NODE" test -x /usr/local/sbin/npu-smi; then
  echo "[local-deploy] npu-smi info on $NODE:"
  podman exec "$NODE" /usr/local/sbin/npu-smi info
fi

# The server: the vllm_service role recorded it; validate it from here, over the node's address.
fact=$(podman exec "$NODE" cat /etc/ansible/facts.d/ascend_vllm_service.fact 2>/dev/null || true)
if [ -n "$fact" ]; then
  read -r served port < <(printf '%s' "$fact" | python -c '
import json, sys, urllib.parse
f = json.load(sys.stdin)
print(f["served_name"], urllib.parse.urlsplit(f["url"]).port)')
  address=$(podman container inspect --format '{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}' "$NODE" | awk '{print $1}')
  url="http://$address:$port"
  echo "[local-deploy] validating $served at $url (unit ascend-vllm on $NODE):"
  ascend-serve validate "$url" --served-name "$served" --reasoning
  echo "[local-deploy] serving $served at $url"
  # The router (roles/router, group vllm_routers) in front of it: the same checks through it.
  if podman exec "$NODE" systemctl is-active --quiet ascend-router 2>/dev/null; then
    router_port=$(ansible-inventory -i inventories/local/hosts.yml --host "$NODE" | python -c '
import json, sys
print(json.load(sys.stdin).get("router_port", 30000))')
    router_url="http://$address:$router_port"
    echo "[local-deploy] validating $served through the router at $router_url (unit ascend-router on $NODE):"
    ascend-serve validate "$router_url" --served-name "$served" --reasoning
    echo "[local-deploy] routing $served at $router_url"
  fi
fi
