#!/usr/bin/env python3
"""Scale benchmark: the accelerator stack over real SSH on 1, 8, 32 simulated Atlas 800 A2 nodes.

For each host count N and each Ansible configuration this script

1. starts N simulated Atlas 800 A2 nodes (``ascend_sim.sshfleet``, shared with the rollout fault
   test: ``python -m ascend_sim node up`` with the simulator's sysfs and tools mounts, systemd)
   as podman containers of a derived image that runs ``sshd``, on podman's default bridge; each
   node generates its own SSH host keys at boot;
2. generates a client key pair for this run, installs it as root's authorized key on every node,
   and writes a known_hosts file from each node's own public host keys (read through the
   container runtime, out of band): host key checking stays ON (``StrictHostKeyChecking=yes``);
3. writes an inventory like ``inventories/local`` (its group_vars, with the artifact paths made
   absolute and the installer pins of this run), hosts with ``ansible_host`` addresses and
   ``ansible_connection: ssh``;
4. times the first converge of ``ascend_serve.fleet.stack`` (canary batch of 1, then the rest, as
   the playbook's ``serial`` says) and then ``--reruns`` no-op re-runs, each of which must report
   ``changed=0`` and no failure on every host (the script fails loudly otherwise);
   ``ansible.posix.profile_tasks`` records the slowest tasks of the last re-run;
5. counts, per host and run, what each run cost: SSH executions (Ansible's ``ssh_executable``,
   ``sftp_executable`` and ``scp_executable`` are ``bench/sshcount/ssh``, which logs each call's
   host), and from the ``ascend_serve.fleet.run_counts`` callback the tasks, module runs, fact
   gatherings and package-manager runs;
6. measures CPU: the controller's as this process's children (ansible-playbook, its workers and
   the SSH clients) with the SSH masters included: this process is a child subreaper
   (``prctl(PR_SET_CHILD_SUBREAPER)``), each run has its own control folder and its masters are
   stopped and reaped when it ends; the nodes' from their containers' cgroups;
7. removes the containers, the nodes' state directories, the SSH master connections and the keys
   (also on Ctrl-C or SIGTERM).

It prints a table per configuration: N, first-converge seconds, re-run seconds (median), the
model ``W1 + (N-1)·c/cores`` (W1 the 1-host re-run, c the controller + node CPU-s per host at
this N: what the re-run would take if it were bound by this machine's CPU alone), re-run/first,
controller and node CPU seconds per host (median [min-max] of the re-runs), and per host the SSH
executions, module runs, fact gatherings, package-manager runs and tasks (the most any host
needed; deterministic), the load average before the re-runs, and the slowest re-run tasks.
Every simulated node shares this machine's cores with the controller: on 2 cores the wall time
of 32 hosts is bound by their CPU, which is why the figures to read are per host.

What is timed, honestly: os_base's Debian packages (compilers, dkms, python3-dev, ... and the
running kernel's headers from the local mirror) are PRE-INSTALLED in the derived image. On this
2-core test machine 32 concurrent ``apt-get install`` runs of ~300 MB of packages would measure
dpkg and the disk, not Ansible. The first converge still runs all of ``stack.yml``: os_base adds
the mirror repository, refreshes the apt cache (the image ships empty lists dated 1970, so every
host fetches the Debian indexes), checks the packages (all present), holds the kernel packages and
writes its fact; npu_driver stages, checksums and runs the driver and firmware installers; cann
stages and runs toolkit, kernels and NNAL and writes the environment. The re-run touches
everything again and changes nothing.

Operating systems (``--os``, comma-separated; default ``debian``; each on its own fresh nodes):

* ``debian``:    the derived image as it is (Debian 12, os_base's apt path);
* ``openeuler``: the same image presented as openEuler 22.03 LTS SP3, exactly as the molecule
                 scenario ``os_base_dnf`` prepares its node (os_base's dnf path): after the nodes
                 are up and before anything is timed, the playbook
                 ``molecule/shared/openeuler_node.yml`` (that scenario's prepare step) runs over
                 SSH: Debian's rpm, dnf and versionlock plugin from the Debian archive,
                 ``/etc/os-release`` saying openEuler, the running kernel's rpm and an unreachable
                 default repository the role must disable. The nodes mount an rpm repository of
                 empty stand-ins with openEuler's package names (``python -m ascend_sim.mirror
                 rpm``: os_base's RedHat package set, the scenario's extra packages and the
                 kernel packages of the scenario's openEuler-style kernel release) at
                 ``/srv/ascend-mirror/rpm``, and the inventory adds the scenario's group_vars
                 (read from ``molecule/os_base_dnf/molecule.yml``: ``os_base_kernel_release``,
                 the mirror as the only dnf repository, ...). Unlike on Debian nothing is
                 pre-installed: the first converge installs the (empty) packages with dnf.

Configurations (``--config``, comma-separated; run against fresh nodes each):

* ``naive``:    what Ansible does without this repository's ansible.cfg tuning: forks 5, no
                pipelining, no SSH ControlMaster (a new SSH connection per task);
* ``baseline``: the repository's ansible.cfg as it is (forks 100, pipelining, ControlPersist
                30 min, gathering smart, absolute remote_tmp);
* ``mitogen``:  baseline with Mitogen for Ansible's ``mitogen_linear`` strategy (the PyPI
                ``mitogen`` package, not a dependency: ``uv pip install mitogen``): one SSH
                connection per host, the modules run in a persistent interpreter on the node.

``strategy: free`` is deliberately not tried: stack.yml uses ``serial`` batches and
``any_errors_fatal``, whose guarantees it would weaken.

``--floor`` puts Ansible's own floor beside each re-run (issue 33): after every no-op re-run of the
playbook, on the same nodes and under the same configuration, ``bench/floor.yml`` runs once: it
gathers the ``min`` fact subset and runs one ``ping``, nothing else. The table then adds, per row,
(a) the playbook's controller + node CPU-s per host, (b) the floor's, and a/b (medians of the
re-runs; each a_i and b_i measured one after the other, so both see the same load).

``--shared-fleet`` converges each N's nodes once, under the first configuration, and times every
configuration's no-op re-run on those same nodes (each with its own SSH control folder, so no
configuration reuses another's connections): the way to afford N=32 for several configurations.

Run from the repository root as root (rootful podman), in the project's venv::

    source .venv/bin/activate
    python bench/scale.py [--hosts 1,8,32] [--os debian,openeuler]
                          [--config baseline,mitogen] [--shared-fleet]
                          [--reruns 3] [--floor] [--tags TAGS] [--keep-logs DIR] [--json FILE]
                          [--rebuild-image]

32 systemd containers need more inotify instances than the default 128
(``sysctl -w fs.inotify.max_user_instances=1024``); the script checks and says so.

Cost measured on the 2-core test machine (2026-12-05, load 2-30): the derived image is built
once (about 70 s, needs the Debian mirror). ``--hosts 1,8,32 --config baseline,mitogen
--shared-fleet --reruns 3`` took 20 minutes: node start-up 2 / 16 / 41-74 s, first converge 24 /
123 / 445 s, each re-run 4 / 20 / 66-73 s. Memory: about 40 MB per node. Exit status 1 when a
converge fails or a re-run changes anything. The figures: docs/bench.md.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import ctypes
import json
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import yaml

from ascend_serve.resources import role_path
from ascend_sim.sshfleet import (
    SSH_IMAGE,
    Fleet,
    FleetError,
    build_image,
    fleet_of,
    sim_env,
    ssh_masters,
    write_inventory,
)

ROOT = Path(__file__).resolve().parent.parent
NAME_PREFIX = "ascend-scale-"
SIM_STATE_DIR = Path(os.environ.get("ASCEND_SIM_STATE", "/var/lib/ascend-sim"))
LOCAL_VARS = ROOT / "inventories/local/group_vars/ascend_nodes/main.yml"
CONFIGS = ("naive", "baseline", "mitogen")
OSES = ("debian", "openeuler")
# The openEuler node: the molecule scenario of os_base's dnf path, its prepare step as a playbook.
DNF_SCENARIO = ROOT / "molecule" / "os_base_dnf" / "molecule.yml"
OPENEULER_NODE = ROOT / "molecule" / "shared" / "openeuler_node.yml"
# Ansible's floor for a converged host: the `min` fact subset and one ping (--floor).
FLOOR_PLAYBOOK = ROOT / "bench" / "floor.yml"
JINJA_RE = re.compile(r"\{\{.*?\}\}")
PR_SET_CHILD_SUBREAPER = 36  # prctl(2)

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


def openeuler_vars() -> dict[str, Any]:
    """The group_vars the os_base_dnf scenario gives its openEuler node (its molecule.yml)."""
    scenario = yaml.safe_load(DNF_SCENARIO.read_text())
    group_vars: dict[str, Any] = scenario["provisioner"]["inventory"]["group_vars"]["ascend_nodes"]
    return group_vars


def prepare_rpm_mirror(cache: Path) -> Path:
    """The openEuler nodes' mirror: ``rpm/`` as the os_base_dnf scenario builds it (os_base's
    RedHat package set, the scenario's extra packages, the kernel packages of its kernel release;
    not the scenario's newer kernel, which only its upgrade probe needs). Rebuilt on every run
    (seconds), so that it follows the role's package list. Returns the directory to mount."""
    group_vars = openeuler_vars()
    # "5.10.0-...oe2203sp3.{{ ansible_facts['architecture'] }}": the containers share this
    # machine's kernel, so the node's architecture is this machine's.
    kernel = JINJA_RE.sub(os.uname().machine, group_vars["os_base_kernel_release"])
    mirror = cache / "mirror-openeuler"
    cmd = [sys.executable, "-m", "ascend_sim.mirror", "rpm", str(mirror / "rpm"),
           "--kernel", kernel,
           "--packages-from", str(role_path("os_base", "vars", "RedHat.yml"))]
    for name in group_vars.get("os_base_extra_packages", []):
        cmd += ["--package", name]
    run(cmd, env=sim_env(), cwd=ROOT)
    return mirror


