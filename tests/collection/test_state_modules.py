"""The roles' state modules (one remote read per role, #21) against fake trees, run as Ansible runs
them: what each reports, that it changes nothing, and the package database read that replaces a
package-manager run on a converged host."""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ansible_run import module_result

MODULES = "ansible_collections.ascend_serve.fleet.plugins.modules"
UTILS = "ansible_collections.ascend_serve.fleet.plugins.module_utils"
package_db = importlib.import_module(f"{UTILS}.package_db")
file_state = importlib.import_module(f"{UTILS}.file_state")
hccl_state = importlib.import_module(f"{MODULES}.hccl_state")
host_tuning_read = importlib.import_module(
    "ansible_collections.ascend_serve.fleet.plugins.module_utils.host_tuning_read")

DPKG_STATUS = """Package: libjemalloc2
Status: install ok installed
Architecture: amd64
Version: 5.3.0-1

Package: python3-venv
Status: deinstall ok config-files
Version: 3.11.2-1

Package: python3.11-venv
Status: hold ok installed
Provides: python3-venv-virtual (= 3.11.2)
Description: a package
 whose description spans
 lines: Provides: not-a-field
"""


def _sha1(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()  # noqa: S324 - what file_state reports


def _write(path: Path, text: str, mode: int = 0o644) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


# --- module_utils ---------------------------------------------------------------------------------


def test_dpkg_database_installed_packages_and_what_they_provide(tmp_path: Path) -> None:
    status = _write(tmp_path / "status", DPKG_STATUS)
    assert package_db.dpkg_installed(str(status)) == {
        "libjemalloc2", "python3.11-venv", "python3-venv-virtual"}
    assert package_db.missing_packages(
        ["libjemalloc2", "python3-venv", "python3-venv-virtual", "not-a-field"], "apt",
        str(status)) == ["python3-venv", "not-a-field"]
    # auto: dpkg's database where it exists
    assert package_db.manager("auto", str(status)) == "apt"
    assert package_db.manager("auto", str(tmp_path / "none")) == "dnf"
    assert package_db.missing_packages([], "dnf") == []
    with pytest.raises(package_db.PackageDbError, match="cannot read"):
        package_db.missing_packages(["x"], "apt", str(tmp_path / "none"))


def test_rpm_query_names_the_packages_no_one_provides(tmp_path: Path) -> None:
    rpm = _write(tmp_path / "rpm", f"""#!{sys.executable}
import sys
names = sys.argv[3:]
missing = [n for n in names if n.startswith("no-")]
for n in names:
    print(f"no package provides {{n}}" if n in missing else f"{{n}}-1.0-1.aarch64")
sys.exit(len(missing))
""", 0o755)
    assert package_db.rpm_missing(["jemalloc", "no-such", "rdma-core"], str(rpm)) == ["no-such"]
    broken = _write(tmp_path / "broken", "#!/bin/sh\necho 'rpmdb open failed' >&2\nexit 1\n",
                    0o755)
    with pytest.raises(package_db.PackageDbError, match="rpmdb open failed"):
        package_db.rpm_missing(["jemalloc"], str(broken))


def test_file_state_reports_sha1_mode_owner_and_links(tmp_path: Path) -> None:
    path = _write(tmp_path / "f", "a\n", 0o640)
    state = file_state.file_state(str(path))
    assert state is not None
    assert (state["sha1"], state["mode"], state["isdir"], state["islnk"]) == (
        _sha1("a\n"), "0640", False, False)
    assert state["owner"] and state["group"]
    assert file_state.file_state(str(tmp_path / "missing")) is None
    assert file_state.file_state(str(tmp_path))["sha1"] is None
    (tmp_path / "dangling").symlink_to(tmp_path / "missing")
    dangling = file_state.file_state(str(tmp_path / "dangling"))
    assert dangling is not None and dangling["islnk"] and dangling["sha1"] is None


# --- the modules as Ansible runs them ------------------------------------------------------------


def _run(name: str, args: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    result = module_result(name, args, tmp_path, check_mode=True)
    assert result.get("failed") is None, result
    assert result["changed"] is False, result
    return result


def test_python_env_state_reads_the_environment_and_its_files(tmp_path: Path) -> None:
    prefix = tmp_path / "env"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "python").symlink_to(sys.executable)
    lock = _write(prefix / "ascend-serve" / "lock" / "plan.json", "{}\n")
    _write(prefix / "ascend-serve" / "installed.json", json.dumps({"set": "s"}))
    status = _write(tmp_path / "status", DPKG_STATUS)
    result = _run("python_env_state", {
        "prefix": str(prefix), "python": sys.executable, "packages": ["libjemalloc2", "x"],
        "package_manager": "apt", "dpkg_status": str(status),
        "distributions": ["pytest", "no-such-distribution"],
        "directories": [str(lock.parent), str(tmp_path / "none")],
        "files": [str(tmp_path / "none.env")],
        "purelib_files": ["no-such.dist-info/METADATA"],
        "marker": str(prefix / "ascend-serve" / "installed.json")}, tmp_path)
    assert result["python_version"] == f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert result["missing_packages"] == ["x"]
    assert result["conda"] is False
    env = result["env"]
    assert env["exists"] and env["error"] == ""
    assert env["python"].startswith(result["python_version"] + ".")
    # The interpreter behind the link reports its own site-packages' version (or None).
    found = subprocess.run(
        [str(prefix / "bin" / "python"), "-c", "import importlib.metadata as m\n"
         "try: print(m.version('pytest'))\nexcept Exception: print('')"],
        capture_output=True, text=True, check=True).stdout.strip() or None
    assert env["distributions"]["pytest"] == found
    assert env["distributions"]["no-such-distribution"] is None
    assert env["files"] == {"no-such.dist-info/METADATA": None}
    assert Path(env["purelib"]).is_dir()
    assert result["files"][str(lock)]["sha1"] == _sha1("{}\n")
    assert result["files"][str(tmp_path / "none.env")] is None
    assert result["marker"] == {"set": "s"}


def test_python_env_state_without_an_environment_or_with_a_broken_one(tmp_path: Path) -> None:
    result = _run("python_env_state", {"prefix": str(tmp_path / "none"),
                                       "conda_prefix": str(tmp_path)}, tmp_path)
    assert result["env"] == {"exists": False, "python": None, "error": "", "purelib": None,
                             "distributions": {}, "files": {}}
    assert (result["python_version"], result["marker"], result["conda"]) == (None, None, False)
    broken = tmp_path / "broken"
    _write(broken / "bin" / "python", "#!/bin/sh\necho no >&2\nexit 3\n", 0o755)
    env = _run("python_env_state", {"prefix": str(broken)}, tmp_path)["env"]
    assert env["exists"] and env["python"] is None
    assert "exited with rc 3: no" in env["error"]


def test_hccl_state_parses_ip_and_the_default_route(tmp_path: Path) -> None:
    text = ("1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever\n"
            "2: eth0    inet 192.0.2.11/24 brd 192.0.2.255 scope global eth0\\\n"
            "2: eth0    inet 192.0.2.99/24 scope global secondary eth0\\\n"
            "5: npu0@if7    inet 198.51.100.2/24 scope global npu0\\\n")
    assert hccl_state.addresses(text) == {
        "lo": "127.0.0.1", "eth0": "192.0.2.11", "npu0": "198.51.100.2"}
    assert hccl_state.default_interface(
        "8.8.8.8 via 192.0.2.1 dev eth0 src 192.0.2.11 uid 0\n    cache\n") == "eth0"
    route = _write(tmp_path / "route",
                   "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\n"
                   "eth1\t0002000A\t00000000\t0001\t0\t0\t0\t00FFFFFF\n"
                   "eth1\t00000000\t0102000A\t0003\t0\t0\t0\t00000000\n")
    assert hccl_state.default_interface("", str(route)) == "eth1"
    assert hccl_state.default_interface("", str(tmp_path / "none")) == ""


def test_hccl_state_as_ansible_runs_it(tmp_path: Path) -> None:
    net = tmp_path / "net"
    for name in ("eth0", "lo"):
        (net / name).mkdir(parents=True)
    ip = _write(tmp_path / "ip", """#!/bin/sh
case "$*" in
  "-4 -o addr show") echo '2: eth0    inet 192.0.2.11/24 scope global eth0' ;;
  *) echo '8.8.8.8 via 192.0.2.1 dev eth0 src 192.0.2.11' ;;
esac
""", 0o755)
    env_file = _write(tmp_path / "hccl.env", "HCCL_IF_IP=192.0.2.11\n")
    result = _run("hccl_state", {"ip": str(ip), "sysfs_net": str(net),
                                 "files": [str(env_file)]}, tmp_path)
    assert result["interfaces"] == {"eth0": {"ipv4": "192.0.2.11"}, "lo": {"ipv4": None}}
    assert result["default_interface"] == "eth0"
    assert result["files"][str(env_file)]["sha1"] == _sha1("HCCL_IF_IP=192.0.2.11\n")


def test_host_tuning_state_reads_files_governors_and_limits(tmp_path: Path) -> None:
    cpu = tmp_path / "cpu"
    _write(cpu / "cpufreq/policy0/scaling_governor", "schedutil\n")
    _write(cpu / "cpufreq/policy0/scaling_available_governors", "performance schedutil\n")
    _write(cpu / "cpufreq/policy1/scaling_governor", "performance\n")
    (cpu / "cpu0").mkdir()
    (cpu / "cpu0/cpufreq").symlink_to(cpu / "cpufreq/policy0")  # the same policy: not twice
    sysctl = _write(tmp_path / "90.conf", "# managed\nvm.swappiness=0\n kernel.x = 5 \n")
    limits = _write(tmp_path / "limits.conf",
                    "# c\n*\t-\tnofile\t1048576\nroot - memlock unlimited\n")
    result = _run("host_tuning_state", {
        "sysctl": ["vm.no_such_key"], "sysctl_file": str(sysctl), "governor": True,
        "cpu_dir": str(cpu), "limits_file": str(limits), "files": [str(tmp_path / "unit")],
        "packages": ["libjemalloc2"], "package_manager": "apt",
        "dpkg_status": str(_write(tmp_path / "status", DPKG_STATUS))}, tmp_path)
    assert result["sysctl"] == {"vm.no_such_key": {"exists": False, "writable": False,
                                                   "value": None}}
    assert result["sysctl_file"] == {"vm.swappiness": "0", "kernel.x": "5"}
    governor = result["governor"]
    assert governor["files"] == [str(cpu / "cpufreq/policy0/scaling_governor"),
                                 str(cpu / "cpufreq/policy1/scaling_governor")]
    assert governor["current"] == ["schedutil", "performance"]
    assert governor["available"] == ["performance", "schedutil"]
    assert governor["writable"] is os.access(governor["files"][0], os.W_OK)
    assert result["limits"] == [["*", "-", "nofile", "1048576"], ["root", "-", "memlock",
                                                                   "unlimited"]]
    assert result["files"] == {str(tmp_path / "unit"): None}
    assert result["missing_packages"] == []
    assert host_tuning_read.governors(str(tmp_path / "none"))["files"] == []


def test_host_tuning_state_reads_a_running_kernel_value() -> None:
    # /proc/sys/kernel/ostype exists on every Linux kernel.
    state = host_tuning_read.sysctl_state("kernel.ostype")
    assert state == {"exists": True, "writable": os.access("/proc/sys/kernel/ostype", os.W_OK),
                     "value": "Linux"}


def test_swap_state_reads_the_file_its_fstab_lines_and_swaps(tmp_path: Path) -> None:
    swapfile = _write(tmp_path / "swapfile", "x" * 10, 0o600)
    fstab = _write(tmp_path / "fstab", f"# {swapfile} none swap sw 0 0\n"
                   f"{swapfile} none swap sw 0 0\n{swapfile}.old none swap sw 0 0\n")
    result = _run("swap_state", {"path": str(swapfile), "fstab": str(fstab)}, tmp_path)
    assert result["file"]["exists"] and result["file"]["isreg"]
    assert (result["file"]["size"], result["file"]["mode"]) == (10, "0600")
    assert result["file"]["signature"] == ""  # no swap area in it
    assert result["fstab_lines"] == [f"{swapfile} none swap sw 0 0"]
    assert result["fstab_file"]["mode"] == f"{stat.S_IMODE(fstab.stat().st_mode):04o}"
    assert int(result["capeff"], 16) >= 0
    assert isinstance(result["swaps"], str)
    missing = _run("swap_state", {"path": str(tmp_path / "none"), "fstab": str(tmp_path / "x")},
                   tmp_path)
    assert missing["file"] == {"exists": False, "isreg": False, "size": 0, "mode": None,
                               "owner": None, "group": None, "signature": ""}
    assert (missing["fstab_lines"], missing["fstab_file"]) == ([], None)


def test_vllm_service_state_reads_files_paths_account_and_config(tmp_path: Path) -> None:
    config = _write(tmp_path / "model/config.json", json.dumps({"model_type": "deepseek_v3"}))
    launcher = _write(tmp_path / "launch.sh", "exec vllm\n", 0o750)
    result = _run("vllm_service_state", {
        "unit": "ascend-serve-test-no-such-unit", "files": [str(launcher), str(tmp_path / "x")],
        "paths": [str(config), str(tmp_path / "none")], "json_file": str(config),
        "user": "root", "group": "no-such-group-ascend"}, tmp_path)
    assert result["files"][str(launcher)]["sha1"] == _sha1("exec vllm\n")
    assert result["files"][str(launcher)]["mode"] == "0750"
    assert result["files"][str(tmp_path / "x")] is None
    assert result["paths"] == {str(config): True, str(tmp_path / "none"): False}
    assert (result["json"], result["json_error"]) == ({"model_type": "deepseek_v3"}, "")
    assert result["user"]["exists"] and result["user"]["home"]
    assert result["group"] == {"exists": False}
    assert isinstance(result["unit"], dict)
    _write(config, "{not json")
    broken = _run("vllm_service_state", {"unit": "u", "json_file": str(config)}, tmp_path)
    assert broken["json"] is None and broken["json_error"].startswith(str(config))
    assert _run("vllm_service_state", {"unit": "u", "json_file": str(tmp_path / "none.json"),
                                       "user": "no-such-user-ascend"}, tmp_path)["user"] == {
        "exists": False}


def test_rdma_facts_reports_missing_packages(tmp_path: Path) -> None:
    status = _write(tmp_path / "status", DPKG_STATUS)
    result = _run("rdma_facts", {"sysfs_path": str(tmp_path / "none"),
                                 "packages": ["libjemalloc2", "rdma-core"],
                                 "package_manager": "apt", "dpkg_status": str(status)}, tmp_path)
    assert result["ansible_facts"] == {"rdma_devices": []}
    assert result["missing_packages"] == ["rdma-core"]
    failed = module_result("rdma_facts", {"packages": ["x"], "package_manager": "apt",
                                          "dpkg_status": str(tmp_path / "none")}, tmp_path)
    assert failed["failed"] and failed["msg"].startswith("cannot read the package database")
