"""A simulated Ascend Docker Runtime installer (MindCluster), built as a vendor-style ``.run``.

Build side (controller)::

    python -m ascend_sim.docker_runtime OUT [--version 26.0.0] [--arch x86_64] [--corrupt]
                                            [--vars-file PINS.yml]

writes ``Ascend-docker-runtime_<version>_linux-<arch>.run`` into OUT (and, with ``--vars-file``,
its pinned sha256 as ``k8s_node_sha256``). Node side: the ``.run`` verifies its archive, extracts
it and runs this same file with the node's system Python (standard library only) as the installer.

What it follows, from Ascend/mind-cluster (component/ascend-docker-runtime) at tag v26.0.0
(commit 2fa1c4f06738892c2cb8f9262bd30fb03405ffcd):

- the file name ``Ascend-docker-runtime_<VERSION>_linux-<uname -m>.run``: build/build.sh
  (``RUN_PKG_NAME``); the release of the quick-start guide is 26.0.0
  (docs/en/scheduling/quick_start/quick_start.md at 22bb3d987bc0208c3eb7395e222b661276133c58);
- the options: build/scripts/help.info and build/scripts/run_main.sh (``--install``,
  ``--uninstall``, ``--upgrade``, ``--install-path=``, ``--install-scene=docker|containerd|isula``,
  ``--install-type=``, ``--config-file-path=``, ``--version``); the makeself header
  (build/makeself-header/makeself-header.sh) refuses any other option, verifies the archive's
  SHA256 on every start (exit 2 on a mismatch) and at v26.0.0 still takes ``--check`` with a
  deprecation warning (removed in v26.1.0, commit f53b34ff4e0d1b663d751ec20ad8f948ff6e63d3,
  which also added an interactive EULA question to ``--install``/``--upgrade``: this simulator
  asks it for versions from 26.1);
- root only; ``--install-path=P`` installs into ``P/Ascend-Docker-Runtime`` (default
  ``/usr/local/Ascend/Ascend-Docker-Runtime``); the files installed there (the five
  ``ascend-docker-*`` programs 0550, ``README.md``, ``script/uninstall.sh``) and
  ``ascend_docker_runtime_install.info`` with the keys of ``save_install_args`` (0640);
  ``/etc/ascend-docker-runtime.d/base.list`` (0440, the paths of build/scripts/base.list);
  the log ``/var/log/ascend-docker-runtime/installer.log`` in the format of ``log``;
- with ``--install-scene=containerd``: ``containerd config default`` writes
  ``/etc/containerd/config.toml`` when it is missing, then the install helper edits it
  (install/process/containerd_process.go): on cgroup v2 (``stat -fc %T /sys/fs/cgroup`` is
  ``cgroup2fs``) the ``runc`` runtime's ``options.BinaryName`` becomes the installed
  ``ascend-docker-runtime``; otherwise ``plugins."io.containerd.runtime.v1.linux".runtime``
  becomes that program and the ``runc`` runtime's ``runtime_type``
  ``io.containerd.runtime.v1.linux``; the file is rewritten whole (0600).

The messages a run prints are those of the real-output corpus
(tests/data/corpus/ascend-docker-runtime/), where the vendor's examples show them, and
otherwise the ``echo``/``log`` lines of run_main.sh. The programs installed are stand-ins:
``ascend-docker-runtime`` hands its arguments to ``runc`` (the real one is an OCI runtime
wrapping runc), the others print that they are simulated.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import gzip
import hashlib
import io
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

PACKAGE = "Ascend-docker-runtime"
LOWER = "ascend-docker-runtime"
DEFAULT_VERSION = "26.0.0"
INSTALL_DIR_NAME = "Ascend-Docker-Runtime"
DEFAULT_INSTALL_PATH = "/usr/local/Ascend/" + INSTALL_DIR_NAME
CONFIG_DIR = "/etc/ascend-docker-runtime.d"
LOG_DIR = "/var/log/ascend-docker-runtime"
CONTAINERD_CONFIG = "/etc/containerd/config.toml"
DOCKER_CONFIG = "/etc/docker/daemon.json"
PROGRAMS = ("ascend-docker-runtime", "ascend-docker-hook", "ascend-docker-cli",
            "ascend-docker-plugin-install-helper", "ascend-docker-destroy")
#: build/scripts/base.list at v26.0.0: what the hook mounts into containers.
BASE_LIST = ("/usr/local/Ascend/driver/lib64\n/usr/local/Ascend/driver/include\n"
             "/usr/local/dcmi\n/usr/local/bin/npu-smi\n/var/queue_schedule")
INSTALL_TYPES = ("A500", "A200", "A200ISoC", "A500A2", "A200IA2")
SCENES = ("docker", "containerd", "isula")
#: The options build/scripts/help.info lists (the makeself header refuses the others).
OPTIONS = ("--install", "--install-path", "--uninstall", "--upgrade", "--install-type",
           "--version", "--install-scene", "--config-file-path")
CRI = "io.containerd.grpc.v1.cri"
RUNTIME_V1 = "io.containerd.runtime.v1.linux"
RUNC_V2 = "io.containerd.runc.v2"

HEADER = """\
#!/bin/bash
# {filename}
# Simulated makeself package (ascend_sim.docker_runtime): header, then a base64 tar.gz archive.
PAYLOAD_SHA256="{sha256}"
HEADER_LINES={lines}
self="$0"
payload() {{ tail -n +$((HEADER_LINES + 1)) "$self"; }}
allowed="{options}"
for arg in "$@"; do
  name="${{arg%%=*}}"
  case " $allowed --check --help -h " in
    *" $name "*) ;;
    *) echo "Error input" >&2; echo "Usage: $0 [options]" >&2; exit 1 ;;
  esac
  case "$arg" in
    -h|--help) echo "Usage: $0 [options]" >&2; exit 0 ;;
  esac