# --------------------------------------------------------------------------------------------
# Nodes


def inventory_for(fleet: Fleet, installers: Path, pins: Path, os_name: str) -> Path:
    """An inventory like inventories/local: its group_vars, these hosts over SSH; for openEuler
    nodes with the os_base_dnf scenario's group_vars added (read after the local ones)."""
    text = LOCAL_VARS.read_text()
    # The local inventory names the artifacts relative to itself (.artifacts/...); this one lives
    # elsewhere and uses this run's installers (their pins come with them).
    text = text.replace("{{ inventory_dir }}/../../.artifacts/local", str(installers))
    text = text.replace("{{ inventory_dir }}/../../.artifacts", str(ROOT / ".artifacts"))
    files = {"main.yml": text, "artifacts.yml": pins.read_text()}
    if os_name == "openeuler":
        files["openeuler.yml"] = "---\n" + yaml.safe_dump(openeuler_vars(), sort_keys=True)
    return write_inventory(fleet, files)


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


# --------------------------------------------------------------------------------------------
# Ansible runs

SSH_WRAPPER = ROOT / "bench" / "sshcount" / "ssh"
COUNT_FIELDS = ("ssh_executions", "module_runs", "fact_gatherings", "package_manager_runs",
                "tasks")


def become_subreaper() -> bool:
    """Adopt orphaned descendants: the SSH masters that ControlPersist detaches become children
    of this process, so their CPU time is in RUSAGE_CHILDREN once they are stopped and reaped."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def stop_masters(control_dir: Path) -> None:
    """Stop the SSH masters of one run and reap them (their CPU joins the run's)."""
    pids = ssh_masters(control_dir)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    for pid in pids:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


def ansible_env(config: str, count: int, control_dir: Path, counts_file: Path,
                ssh_log: Path, fleet: Fleet) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_FORCE_COLOR="0",
        PY_COLORS="0",
        # One folder per run: a run must not borrow another run's SSH master connections, and
        # the masters of each run are stopped (and their CPU counted) when it ends.
        ANSIBLE_SSH_CONTROL_PATH_DIR=str(control_dir),
        ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_tasks,ascend_serve.fleet.run_counts",
        ASCEND_SERVE_RUN_COUNTS=str(counts_file),
        ANSIBLE_SSH_EXECUTABLE=str(SSH_WRAPPER),
        ANSIBLE_SFTP_EXECUTABLE=str(SSH_WRAPPER.with_name("sftp")),
        ANSIBLE_SCP_EXECUTABLE=str(SSH_WRAPPER.with_name("scp")),
        ASCEND_SSH_COUNT_LOG=str(ssh_log),
        PROFILE_TASKS_TASK_OUTPUT_LIMIT="all",
        PROFILE_TASKS_SORT_ORDER="descending",
        ANSIBLE_RETRY_FILES_ENABLED="0",
    )
    if config == "naive":
        env.update(ANSIBLE_FORKS="5", ANSIBLE_PIPELINING="False",
                   ANSIBLE_SSH_ARGS="-o ControlMaster=no -o ControlPath=none")
    elif config == "mitogen":
        import ansible_mitogen  # only this configuration needs it: pip install mitogen

        strategy_dir = Path(ansible_mitogen.__file__).parent / "plugins" / "strategy"
        env.update(ANSIBLE_STRATEGY_PLUGINS=str(strategy_dir),
                   ANSIBLE_STRATEGY="mitogen_linear")
    elif config != "baseline":
        raise ValueError(config)
    return env


