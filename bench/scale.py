#!/usr/bin/env python3
"""Scale benchmark: the accelerator stack over real SSH on 1, 8, 32 simulated Atlas 800 A2 nodes.

For each host count N and each Ansible configuration this script

1. starts N simulated Atlas 800 A2 nodes (``python -m ascend_sim node up``: the simulator's sysfs
   and tools mounts, systemd) as podman containers of a derived image that runs ``sshd``, on
   podman's default bridge; each node generates its own SSH host keys at boot;
2. generates a client key pair for this run, installs it as root's authorized key on every node,
   and writes a known_hosts file from each node's own public host keys (read through the
   container runtime, out of band): host key checking stays ON (``StrictHostKeyChecking=yes``);
3. writes an inventory like ``inventories/local`` (its group_vars, with the artifact paths made
   absolute and the installer pins of this run), hosts with ``ansible_host`` addresses and
   ``ansible_connection: ssh``;
4. times the first converge of ``playbooks/stack.yml`` (canary batch of 1, then the rest, as the
   playbook's ``serial`` says) and then a no-op re-run, which must report ``changed=0`` and no
   failure on every host (the script fails loudly otherwise); ``ansible.posix.profile_tasks``
   records the slowest tasks of the re-run;
5. removes the containers, the nodes' state directories, the SSH master connections and the keys
   (also on Ctrl-C or SIGTERM).

It prints a table per configuration: N, first-converge seconds, re-run seconds, the ratios
N-host/1-host of both, the ratio re-run/first, tasks per host, the CPU seconds the re-run cost on
the controller (ansible-playbook and its children) and in all nodes' containers (cgroup cpuacct),
the load average before the re-run, and the slowest re-run tasks (profile_tasks). Every simulated
node shares this machine's cores with the controller, so the CPU columns say how far a wall time
is bound by CPU: on 2 cores no tuning makes 32 hosts' module runs as cheap as one host's.

What is timed, honestly: os_base's Debian packages (compilers, dkms, python3-dev, ... and the
running kernel's headers from the local mirror) are PRE-INSTALLED in the derived image. On this
2-core test machine 32 concurrent ``apt-get install`` runs of ~300 MB of packages would measure
dpkg and the disk, not Ansible. The first converge still runs all of ``stack.yml``: os_base adds
the mirror repository, refreshes the apt cache (the image ships empty lists dated 1970, so every
host fetches the Debian indexes), checks the packages (all present), holds the kernel packages and
writes its fact; npu_driver stages, checksums and runs the driver and firmware installers; cann
stages and runs toolkit, kernels and NNAL and writes the environment. The re-run touches
everything again and changes nothing.

Configurations (``--config``, comma-separated; run against fresh nodes each):

* ``naive``:    what Ansible does without this repository's ansible.cfg tuning: forks 5, no
                pipelining, no SSH ControlMaster (a new SSH connection per task);
* ``baseline``: the repository's ansible.cfg as it is (forks 25, pipelining, ControlPersist 60s);
* ``tuned``:    baseline plus forks >= N, ControlPersist 10 min (the re-run reuses the
                connections of the first converge), ``PreferredAuthentications=publickey``, and
                a jsonfile fact cache with ``gathering = smart`` (the play's ``gather_subset: min``
                facts are not gathered again on the re-run).

``strategy: free`` is deliberately not tried: stack.yml uses ``serial`` batches and
``any_errors_fatal``, whose guarantees it would weaken.

``--shared-fleet`` converges each N's nodes once, under the first configuration, and times every
configuration's no-op re-run on those same nodes (each with its own SSH control folder, so no
configuration reuses another's connections): the way to afford N=32 for several configurations.

Run from the repository root as root (rootful podman), in the project's venv::

    source .venv/bin/activate
    python bench/scale.py [--hosts 1,8,32] [--config baseline,tuned] [--shared-fleet]
                          [--tags TAGS] [--keep-logs DIR] [--json FILE] [--rebuild-image]

32 systemd containers need more inotify instances than the default 128
(``sysctl -w fs.inotify.max_user_instances=1024``); the script checks and says so.

Cost measured on the 2-core test machine (shared with other jobs, load 4-12): the derived image is
built once (about 70 s, needs the Debian mirror). Per configuration: N=1 about 1.5 minutes
(first converge 50-80 s, re-run 25-35 s), N=8 about 6-8 minutes (first converge 210-330 s, re-run
95-145 s), N=32 about 27 minutes for the first configuration (node start-up 65 s, first converge
950 s, re-run 625 s, at load 20-30) and about 10 more per further --shared-fleet one. Memory:
about 40 MB per node. Exit status 1 when a converge fails or a re-run changes anything.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import yaml

ROOT = Path(__file__).resolve().parent.parent
BASE_IMAGE = os.environ.get("ASCEND_SIM_IMAGE", "localhost/ascend-serve-node:bookworm")
SSH_IMAGE = "localhost/ascend-serve-node-ssh:bookworm"
NAME_PREFIX = "ascend-scale-"
SIM_STATE_DIR = Path(os.environ.get("ASCEND_SIM_STATE", "/var/lib/ascend-sim"))
LOCAL_VARS = ROOT / "inventories/local/group_vars/ascend_nodes/main.yml"
CONFIGS = ("naive", "baseline", "tuned")

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

RECAP_RE = re.compile(
    r"^(?P<host>\S+)\s+:\s+ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+"
    r"unreachable=(?P<unreachable>\d+)\s+failed=(?P<failed>\d+)\s+skipped=(?P<skipped>\d+)"
)
PROFILE_RE = re.compile(r"^(?P<task>.+?) -{2,} (?P<secs>\d+\.\d+)s$")


class BenchError(RuntimeError):
    """A run that did not do what the benchmark requires (a failed converge, a changing re-run)."""


def log(message: str) -> None:
    print(f"[scale {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run(cmd: Sequence[str], *, input: str | None = None, env: dict[str, str] | None = None,
        cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), check=True, text=True, capture_output=True, input=input,
                          env=env, cwd=cwd)


# --------------------------------------------------------------------------------------------
# Artifacts and image


def sim_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT / "molecule"), str(ROOT / "python"), env.get("PYTHONPATH")) if p
    )
    return env


def prepare_artifacts(cache: Path) -> tuple[Path, Path, Path]:
    """Vendor-format installers with their pins, and the apt mirror with the kernel headers.

    Built under ``cache`` (not scripts/local-deploy.sh's .artifacts/local), so a concurrent local
    deploy is not disturbed. Returns (installer dir, pins vars file, mirror dir).
    """
    local_vars = yaml.safe_load(LOCAL_VARS.read_text())
    installers, mirror = cache / "local", cache / "mirror"
    pins = cache / "artifacts.yml"
    run([sys.executable, "-m", "ascend_sim", "packages", str(installers),
         "--set", local_vars["ascend_stack_set"],
         "--firmware", local_vars["npu_driver_firmware_version"],
         "--vars-file", str(pins)], env=sim_env(), cwd=ROOT)
    if not (mirror / "apt" / "Packages").exists():
        run([sys.executable, "-m", "ascend_sim.mirror", "apt", str(mirror / "apt")],
            env=sim_env(), cwd=ROOT)
    return installers, pins, mirror


def image_exists(image: str) -> bool:
    return subprocess.run(["podman", "image", "exists", image], check=False).returncode == 0


def build_image(mirror: Path, rebuild: bool) -> None:
    if image_exists(SSH_IMAGE) and not rebuild:
        return
    vars_debian = yaml.safe_load((ROOT / "roles/os_base/vars/Debian.yml").read_text())
    packages = [*vars_debian["_os_base_packages"], f"linux-headers-{os.uname().release}"]
    log(f"building {SSH_IMAGE} (sshd + {len(packages)} os_base packages), about 2 minutes")
    with tempfile.TemporaryDirectory(prefix="ascend-scale-image-") as ctx:
        (Path(ctx) / "Containerfile").write_text(CONTAINERFILE.format(base=BASE_IMAGE))
        run(["podman", "build", "-t", SSH_IMAGE, "--build-arg", f"PACKAGES={' '.join(packages)}",
             "-v", f"{mirror}:/srv/ascend-mirror:ro", ctx])


# --------------------------------------------------------------------------------------------
# Nodes


@dataclass
class Fleet:
    """The nodes of one run, and everything to remove afterwards."""

    workdir: Path
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


def start_node(name: str, mirror: Path, pubkey: str) -> tuple[str, str, list[str], str]:
    """Start one node; return its address and public host keys once sshd answers."""
    run([sys.executable, "-m", "ascend_sim", "node", "up", name, "--model", "atlas800-a2",
         "--image", SSH_IMAGE, "--mirror", str(mirror)], env=sim_env(), cwd=ROOT)
    deadline = time.monotonic() + 300  # 32 systemd boots on 2 busy cores take a while
    while True:
        state = subprocess.run(["podman", "exec", name, "systemctl", "is-active", "ssh"],
                               check=False, text=True, capture_output=True).stdout.strip()
        if state == "active":
            break
        if time.monotonic() > deadline:
            raise BenchError(f"{name}: sshd is not active after 300 s ({state or 'no answer'})")
        time.sleep(0.5)
    run(["podman", "exec", "-i", name, "sh", "-c",
         "umask 077 && mkdir -p /root/.ssh && cat > /root/.ssh/authorized_keys"], input=pubkey)
    keys = run(["podman", "exec", name, "sh", "-c", "cat /etc/ssh/ssh_host_*_key.pub"]).stdout
    template = "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}"
    address = run(["podman", "container", "inspect", "--format", template, name]).stdout.split()
    if not address:
        raise BenchError(f"{name}: no address on podman's network")
    cgroup = run(["podman", "container", "inspect", "--format", "{{.State.CgroupPath}}",
                  name]).stdout.strip()
    return address[0], name, [line for line in keys.splitlines() if line.strip()], cgroup


def check_inotify(count: int) -> None:
    """Each node's systemd takes inotify instances; past the limit, nodes hang at boot."""
    path = Path("/proc/sys/fs/inotify/max_user_instances")
    need = 128 + 16 * count
    if path.exists() and int(path.read_text()) < need:
        raise BenchError(f"fs.inotify.max_user_instances is {path.read_text().strip()}; {count} "
                         f"systemd nodes need about {need}: sysctl -w "
                         f"fs.inotify.max_user_instances={max(need, 1024)}")


def start_fleet(fleet: Fleet, count: int, mirror: Path) -> None:
    check_inotify(count)
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ascend-scale", "-f",
         str(fleet.key)])
    pubkey = fleet.key.with_suffix(".pub").read_text()
    names = [f"{NAME_PREFIX}{i:02d}" for i in range(count)]
    fleet.names.extend(names)  # registered first: cleanup removes half-started ones too
    known: list[str] = []
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=4)
    try:
        for address, name, keys, cgroup in pool.map(lambda n: start_node(n, mirror, pubkey),
                                                    names):
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


