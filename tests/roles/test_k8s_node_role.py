"""The k8s_node role's pieces that need no container: the simulated Ascend Docker Runtime installer
against the vendor's documented output (the corpus), its containerd edit against Debian's shipped
configuration and the role's template, and the template as TOML containerd can read.

The role itself runs in molecule scenario k8s_node."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml
from ansible_run import ansible_playbook
from paths import CORPUS, ROLES

from ascend_sim import docker_runtime
from ascend_sim.models import make_node
from ascend_sim.sysfs import write_pci_tree

# The project's floor is Python 3.10, which has no tomllib; the test venv's Python has it.
tomllib = pytest.importorskip("tomllib")

CORPUS_DIR = CORPUS / "ascend-docker-runtime"
ROLE = ROLES / "k8s_node"
DEBIAN_CONFIG = CORPUS_DIR / "debian-bookworm-containerd-1.6.20-config.toml"
ARCH = os.uname().machine
BINARY = "/usr/local/Ascend/Ascend-Docker-Runtime/ascend-docker-runtime"
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="the installer runs as root only")


def corpus_lines(name: str) -> list[str]:
    """The lines of a documented output, without the documents' ``...`` elisions."""
    return [line for line in (CORPUS_DIR / name).read_text().splitlines() if line != "..."]


def in_order(expected: list[str], output: str) -> bool:
    """Every expected line is a line of ``output``, in the same order."""
    lines = iter(output.splitlines())
    return all(any(line == wanted for line in lines) for wanted in expected)


def render_config(**overrides: Any) -> str:
    """templates/config.toml.j2 with the role's defaults (Ansible's to_json and bool filters)."""
    values = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    values.update(ansible_managed="Ansible managed", _k8s_node_runtime_binary=BINARY, **overrides)
    env = jinja2.Environment(  # noqa: S701 - renders TOML, not HTML
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True)
    env.filters["to_json"] = json.dumps
    env.filters["bool"] = bool
    return env.from_string((ROLE / "templates" / "config.toml.j2").read_text()).render(values)


