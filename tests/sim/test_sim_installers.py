"""The simulated vendor ``.run`` installers, built for real and executed with bash.

Every installer runs into a scratch root (``ASCEND_SIM_ROOT``) against a node description
(``ASCEND_SIM_NODE``), with a ``PATH`` of its own: the few real programs the ``.run`` header and
the installer need, plus fake ``gcc``/``make``/``dkms`` where a test wants the driver build to
find them.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ascend_sim import models, runfile
from ascend_sim.devtools import installer
from ascend_sim.runfile import Package

DRIVER_V1, DRIVER_V2 = "24.1.rc2", "25.0.rc1"
FIRMWARE_V1, FIRMWARE_V2 = "7.5.0.1.129", "7.7.0.1.231"
CANN_83, CANN_85 = "8.3.RC2", "8.5.0"
ARCH = platform.machine()  # the installer lays CANN out for the machine it runs on

PACKAGES = {
    "driver": Package("driver", DRIVER_V1),
    "driver2": Package("driver", DRIVER_V2),
    "firmware": Package("firmware", FIRMWARE_V1, hdk=DRIVER_V1),
    "firmware2": Package("firmware", FIRMWARE_V2, hdk=DRIVER_V2),
    "toolkit": Package("toolkit", CANN_83),
    "kernels": Package("kernels", CANN_83),
    "nnal": Package("nnal", CANN_83),
    "toolkit85": Package("toolkit", CANN_85),
    "kernels85": Package("kernels", CANN_85),
}
# Programs the .run header and the installer use; everything else is kept off PATH.
REAL_TOOLS = ("bash", "sh", "tar", "gzip", "base64", "sha256sum", "tail", "cut", "mktemp", "rm",
              "mkdir", "env")
BUILD_TOOLS = ("gcc", "make", "dkms")


@pytest.fixture(scope="session")
def packages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("packages")
    built = {key: runfile.build(pkg, out) for key, pkg in PACKAGES.items()}
    built["corrupt"] = runfile.build(PACKAGES["driver"], out / "corrupt", corrupt=True)
    return built


@pytest.fixture(scope="session")
def bin_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``real``: links to the real programs; ``build``: fake gcc, make and dkms."""
    real = tmp_path_factory.mktemp("realbin")
    for tool in REAL_TOOLS:
        found = shutil.which(tool)
        assert found, f"{tool} is needed to run the installers"
        (real / tool).symlink_to(os.path.realpath(found))
    # The interpreter running the tests, not a shim that needs more of PATH.
    (real / "python3").symlink_to(os.path.realpath(sys.executable))
    dirs = {"real": real}
    for name in ("build", *(f"no-{t}" for t in BUILD_TOOLS)):
        fake = tmp_path_factory.mktemp(name)
        for tool in BUILD_TOOLS:
            if name != f"no-{tool}":
                (fake / tool).write_text("#!/bin/sh\nexit 0\n")
                (fake / tool).chmod(0o755)
        dirs[name] = fake
    return dirs


