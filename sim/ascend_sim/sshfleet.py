"""Simulated nodes reached over real SSH (test infrastructure, not part of the product).

A fleet is N simulated Atlas 800 A2 nodes (``python -m ascend_sim node up``: the simulator's
sysfs and tools mounts, systemd) as podman containers of a derived image that runs ``sshd`` on
podman's default bridge. Each node generates its own SSH host keys at boot; the controller gets a
client key pair made for the fleet, installed as root's authorized key on every node, and a
known_hosts file written from each node's own public host keys (read through the container
runtime, out of band), so host key checking stays ON (``StrictHostKeyChecking=yes``).

The derived image has os_base's Debian packages (compilers, dkms, python3-dev, ... and the
running kernel's headers from the simulator's mirror) PRE-INSTALLED, like a site's golden image:
N concurrent ``apt-get install`` runs of ~300 MB would measure dpkg and the disk. os_base still
adds its repository, refreshes the apt cache (the image ships empty lists dated 1970), checks the
packages (all present), holds the kernel packages and writes its fact.

Used by ``bench/scale.py`` (the scale benchmark) and the rollout fault tests.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ascend_serve.resources import role_path

ROOT = Path(__file__).resolve().parents[2]
BASE_IMAGE = os.environ.get("ASCEND_SIM_IMAGE", "localhost/ascend-serve-node:bookworm")
SSH_IMAGE = "localhost/ascend-serve-node-ssh:bookworm"

# The derived image: sshd with per-container host keys (generated at boot: a shared image must not
# share its host keys), PAM without loginuid (containers may not set it), and os_base's Debian
# packages pre-installed (see the module docstring). The apt lists are emptied and dated in the
# past, so that the first converge refreshes them as on a fresh host.
CONTAINERFILE = """\
FROM {base}
ARG PACKAGES
RUN echo "deb [trusted=yes] file:/srv/ascend-mirror/apt ./" \\
      > /etc/apt/sources.list.d/build-mirror.list \\
 && apt-get update \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \\
      openssh-server $PACKAGES \\
 && rm -f /etc/ssh/ssh_host_* /etc/apt/sources.list.d/build-mirror.list \\
 && sed -i 's/^session\\s\\+required\\s\\+pam_loginuid.so/session optional pam_loginuid.so/' \\
      /etc/pam.d/sshd \\
 && mkdir -p /etc/systemd/system/ssh.service.d \\
 && printf '[Service]\\nExecStartPre=\\nExecStartPre=/usr/bin/ssh-keygen -A\\n\
ExecStartPre=/usr/sbin/sshd -t\\n' > /etc/systemd/system/ssh.service.d/hostkeys.conf \\
 && systemctl enable ssh.service \\
 && apt-get clean && rm -rf /var/lib/apt/lists/* && mkdir -p /var/lib/apt/lists/partial \\
 && touch -d @0 /var/lib/apt/lists
"""

Log = Callable[[str], None]


class FleetError(RuntimeError):
    """A node that did not come up as an SSH host."""


def _quiet(message: str) -> None:
    del message


def _run(cmd: Sequence[str], *, input: str | None = None, env: Mapping[str, str] | None = None,
         cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), check=True, text=True, capture_output=True, input=input,
                          env=None if env is None else dict(env), cwd=cwd)


def sim_env(state_dir: Path | None = None) -> dict[str, str]:
    """The environment for ``python -m ascend_sim`` (and its node state directory)."""
    env = dict(os.environ)
    if state_dir is not None:
        env["ASCEND_SIM_STATE"] = str(state_dir)
    return env


def image_exists(image: str) -> bool:
    return subprocess.run(["podman", "image", "exists", image], check=False).returncode == 0


def build_image(mirror: Path, rebuild: bool = False, log: Log = _quiet) -> None:
    """Build :data:`SSH_IMAGE` unless it exists; ``mirror`` holds the kernel headers (apt/)."""
    if image_exists(SSH_IMAGE) and not rebuild:
        return
    vars_debian = yaml.safe_load((role_path("os_base", "vars", "Debian.yml")).read_text())
    packages = [*vars_debian["_os_base_packages"], f"linux-headers-{os.uname().release}"]
    log(f"building {SSH_IMAGE} (sshd + {len(packages)} os_base packages), about 2 minutes")
    with tempfile.TemporaryDirectory(prefix="ascend-ssh-image-") as ctx:
        (Path(ctx) / "Containerfile").write_text(CONTAINERFILE.format(base=BASE_IMAGE))
        _run(["podman", "build", "-t", SSH_IMAGE, "--build-arg", f"PACKAGES={' '.join(packages)}",
              "-v", f"{mirror}:/srv/ascend-mirror:ro", ctx])


@dataclass
class Fleet:
    """The nodes of one run, and everything to remove afterwards."""

    workdir: Path
    state_dir: Path
    names: list[str] = field(default_factory=list)
    addresses: dict[str, str] = field(default_factory=dict)
    cgroups: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> Path:
        return self.workdir / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.workdir / "known_hosts"

    @property
    def control_dir(self) -> Path:
        return self.workdir / "cp"

    def node_dir(self, name: str) -> Path:
        """The simulator's state of one node (``python -m ascend_sim health DIR ...``)."""
        return self.state_dir / name

    def ssh_vars(self, name: str) -> dict[str, Any]:
        """Inventory variables that reach ``name`` over SSH with its host key checked."""
        return {
            "ansible_host": self.addresses[name],
            "ansible_connection": "ssh",
            "ansible_user": "root",
            "ansible_ssh_private_key_file": str(self.key),
            "ansible_ssh_common_args": (f"-o UserKnownHostsFile={self.known_hosts} "
                                        "-o StrictHostKeyChecking=yes -o IdentitiesOnly=yes"),
            "ansible_python_interpreter": "/usr/bin/python3",
        }


def wait_for_sshd(name: str, timeout: float = 300) -> None:
    """Until the node's sshd unit is active (systemd boots slowly on busy cores)."""
    deadline = time.monotonic() + timeout
    while True:
        state = subprocess.run(["podman", "exec", name, "systemctl", "is-active", "ssh"],
                               check=False, text=True, capture_output=True).stdout.strip()
        if state == "active":
            return
        if time.monotonic() > deadline:
            raise FleetError(f"{name}: sshd is not active after {timeout:.0f} s "
                             f"({state or 'no answer'})")
        time.sleep(0.5)


def start_node(name: str, mirror: Path, pubkey: str,
               state_dir: Path) -> tuple[str, str, list[str], str]:
    """Start one node; return its address, name, public host keys and cgroup once sshd answers."""
    _run([sys.executable, "-m", "ascend_sim", "node", "up", name, "--model", "atlas800-a2",
          "--image", SSH_IMAGE, "--mirror", str(mirror)], env=sim_env(state_dir), cwd=ROOT)
    wait_for_sshd(name)
    _run(["podman", "exec", "-i", name, "sh", "-c",
          "umask 077 && mkdir -p /root/.ssh && cat > /root/.ssh/authorized_keys"], input=pubkey)
    keys = _run(["podman", "exec", name, "sh", "-c", "cat /etc/ssh/ssh_host_*_key.pub"]).stdout
    template = "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}"
    address = _run(["podman", "container", "inspect", "--format", template, name]).stdout.split()
    if not address:
        raise FleetError(f"{name}: no address on podman's network")
    cgroup = _run(["podman", "container", "inspect", "--format", "{{.State.CgroupPath}}",
                   name]).stdout.strip()
    return address[0], name, [line for line in keys.splitlines() if line.strip()], cgroup


def check_inotify(count: int) -> None:
    """Each node's systemd takes inotify instances; past the limit, nodes hang at boot."""
    path = Path("/proc/sys/fs/inotify/max_user_instances")
    need = 128 + 16 * count
    if path.exists() and int(path.read_text()) < need:
        raise FleetError(f"fs.inotify.max_user_instances is {path.read_text().strip()}; {count} "
                         f"systemd nodes need about {need}: sysctl -w "
                         f"fs.inotify.max_user_instances={max(need, 1024)}")


def start_fleet(fleet: Fleet, names: Sequence[str], mirror: Path) -> None:
    check_inotify(len(names))
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ascend-sim-fleet", "-f",
          str(fleet.key)])
    pubkey = fleet.key.with_suffix(".pub").read_text()
    fleet.names.extend(names)  # registered first: cleanup removes half-started ones too
    known: list[str] = []
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=4)
    try:
        for address, name, keys, cgroup in pool.map(
                lambda n: start_node(n, mirror, pubkey, fleet.state_dir), names):
            fleet.addresses[name] = address
            fleet.cgroups[name] = cgroup
            # known_hosts: "address keytype base64", one line per host key of that node.
            known += [f"{address} {' '.join(k.split()[:2])}" for k in keys]
    finally:
        # On an error or Ctrl-C: start no further node and let the running starts finish, so
        # that the cleanup that follows finds every container that exists.
        pool.shutdown(wait=True, cancel_futures=True)
    fleet.known_hosts.write_text("\n".join(known) + "\n")
    fleet.known_hosts.chmod(0o600)


def write_inventory(fleet: Fleet, group_vars: Mapping[str, str]) -> Path:
    """An inventory of the fleet's nodes (group ascend_nodes) with these group_vars files
    (file name -> text); returns its hosts.yml."""
    inv = fleet.workdir / "inventory"
    gv_dir = inv / "group_vars" / "ascend_nodes"
    gv_dir.mkdir(parents=True, exist_ok=True)
    for filename, text in group_vars.items():
        (gv_dir / filename).write_text(text)
    hosts = {name: fleet.ssh_vars(name) for name in fleet.names}
    inventory = {"all": {"children": {"ascend_nodes": {"hosts": hosts}}}}
    (inv / "hosts.yml").write_text("---\n" + yaml.safe_dump(inventory, sort_keys=True))
    return inv / "hosts.yml"


def ssh_masters(control_dir: Path) -> list[int]:
    """PIDs of the SSH master processes whose control sockets live in control_dir."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        # A master renames itself to "ssh: <control path> [mux]".
        if cmdline and cmdline[0].split(b":")[0].endswith(b"ssh") and any(
            str(control_dir).encode() in arg for arg in cmdline
        ):
            pids.append(int(proc.name))
    return pids


def remove_fleet(fleet: Fleet, log: Log = _quiet) -> None:
    for pid in ssh_masters(fleet.control_dir):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    if fleet.names:
        subprocess.run(["podman", "rm", "-f", "--ignore", *fleet.names], check=False,
                       capture_output=True)
        # One bulk rm under load has left a container behind: check each, retry one by one.
        for name in fleet.names:
            for _ in range(3):
                if subprocess.run(["podman", "container", "exists", name],
                                  check=False).returncode != 0:
                    break
                subprocess.run(["podman", "rm", "-f", "--ignore", name], check=False,
                               capture_output=True)
            else:
                log(f"could not remove container {name}: podman rm -f {name}")
            shutil.rmtree(fleet.node_dir(name), ignore_errors=True)
    shutil.rmtree(fleet.workdir, ignore_errors=True)


@contextlib.contextmanager
def fleet_of(names: Sequence[str], mirror: Path, state_dir: Path,
             log: Log = _quiet) -> Iterator[Fleet]:
    """Nodes ``names`` up over SSH for the ``with`` block; everything removed afterwards."""
    fleet = Fleet(Path(tempfile.mkdtemp(prefix="ascend-fleet-")), state_dir)
    fleet.workdir.chmod(0o700)
    try:
        log(f"starting {len(names)} node(s)")
        started = time.monotonic()
        start_fleet(fleet, names, mirror)
        log(f"{len(names)} node(s) up in {time.monotonic() - started:.0f} s")
        yield fleet
    finally:
        remove_fleet(fleet, log)