done
if [ "$1" = "--check" ]; then
  {check_line}
fi
printf 'Verifying archive integrity...'
sum=$(payload | sha256sum | cut -d' ' -f1)
if [ "$sum" != "$PAYLOAD_SHA256" ]; then
  echo "Error in SHA256 checksums: $sum is different from $PAYLOAD_SHA256" >&2
  exit 2
fi
printf '  100%%   SHA256 checksums are OK.\\n'
echo " All good."
[ "$1" = "--check" ] && exit 0
tmp=$(mktemp -d "${{TMPDIR:-/tmp}}/selfgz.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
payload | base64 -d | tar -xz -C "$tmp" || {{ echo "Unable to decompress $0" >&2; exit 1; }}
echo "Uncompressing {label}  100%"
cd "$tmp" || exit 1
PYTHONDONTWRITEBYTECODE=1 python3 ./docker_runtime.py --node "$0" "$@"
exit $?
"""


def filename(version: str, arch: str) -> str:
    """The vendor's file name (build/build.sh): ``Ascend-docker-runtime_<v>_linux-<arch>.run``."""
    return f"{PACKAGE}_{version}_linux-{arch}.run"


def _release(version: str) -> tuple[int, int]:
    numbers = [int(n) for n in re.findall(r"\d+", version)[:2]] + [0, 0]
    return numbers[0], numbers[1]


def asks_eula(version: str) -> bool:
    """From v26.1.0 on, --install and --upgrade ask for the EULA on stdin (commit f53b34ff)."""
    return _release(version) >= (26, 1)


# -- build side ----------------------------------------------------------------------------------

def _payload(version: str, arch: str) -> bytes:
    manifest = {"package": PACKAGE, "version": version, "arch": arch,
                "filename": filename(version, arch)}
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in (("manifest.json", json.dumps(manifest, sort_keys=True).encode()),
                           ("docker_runtime.py", Path(__file__).read_bytes())):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            info.uname = info.gname = "root"
            tar.addfile(info, io.BytesIO(data))
    packed = io.BytesIO()
    with gzip.GzipFile(fileobj=packed, mode="wb", mtime=0) as gz:
        gz.write(raw.getvalue())
    return packed.getvalue()


def build(out_dir: Path, version: str = DEFAULT_VERSION, arch: str = "",
          corrupt: bool = False) -> Path:
    """Write the ``.run`` into ``out_dir`` (reproducible bytes); ``corrupt`` damages the archive
    after its checksum was computed."""
    arch = arch or platform.machine()
    name = filename(version, arch)
    encoded = base64.encodebytes(_payload(version, arch))
    sha = hashlib.sha256(encoded).hexdigest()
    check_line = ("" if asks_eula(version) else
                  f'echo "[WARNING]: --check is meaningless for {LOWER} and will be discarded '
                  'in the future"')
    fields = {"filename": name, "sha256": sha, "options": " ".join(OPTIONS),
              "check_line": check_line or ":", "label": LOWER}
    header = HEADER.format(lines=0, **fields)
    header = HEADER.format(lines=header.count("\n"), **fields)
    if not check_line:  # from 26.1 the header no longer knows --check
        header = header.replace(" --check --help -h ", " --help -h ")
    if corrupt:
        middle = len(encoded) // 2
        flipped = b"A" if encoded[middle:middle + 1] != b"A" else b"B"
        encoded = encoded[:middle] + flipped + encoded[middle + 1:]
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / name
    path.write_bytes(header.encode() + encoded)
    path.chmod(0o550)
    return path


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- node side: run_main.sh ----------------------------------------------------------------------

class RefusedError(Exception):
    """The installer's ``[ERROR]`` line; exit 1."""


def _root(path: str) -> str:
    """A node path, under ``ASCEND_SIM_ROOT`` when set (pytest installs into a scratch root)."""
    root = os.environ.get("ASCEND_SIM_ROOT", "")
    return root.rstrip("/") + path if root else path


def _log(level: str, message: str) -> None:
    """run_main.sh ``log``: the line on stdout and, with a time stamp, in installer.log."""
    print(f"{level} {message}")
    os.makedirs(_root(LOG_DIR), mode=0o750, exist_ok=True)
    ip = os.environ.get("SSH_CLIENT", "").split(" ")[0] or "localhost"
    stamp = datetime.datetime.now().strftime("%Y/%m/%d %H:%M:%S")
    with open(_root(LOG_DIR + "/installer.log"), "a", encoding="utf-8") as fh:
        fh.write(f"{level} [{stamp}] [uid: {os.getuid()}] [{ip}] [{LOWER}] {message}\n")


def _write(path: str, text: str, mode: int) -> None:
    full = _root(path)
    os.makedirs(os.path.dirname(full), mode=0o750, exist_ok=True)
    with open(full, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.chmod(full, mode)


def parse(argv: list[str]) -> dict[str, Any]:
    """run_main.sh's option loop: each option once, values checked, no option alone."""
    opts: dict[str, Any] = {"scene": "docker", "install_path": DEFAULT_INSTALL_PATH,
                            "type": "", "config": ""}
    seen: set[str] = set()
    for arg in argv:
        name, _, value = arg.partition("=")
        if name not in OPTIONS or name in seen:
            what = "Repeat parameter!" if name in seen else f"unsupported parameters: {arg}"
            raise RefusedError(f"failed, '{name}' {what}" if name in seen else f"failed, {what}")
        seen.add(name)
        if name == "--install-scene":
            if value not in SCENES:
                raise RefusedError("failed, please check the parameter of --install-scene=<scene>")
            opts["scene"] = value
        elif name == "--install-type":
            if value not in INSTALL_TYPES:
                raise RefusedError("failed, please check the parameter of --install-type=<type>")
            opts["type"] = value
        elif name == "--install-path":
            opts["install_path"] = (value.rstrip("/") + "/" + INSTALL_DIR_NAME)
        elif name == "--config-file-path":
            if not os.path.exists(_root(value)):
                raise RefusedError(f"failed, file '{value}' does not exist.")
            opts["config"] = value
    actions = [a for a in ("--install", "--uninstall", "--upgrade") if a in seen]
    for alone in ("--install-path", "--install-scene"):
        if alone in seen and not actions:
            raise RefusedError(
                f"failed, only input <{alone.lstrip('-')}> command. When use {alone} "
                "you also need input --install or --uninstall or --upgrade")
    opts["action"] = actions[0] if actions else ("--version" if "--version" in seen else "")
    return opts


def _install_info(version: str, arch: str, opts: dict[str, Any]) -> str:
    """run_main.sh ``save_install_args`` at v26.0.0: one ``key=value`` per line."""
    kinds = {t.lower(): ("y" if opts["type"] == t else "n") for t in INSTALL_TYPES}
    return (f"version=v{version}\narch={arch}\nos=linux\npath={opts['install_path']}\n"
            f"build={PACKAGE}_{version}-{arch}\n"
            + "".join(f"{k}={kinds[k]}\n" for k in ("a500", "a500a2", "a200", "a200isoc",
                                                     "a200ia2"))
            + f"install-scene={opts['scene']}\nconfig-file-path={opts['config']}\n")


def _stand_in(name: str, version: str) -> str:
    if name == "ascend-docker-runtime":
        return ("#!/bin/sh\n# ascend_sim stand-in: an OCI runtime handing over to runc\n"
                'exec runc "$@"\n')
    return f'#!/bin/sh\necho "{name} {version} (ascend_sim stand-in)"\n'


def _accept_eula(version: str) -> None:
    if not asks_eula(version):
        return
    print(f"Do you accept the EULA to install {PACKAGE}?[Y/N]")
    for line in sys.stdin:
        answer = line.strip()
        if answer in ("Y", "y"):
            _log("[INFO]", "user accepted EULA")
            return
        if answer in ("N", "n"):
            _log("[INFO]", "install cancelled, user declined EULA")
            raise SystemExit(0)
        print(f"Do you accept the EULA to install {PACKAGE}?[Y/N]")
    raise RefusedError("install failed, no answer to the EULA question")  # stdin closed


def _copy_files(version: str, opts: dict[str, Any]) -> None:
    base = opts["install_path"]
    for name in PROGRAMS:
        _write(f"{base}/{name}", _stand_in(name, version), 0o550)
    _write(f"{base}/README.md", f"# {PACKAGE} {version} (ascend_sim stand-in)\n", 0o640)
    _write(f"{base}/script/uninstall.sh",
           "#!/bin/sh\n# ascend_sim stand-in: run the package with --uninstall\nexit 0\n", 0o500)
    _write(f"{CONFIG_DIR}/base.list", BASE_LIST, 0o440)


# -- containerd's config.toml, as the install helper edits it ------------------------------------

def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def dump_toml(data: dict[str, Any], prefix: str = "") -> str:
    """TOML text of nested tables (what go-toml's Marshal writes: scalars, then sub-tables)."""
    lines = [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in data.items()
             if not isinstance(v, dict)]
    text = "\n".join(lines) + ("\n" if lines else "")
    for key, value in data.items():
        if isinstance(value, dict):
            name = f"{prefix}.{_toml_key(key)}" if prefix else _toml_key(key)
            text += f"\n[{name}]\n" + dump_toml(value, name)
    return text


def _load_toml(text: str) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib

        return tomllib.loads(text)
    raise RefusedError("install failed, reading TOML needs Python 3.11 (tomllib)")


def edit_containerd_config(text: str, runtime: str, cgroup_v2: bool) -> str:
    """install/process/containerd_process.go ``editContainerdConfig`` for ``add``."""
    config = _load_toml(text)
    plugins = config.setdefault("plugins", {})
    if cgroup_v2:
        try:
            runc = plugins[CRI]["containerd"]["runtimes"]["runc"]
            runc["options"]["BinaryName"] = runtime
        except (KeyError, TypeError) as exc:
            raise RefusedError(f"install failed, can not find config: {exc}") from exc
    else:
        if RUNTIME_V1 not in plugins:
            raise RefusedError(f"install failed, can not find plugin: {RUNTIME_V1}")
        plugins[RUNTIME_V1]["runtime"] = runtime
        try:
            plugins[CRI]["containerd"]["runtimes"]["runc"]["runtime_type"] = RUNTIME_V1
        except (KeyError, TypeError) as exc:
            raise RefusedError(f"install failed, can not find config: {exc}") from exc
    return dump_toml(config)


def _cgroup_v2() -> bool:
    proc = subprocess.run(["stat", "-fc", "%T", "/sys/fs/cgroup/"], capture_output=True,
                          text=True, check=False)
    return "cgroup2fs" in proc.stdout


def _configure_containerd(opts: dict[str, Any]) -> None:
    config = opts["config"] or CONTAINERD_CONFIG
    full = _root(config)
    if not opts["config"]:
        print("[INFO] install scene is 'containerd'.")
        if not os.path.exists(full):
            print(f"[INFO] containerd config file does not exist, default {config} will be "
                  "created")
            os.makedirs(os.path.dirname(full), mode=0o750, exist_ok=True)
            default = subprocess.run(["containerd", "config", "default"], capture_output=True,
                                     text=True, check=False)
            if default.returncode != 0:
                raise RefusedError(f"install failed, 'containerd config default' failed: "
                              f"{default.stderr.strip()}")
            with open(full, "w", encoding="utf-8") as fh:
                fh.write(default.stdout)
    with open(full, encoding="utf-8") as fh:
        text = fh.read()
    try:
        edited = edit_containerd_config(text, opts["install_path"] + "/ascend-docker-runtime",
                                        _cgroup_v2())
    except ValueError as exc:  # tomllib.TOMLDecodeError
        raise RefusedError(f"install failed, './ascend-docker-plugin-install-helper add {config}' "
                      f"return non-zero ({exc})") from exc
    with open(full, "w", encoding="utf-8") as fh:
        fh.write(edited)
    os.chmod(full, 0o600)
    _log("[INFO]", f"{config} modify success")


def install(manifest: dict[str, Any], opts: dict[str, Any], upgrade: bool) -> None:
    version, arch = manifest["version"], manifest["arch"]
    _accept_eula(version)
    verb = "upgrade" if upgrade else "install"
    # "[INFO]: installing" as the corpus shows it; run_main.sh upgrade() echoes "[INFO] upgrading".
    print(f"[INFO] upgrading {LOWER}" if upgrade else f"[INFO]: installing {LOWER}")
    if arch != platform.machine():
        raise RefusedError(f"{verb} failed, run package and os not matched in arch")
    if not opts["install_path"].startswith("/"):
        raise RefusedError(f"install path: {opts['install_path']} is a relative path, please use "
                      "absolute path")
    info_path = opts["install_path"] + "/ascend_docker_runtime_install.info"
    if upgrade:
        if not os.path.isdir(_root(opts["install_path"])):
            raise RefusedError("upgrade failed, the specified install path does not exist, "
                               "stopping upgrading")
        if not os.path.isdir(_root(CONFIG_DIR)):
            raise RefusedError("upgrade failed, the configuration directory does not exist")
    _copy_files(version, opts)
    if upgrade:
        _write(info_path, _install_info(version, arch, opts), 0o640)
        print(f"[INFO] {LOWER} has been installed in: {opts['install_path']}")
        print(f"[INFO] upgrade {LOWER} success")
        print(f"[INFO] The version of {LOWER} is: v{version}")
        _log("[INFO]", f"{LOWER} upgrade success")
        return
    print("[INFO] install executable files success")
    if opts["scene"] == "containerd":
        _configure_containerd(opts)
    elif opts["scene"] in ("docker", "isula"):
        raise RefusedError(f"install failed, the simulator does not edit {DOCKER_CONFIG} "
                      f"(install scene '{opts['scene']}')")
    _write(info_path, _install_info(version, arch, opts), 0o640)
    print(f"[INFO] {LOWER} has been installed in: {opts['install_path']}")
    print(f"[INFO] The version of {LOWER} is: {version}")
    print("[INFO] please reboot daemon and container engine to take effect")
    _log("[INFO]", f"{LOWER} install success")


def uninstall(opts: dict[str, Any]) -> None:
    print(f"[INFO] uninstalling {LOWER}")
    base = _root(opts["install_path"])
    if not os.path.isdir(base):
        _log("[WARNING]", "uninstall skipping, the specified install path does not exist")
        return
    shutil.rmtree(base)
    if os.path.isdir(_root(CONFIG_DIR)):
        shutil.rmtree(_root(CONFIG_DIR))
    _log("[INFO]", f"{LOWER} uninstall success")


def node_main(argv: list[str]) -> int:
    """The installer, run by the ``.run`` header after extraction: ``--node RUNFILE ARGS...``."""
    with open("manifest.json", encoding="utf-8") as fh:
        manifest: dict[str, Any] = json.load(fh)
    os.umask(0o027)
    try:
        if os.getuid() != 0:
            raise RefusedError("failed, please run with root permission")
        opts = parse(argv[1:])
        if opts["action"] == "--version":
            print(f"{LOWER} version: {manifest['version']}")
        elif opts["action"] in ("--install", "--upgrade"):
            install(manifest, opts, upgrade=opts["action"] == "--upgrade")
        elif opts["action"] == "--uninstall":
            uninstall(opts)
        else:
            print(f"Error input\nUsage: ./{manifest['filename']} [options]")
    except RefusedError as exc:
        _log("[ERROR]", str(exc))
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in[:1] == ["--node"]:
        return node_main(args_in[1:])
    parser = argparse.ArgumentParser(prog="ascend_sim.docker_runtime",
                                     description="Build a simulated Ascend Docker Runtime .run")
    parser.add_argument("out", type=Path)
    parser.add_argument("--version", default=DEFAULT_VERSION)
    parser.add_argument("--arch", default="", help="uname -m of the node (default: this machine)")
    parser.add_argument("--corrupt", action="store_true", help="damage the archive")
    parser.add_argument("--vars-file", type=Path,
                        help="write the pinned sha256 as k8s_node_sha256 (YAML) to this file")
    args = parser.parse_args(args_in)
    path = build(args.out, args.version, args.arch, args.corrupt)
    if args.vars_file:
        args.vars_file.parent.mkdir(parents=True, exist_ok=True)
        args.vars_file.write_text(
            f"---\nk8s_node_sha256:\n  {path.name}: {sha256_of(path)}\n")
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