@dataclass
class Sim:
    root: Path
    node_file: Path
    packages: dict[str, Path]
    bins: dict[str, Path]
    build_tools: str = "build"  # which fake build-tool directory is on PATH

    def env(self) -> dict[str, str]:
        return {
            "PATH": f"{self.bins[self.build_tools]}:{self.bins['real']}",
            "ASCEND_SIM_ROOT": str(self.root),
            "ASCEND_SIM_NODE": str(self.node_file),
            "TMPDIR": str(self.root.parent),
            "LANG": "C",
        }

    def exec(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv,
            env=self.env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def run(self, key: str, *flags: str) -> subprocess.CompletedProcess[str]:
        return self.exec([str(self.bins["real"] / "bash"), str(self.packages[key]), *flags])

    def ok(self, key: str, *flags: str, rc: int = 0) -> subprocess.CompletedProcess[str]:
        result = self.run(key, *flags)
        assert result.returncode == rc, result.stdout + result.stderr
        return result

    def refused(self, key: str, *flags: str) -> str:
        result = self.run(key, *flags)
        assert result.returncode == 1, result.stdout + result.stderr
        assert "[ERROR]" in result.stderr
        return result.stderr

    def path(self, node_path: str) -> Path:
        return self.root / node_path.lstrip("/")

    def kv(self, node_path: str, sep: str = "=") -> dict[str, str]:
        lines = self.path(node_path).read_text().splitlines()
        pairs = (line.strip().split(sep, 1) for line in lines if sep in line)
        return {key: value for key, value in pairs}

    def npu_smi(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run the ``npu-smi`` the driver installed, as the node would."""
        result = self.exec([str(self.path("/usr/local/sbin/npu-smi")), *args])
        assert result.returncode == 0, result.stderr
        return result

    def board(self, npu: int = 0) -> dict[str, str]:
        out = self.npu_smi("info", "-t", "board", "-i", str(npu)).stdout
        pairs = (line.split(":", 1) for line in out.splitlines() if ":" in line)
        return {key.strip(): value.strip() for key, value in pairs}

    def node(self) -> models.Node:
        return models.Node.load(self.node_file)

    def install_log(self) -> list[tuple[str, str, str]]:
        """(kind, version, message) per line of the vendor's install log."""
        text = self.path(f"{installer.SECLOG}/ascend_install.log").read_text()
        return re.findall(r"^\[[^]]*\]\[(\w+)\]\[([^]]+)\] (.*)$", text, re.MULTILINE)


@pytest.fixture
def sim(
    sim_root: Path, node_file: Path, packages: dict[str, Path], bin_dirs: dict[str, Path]
) -> Iterator[Sim]:
    models.make_node("atlas800-a2").save(node_file)
    (sim_root / f"lib/modules/{platform.release()}/build").mkdir(parents=True)
    yield Sim(sim_root, node_file, packages, bin_dirs)


DRIVER_FULL = ("--full", "--quiet")
DRIVER_VERSION_INFO = "/usr/local/Ascend/driver/version.info"
TOOLKIT = "/usr/local/Ascend/ascend-toolkit"


# --- the .run file -----------------------------------------------------------------------------


def test_check_passes_on_a_good_file(sim: Sim) -> None:
    result = sim.ok("driver", "--check")

    assert "All good" in result.stdout
    assert not sim.path("/var/log").exists()  # --check installs nothing


def test_check_fails_on_a_corrupted_file(sim: Sim) -> None:
    for flags in (["--check"], list(DRIVER_FULL)):
        result = sim.run("corrupt", *flags)
        assert result.returncode != 0
        assert "corrupted" in result.stderr
    assert not sim.path(DRIVER_VERSION_INFO).exists()


def test_builds_are_reproducible(tmp_path: Path) -> None:
    first = runfile.build(PACKAGES["driver"], tmp_path / "a")
    second = runfile.build(PACKAGES["driver"], tmp_path / "b")
    corrupt = runfile.build(PACKAGES["driver"], tmp_path / "c", corrupt=True)
    other = runfile.build(PACKAGES["driver2"], tmp_path / "d")

    assert first.read_bytes() == second.read_bytes()
    assert runfile.sha256_of(first) == runfile.sha256_of(second)
    assert runfile.sha256_of(corrupt) != runfile.sha256_of(first)
    assert runfile.sha256_of(other) != runfile.sha256_of(first)
    assert os.access(first, os.X_OK)


def test_extract_noexec_unpacks_without_installing(sim: Sim, tmp_path: Path) -> None:
    sim.ok("driver", f"--extract={tmp_path / 'x'}", "--noexec")

    assert (tmp_path / "x/manifest.json").is_file()
    assert (tmp_path / "x/ascend_devtools/installer.py").is_file()
    assert not sim.path(DRIVER_VERSION_INFO).exists()


@pytest.mark.parametrize(
    ("pkg", "name"),
    [
        (Package("driver", "24.1.rc2"), "Ascend-hdk-910b-npu-driver_24.1.rc2_linux-aarch64.run"),
        (Package("firmware", "7.5.0.1.129"), "Ascend-hdk-910b-npu-firmware_7.5.0.1.129.run"),
        (Package("toolkit", "8.3.RC2"), "Ascend-cann-toolkit_8.3.RC2_linux-aarch64.run"),
        (Package("kernels", "8.3.RC2"), "Ascend-cann-kernels-910b_8.3.RC2_linux-aarch64.run"),
        (Package("kernels", "8.3.RC2", "a3"), "Atlas-A3-cann-kernels_8.3.RC2_linux-aarch64.run"),
        # renamed to ops from CANN 8.5.0 (Ascend/cann-container-image cann/8.5.0-a3 Dockerfile)
        (Package("kernels", "8.5.0", "a3"), "Ascend-cann-A3-ops_8.5.0_linux-aarch64.run"),
        (Package("kernels", "8.5.1"), "Ascend-cann-910b-ops_8.5.1_linux-aarch64.run"),
        # A3 HDK names, and the driver's x86 name linux-x86-64 (Ascend/docs package_info.js)
        (Package("driver", "25.3.rc1", "a3"), "Atlas-A3-hdk-npu-driver_25.3.rc1_linux-aarch64.run"),
        (Package("firmware", "7.8.0.2.212", "a3"), "Atlas-A3-hdk-npu-firmware_7.8.0.2.212.run"),
        (Package("driver", "25.0.rc1.1", arch="x86_64"),
         "Ascend-hdk-910b-npu-driver_25.0.rc1.1_linux-x86-64.run"),
        (Package("kernels", "9.1.0"), "Ascend-cann-910b-ops_9.1.0_linux-aarch64.run"),
        (Package("kernels", "10.0.RC1"), "Ascend-cann-910b-ops_10.0.RC1_linux-aarch64.run"),
        (Package("nnal", "8.3.RC2"), "Ascend-cann-nnal_8.3.RC2_linux-aarch64.run"),
        (Package("toolkit", "8.5.0", arch="x86_64"), "Ascend-cann-toolkit_8.5.0_linux-x86_64.run"),
    ],
)  # fmt: skip
def test_file_names(pkg: Package, name: str) -> None:
    assert pkg.filename == name


def test_unknown_package_kind() -> None:
    with pytest.raises(ValueError, match="unknown package kind"):
        _ = Package("bios", "1.0").filename


# --- the command-line contract -----------------------------------------------------------------


def test_refuses_without_quiet_when_there_is_no_terminal(sim: Sim) -> None:
    assert "EULA" in sim.refused("driver", "--full")
    assert not sim.path(DRIVER_VERSION_INFO).exists()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--full", "--quiet", "--bogus"], "unrecognized option '--bogus'"),
        (["--full", "--quiet=yes"], "unrecognized option"),
        (["--quiet"], "no action given"),
        (["--full", "--upgrade", "--quiet"], "cannot be used together"),
        (["--full", "--quiet", "--install-path"], "--install-path needs a value"),
        (
            ["--upgrade", "--quiet", "--install-username=u", "--install-usergroup=g"],
            "cannot be used with --upgrade",
        ),
        (["--upgrade", "--quiet", "--install-username=u"], "cannot be used with --upgrade"),
        (["--full", "--quiet", "--install-username=u"], "must be given with --install-usergroup"),
    ],
)
def test_bad_command_lines_are_refused(sim: Sim, flags: list[str], message: str) -> None:
    assert message in sim.refused("driver", *flags)
    assert not sim.path(DRIVER_VERSION_INFO).exists()