@dataclass
class PlaybookRun:
    seconds: float
    controller_cpu: float
    nodes_cpu: float
    recap: dict[str, dict[str, int]]
    counts: dict[str, dict[str, int]]
    profile: list[tuple[str, float]]
    output: str


def children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def read_counts(counts_file: Path, ssh_log: Path, fleet: Fleet) -> dict[str, dict[str, int]]:
    """Per inventory host: the run_counts callback's figures and the SSH wrapper's executions."""
    lines = counts_file.read_text().splitlines() if counts_file.exists() else []
    hosts: dict[str, dict[str, int]] = json.loads(lines[-1])["hosts"] if lines else {}
    by_address = {address: name for name, address in fleet.addresses.items()}
    calls = collections.Counter(
        by_address.get(line.split()[-1], line.split()[-1])
        for line in (ssh_log.read_text().splitlines() if ssh_log.exists() else []))
    for name in fleet.names:
        hosts.setdefault(name, dict.fromkeys(COUNT_FIELDS, 0))["ssh_executions"] = calls[name]
    return hosts


def run_playbook(playbook: str, inventory: Path, config: str, label: str,
                 extra: Sequence[str], fleet: Fleet) -> PlaybookRun:
    cmd = ["ansible-playbook", playbook, "-i", str(inventory), *extra]
    control_dir = fleet.control_dir / label
    counts_file, ssh_log = fleet.workdir / f"{label}.counts", fleet.workdir / f"{label}.ssh"
    env = ansible_env(config, len(fleet.names), control_dir, counts_file, ssh_log, fleet)
    cpu, nodes_cpu = children_cpu_seconds(), nodes_cpu_seconds(fleet)
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, check=False)
    stop_masters(control_dir)
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
    result = PlaybookRun(seconds, cpu, nodes_cpu, recap, read_counts(counts_file, ssh_log, fleet),
                         profile, proc.stdout)
    if proc.returncode != 0 or any(r["failed"] or r["unreachable"] for r in recap.values()):
        tail = "\n".join(proc.stdout.splitlines()[-40:])
        raise BenchError(f"ansible-playbook exited {proc.returncode}:\n{tail}")
    return result