def write_inventory(fleet: Fleet, installers: Path, pins: Path) -> Path:
    """An inventory like inventories/local: its group_vars, these hosts over SSH."""
    inv = fleet.workdir / "inventory"
    group_vars = inv / "group_vars" / "ascend_nodes"
    group_vars.mkdir(parents=True)
    text = LOCAL_VARS.read_text()
    # The local inventory names the artifacts relative to itself (.artifacts/...); this one lives
    # elsewhere and uses this run's installers (their pins come with them).
    text = text.replace("{{ inventory_dir }}/../../.artifacts/local", str(installers))
    text = text.replace("{{ inventory_dir }}/../../.artifacts", str(ROOT / ".artifacts"))
    (group_vars / "main.yml").write_text(text)
    shutil.copy(pins, group_vars / "artifacts.yml")
    ssh_args = (f"-o UserKnownHostsFile={fleet.known_hosts} -o StrictHostKeyChecking=yes "
                "-o IdentitiesOnly=yes")
    hosts = {
        name: {
            "ansible_host": fleet.addresses[name],
            "ansible_connection": "ssh",
            "ansible_user": "root",
            "ansible_ssh_private_key_file": str(fleet.key),
            "ansible_ssh_common_args": ssh_args,
            "ansible_python_interpreter": "/usr/bin/python3",
        }
        for name in fleet.names
    }
    inventory = {"all": {"children": {"ascend_nodes": {"hosts": hosts}}}}
    (inv / "hosts.yml").write_text("---\n" + yaml.safe_dump(inventory, sort_keys=True))
    return inv / "hosts.yml"