# --- driver and firmware -----------------------------------------------------------------------


@pytest.mark.parametrize("missing", BUILD_TOOLS)
def test_driver_build_needs_gcc_make_dkms(sim: Sim, missing: str) -> None:
    sim.build_tools = f"no-{missing}"

    message = sim.refused("driver", *DRIVER_FULL)

    assert f"the driver build needs {missing};" in message
    assert not sim.path(DRIVER_VERSION_INFO).exists()


def test_driver_build_needs_headers_of_the_running_kernel(sim: Sim) -> None:
    shutil.rmtree(sim.path("/lib/modules"))
    (sim.path("/lib/modules") / "4.19.0-old" / "build").mkdir(parents=True)

    message = sim.refused("driver", *DRIVER_FULL)

    assert f"running kernel {platform.release()} not found" in message
    assert not sim.path(DRIVER_VERSION_INFO).exists()


def test_docker_mode_skips_the_driver_build(sim: Sim) -> None:
    sim.build_tools = "no-gcc"
    shutil.rmtree(sim.path("/lib/modules"))

    sim.ok("driver", "--full", "--quiet", "--docker")

    assert sim.kv("/etc/ascend_install.info")["Driver_Install_Mode"] == "docker"


def test_first_driver_install(sim: Sim) -> None:
    result = sim.ok("driver", *DRIVER_FULL)

    assert f"installed successfully! ({DRIVER_V1})" in result.stdout
    assert "Reboot" not in result.stdout
    assert sim.kv(DRIVER_VERSION_INFO)["Version"] == DRIVER_V1
    info = sim.kv("/etc/ascend_install.info")
    assert info["Driver_Install_Path_Param"] == "/usr/local/Ascend"
    assert info["Driver_Install_Type"] == "full"
    assert info["Driver_Install_Status"] == "complete"
    assert info["UserName"] == info["UserGroup"] == "HwHiAiUser"
    assert ("driver", DRIVER_V1, "install success") in sim.install_log()
    assert sim.path(f"{installer.SECLOG}/operation.log").read_text()

    table = sim.npu_smi("info").stdout
    assert f"Version: {DRIVER_V1}" in table.splitlines()[1]
    assert table.count("910B1") == 8

    tool = sim.exec(
        [str(sim.path("/usr/local/Ascend/driver/tools/upgrade-tool")), "--device_index", "-1",
         "--system_version"]
    )
    assert tool.returncode == 0, tool.stderr
    assert tool.stdout.count('"version":"NA"') == 8  # no firmware flashed yet

    hccn = sim.exec([str(sim.path("/usr/local/Ascend/driver/tools/hccn_tool")), "-i", "0",
                     "-link", "-g"])
    assert hccn.returncode == 0, hccn.stderr
    assert "link status: UP" in hccn.stdout