@dataclass
class Measurement:
    config: str
    os: str
    hosts: int
    first: float
    reruns: list[float]
    controller_cpu: list[float]
    nodes_cpu: list[float]
    counts: dict[str, int]  # per host, the most any host needed (the figures are deterministic)
    load_before_rerun: float
    profile: list[tuple[str, float]]
    problem: str = ""
    # --floor: bench/floor.yml's CPU-s (all hosts), one run after each re-run of the playbook.
    floor_controller_cpu: list[float] = field(default_factory=list)
    floor_nodes_cpu: list[float] = field(default_factory=list)

    @property
    def rerun(self) -> float:
        return statistics.median(self.reruns)

    def per_host(self, values: list[float]) -> tuple[float, float, float]:
        """Median, min and max of values, per host."""
        per = [v / self.hosts for v in values]
        return statistics.median(per), min(per), max(per)

    def floor_ratio(self) -> tuple[float, float, float] | None:
        """(a, b, a/b): the playbook's and the floor's controller + node CPU-s per host
        (medians of the re-runs), or None without --floor."""
        if not self.floor_controller_cpu:
            return None
        a = statistics.median(c + n for c, n in zip(self.controller_cpu, self.nodes_cpu,
                                                      strict=True)) / self.hosts
        b = statistics.median(c + n for c, n in zip(self.floor_controller_cpu,
                                                      self.floor_nodes_cpu,
                                                      strict=True)) / self.hosts
        return a, b, a / b


