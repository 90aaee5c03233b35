"""Installer logic that a generated ``.run`` package executes after self-extraction.

It follows the vendor's command-line contract and rules (see the project's Ascend reference):
flags, root only, EULA only with ``--quiet`` when there is no terminal, driver before firmware on a
first install, the driver build's needs (gcc, make, dkms, headers of the *running* kernel), the
firmware's need for the driver's ``upgrade-tool`` and its exit code 2 when a reboot is needed,
CANN toolkit then kernels/ops then NNAL, and the files each one leaves on disk and in the logs.
"""

from __future__ import annotations

import contextlib
import datetime
import grp
import hashlib
import json
import os
import platform
import pwd
import shutil
import signal
import stat
import sys
from collections.abc import Callable
from typing import Any

from . import hw

FLAGS_WITH_VALUE = ("--install-path", "--install-username", "--install-usergroup", "--extract")
FLAGS = (
    "--check",
    "--full",
    "--install",
    "--upgrade",
    "--uninstall",
    "--quiet",
    "--nox11",
    "--install-for-all",
    "--noexec",
    "--docker",
)
ACTIONS = ("--full", "--install", "--upgrade", "--uninstall")
SECLOG = "/var/log/ascend_seclog"
TOOL_LAUNCHERS = {
    "npu-smi": ("/usr/local/sbin/npu-smi", "npu_smi"),
    "upgrade-tool": ("{driver}/tools/upgrade-tool", "upgrade_tool"),
    "hccn_tool": ("{driver}/tools/hccn_tool", "hccn_tool"),
}


# --- the version files, in the layouts of real installs ----------------------------------------
# Each renderer writes the keys, in the order, of a real file in tests/data/corpus/versions/
# (named in its docstring); only the versions differ. Build numbers are stand-ins in the vendor's
# form: a real build number cannot be derived from a release.


def _release(version: str) -> tuple[int, int]:
    parts = version.lower().split(".")
    minor = parts[1] if len(parts) > 1 and parts[1].isdigit() else "0"
    return int(parts[0]), int(minor)


def render_driver_info(version: str) -> str:
    """driver/version.info, as driver-25.3.rc1-pypto-doc.txt (package_version = Version)."""
    return (
        f"Version={version}\nascendhal_version=7.35.23\naicpu_version=1.0\ntdt_version=1.0\n"
        "log_version=1.0\nprof_version=2.0\ndvppkernels_version=1.1\ntsfw_version=1.0\n"
        "Innerversion=V100R001C23SPC002B212\n"
        "compatible_version=[V100R001C19],[V100R001C20],[V100R001C21],[V100R001C22],[V100R001C23]\n"
        f"compatible_version_fw=[7.0.0,8.9.9]\npackage_version={version}\n"
    )


def render_firmware_info(version: str, hdk: str) -> str:
    """firmware/version.info, as firmware-7.7.0.1.231.txt: package_version is the HDK release."""
    return (
        f"Version={version}\nfirmware_version=1.0\npackage_version={hdk}\n"
        "compatible_version_drv=[23.0.0,23.0.0.],[24.0,24.0.],[24.1,24.1.],[25.0,25.0.]\n"
    )


def render_toolkit_install_info(version: str, arch: str, install_dir: str) -> str:
    """<arch>-linux/ascend_toolkit_install.info, as toolkit-install-info-8.3.RC2-aarch64.txt."""
    return (
        f"package_name=Ascend-cann-toolkit\nversion={version}\n"
        "innerversion=V100R001C23SPC002B210\n"
        "compatible_version=[V100R001C15],[V100R001C18],[V100R001C19],[V100R001C20],"
        "[V100R001C21],[V100R001C23]\n"
        f"arch={arch}\nos=linux\npath={install_dir}\n"
    )


def component_build(version: str) -> str:
    """An internal build number for a release (8.2.RC1's real one is 8.2.0.0.201)."""
    major, minor = _release(version)
    return f"{major}.{minor}.0.0.201"