def test_driver_install_path_and_user(sim: Sim) -> None:
    sim.ok("driver", *DRIVER_FULL, "--install-path=/opt/Ascend", "--install-username=ai",
           "--install-usergroup=ai", "--install-for-all")

    assert sim.kv("/opt/Ascend/driver/version.info")["Version"] == DRIVER_V1
    info = sim.kv("/etc/ascend_install.info")
    assert info["Driver_Install_Path_Param"] == "/opt/Ascend"
    assert (info["UserName"], info["UserGroup"], info["Driver_Install_For_All"]) == (
        "ai", "ai", "yes")
    # The upgrade and the firmware find the driver where it was installed.
    sim.ok("firmware", "--full", "--quiet", rc=2)
    sim.ok("driver2", "--upgrade", "--quiet")
    assert sim.kv("/opt/Ascend/driver/version.info")["Version"] == DRIVER_V2
    assert sim.board()["Software Version"] == DRIVER_V2


def test_second_driver_in_another_path_is_refused(sim: Sim) -> None:
    sim.ok("driver", *DRIVER_FULL)

    message = sim.refused("driver", *DRIVER_FULL, "--install-path=/opt/Ascend")

    assert "already installed in /usr/local/Ascend" in message
    assert not sim.path("/opt/Ascend").exists()


def test_full_on_an_installed_driver_is_refused_and_upgrade_works(sim: Sim) -> None:
    assert "use --full" in sim.refused("driver2", "--upgrade", "--quiet")
    sim.ok("driver", *DRIVER_FULL)

    assert "use --upgrade" in sim.refused("driver2", *DRIVER_FULL)
    assert sim.kv(DRIVER_VERSION_INFO)["Version"] == DRIVER_V1

    result = sim.ok("driver2", "--upgrade", "--quiet")
    assert "Reboot needed" in result.stdout
    assert sim.kv(DRIVER_VERSION_INFO)["Version"] == DRIVER_V2
    assert sim.kv("/etc/ascend_install.info")["Driver_Install_Type"] == "upgrade"


def test_driver_uninstall(sim: Sim) -> None:
    assert "not installed" in sim.refused("driver", "--uninstall", "--quiet")
    sim.ok("driver", *DRIVER_FULL)

    sim.ok("driver", "--uninstall", "--quiet")

    assert not sim.path("/usr/local/Ascend/driver").exists()
    assert not sim.path("/usr/local/sbin/npu-smi").exists()
    assert "Driver_Install_Path_Param" not in sim.kv("/etc/ascend_install.info")
    sim.ok("driver", *DRIVER_FULL)  # a fresh --full is a first install again


def test_firmware_before_the_driver_is_refused(sim: Sim) -> None:
    assert "upgrade-tool" in sim.refused("firmware", "--full", "--quiet")
    assert all(chip.firmware_version == "" for chip in sim.node().chips)


def test_firmware_after_the_driver_needs_a_reboot_once(sim: Sim) -> None:
    sim.ok("driver", *DRIVER_FULL)

    first = sim.ok("firmware", "--full", "--quiet", rc=2)
    again = sim.ok("firmware", "--full", "--quiet", rc=0)

    assert "Reboot" in first.stdout
    assert "already installed" in again.stdout
    chips = sim.node().chips
    assert {(c.firmware_version, c.firmware_hdk) for c in chips} == {(FIRMWARE_V1, DRIVER_V1)}
    board = sim.board()
    assert (board["Firmware Version"], board["Compatibility"]) == (FIRMWARE_V1, "OK")