def measure(configs: Sequence[str], os_name: str, count: int, playbook: str,
            extra: Sequence[str], mirror: Path, installers: Path, pins: Path, logs: Path | None,
            reruns: int, results: list[Measurement], floor: bool = False) -> None:
    """First converge of fresh nodes under configs[0], then no-op re-runs under each config.

    With one configuration this is the plain benchmark. With several (``--shared-fleet``) the
    nodes are converged once and each configuration's re-runs are timed on the same nodes; their
    "first" column is then the one shared first converge, under configs[0].
    """
    prefix = NAME_PREFIX if os_name == "debian" else f"{NAME_PREFIX}{os_name}-"
    names = [f"{prefix}{i:02d}" for i in range(count)]
    if logs is not None:
        logs.mkdir(parents=True, exist_ok=True)
    with fleet_of(names, mirror, SIM_STATE_DIR, log) as fleet:
        inventory = inventory_for(fleet, installers, pins, os_name)
        if os_name == "openeuler":
            # Not timed, not counted: makes the nodes what the os_base_dnf scenario's are.
            log(f"{os_name} N={count}: preparing the nodes ({OPENEULER_NODE.relative_to(ROOT)})")
            prepared = run_playbook(str(OPENEULER_NODE), inventory, "baseline", "prepare", [],
                                    fleet)
            log(f"{os_name} N={count}: prepared in {prepared.seconds:.1f} s")
        tag = f"{configs[0]} {os_name} N={count}"
        log(f"{tag}: first converge")
        first = run_playbook(playbook, inventory, configs[0], f"{configs[0]}-first", extra, fleet)
        log(f"{tag}: first converge {first.seconds:.1f} s")
        if logs is not None:
            (logs / f"{configs[0]}-{os_name}-{count}-first.log").write_text(first.output)
        for config in configs:
            runs: list[PlaybookRun] = []
            floors: list[PlaybookRun] = []
            load = os.getloadavg()[0]
            problem = ""
            tag = f"{config} {os_name} N={count}"
            for i in range(reruns):
                log(f"{tag}: no-op re-run {i + 1}/{reruns}")
                # --diff: a re-run that changes something shows what (free when nothing changes).
                rerun = run_playbook(playbook, inventory, config, f"{config}-rerun{i}",
                                     [*extra, "--diff"], fleet)
                runs.append(rerun)
                log(f"{tag}: re-run {rerun.seconds:.1f} s, CPU s: controller "
                    f"{rerun.controller_cpu:.1f}, nodes {rerun.nodes_cpu:.1f}")
                if logs is not None:
                    (logs / f"{config}-{os_name}-{count}-rerun{i}.log").write_text(rerun.output)
                changed = {h: r["changed"] for h, r in rerun.recap.items() if r["changed"]}
                if changed or len(rerun.recap) != count:
                    problem = (f"{tag}: the re-run is NOT a no-op: changed={changed}"
                               f", {len(rerun.recap)} of {count} hosts in the recap")
                    log(problem)  # recorded, reported, and the exit status is 1 at the end
                if floor:
                    # Right after the re-run, same nodes and configuration: the same load.
                    floors.append(run_playbook(str(FLOOR_PLAYBOOK), inventory, config,
                                               f"{config}-floor{i}", [], fleet))
                    log(f"{tag}: floor {floors[-1].seconds:.1f} s, CPU s: controller "
                        f"{floors[-1].controller_cpu:.1f}, nodes {floors[-1].nodes_cpu:.1f}")
            counts = {f: max(h.get(f, 0) for h in runs[-1].counts.values())
                      for f in COUNT_FIELDS}
            results.append(Measurement(
                config, os_name, count, first.seconds, [r.seconds for r in runs],
                [r.controller_cpu for r in runs], [r.nodes_cpu for r in runs], counts, load,
                runs[-1].profile, problem, [f.controller_cpu for f in floors],
                [f.nodes_cpu for f in floors]))