def nodes_cpu_seconds(fleet: Fleet) -> float:
    """CPU time all nodes' containers used so far (cgroup v1 cpuacct, or v2 cpu.stat)."""
    total = 0.0
    for cgroup in fleet.cgroups.values():
        v1 = Path("/sys/fs/cgroup/cpuacct") / cgroup.lstrip("/") / "cpuacct.usage"
        v2 = Path("/sys/fs/cgroup") / cgroup.lstrip("/") / "cpu.stat"
        with contextlib.suppress(OSError, ValueError):
            if v1.exists():
                total += int(v1.read_text()) / 1e9
            elif v2.exists():
                stat = dict(line.split() for line in v2.read_text().splitlines())
                total += int(stat["usage_usec"]) / 1e6
    return total


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


def remove_fleet(fleet: Fleet) -> None:
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
            shutil.rmtree(SIM_STATE_DIR / name, ignore_errors=True)
    shutil.rmtree(fleet.workdir, ignore_errors=True)


@contextlib.contextmanager
def fleet_of(count: int, mirror: Path) -> Iterator[Fleet]:
    fleet = Fleet(Path(tempfile.mkdtemp(prefix="ascend-scale-")))
    fleet.workdir.chmod(0o700)
    try:
        log(f"starting {count} node(s)")
        started = time.monotonic()
        start_fleet(fleet, count, mirror)
        log(f"{count} node(s) up in {time.monotonic() - started:.0f} s")
        yield fleet
    finally:
        remove_fleet(fleet)


