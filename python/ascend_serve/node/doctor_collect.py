"""What ``ascend-serve doctor`` runs on a host: one program that collects everything at once.

It is sent as the text of ``python3 -c`` (one round trip per host) and runs on the managed node,
whose Python may be older than the controller's: standard library only, Python 3.7 syntax. It
changes nothing. It reads the local facts the roles wrote (``/etc/ansible/facts.d/*.fact``) to
learn the install path, the serving environment, the unit, the device network and the tuning
the roles applied, then the vendor's files and tools (``version.info``,
``ascend_toolkit_install.info``, ``npu-smi info``, ``upgrade-tool``, ``hccn_tool``), systemd and
the journal, and prints one JSON document: ``{"format": 1, "host": ..., "sections": {NAME:
{...}}}`` where each section is a file (``path``, ``text`` or ``error``), a command (``argv``,
``rc``, ``out``, ``err``) or a value (``value``). Every tool is run with an argument list, never
through a shell.
"""

from __future__ import annotations

import glob
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from typing import Any

FORMAT = 1
MAX_TEXT = 256 * 1024  # per section: keep the tail beyond this
DEFAULT_INSTALL_PATH = "/usr/local/Ascend"
DEFAULT_UNIT = "ascend-vllm"
NPU_SMI_FALLBACK = "/usr/local/sbin/npu-smi"
INSTALL_LOG = "/var/log/ascend_seclog/ascend_install.log"
# CANN's host process logs (plog-<pid>_<time>.log) of a user: ~/ascend/log/debug/plog, e.g.
# /root/ascend/log/debug/plog (vllm-ascend issue 4866); ASCEND_PROCESS_LOG_PATH moves them.
PLOG_DIR = os.path.join("ascend", "log", "debug", "plog")
PLOG_FILES = 4  # the newest files
PLOG_LINES = 2000  # read from each file's tail; only its [ERROR] lines are kept
# `npu-smi info -m`: "NPU ID  Chip ID  Chip Logic ID  Chip Name"; an MCU row has "-" as its
# logic id (tests/data/corpus/npu-smi/a2-910b4-info-m-8card.txt).
NPU_MAP_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+\S")
UNIT_PROPERTIES = (
    "LoadState,ActiveState,SubState,Result,UnitFileState,NRestarts,MainPID,ExecMainPID,"
    "ExecMainStatus,ExecMainCode,InvocationID,FragmentPath,DropInPaths,ActiveEnterTimestamp,"
    "User,ControlGroup,EnvironmentFiles"
)
# `source FILE` / `. FILE` lines of a shell script.
SOURCE_LINE = re.compile(r"^[ \t]*(source|\.)[ \t]+(\S+)[ \t]*$", re.MULTILINE)
# The serving environment's interpreter prints these (importlib.metadata, no imports).
PYENV_PROBE = (
    "import json, platform, sys\n"
    "try:\n"
    "    from importlib import metadata\n"
    "except ImportError:\n"
    "    metadata = None\n"
    "def version(name):\n"
    "    if metadata is None:\n"
    "        return None\n"
    "    try:\n"
    "        return metadata.version(name)\n"
    "    except Exception:\n"
    "        return None\n"
    "names = json.loads(sys.argv[1])\n"
    "print(json.dumps({'python': platform.python_version(), 'executable': sys.executable,\n"
    "                  'dists': {n: version(n) for n in names}}))\n"
)


def _clip(text: str) -> str:
    return text if len(text) <= MAX_TEXT else "[... cut ...]\n" + text[-MAX_TEXT:]