# --------------------------------------------------------------------------------------------
# Report

def model_seconds(m: Measurement, one: Measurement | None) -> float | None:
    """W1 + (N-1)·c/cores: the one-host re-run plus every further host's CPU spread over the
    cores (c: controller + node CPU seconds per host, measured at this N)."""
    if one is None:
        return None
    pairs = zip(m.controller_cpu, m.nodes_cpu, strict=True)
    cpu = statistics.median(c + n for c, n in pairs) / m.hosts
    return one.rerun + (m.hosts - 1) * cpu / (os.cpu_count() or 1)


def table(results: list[Measurement]) -> str:
    lines = []
    for config in dict.fromkeys(m.config for m in results):
        rows = sorted((m for m in results if m.config == config),
                      key=lambda m: (OSES.index(m.os), m.hosts))
        lines += [f"config: {config}  (re-runs: median of {len(rows[0].reruns)}; CPU-s per host:"
                  " median [min-max]; counts per host: the most any host needed)",
                  f"{'os':<9} {'N':>4} {'first s':>8} {'re-run s':>9} {'model s':>8}"
                  f" {'re-run/first':>12}"
                  f" {'ctl CPU-s/host':>20} {'node CPU-s/host':>20} {'ssh':>4} {'mods':>5}"
                  f" {'facts':>5} {'pkg':>4} {'tasks':>5} {'load':>5}"]
        for m in rows:
            one = next((o for o in rows if o.os == m.os and o.hosts == 1), None)
            model = model_seconds(m, one)
            ctl, node = m.per_host(m.controller_cpu), m.per_host(m.nodes_cpu)
            c = m.counts
            lines.append(
                f"{m.os:<9} {m.hosts:>4} {m.first:>8.1f} {m.rerun:>9.1f} "
                f"{(f'{model:.1f}' if model is not None else '-'):>8} {m.rerun / m.first:>12.2f}"
                f" {ctl[0]:>6.2f} [{ctl[1]:.2f}-{ctl[2]:.2f}] "
                f"{node[0]:>6.2f} [{node[1]:.2f}-{node[2]:.2f}]"
                f" {c['ssh_executions']:>4} {c['module_runs']:>5} {c['fact_gatherings']:>5}"
                f" {c['package_manager_runs']:>4} {c['tasks']:>5} {m.load_before_rerun:>5.1f}"
                + ("  RE-RUN CHANGED HOSTS: NOT A NO-OP" if m.problem else ""))
        lines.append("")
        floors = [(m, m.floor_ratio()) for m in rows]
        if any(r for _, r in floors):
            lines.append(f"config: {config}, beside the floor (bench/floor.yml: facts subset min"
                         " and one ping, run after each re-run): controller + node CPU-s per host,"
                         " medians of the re-runs")
            lines.append(f"{'os':<9} {'N':>4} {'a playbook':>11} {'b floor':>8} {'a/b':>6}")
            lines += [f"{m.os:<9} {m.hosts:>4} {r[0]:>11.2f} {r[1]:>8.2f} {r[2]:>6.2f}"
                      for m, r in floors if r]
            lines.append("")
    lines.append("CPU: ansible-playbook and its children, the SSH masters included (controller),"
                 " and the nodes' containers' cgroups (node); this machine has "
                 f"{os.cpu_count()} cores, shared with whatever else runs (load = 1-min load"
                 " average before the re-runs). model: W1 + (N-1)·c/cores, W1 the 1-host re-run"
                 " (same os),"
                 " c the controller + node CPU-s per host.")
    lines.append("")
    for m in results:
        lines.append(f"slowest tasks of the last no-op re-run, {m.config} {m.os} N={m.hosts} "
                     "(profile_tasks: wall seconds of the task, all hosts and batches):")
        lines += [f"  {secs:7.2f} s  {task}" for task, secs in m.profile[:12]]
        lines.append("")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--hosts", default="1,8,32",
                        help="comma-separated host counts (default 1,8,32)")
    parser.add_argument("--config", default="baseline",
                        help=f"comma-separated configurations of {', '.join(CONFIGS)}")
    parser.add_argument("--os", default="debian",
                        help=f"comma-separated node operating systems of {', '.join(OSES)} "
                        "(default debian)")
    parser.add_argument("--playbook", default="ascend_serve.fleet.stack",
                        help="a playbook path, or one of the collection's by FQCN")
    parser.add_argument("--tags", help="ansible-playbook --tags (default: the whole playbook)")
    parser.add_argument("--keep-logs", type=Path, help="write each run's output to this folder")
    parser.add_argument("--json", type=Path, help="also write the measurements as JSON")
    parser.add_argument("--shared-fleet", action="store_true",
                        help="per N, converge one fleet once (under the first --config) and time "
                        "every configuration's re-run on it (saves the first converges of big N)")
    parser.add_argument("--floor", action="store_true",
                        help="after each re-run, run bench/floor.yml (facts subset min, one ping)"
                        " on the same nodes and print a/b: the playbook's CPU per host over the"
                        " floor's")
    parser.add_argument("--reruns", type=int, default=3,
                        help="no-op re-runs per configuration (median and spread; default 3)")
    parser.add_argument("--rebuild-image", action="store_true",
                        help=f"rebuild {SSH_IMAGE} even if it exists")
    args = parser.parse_args(argv)
    args.host_counts = [int(x) for x in args.hosts.split(",")]
    args.configs = args.config.split(",")
    unknown = set(args.configs) - set(CONFIGS)
    if unknown:
        parser.error(f"unknown configuration(s) {', '.join(sorted(unknown))}")
    args.oses = args.os.split(",")
    unknown = set(args.oses) - set(OSES)
    if unknown:
        parser.error(f"unknown operating system(s) {', '.join(sorted(unknown))}")
    return args