def test_upgrade_is_firmware_then_driver_and_is_logged(sim: Sim) -> None:
    sim.ok("driver", *DRIVER_FULL)
    sim.ok("firmware", "--full", "--quiet", rc=2)
    sim.ok("firmware2", "--upgrade", "--quiet", rc=2)
    # Between the two steps the board reports the mismatch.
    assert sim.board()["Compatibility"] == "NOK"
    sim.ok("driver2", "--upgrade", "--quiet")

    log = sim.install_log()
    done = [(kind, ver) for kind, ver, msg in log if msg.startswith("install success")]
    assert done == [
        ("driver", DRIVER_V1),
        ("firmware", FIRMWARE_V1),
        ("firmware", FIRMWARE_V2),
        ("driver", DRIVER_V2),
    ]
    board = sim.board(7)
    assert (board["Software Version"], board["Firmware Version"]) == (DRIVER_V2, FIRMWARE_V2)
    assert board["Compatibility"] == "OK"


def test_refusals_are_logged(sim: Sim) -> None:
    sim.refused("firmware", "--full", "--quiet")

    assert any(
        kind == "firmware" and msg.startswith("install failed:") and "upgrade-tool" in msg
        for kind, _, msg in sim.install_log()
    )


def test_installer_crash_fault_kills_the_driver_install_half_way(sim: Sim) -> None:
    node = sim.node()
    node.faults = {"installer_crash": {"driver": 1}}
    node.save(sim.node_file)

    crashed = sim.run("driver", *DRIVER_FULL)

    assert crashed.returncode != 0
    assert crashed.returncode not in (1, 2)  # killed, not a refusal
    assert not sim.path(DRIVER_VERSION_INFO).exists()
    assert not sim.path("/etc/ascend_install.info").exists()
    assert sim.node().faults == {"installer_crash": {"driver": 0}}
    assert ("driver", DRIVER_V1, "install interrupted") in sim.install_log()
    assert not list(sim.root.parent.glob("ascend-run.*"))  # the header cleaned up

    sim.ok("driver", *DRIVER_FULL)
    assert sim.kv(DRIVER_VERSION_INFO)["Version"] == DRIVER_V1


def test_installer_crash_fault_only_hits_its_package_kind(sim: Sim) -> None:
    node = sim.node()
    node.faults = {"installer_crash": {"firmware": 2}}
    node.save(sim.node_file)

    sim.ok("driver", *DRIVER_FULL)
    for left in (1, 0):
        assert sim.run("firmware", "--full", "--quiet").returncode not in (0, 1, 2)
        assert sim.node().faults["installer_crash"]["firmware"] == left
    sim.ok("firmware", "--full", "--quiet", rc=2)


# --- CANN --------------------------------------------------------------------------------------


def test_cann_order_toolkit_kernels_nnal(sim: Sim) -> None:
    assert "needs Ascend-cann-toolkit" in sim.refused("kernels", "--install", "--quiet")
    assert "install it first" in sim.refused("nnal", "--install", "--quiet")

    sim.ok("toolkit", "--install", "--quiet")
    home = f"{TOOLKIT}/{CANN_83}"
    assert sim.path(home).is_dir()
    # latest is a real directory of per-component links (corpus ls-toolkit-latest-8.2.RC2-symlinks)
    latest = sim.path(f"{TOOLKIT}/latest")
    assert latest.is_dir() and not latest.is_symlink()
    assert os.readlink(latest / "opp") == f"../{CANN_83}/opp"
    info = sim.kv(f"{TOOLKIT}/latest/{ARCH}-linux/ascend_toolkit_install.info")
    assert info["version"] == CANN_83
    assert info["package_name"] == "Ascend-cann-toolkit"
    assert info["path"] == f"{home}/{ARCH}-linux"
    set_env = sim.path(f"{TOOLKIT}/set_env.sh").read_text()
    # up to CANN 8.3 the vendor's set_env.sh points at latest (corpus set-env-derived-ENV extract)
    assert f"export ASCEND_TOOLKIT_HOME={TOOLKIT}/latest\n" in set_env
    assert sim.kv("/etc/Ascend/ascend_cann_install.info")["Version"] == CANN_83

    assert "needs Ascend-cann-toolkit 8.5.0" in sim.refused("kernels85", "--install", "--quiet")
    sim.ok("kernels", "--install", "--quiet")
    # the release is version_dir=; Version= is an internal build (corpus opp-kernel-version-*)
    kernels = sim.kv(f"{home}/opp_kernel/version.info")
    assert kernels["version_dir"] == CANN_83
    assert kernels["Version"] != CANN_83
    assert os.readlink(latest / "opp_kernel") == f"../{CANN_83}/opp_kernel"

    sim.ok("nnal", "--install", "--quiet")
    atb = "/usr/local/Ascend/nnal/atb"
    # ATB's "    key : value" form (corpus nnal-atb-*)
    assert sim.kv(f"{atb}/latest/version.info", " : ")["Ascend-cann-atb"] == CANN_83
    assert sim.path(f"{atb}/latest/atb/cxx_abi_1/lib/libatb.so").is_file()
    assert f"ATB_HOME_PATH={atb}/latest/atb/cxx_abi_1" in sim.path(f"{atb}/set_env.sh").read_text()

    again = sim.ok("nnal", "--install", "--quiet")
    assert "already installed" in again.stdout
    done = [kind for kind, _, msg in sim.install_log() if msg == "install success"]
    assert done == ["toolkit", "kernels", "nnal"]