def _release_of(info_path: str) -> str:
    """``version=`` of an ascend_toolkit_install.info (leading whitespace allowed), or ""."""
    try:
        with open(info_path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, sep, value = line.strip().partition("=")
                if sep and key == "version":
                    return value.strip()
    except OSError:
        pass
    return ""

class Collector:
    def __init__(self, facts_dir: str, journal_lines: int, timeout: float) -> None:
        self.facts_dir = facts_dir
        self.journal_lines = journal_lines
        self.timeout = timeout
        self.sections: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    # --- primitives --------------------------------------------------------------------------

    def _put(self, name: str, section: dict[str, Any]) -> None:
        with self._lock:
            self.sections[name] = section

    def file(self, name: str, path: str, tail_lines: int = 0) -> str | None:
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        except OSError as exc:
            self._put(name, {"path": path, "text": None, "error": exc.strerror or str(exc)})
            return None
        if tail_lines:
            text = "".join(text.splitlines(True)[-tail_lines:])
        self._put(name, {"path": path, "text": _clip(text)})
        return text

    def value(self, name: str, value: Any) -> Any:
        self._put(name, {"value": value})
        return value

    def cmd(self, name: str, argv: list[str], timeout: float | None = None) -> tuple[int, str]:
        try:
            done = subprocess.run(
                argv, capture_output=True, timeout=timeout or
                self.timeout, text=True, errors="replace", check=False,
            )
            rc, out, err = done.returncode, done.stdout, done.stderr
        except FileNotFoundError as exc:
            rc, out, err = 127, "", f"{argv[0]}: {exc.strerror}"
        except subprocess.TimeoutExpired:
            rc, out, err = 124, "", f"no answer in {timeout or self.timeout:.0f} s"
        except OSError as exc:
            rc, out, err = 126, "", f"{argv[0]}: {exc}"
        self._put(name, {"argv": argv, "rc": rc, "out": _clip(out), "err": _clip(err)})
        return rc, out

    # --- what is collected -------------------------------------------------------------------

    def facts(self) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        for path in sorted(glob.glob(os.path.join(self.facts_dir, "*.fact"))):
            name = os.path.basename(path)[: -len(".fact")]
            text = self.file("fact:" + name, path)
            try:
                data = json.loads(text) if text else None
            except ValueError:
                data = None
            if isinstance(data, dict):
                found[name] = data
        self.value("facts_dir", {"path": self.facts_dir, "exists": os.path.isdir(self.facts_dir),
                                 "names": sorted(found)})
        return found

    def system(self) -> None:
        self.value("uname", {"release": platform.release(), "machine": platform.machine(),
                             "hostname": socket.gethostname()})
        self.file("os-release", "/etc/os-release")
        self.file("meminfo", "/proc/meminfo")
        self.file("swaps", "/proc/swaps")
        self.file("boot_id", "/proc/sys/kernel/random/boot_id")
        self.cmd("ip.addr", ["ip", "-o", "-4", "addr", "show"])
        self.cmd("ip.link", ["ip", "-o", "link", "show"])
        devices = []
        for path in sorted(glob.glob("/sys/bus/pci/devices/*")):
            entry = {"address": os.path.basename(path)}
            for key in ("vendor", "device", "class"):
                try:
                    with open(os.path.join(path, key), encoding="ascii", errors="replace") as fh:
                        entry[key] = fh.read().strip()
                except OSError:
                    entry[key] = ""
            if entry.get("vendor", "").lower() == "0x19e5":
                devices.append(entry)
        self.value("pci.huawei", devices)

    def driver(self, facts: dict[str, dict[str, Any]]) -> str:
        ledger = facts.get("ascend_npu_driver", {})
        base = str(ledger.get("install_path") or DEFAULT_INSTALL_PATH)
        self.file("driver.version_info", os.path.join(base, "driver", "version.info"))
        self.file("ascend_install.info", "/etc/ascend_install.info")
        tool = os.path.join(base, "driver", "tools", "upgrade-tool")
        if os.access(tool, os.X_OK):
            self.cmd("firmware", [tool, "--device_index", "-1", "--system_version"])
        smi = shutil.which("npu-smi") or (
            NPU_SMI_FALLBACK if os.access(NPU_SMI_FALLBACK, os.X_OK) else None)
        self.value("npu-smi.path", smi)
        if smi:
            rc, _ = self.cmd("npu-smi.info", [smi, "info"])
            if rc == 0:
                self.npu_health(smi)
        release = platform.release()
        build = f"/lib/modules/{release}/build"
        self.value("kernel.build_dir", {"path": build, "exists": os.path.isdir(build)})
        if shutil.which("dpkg-query"):
            self.cmd("kernel.packages.dpkg", [
                "dpkg-query", "-W", "-f", "${Package} ${Version} ${db:Status-Abbrev}\\n",
                "linux-headers-" + release])
        if shutil.which("rpm"):
            self.cmd("kernel.packages.rpm", [
                "rpm", "-q", "kernel-devel-" + release, "kernel-headers-" + release])
        self.file("install_log", INSTALL_LOG, tail_lines=300)
        return base

    def npu_health(self, smi: str) -> None:
        """``npu-smi info -t health -i N -c C`` of every chip: its health and error codes."""
        rc, out = self.cmd("npu-smi.map", [smi, "info", "-m"])
        chips = []
        for line in out.splitlines() if rc == 0 else []:
            match = NPU_MAP_ROW.match(line)
            if match:
                chips.append((match.group(1), match.group(2)))
        self._parallel([
            (lambda n=n, c=c: self.cmd("npu-smi.health:" + n + ":" + c,
                                       [smi, "info", "-t", "health", "-i", n, "-c", c]))
            for n, c in chips])

    def plog(self, environ: dict[str, str]) -> None:
        """The [ERROR] lines of the newest CANN plog files of root and of the service's user."""
        dirs = []
        if environ.get("ASCEND_PROCESS_LOG_PATH"):
            dirs.append(os.path.join(environ["ASCEND_PROCESS_LOG_PATH"], "debug", "plog"))
        homes = ["/root"]
        user = environ.get("USER") or ""
        if user and user != "root":
            homes.append(os.path.expanduser("~" + user))
        dirs += [os.path.join(home, PLOG_DIR) for home in homes]
        found = []
        for folder in dirs:
            for path in glob.glob(os.path.join(folder, "plog-*.log")):
                try:
                    found.append((os.path.getmtime(path), path))
                except OSError:
                    continue
        self.value("plog.dirs", dirs)
        for _, path in sorted(found, reverse=True)[:PLOG_FILES]:
            try:
                with open(path, encoding="utf-8", errors="replace") as fh:
                    tail = fh.readlines()[-PLOG_LINES:]
            except OSError as exc:
                self._put("plog:" + path, {"path": path, "text": None,
                                           "error": exc.strerror or str(exc)})
                continue
            errors = [line for line in tail if "[ERROR]" in line]
            self._put("plog:" + path, {"path": path, "text": _clip("".join(errors))})

    def cann(self, facts: dict[str, dict[str, Any]], base: str) -> None:
        ledger = facts.get("ascend_cann", {})
        self.file("cann_install.info", "/etc/Ascend/ascend_cann_install.info")
        roots = [str(ledger["toolkit_root"])] if ledger.get("toolkit_root") else sorted(
            glob.glob(os.path.join(base, "cann-*")) + [
                p for p in glob.glob(os.path.join(base, "ascend-toolkit", "*"))
                # latest: a symlink, or (CANN 8.2.x) a real directory of per-component links
                if os.path.isdir(p) and not os.path.islink(p) and os.path.basename(p) != "latest"])
        self.value("toolkit.roots", roots)
        for root in roots:
            infos = sorted(glob.glob(os.path.join(root, "*-linux", "ascend_toolkit_install.info")))
            release = ""
            if infos:
                self.file("toolkit.info:" + root, infos[0])
                release = _release_of(infos[0])
            else:
                self.value("toolkit.info:" + root, None)
            # kernels/ops: opp_kernel/version.info up to CANN 8.3, opp/version.info from 8.5
            # (ascend_files.ops_version_info; this program runs alone on the node)
            match = re.match(r"(\d+)\.(\d+)", release)
            renamed = match is not None and (int(match.group(1)), int(match.group(2))) >= (8, 5)
            self.file("kernels.info:" + root, os.path.join(
                root, "opp" if renamed else "opp_kernel", "version.info"))
        self.file("nnal.version_info", os.path.join(base, "nnal", "atb", "latest", "version.info"))
        if ledger.get("profile_script"):
            self.file("cann.profile_script", str(ledger["profile_script"]))
        if ledger.get("env_file"):
            self.file("cann.env_file", str(ledger["env_file"]))

    def python_env(self, facts: dict[str, dict[str, Any]]) -> None:
        env = facts.get("ascend_python_env")
        if not env or not env.get("python"):
            return
        names = sorted(set(env.get("packages") or {}) | {"vllm", "torch", "torch-npu",
                                                          "vllm-ascend", "transformers"})
        self.cmd("python_env", [str(env["python"]), "-c", PYENV_PROBE, json.dumps(names)])

    def network(self, facts: dict[str, dict[str, Any]], base: str) -> None:
        net = facts.get("ascend_npu_network", {})
        devices = [int(d["device"]) for d in net.get("devices", []) if "device" in d]
        hccl = facts.get("ascend_hccl", {})
        self.file("hccl.env", str(hccl.get("env_file") or "/etc/ascend-serve/hccl.env"))
        self.file("hccn.conf", str(net.get("conf") or "/etc/hccn.conf"))
        self.file("hccl.json", "/etc/ascend-serve/hccl.json")
        tool = os.path.join(base, "driver", "tools", "hccn_tool")
        self.value("hccn.devices", {"tool": tool, "devices": devices,
                                    "usable": os.access(tool, os.X_OK)})
        if not devices or not os.access(tool, os.X_OK):
            return
        calls = [(d, g) for d in devices for g in ("link", "net_health", "tls")]
        self._parallel([
            (lambda d=d, g=g: self.cmd(f"hccn:{d}:{g}",
                                       [tool, "-i", str(d), "-" + g, "-g"]))
            for d, g in calls])

    def tuning(self, facts: dict[str, dict[str, Any]]) -> None:
        tuning = facts.get("ascend_host_tuning", {})
        sysctl = tuning.get("sysctl", {}) if isinstance(tuning.get("sysctl"), dict) else {}
        keys = sorted(set(sysctl.get("applied") or {}) | set(sysctl.get("persisted_only") or {}))
        for key in keys:
            self.file("sysctl:" + key, "/proc/sys/" + key.replace(".", "/"))
        governors: dict[str, str] = {}
        for path in sorted(glob.glob("/sys/devices/system/cpu/cpufreq/policy*/scaling_governor")):
            try:
                with open(path, encoding="ascii", errors="replace") as fh:
                    governors[path] = fh.read().strip()
            except OSError:
                governors[path] = ""
        self.value("cpu.governors", governors)
        jemalloc = tuning.get("jemalloc_path")
        if jemalloc:
            self.value("jemalloc", {"path": jemalloc, "exists": os.path.exists(str(jemalloc))})

    def service(self, facts: dict[str, dict[str, Any]]) -> None:
        svc = facts.get("ascend_vllm_service", {})
        unit = str(svc.get("unit") or DEFAULT_UNIT)
        self.value("unit.name", unit)
        if not shutil.which("systemctl"):
            return
        _, show = self.cmd("unit.show", ["systemctl", "show", unit, "--property=" +
                                         UNIT_PROPERTIES])
        self.cmd("unit.cat", ["systemctl", "cat", unit])
        self.cmd("journal", ["journalctl", "--unit", unit, "--lines",
                             str(self.journal_lines), "--no-pager", "--output", "short-iso"])
        props = dict(line.split("=", 1) for line in show.splitlines() if "=" in line)
        # The files systemd loads into the service's environment ("PATH (ignore_errors=no)").
        for line in show.splitlines():
            path = line.partition("=")[2].split(" (", 1)[0].strip()
            if line.startswith("EnvironmentFiles=") and path:
                self.file("unit.envfile:" + path, path)
        launcher = self.file("launcher", str(svc["launcher"])) if svc.get("launcher") else None
        if launcher:
            # Does every script and env file the launcher sources exist?
            sourced = {}
            for match in SOURCE_LINE.finditer(launcher):
                path = match.group(2).strip("'\"")
                sourced[path] = os.path.exists(path)
            self.value("launcher.sourced", sourced)
        self.value("unit.pids", _unit_pids(props.get("ControlGroup", "")))
        pid = props.get("MainPID", "0")
        if svc.get("runtime") == "container":
            # The unit's main process is conmon (podman run --sdnotify=conmon); the server is
            # the container's first process, in the container named after the unit.
            rc, out = self.cmd("container.pid", ["podman", "container", "inspect", "--format",
                                                 "{{.State.Pid}}", unit])
            pid = out.strip() if rc == 0 else "0"
        if pid.isdigit() and pid != "0":
            # The running server's environment: the truth about what set_env and the env files
            # gave it (secrets in it are redacted by the controller before anything is kept).
            try:
                with open(f"/proc/{pid}/environ", "rb") as fh:
                    environ = fh.read().decode("utf-8", "replace").replace("\0", "\n")
                self.value("service.environ", environ)
            except OSError as exc:
                self.value("service.environ", None)
                self.value("service.environ.error", str(exc))
        url = str(svc.get("url") or "")
        if url and props.get("ActiveState") == "active":
            self.value("service.health", _probe(url.rstrip("/") + "/health"))

    def _service_env(self) -> dict[str, str]:
        """The running server's environment and its unit's User= (what the plog needs)."""
        env = {}
        text = (self.sections.get("service.environ") or {}).get("value") or ""
        for line in str(text).splitlines():
            key, sep, value = line.partition("=")
            if sep and key in ("ASCEND_PROCESS_LOG_PATH", "HOME"):
                env[key] = value
        show = (self.sections.get("unit.show") or {}).get("out") or ""
        for line in str(show).splitlines():
            if line.startswith("User=") and line[5:]:
                env["USER"] = line[5:]
        return env

    def _parallel(self, jobs: list[Any], workers: int = 8) -> None:
        pending = list(jobs)

        def work() -> None:
            while True:
                with self._lock:
                    if not pending:
                        return
                    job = pending.pop()
                job()

        threads = [threading.Thread(target=work) for _ in range(min(workers, len(pending)))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def run(self) -> dict[str, Any]:
        facts = self.facts()
        self.system()
        base = self.driver(facts)
        self.cann(facts, base)
        self._parallel([
            lambda: self.python_env(facts),
            lambda: self.network(facts, base),
            lambda: self.tuning(facts),
            lambda: self.service(facts),
        ], workers=4)
        self.plog(self._service_env())
        return {"format": FORMAT, "host": socket.gethostname(), "sections": self.sections}


def _unit_pids(group: str) -> list[int]:
    """The processes of a unit's control group (cgroup v2, or v1's systemd hierarchy)."""
    if not group:
        return []
    for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd"):
        path = root + group + "/cgroup.procs"
        pids = []
        try:
            for sub, _dirs, files in os.walk(root + group):
                if "cgroup.procs" in files:
                    with open(os.path.join(sub, "cgroup.procs"), encoding="ascii") as fh:
                        pids += [int(line) for line in fh.read().split() if line.isdigit()]
        except OSError:
            continue
        if pids or os.path.exists(path):
            return sorted(set(pids))
    return []


def _probe(url: str) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:  # noqa: S310 - the fact's URL
            return {"url": url, "status": answer.status}
    except urllib.error.HTTPError as exc:
        return {"url": url, "status": exc.code}
    except (OSError, ValueError) as exc:
        return {"url": url, "status": None, "error": str(exc)}


def main(argv: list[str]) -> int:
    facts_dir, journal_lines, timeout = "/etc/ansible/facts.d", 300, 60.0
    for arg in argv:
        key, _, value = arg.partition("=")
        if key == "--facts-dir":
            facts_dir = value
        elif key == "--journal-lines":
            journal_lines = int(value)
        elif key == "--timeout":
            timeout = float(value)
        else:
            sys.stderr.write(f"doctor collector: unknown argument {arg!r}\n")
            return 2
    report = Collector(facts_dir, journal_lines, timeout).run()
    sys.stdout.write(json.dumps(report, sort_keys=True))
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