def on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # unwinds through the cleanup of the running fleet


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("run as root: the nodes are rootful podman containers")
    signal.signal(signal.SIGTERM, on_sigterm)
    if not become_subreaper():
        log("prctl(PR_SET_CHILD_SUBREAPER) failed: the SSH masters' CPU is not counted")
    extra = ["--tags", args.tags] if args.tags else []
    results: list[Measurement] = []
    cache = ROOT / ".artifacts" / "scale"
    try:
        installers, pins, mirror = prepare_artifacts(cache)
        build_image(mirror, args.rebuild_image, log)
        mirrors = {"debian": mirror}
        if "openeuler" in args.oses:
            mirrors["openeuler"] = prepare_rpm_mirror(cache)
        groups = [args.configs] if args.shared_fleet else [[c] for c in args.configs]
        for count in args.host_counts:
            for os_name in args.oses:
                for configs in groups:
                    measure(configs, os_name, count, args.playbook, extra, mirrors[os_name],
                            installers, pins, args.keep_logs, args.reruns, results,
                            args.floor)
                print(table(results), flush=True)
    except KeyboardInterrupt:
        log("interrupted; the nodes of the current run were removed")
        if results:
            print("partial results (interrupted):\n" + table(results))
        return 130
    except (BenchError, FleetError, subprocess.CalledProcessError) as exc:
        detail = exc.stderr if isinstance(exc, subprocess.CalledProcessError) else ""
        log(f"FAILED: {exc}\n{detail}")
        return 1
    finally:
        if args.json and results:
            rows = [{**m.__dict__, "rerun": m.rerun} for m in results]
            args.json.write_text(json.dumps(rows, indent=2) + "\n")
    print("=" * 80)
    print(table(results))
    problems = [m.problem for m in results if m.problem]
    for problem in problems:
        log(f"FAILED: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