def render_ops_info(version: str) -> str:
    """The kernels/ops package's version.info: Version= is a build, version_dir= the release.

    Up to CANN 8.3 opp_kernel/version.info, as opp-kernel-version-8.2.RC1.txt; from 8.5
    opp/version.info, as opp-version-8.5.0.2.220-pypto-doc.txt (the four lines it shows).
    """
    build = component_build(version)
    major, minor = _release(version)
    if (major, minor) >= (8, 5):
        return (
            f"Version={build}\nversion_dir={version}\ntimestamp=20250101_000000000\n"
            f'required_package_amct_acl_version="{major}.{minor}"\n'
        )
    required = "".join(
        f'required_package_{name}_version=">=7.6, <={major}.{minor}"\n'
        for name in ("amct_acl", "aoe", "compiler", "fwkplugin", "hccl", "nca", "ncs", "opp",
                     "runtime", "toolkit")
    )
    return (
        f"Version={build}\nversion_dir={version}\ntimestamp=20250101_000000000\n"
        f"ops_version={build}\nadk_version={build}\n" + required
    )


def ops_info_path(root: str, version: str) -> str:
    """opp_kernel/version.info up to CANN 8.3, opp/version.info from 8.5."""
    if _release(version) >= (8, 5):
        return f"{root}/opp/version.info"
    return f"{root}/opp_kernel/version.info"


def render_atb_info(version: str, arch: str) -> str:
    """nnal/atb/<ver>/version.info, as nnal-atb-8.2.RC1.B150.txt: indented ``key : value``."""
    commit = hashlib.sha1(version.encode()).hexdigest()  # noqa: S324 - a stand-in commit id
    return (
        f"    Ascend-cann-atb : {version}\n"
        f"    Ascend-cann-atb Version : {version}.B150\n"
        f"    Platform : {arch}\n"
        f"    branch : br_release_cann_{version}_20250101\n"
        f"    commit id : {commit}\n"
    )


def read_release(path: str, key: str) -> str | None:
    """The release a simulated version file records: ``key=`` or the ATB ``key : value`` form."""
    try:
        with open(hw.root_path(path), encoding="utf-8") as fh:
            for line in fh:
                stripped = line.strip()
                for sep in ("=", " : "):
                    name, found, value = stripped.partition(sep)
                    if found and name.strip() == key:
                        return value.strip()
    except FileNotFoundError:
        pass
    return None


class InstallError(Exception):
    """A refusal with the message the vendor installer would print."""


def parse_args(argv: list[str]) -> dict[str, Any]:
    opts: dict[str, Any] = {}
    for arg in argv:
        name, _, value = arg.partition("=")
        if name in FLAGS_WITH_VALUE:
            if not value:
                raise InstallError(f"{name} needs a value ({name}=...)")
            opts[name] = value
        elif name in FLAGS and not value:
            opts[name] = True
        else:
            raise InstallError(f"unrecognized option {arg!r}")
    actions = [a for a in ACTIONS if a in opts]
    if len(actions) > 1:
        raise InstallError(f"options {' and '.join(actions)} cannot be used together")
    if "--upgrade" in opts and ("--install-username" in opts or "--install-usergroup" in opts):
        raise InstallError("--install-username/--install-usergroup cannot be used with --upgrade")
    return opts