# --------------------------------------------------------------------------------------------
# Ansible runs


def ansible_env(config: str, count: int, fleet: Fleet) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_FORCE_COLOR="0",
        PY_COLORS="0",
        # One folder per configuration: a re-run must not borrow another configuration's
        # SSH master connections.
        ANSIBLE_SSH_CONTROL_PATH_DIR=str(fleet.control_dir / config),
        ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_tasks",
        PROFILE_TASKS_TASK_OUTPUT_LIMIT="all",
        PROFILE_TASKS_SORT_ORDER="descending",
        ANSIBLE_RETRY_FILES_ENABLED="0",
    )
    if config == "naive":
        env.update(ANSIBLE_FORKS="5", ANSIBLE_PIPELINING="False",
                   ANSIBLE_SSH_ARGS="-o ControlMaster=no -o ControlPath=none")
    elif config == "tuned":
        env.update(
            ANSIBLE_FORKS=str(max(count, 5)),
            ANSIBLE_PIPELINING="True",
            ANSIBLE_SSH_ARGS=("-o ControlMaster=auto -o ControlPersist=600s "
                              "-o PreferredAuthentications=publickey"),
            ANSIBLE_GATHERING="smart",
            ANSIBLE_CACHE_PLUGIN="jsonfile",
            ANSIBLE_CACHE_PLUGIN_CONNECTION=str(fleet.workdir / "facts"),
            ANSIBLE_CACHE_PLUGIN_TIMEOUT="86400",
        )
    elif config != "baseline":
        raise ValueError(config)
    return env


@dataclass
class PlaybookRun:
    seconds: float
    controller_cpu: float
    nodes_cpu: float
    recap: dict[str, dict[str, int]]
    profile: list[tuple[str, float]]
    output: str


def children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_playbook(playbook: str, inventory: Path, env: dict[str, str],
                 extra: Sequence[str], fleet: Fleet) -> PlaybookRun:
    cmd = ["ansible-playbook", playbook, "-i", str(inventory), *extra]
    cpu, nodes_cpu = children_cpu_seconds(), nodes_cpu_seconds(fleet)
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, check=False)
    seconds = time.monotonic() - started
    cpu, nodes_cpu = children_cpu_seconds() - cpu, nodes_cpu_seconds(fleet) - nodes_cpu
    recap: dict[str, dict[str, int]] = {}
    profile: list[tuple[str, float]] = []
    in_recap = False
    for line in proc.stdout.splitlines():
        if line.startswith("PLAY RECAP"):
            in_recap = True
            continue
        match = RECAP_RE.match(line) if in_recap else None
        if match:
            recap[match["host"]] = {k: int(v) for k, v in match.groupdict().items()
                                    if k != "host"}
            continue
        prof = PROFILE_RE.match(line.strip())
        if in_recap and prof:
            profile.append((prof["task"], float(prof["secs"])))
    result = PlaybookRun(seconds, cpu, nodes_cpu, recap, profile, proc.stdout)
    if proc.returncode != 0 or any(r["failed"] or r["unreachable"] for r in recap.values()):
        tail = "\n".join(proc.stdout.splitlines()[-40:])
        raise BenchError(f"ansible-playbook exited {proc.returncode}:\n{tail}")
    return result