def test_toolkit_85_lives_under_cann_version(sim: Sim) -> None:
    sim.ok("toolkit85", "--install", "--quiet")
    sim.ok("kernels85", "--install", "--quiet")

    home = f"/usr/local/Ascend/cann-{CANN_85}"
    info = sim.kv(f"{home}/{ARCH}-linux/ascend_toolkit_install.info")
    assert info["version"] == CANN_85
    assert f"export ASCEND_HOME_PATH={home}\n" in sim.path(f"{home}/set_env.sh").read_text()
    # from CANN 8.5 the ops release is in opp/version.info (corpus opp-version-8.5.0.2.220)
    assert sim.kv(f"{home}/opp/version.info")["version_dir"] == CANN_85
    assert not sim.path(f"{home}/opp_kernel").exists()
    assert not sim.path(TOOLKIT).exists()


def test_toolkit_install_path(sim: Sim) -> None:
    sim.ok("toolkit", "--install", "--quiet", "--install-path=/opt/cann")

    assert sim.path(f"/opt/cann/ascend-toolkit/{CANN_83}/{ARCH}-linux/lib64/libhccl.so").is_file()
    assert sim.kv("/etc/Ascend/ascend_cann_install.info")["Install_Path"] == "/opt/cann"
    # Kernels go to the toolkit of their own install path only.
    assert "installed: none" in sim.refused("kernels", "--install", "--quiet")
    sim.ok("kernels", "--install", "--quiet", "--install-path=/opt/cann")


def test_toolkit_upgrade_replaces_the_old_layout(sim: Sim) -> None:
    sim.ok("toolkit", "--install", "--quiet")
    sim.ok("kernels", "--install", "--quiet")

    assert "use --upgrade" in sim.refused("toolkit85", "--install", "--quiet")
    sim.ok("toolkit85", "--upgrade", "--quiet")

    assert sim.kv("/etc/Ascend/ascend_cann_install.info")["Version"] == CANN_85
    assert sim.path(f"/usr/local/Ascend/cann-{CANN_85}/set_env.sh").is_file()
    # Nothing of 8.3 is left to be sourced by mistake.
    assert not sim.path(f"{TOOLKIT}/latest").is_symlink()
    assert not sim.path(f"{TOOLKIT}/set_env.sh").exists()
    assert not sim.path(f"{TOOLKIT}/{CANN_83}").exists()
    # The kernels went with the old toolkit; the new ones are needed again.
    assert "needs Ascend-cann-toolkit 8.3.RC2" in sim.refused("kernels", "--install", "--quiet")


def test_toolkit_uninstall(sim: Sim) -> None:
    assert "not installed" in sim.refused("toolkit", "--uninstall", "--quiet")
    sim.ok("toolkit", "--install", "--quiet")

    sim.ok("toolkit", "--uninstall", "--quiet")

    assert not sim.path("/etc/Ascend/ascend_cann_install.info").exists()
    assert list(sim.path(TOOLKIT).iterdir()) == []
    sim.ok("toolkit", "--install", "--quiet")


def test_upgrade_without_toolkit_is_refused(sim: Sim) -> None:
    assert "use --install" in sim.refused("toolkit", "--upgrade", "--quiet")