def log(manifest: dict[str, Any], message: str) -> None:
    directory = hw.root_path(SECLOG)
    os.makedirs(directory, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    line = f"[{stamp}][{manifest['kind']}][{manifest['version']}] {message}\n"
    for name in ("ascend_install.log", "operation.log"):
        with open(os.path.join(directory, name), "a", encoding="utf-8") as fh:
            fh.write(line)


def _write(path: str, text: str, mode: int = 0o644) -> None:
    full = hw.root_path(path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.chmod(full, mode)


def _symlink(target: str, link: str) -> None:
    full = hw.root_path(link)
    if os.path.islink(full) or os.path.exists(full):
        os.remove(full)
    os.symlink(target, full)


def _check_user(opts: dict[str, Any]) -> tuple[str, str]:
    user = opts.get("--install-username", "HwHiAiUser")
    group = opts.get("--install-usergroup", user)
    if "--install-username" in opts and "--install-usergroup" not in opts:
        raise InstallError("--install-username must be given with --install-usergroup")
    if os.environ.get("ASCEND_SIM_ROOT"):
        return user, group  # unit tests: no users in a scratch root
    try:
        pwd.getpwnam(user)
    except KeyError:
        raise InstallError(f"the user {user} does not exist, create it first") from None
    try:
        grp.getgrnam(group)
    except KeyError:
        raise InstallError(f"the group {group} does not exist, create it first") from None
    return user, group


def _which(tool: str) -> bool:
    return shutil.which(tool) is not None


def _check_driver_build() -> None:
    missing = [t for t in ("gcc", "make", "dkms") if not _which(t)]
    if missing:
        raise InstallError(
            f"the driver build needs {', '.join(missing)}; install them and run again"
        )
    kernel = platform.release()
    build = hw.root_path(f"/lib/modules/{kernel}/build")
    if not os.path.isdir(build):
        raise InstallError(
            f"kernel headers/devel for the running kernel {kernel} not found ({build}); "
            "install the headers package matching `uname -r`"
        )


def _install_tools(payload: str, driver_dir: str) -> None:
    lib = f"{driver_dir}/lib64/devtools"
    target = hw.root_path(lib + "/ascend_devtools")
    if os.path.isdir(target):
        shutil.rmtree(target)
    shutil.copytree(
        os.path.join(payload, "ascend_devtools"),
        target,
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    for dest, module in TOOL_LAUNCHERS.values():
        path = dest.format(driver=driver_dir)
        # The launcher must import the copy it was installed with, which lies under the test
        # root when there is one (the un-rooted path does not exist there).
        _write(
            path,
            "#!/usr/bin/env python3\n"
            "import sys\n"
            f"sys.path.insert(0, {hw.root_path(lib)!r})\n"
            f"from ascend_devtools.{module} import main\n"
            "sys.exit(main())\n",
            0o755,
        )


def _crash_point(node: dict[str, Any] | None, manifest: dict[str, Any]) -> None:
    """Fault knob: the installer is killed half-way, as by an OOM kill or a lost session."""
    if node is not None and hw.consume_fault(node, "installer_crash", manifest["kind"]):
        log(manifest, "install interrupted")
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)


def _load_node_if_present() -> dict[str, Any] | None:
    try:
        return hw.load_node()
    except FileNotFoundError:
        return None


def install_driver(manifest: dict[str, Any], opts: dict[str, Any], payload: str) -> int:
    # An installed driver is found where /etc/ascend_install.info says it is; --upgrade and
    # --uninstall act on it there, and a second driver in another path is refused.
    recorded = hw.read_kv("/etc/ascend_install.info").get("Driver_Install_Path_Param")
    base = opts.get("--install-path", recorded or hw.DEFAULT_INSTALL_PATH)
    if recorded and base != recorded and hw.read_kv(f"{recorded}/driver/version.info"):
        raise InstallError(
            f"a driver is already installed in {recorded}; it cannot be installed, upgraded "
            f"or uninstalled in {base}"
        )
    driver_dir = f"{base}/driver"
    installed = hw.read_kv(f"{driver_dir}/version.info").get("Version")
    if "--uninstall" in opts:
        if installed is None:
            raise InstallError("the driver is not installed")
        shutil.rmtree(hw.root_path(driver_dir), ignore_errors=True)
        for dest, _ in TOOL_LAUNCHERS.values():
            path = hw.root_path(dest.format(driver=driver_dir))
            if os.path.exists(path):
                os.remove(path)
        info = hw.read_kv("/etc/ascend_install.info")
        for key in [k for k in info if k.startswith("Driver_")]:
            del info[key]
        hw.write_kv("/etc/ascend_install.info", info)
        log(manifest, "uninstall success")
        print("Driver package uninstalled successfully!")
        return 0
    if "--full" in opts and installed is not None:
        raise InstallError(
            f"the driver {installed} is already installed; use --upgrade to change it"
        )
    if "--upgrade" in opts and installed is None:
        raise InstallError("no driver is installed; use --full for a first installation")
    user, group = _check_user(opts)
    if "--docker" not in opts:
        _check_driver_build()
    node = _load_node_if_present()
    log(manifest, f"install start, mode={'upgrade' if installed else 'full'}")
    _install_tools(payload, driver_dir)
    _write(f"{driver_dir}/kernel/drv_davinci_intf_host.ko", "simulated kernel module\n")
    _crash_point(node, manifest)
    _write(f"{driver_dir}/version.info", render_driver_info(manifest["version"]))
    info = hw.read_kv("/etc/ascend_install.info")
    info.update(
        {
            "UserName": user,
            "UserGroup": group,
            "Driver_Install_Type": "upgrade" if installed else "full",
            "Driver_Install_Path_Param": base,
            "Driver_Install_For_All": "yes" if "--install-for-all" in opts else "no",
            "Driver_Install_Mode": "docker" if "--docker" in opts else "normal",
            "Driver_Install_Status": "complete",
        }
    )
    hw.write_kv("/etc/ascend_install.info", info)
    log(manifest, "install success")
    print(f"Driver package installed successfully! ({manifest['version']})")
    if installed:
        print("Reboot needed for installation/upgrade to take effect!")
    return 0


def install_firmware(manifest: dict[str, Any], opts: dict[str, Any]) -> int:
    base = hw.driver_install_path()
    tool = hw.root_path(f"{base}/driver/tools/upgrade-tool")
    if not os.path.exists(tool):
        raise InstallError(
            "the driver's upgrade-tool was not found; install the driver before the firmware"
        )
    if "--uninstall" in opts:
        raise InstallError("the firmware cannot be uninstalled, install another version instead")
    node = hw.load_node()
    log(manifest, "install start")
    _crash_point(node, manifest)
    node = hw.load_node()
    changed = False
    for chip in node["chips"]:
        if chip.get("firmware_version") != manifest["version"]:
            chip["firmware_version"] = manifest["version"]
            chip["firmware_hdk"] = manifest.get("hdk", "")
            changed = True
    hw.save_node(node)
    _write(f"{base}/firmware/version.info",
           render_firmware_info(manifest["version"], manifest.get("hdk", "")))
    info = hw.read_kv("/etc/ascend_install.info")
    info.update({"Firmware_Install_Type": "full", "Firmware_Install_Path_Param": base})
    hw.write_kv("/etc/ascend_install.info", info)
    if not changed:
        log(manifest, "install success, same version, nothing to do")
        print(f"Firmware {manifest['version']} is already installed.")
        return 0
    log(manifest, "install success, reboot needed")
    print("Firmware package installed successfully! Reboot now or after driver installation.")
    return 2


_version_tuple = _release


def toolkit_root(base: str, version: str) -> str:
    """CANN up to 8.3 lives under ascend-toolkit/<ver>; from 8.5 under cann-<ver>."""
    if _version_tuple(version) >= (8, 5):
        return f"{base}/cann-{version}"
    return f"{base}/ascend-toolkit/{version}"


def _arch() -> str:
    return platform.machine()


def _installed_toolkit(base: str) -> dict[str, str]:
    info = hw.read_kv("/etc/Ascend/ascend_cann_install.info")
    if info.get("Install_Path", base) != base:
        return {}
    return info


def _remove_toolkit(base: str, version: str) -> None:
    """Remove an installed toolkit, with the ascend-toolkit links that point into it."""
    shutil.rmtree(hw.root_path(toolkit_root(base, version)), ignore_errors=True)
    if _version_tuple(version) < (8, 5):
        for name in ("latest", "set_env.sh"):
            path = hw.root_path(f"{base}/ascend-toolkit/{name}")
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            elif os.path.islink(path) or os.path.exists(path):
                os.remove(path)


def _latest_links(base: str, version: str, names: tuple[str, ...]) -> None:
    """ascend-toolkit/latest: a real directory of per-component symlinks into ../<version>/
    (ls-toolkit-latest-8.2.RC2-symlinks.txt); its <arch>-linux/ is a real directory too (what is
    inside it was not shown: here, links to the versioned <arch>-linux/ entries)."""
    latest = f"{base}/ascend-toolkit/latest"
    os.makedirs(hw.root_path(latest), exist_ok=True)
    for name in names:
        _symlink(f"../{version}/{name}", f"{latest}/{name}")


def _latest_arch_dir(base: str, version: str) -> None:
    arch_dir = f"{_arch()}-linux"
    latest = f"{base}/ascend-toolkit/latest/{arch_dir}"
    real = hw.root_path(f"{base}/ascend-toolkit/{version}/{arch_dir}")
    os.makedirs(hw.root_path(latest), exist_ok=True)
    for entry in sorted(os.listdir(real)):
        _symlink(f"../../{version}/{arch_dir}/{entry}", f"{latest}/{entry}")
    _symlink(f"{arch_dir}/lib64", f"{base}/ascend-toolkit/latest/lib64")


def install_toolkit(manifest: dict[str, Any], opts: dict[str, Any]) -> int:
    base = opts.get("--install-path", hw.DEFAULT_INSTALL_PATH)
    version = manifest["version"]
    current = _installed_toolkit(base).get("Version")
    if "--uninstall" in opts:
        if current is None:
            raise InstallError("the CANN toolkit is not installed")
        _remove_toolkit(base, current)
        os.remove(hw.root_path("/etc/Ascend/ascend_cann_install.info"))
        log(manifest, "uninstall success")
        return 0
    if current == version:
        print(f"Ascend-cann-toolkit {version} is already installed.")
        return 0
    if current is not None and "--upgrade" not in opts:
        raise InstallError(
            f"Ascend-cann-toolkit {current} is installed; use --upgrade to install {version}"
        )
    if current is None and "--upgrade" in opts:
        raise InstallError("no Ascend-cann-toolkit is installed; use --install")
    _check_user(opts)
    node = _load_node_if_present()
    log(manifest, f"install start, mode={'upgrade' if current else 'install'}")
    root = toolkit_root(base, version)
    if current is not None:
        _remove_toolkit(base, current)
    _write(f"{root}/{_arch()}-linux/lib64/libhccl.so", "simulated\n")
    _crash_point(node, manifest)
    _write(
        f"{root}/{_arch()}-linux/ascend_toolkit_install.info",
        render_toolkit_install_info(version, _arch(), f"{root}/{_arch()}-linux"),
    )
    os.makedirs(hw.root_path(f"{root}/opp"), exist_ok=True)
    # The vendor's set_env.sh sets ASCEND_TOOLKIT_HOME to ascend-toolkit/latest up to CANN 8.3
    # and to cann-<version> from 8.5 (set-env-derived-ENV-cann-container-image-extract.txt).
    home = root
    env_root = root
    if _version_tuple(version) < (8, 5):
        env_root = f"{base}/ascend-toolkit"
        home = f"{env_root}/latest"
        _latest_arch_dir(base, version)
        _latest_links(base, version, ("opp",))
    _write(
        f"{env_root}/set_env.sh",
        "# Ascend CANN toolkit environment\n"
        f"export ASCEND_TOOLKIT_HOME={home}\n"
        f"export ASCEND_HOME_PATH={home}\n"
        f"export LD_LIBRARY_PATH={root}/{_arch()}-linux/lib64:${{LD_LIBRARY_PATH:-}}\n"
        f"export ASCEND_OPP_PATH={home}/opp\n",
    )
    hw.write_kv(
        "/etc/Ascend/ascend_cann_install.info",
        {"Install_Path": base, "Version": version, "Toolkit_Root": root},
    )
    log(manifest, "install success")
    print(f"Ascend-cann-toolkit {version} install success")
    return 0


def _install_component(manifest: dict[str, Any], opts: dict[str, Any], name: str, *,
                       directory: str, release: tuple[str, str], payload: tuple[str, str],
                       finish: Callable[[], None]) -> int:
    """The steps of a package that installs into a ``directory`` of its own (kernels/ops,
    NNAL): ``--uninstall`` removes the directory; the version that ``release`` (its version file
    and key) records is left as it is; else the ``payload`` (path, text), the crash point, then
    ``finish`` writes the rest."""
    version = manifest["version"]
    if "--uninstall" in opts:
        shutil.rmtree(hw.root_path(directory), ignore_errors=True)
        log(manifest, "uninstall success")
        return 0
    if read_release(*release) == version:
        print(f"{name} {version} is already installed.")
        return 0
    node = _load_node_if_present()
    log(manifest, "install start")
    _write(*payload)
    _crash_point(node, manifest)
    finish()
    log(manifest, "install success")
    print(f"{name} {version} install success")
    return 0


def install_kernels(manifest: dict[str, Any], opts: dict[str, Any]) -> int:
    base = opts.get("--install-path", hw.DEFAULT_INSTALL_PATH)
    toolkit = _installed_toolkit(base)
    version = manifest["version"]
    if toolkit.get("Version") != version:
        raise InstallError(
            f"the kernels/ops package {version} needs Ascend-cann-toolkit {version}; "
            f"installed: {toolkit.get('Version', 'none')}"
        )
    root = toolkit["Toolkit_Root"]
    info_path = ops_info_path(root, version)

    def finish() -> None:
        _write(info_path, render_ops_info(version))
        if info_path.endswith("/opp_kernel/version.info"):
            _latest_links(base, version, ("opp_kernel",))

    return _install_component(
        manifest, opts, manifest["package"], directory=os.path.dirname(info_path),
        release=(info_path, "version_dir"), finish=finish,
        payload=(f"{root}/opp/built-in/op_impl/ai_core/tbe/kernel/{manifest['chip']}/ops.o",
                 "sim\n"))


def install_nnal(manifest: dict[str, Any], opts: dict[str, Any]) -> int:
    base = opts.get("--install-path", hw.DEFAULT_INSTALL_PATH)
    version = manifest["version"]
    if _installed_toolkit(base).get("Version") is None:
        raise InstallError("NNAL needs the Ascend-cann-toolkit; install it first")
    atb = f"{base}/nnal/atb"

    def finish() -> None:
        _write(f"{atb}/{version}/version.info", render_atb_info(version, _arch()))
        _symlink(version, f"{atb}/latest")
        _write(
            f"{atb}/set_env.sh",
            "# Ascend NNAL (ATB) environment\n"
            f"export ATB_HOME_PATH={atb}/latest/atb/cxx_abi_1\n"
            f"export LD_LIBRARY_PATH={atb}/latest/atb/cxx_abi_1/lib:${{LD_LIBRARY_PATH:-}}\n",
        )

    return _install_component(
        manifest, opts, "Ascend-cann-nnal", directory=f"{base}/nnal",
        release=(f"{atb}/latest/version.info", "Ascend-cann-atb"), finish=finish,
        payload=(f"{atb}/{version}/atb/cxx_abi_1/lib/libatb.so", "simulated\n"))


def run(payload: str, argv: list[str]) -> int:
    with open(os.path.join(payload, "manifest.json"), encoding="utf-8") as fh:
        manifest: dict[str, Any] = json.load(fh)
    try:
        opts = parse_args(argv)
        if not any(a in opts for a in ACTIONS):
            raise InstallError("no action given: use --full, --install, --upgrade or --uninstall")
        if os.geteuid() != 0:
            raise InstallError("the installer must be run as root")
        if "--quiet" not in opts and not sys.stdin.isatty():
            raise InstallError(
                "the EULA must be accepted interactively, or pass --quiet to accept it"
            )
        kind = manifest["kind"]
        if kind == "driver":
            return install_driver(manifest, opts, payload)
        if kind == "firmware":
            return install_firmware(manifest, opts)
        if kind == "toolkit":
            return install_toolkit(manifest, opts)
        if kind == "kernels":
            return install_kernels(manifest, opts)
        if kind == "nnal":
            return install_nnal(manifest, opts)
        raise InstallError(f"unknown package kind {kind}")
    except InstallError as exc:
        with contextlib.suppress(OSError):
            log(manifest, f"install failed: {exc}")
        sys.stderr.write(f"[ERROR] {manifest.get('filename', 'installer')}: {exc}\n")
        return 1


def _executable(path: str) -> bool:
    return os.path.isfile(path) and bool(os.stat(path).st_mode & stat.S_IXUSR)


if __name__ == "__main__":  # invoked by the .run header as: python3 -m ascend_devtools.installer
    sys.exit(run(os.environ["ASCEND_RUN_PAYLOAD"], sys.argv[1:]))