@dataclass
class Measurement:
    config: str
    hosts: int
    first: float
    rerun: float
    tasks_per_host: int
    rerun_controller_cpu: float
    rerun_nodes_cpu: float
    load_before_rerun: float
    profile: list[tuple[str, float]]
    problem: str = ""


def measure(configs: Sequence[str], count: int, playbook: str, extra: Sequence[str],
            mirror: Path, installers: Path, pins: Path, logs: Path | None,
            results: list[Measurement]) -> None:
    """First converge of fresh nodes under configs[0], then a no-op re-run under each config.

    With one configuration this is the plain benchmark. With several (``--shared-fleet``) the
    nodes are converged once and each configuration's re-run is timed on the same nodes; their
    "first" column is then the one shared first converge, under configs[0].
    """
    with fleet_of(count, mirror) as fleet:
        inventory = write_inventory(fleet, installers, pins)
        log(f"{configs[0]} N={count}: first converge")
        first = run_playbook(playbook, inventory, ansible_env(configs[0], count, fleet), extra,
                             fleet)
        log(f"{configs[0]} N={count}: first converge {first.seconds:.1f} s")
        if logs is not None:
            logs.mkdir(parents=True, exist_ok=True)
            (logs / f"{configs[0]}-{count}-first.log").write_text(first.output)
        for config in configs:
            log(f"{config} N={count}: no-op re-run")
            load = os.getloadavg()[0]
            # --diff: a re-run that changes something shows what (free when nothing changes).
            rerun = run_playbook(playbook, inventory, ansible_env(config, count, fleet),
                                 [*extra, "--diff"], fleet)
            log(f"{config} N={count}: re-run {rerun.seconds:.1f} s, CPU s: controller "
                f"{rerun.controller_cpu:.1f}, nodes {rerun.nodes_cpu:.1f}")
            if logs is not None:
                (logs / f"{config}-{count}-rerun.log").write_text(rerun.output)
            changed = {h: r["changed"] for h, r in rerun.recap.items() if r["changed"]}
            problem = ""
            if changed or len(rerun.recap) != count:
                problem = (f"{config} N={count}: the re-run is NOT a no-op: changed={changed}, "
                           f"{len(rerun.recap)} of {count} hosts in the recap")
                log(problem)  # recorded, reported, and the exit status is 1 at the end
            tasks = max(r["ok"] + r["skipped"] for r in rerun.recap.values())
            results.append(Measurement(config, count, first.seconds, rerun.seconds, tasks,
                                       rerun.controller_cpu, rerun.nodes_cpu, load,
                                       rerun.profile, problem))


# --------------------------------------------------------------------------------------------
# Report