def run(path: Path, *args: str, root: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if root is not None:
        env["ASCEND_SIM_ROOT"] = str(root)
    return subprocess.run([str(path), *args], capture_output=True, text=True, env=env,
                          stdin=subprocess.DEVNULL, check=False)


@pytest.fixture(scope="module")
def runfile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return docker_runtime.build(tmp_path_factory.mktemp("drt"), "26.0.0", ARCH)


def test_file_name_and_check_follow_the_vendor(runfile: Path) -> None:
    assert runfile.name == f"Ascend-docker-runtime_26.0.0_linux-{ARCH}.run"
    done = run(runfile, "--check")
    assert done.returncode == 0, done.stderr
    assert in_order(corpus_lines("check-containerd-doc.txt"), done.stdout)
    # Only the options of help.info: anything else is refused by the header.
    refused = run(runfile, "--quiet")
    assert refused.returncode == 1 and "Error input" in refused.stderr


def test_26_1_dropped_check(tmp_path: Path) -> None:
    newer = docker_runtime.build(tmp_path, "26.1.0", ARCH)
    done = run(newer, "--check")
    assert done.returncode == 1 and "Error input" in done.stderr


def test_corrupted_installer_fails_its_own_sha256(tmp_path: Path) -> None:
    bad = docker_runtime.build(tmp_path, "26.0.0", ARCH, corrupt=True)
    done = run(bad, "--install", "--install-scene=containerd", root=tmp_path / "root")
    assert done.returncode == 2
    assert "Error in SHA256 checksums" in done.stderr
    assert not (tmp_path / "root").exists()


@as_root
def test_install_upgrade_uninstall_into_a_scratch_root(runfile: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    config = root / "etc/containerd/config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(render_config())
    done = run(runfile, "--install", "--install-scene=containerd",
               "--install-path=/usr/local/Ascend", root=root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert in_order(corpus_lines("install-containerd-doc.txt"), done.stdout)
    base = root / "usr/local/Ascend/Ascend-Docker-Runtime"
    info = (base / "ascend_docker_runtime_install.info").read_text().splitlines()
    assert info[:5] == ["version=v26.0.0", f"arch={ARCH}", "os=linux",
                        "path=/usr/local/Ascend/Ascend-Docker-Runtime",
                        f"build=Ascend-docker-runtime_26.0.0-{ARCH}"]
    assert "install-scene=containerd" in info
    assert oct((base / "ascend_docker_runtime_install.info").stat().st_mode & 0o777) == "0o640"
    for program in docker_runtime.PROGRAMS:
        assert oct((base / program).stat().st_mode & 0o777) == "0o550", program
    # The helper pointed runc at the runtime (which branch depends on this machine's cgroups).
    edited = tomllib.loads(config.read_text())
    runc = edited["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["runc"]
    v1 = edited["plugins"]["io.containerd.runtime.v1.linux"]
    assert BINARY in (runc["options"].get("BinaryName"), v1.get("runtime"))
    assert oct(config.stat().st_mode & 0o777) == "0o600"

    upgraded = run(docker_runtime.build(tmp_path / "next", "26.0.1", ARCH), "--upgrade",
                   "--install-scene=containerd", "--install-path=/usr/local/Ascend", root=root)
    assert upgraded.returncode == 0, upgraded.stdout
    assert in_order(corpus_lines("upgrade-doc.txt"), upgraded.stdout)
    assert "version=v26.0.1" in (base / "ascend_docker_runtime_install.info").read_text()

    removed = run(runfile, "--uninstall", root=root)
    assert removed.returncode == 0, removed.stdout
    assert in_order(corpus_lines("uninstall-doc.txt"), removed.stdout)
    assert not base.exists()
    log = (root / "var/log/ascend-docker-runtime/installer.log").read_text().splitlines()
    assert [line.split("] ")[-1] for line in log if "success" in line and "modify" not in line] \
        == ["ascend-docker-runtime install success", "ascend-docker-runtime upgrade success",
            "ascend-docker-runtime uninstall success"]


@as_root
def test_option_errors_are_refused(runfile: Path, tmp_path: Path) -> None:
    alone = run(runfile, "--install-path=/opt", root=tmp_path)
    assert alone.returncode == 1 and "When use --install-path" in alone.stdout
    scene = run(runfile, "--install", "--install-scene=podman", root=tmp_path)
    assert scene.returncode == 1 and "--install-scene=<scene>" in scene.stdout


@pytest.mark.parametrize("cgroup_v2", [True, False])
def test_the_helper_fails_on_debians_config_and_edits_the_roles(cgroup_v2: bool) -> None:
    with pytest.raises(docker_runtime.RefusedError, match="can not find"):
        docker_runtime.edit_containerd_config(DEBIAN_CONFIG.read_text(), BINARY, cgroup_v2)
    edited = tomllib.loads(docker_runtime.edit_containerd_config(render_config(), BINARY,
                                                                 cgroup_v2))
    runtimes = edited["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]
    # The helper leaves the ascend handler as the role wrote it.
    assert runtimes["ascend"] == {"runtime_type": "io.containerd.runc.v2",
                                  "options": {"BinaryName": BINARY, "SystemdCgroup": True}}
    if cgroup_v2:
        assert runtimes["runc"]["options"]["BinaryName"] == BINARY
    else:
        assert runtimes["runc"]["runtime_type"] == "io.containerd.runtime.v1.linux"
        assert edited["plugins"]["io.containerd.runtime.v1.linux"]["runtime"] == BINARY


def test_template_is_the_mindcluster_layout() -> None:
    config = tomllib.loads(render_config(k8s_node_containerd_sandbox_image="reg.example/pause:3.9",
                                         k8s_node_containerd_default_runtime="runc"))
    assert config["version"] == 2
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == "reg.example/pause:3.9"
    assert cri["containerd"]["default_runtime_name"] == "runc"
    assert cri["containerd"]["runtimes"]["ascend"]["options"]["BinaryName"] == BINARY
    assert "sandbox_image" not in tomllib.loads(render_config())["plugins"][
        "io.containerd.grpc.v1.cri"]


def test_argument_specs_declare_every_default() -> None:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    assert set(defaults) == set(options)
    assert all(name.startswith("k8s_node_") for name in options)


LABEL_CASES = {
    # model: the MindCluster labels its PCI tree gives (docs table in vars/main.yml)
    "atlas800-a2": {"accelerator": "huawei-Ascend910", "accelerator-type": "module-910b-8"},
    "atlas800-a3": {"accelerator": "huawei-Ascend910", "accelerator-type": "module-a3-16"},
    "atlas800-910": {"accelerator": "huawei-Ascend910", "accelerator-type": "module"},
    "atlas300i-duo": {"accelerator": "huawei-Ascend310P"},
}


def test_labels_from_the_pci_bus_and_refusals(tmp_path: Path) -> None:
    """The role's label derivation and input checks (tasks/validate.yml) as Ansible evaluates
    them, on the PCI trees of the simulator's server models; one ansible-playbook run."""
    tasks: list[dict[str, Any]] = []
    cases = [*((model, {}) for model in LABEL_CASES),
             ("atlas800-a2", {"node-role.kubernetes.io/worker": "worker"}),
             ("atlas800-a2", {"bad label": "x", "ok": "-no"}),
             ("none", {})]
    for index, (model, extra) in enumerate(cases):
        tree = tmp_path / f"pci-{index}"
        if model == "none":
            tree.mkdir()
        else:
            write_pci_tree(make_node(model), tree)
        tasks.append({"name": f"case {index}", "block": [
            {"name": "Read the PCI tree", "ascend_serve.fleet.npu_pci_facts": {
                "sysfs_pci_path": str(tree)}},
            {"name": "Check the inputs", "ansible.builtin.include_role": {
                "name": "ascend_serve.fleet.k8s_node", "tasks_from": "validate", "public": True},
             "vars": {"k8s_node_labels_extra": extra}},
            {"name": "Keep the labels", "ansible.builtin.copy": {
                "content": "{{ _k8s_node_labels | to_json }}",
                "dest": str(tmp_path / f"labels-{index}.json"), "mode": "0644"}},
        ], "rescue": [
            {"name": "Keep the refusal", "ansible.builtin.copy": {
                "content": "{{ ansible_failed_result.msg | to_json }}",
                "dest": str(tmp_path / f"refused-{index}.json"), "mode": "0644"}},
        ]})
    playbook = tmp_path / "labels.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "k8s_node labels", "hosts": "localhost", "gather_facts": False,
        "vars": {"k8s_node_runtime_arch": "aarch64",
                 "k8s_node_kubelet_env_file": "/etc/default/kubelet",
                 "k8s_node_artifact_dir": str(tmp_path),
                 "k8s_node_sha256": {"Ascend-docker-runtime_26.0.0_linux-aarch64.run": "0" * 64}},
        "tasks": tasks}]))
    done = ansible_playbook("-i", "localhost,", "-c", "local", "-e",
                            f"ansible_python_interpreter={sys.executable}", str(playbook),
                            timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    for index, (model, expected) in enumerate(LABEL_CASES.items()):
        labels = json.loads((tmp_path / f"labels-{index}.json").read_text())
        assert labels == {"host-arch": "huawei-arm", "workerselector": "dls-worker-node",
                          "server-usage": "infer", **expected}, model
    first = len(LABEL_CASES)
    role_label = " ".join(json.loads((tmp_path / f"refused-{first}.json").read_text()))
    assert "may not set on its own node (NodeRestriction): node-role.kubernetes.io/worker" \
        in role_label
    invalid = " ".join(json.loads((tmp_path / f"refused-{first + 1}.json").read_text()))
    assert "not valid Kubernetes labels: bad label, ok" in invalid
    none = " ".join(json.loads((tmp_path / f"refused-{first + 2}.json").read_text()))
    assert "no Ascend NPU on the PCI bus" in none
    assert not (tmp_path / f"labels-{first}.json").exists()