def table(results: list[Measurement]) -> str:
    lines = []
    for config in dict.fromkeys(m.config for m in results):
        rows = sorted((m for m in results if m.config == config), key=lambda m: m.hosts)
        one = next((m for m in rows if m.hosts == 1), None)
        lines += [f"config: {config}",
                  f"{'N':>4} {'first s':>9} {'re-run s':>9} {'first N/1':>10} {'re-run N/1':>11}"
                  f" {'re-run/first':>13} {'tasks/host':>11} {'re-run CPU s ctl+nodes':>23}"
                  f" {'load':>5}"]
        for m in rows:
            first_ratio = f"{m.first / one.first:.2f}" if one else "-"
            rerun_ratio = f"{m.rerun / one.rerun:.2f}" if one else "-"
            lines.append(f"{m.hosts:>4} {m.first:>9.1f} {m.rerun:>9.1f} {first_ratio:>10}"
                         f" {rerun_ratio:>11} {m.rerun / m.first:>13.2f} {m.tasks_per_host:>11}"
                         f" {m.rerun_controller_cpu:>11.1f}+{m.rerun_nodes_cpu:<11.1f}"
                         f" {m.load_before_rerun:>5.1f}"
                         + ("  RE-RUN CHANGED HOSTS: NOT A NO-OP" if m.problem else ""))
        lines.append("")
    lines.append("CPU: re-run CPU seconds of ansible-playbook (controller) + all nodes' containers;"
                 f" this machine has {os.cpu_count()} cores, shared with whatever else runs (load ="
                 " 1-min load average before the re-run).")
    lines.append("")
    configs = {m.config for m in results}
    if "baseline" in configs and len(configs) > 1:
        lines.append("speed-up against baseline (baseline s / config s), first | re-run:")
        base = {m.hosts: m for m in results if m.config == "baseline"}
        for m in sorted(results, key=lambda m: (m.config, m.hosts)):
            if m.config != "baseline" and m.hosts in base:
                b = base[m.hosts]
                lines.append(f"  {m.config:>8} N={m.hosts:<3} {b.first / m.first:5.2f} | "
                             f"{b.rerun / m.rerun:5.2f}")
        lines.append("")
    for m in results:
        lines.append(f"slowest tasks of the no-op re-run, {m.config} N={m.hosts} "
                     "(profile_tasks: wall seconds of the task, all hosts and batches):")
        lines += [f"  {secs:7.2f} s  {task}" for task, secs in m.profile[:12]]
        lines.append("")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--hosts", default="1,8,32",
                        help="comma-separated host counts (default 1,8,32)")
    parser.add_argument("--config", default="baseline,tuned",
                        help=f"comma-separated configurations of {', '.join(CONFIGS)}")
    parser.add_argument("--playbook", default="playbooks/stack.yml")
    parser.add_argument("--tags", help="ansible-playbook --tags (default: the whole playbook)")
    parser.add_argument("--keep-logs", type=Path, help="write each run's output to this folder")
    parser.add_argument("--json", type=Path, help="also write the measurements as JSON")
    parser.add_argument("--shared-fleet", action="store_true",
                        help="per N, converge one fleet once (under the first --config) and time "
                        "every configuration's re-run on it (saves the first converges of big N)")
    parser.add_argument("--rebuild-image", action="store_true",
                        help=f"rebuild {SSH_IMAGE} even if it exists")
    args = parser.parse_args(argv)
    args.host_counts = [int(x) for x in args.hosts.split(",")]
    args.configs = args.config.split(",")
    unknown = set(args.configs) - set(CONFIGS)
    if unknown:
        parser.error(f"unknown configuration(s) {', '.join(sorted(unknown))}")
    return args


def on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # unwinds through the cleanup of the running fleet


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("run as root: the nodes are rootful podman containers")
    signal.signal(signal.SIGTERM, on_sigterm)
    extra = ["--tags", args.tags] if args.tags else []
    results: list[Measurement] = []
    cache = ROOT / ".artifacts" / "scale"
    try:
        installers, pins, mirror = prepare_artifacts(cache)
        build_image(mirror, args.rebuild_image)
        groups = [args.configs] if args.shared_fleet else [[c] for c in args.configs]
        for count in args.host_counts:
            for configs in groups:
                measure(configs, count, args.playbook, extra, mirror, installers, pins,
                        args.keep_logs, results)
                print(table(results), flush=True)
    except KeyboardInterrupt:
        log("interrupted; the nodes of the current run were removed")
        if results:
            print("partial results (interrupted):\n" + table(results))
        return 130
    except (BenchError, subprocess.CalledProcessError) as exc:
        detail = exc.stderr if isinstance(exc, subprocess.CalledProcessError) else ""
        log(f"FAILED: {exc}\n{detail}")
        return 1
    finally:
        if args.json and results:
            args.json.write_text(json.dumps([m.__dict__ for m in results], indent=2) + "\n")
    print("=" * 80)
    print(table(results))
    problems = [m.problem for m in results if m.problem]
    for problem in problems:
        log(f"FAILED: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
