"""NPU metrics for Prometheus' node exporter: a textfile-collector writer fed by ``npu-smi`` and
``hccn_tool``, with the metric names, types, units and labels of MindCluster's npu-exporter.

Runs on a managed node with its system Python (standard library only, Python 3.8 syntax), once
per run of a systemd timer (the ``npu_metrics`` role): it reads the devices, renders the
Prometheus text format and replaces its output file atomically (a temporary file in the same
directory, then ``os.replace``), so the node exporter never reads half a file (Debian
``prometheus-node-exporter`` 1.5.0, ``/usr/share/doc/prometheus-node-exporter/README.textfile``:
write ``NAME.prom.$$``, then ``mv`` it). The node exporter's textfile collector serves it; its
README (``README.md.gz``, "Textfile Collector") says the collector reads the ``*.prom`` files of
its directory and that timestamps are not supported, so none are written (npu-exporter's own
output carries them: ``tests/data/corpus/npu-exporter``).

Why a textfile writer and not npu-exporter itself or a daemon of our own: npu-exporter is a Go
binary and container image of MindCluster that calls the driver's DCMI library; it is not in the
artifact mirror the roles install from, and it cannot run on a simulated node. The node exporter
is an OS package on Debian/Ubuntu, already knows how to serve files, and a timer-driven one-shot
program keeps nothing running between runs.

What is read, with the readers the roles and ``doctor`` share (one reader per format:
``npu_smi.py`` and ``hccn.py``, the collection's ``module_utils``):

- ``npu-smi info``: the chip table (health, power, temperature, AI Core %, HBM and DDR use, bus
  id, Phy-ID on A3);
- ``npu-smi info -t board -i NPU -c CHIP``: Chip Name, Chip Type, Chip Version and VDie ID, for
  the ``model_name`` and ``vdie_id`` labels;
- ``hccn_tool -i ID -link -g`` and ``-net_health -g`` (training chips: 910, 910B, 910C): the
  device port's link and network health.

The metrics and labels, as npu-exporter defines them (Ascend/mind-cluster at commit
22bb3d987bc0208c3eb7395e222b661276133c58: ``docs/en/scheduling/api/npu_exporter/
01_prometheus_metrics_api.md``, "NPU", "Utilization", "Network", "DDR", "On-Chip Memory" data and
"Data Label Information"; ``component/npu-exporter/collector/metrics/collector_for_npu.go``,
``collector_for_hbm.go``, ``collector_for_network.go``, ``collector_for_utilization.go``;
``collector/metrics/common_utils.go`` ``collectCardLabelValue``), every one a gauge:

- ``machine_npu_nums``: how many chips (no labels; ``len(chips)`` in collector_for_npu.go);
- ``npu_chip_info_name`` (value 1; its chip name label is ``name`` instead of ``model_name``);
- ``npu_chip_info_health_status``: 1 healthy, 0 unhealthy, -1 unknown. npu-exporter calls a
  chip healthy when the driver's health code is 0 (``getHealth``), which npu-smi prints as
  ``OK``; any other Health (Warning, Alarm, Critical) is 0;
- ``npu_chip_info_temperature`` (Celsius), ``npu_chip_info_power`` (W; not written where npu-smi
  prints ``-``/``NA``: "if ... fails ..., this data information will not be reported"),
  ``npu_chip_info_utilization`` (AI Core, %);
- ``npu_chip_info_hbm_used_memory``, ``npu_chip_info_hbm_total_memory`` (MB; chips with HBM),
  ``npu_chip_info_used_memory``, ``npu_chip_info_total_memory`` (DDR, MB; where npu-smi prints a
  non-zero DDR total);
- ``npu_chip_info_link_status``: 1 UP, 0 DOWN, -1 unknown (hccn_tool failed). npu-exporter runs
  ``hccn_tool -i <physical id> -link -g`` itself (ascend-common/devmanager/hccn/hccn_tool.go
  ``GetNPULinkStatus``), as this writer does;
- ``npu_chip_info_network_status``: 1 healthy, 0 unhealthy, -1 unknown. npu-exporter asks the
  driver's DCMI library and counts its "init" and "success" codes as healthy
  (``getNetworkHealthy``); without DCMI, this writer reads the same state through
  ``hccn_tool -net_health -g`` and counts its ``Success`` and ``Init`` answers as healthy.

Labels of every chip series ("Label 1"): ``id`` (the chip's physical id: npu-smi's Phy-ID on A3,
else the NPU ID, as the doc's label table says), ``model_name`` (``Chip Name-Chip Type-Chip
Version`` of the board page, ``GetNpuName`` in ascend-common/devmanager/common/utils.go),
``vdie_id`` (the board page's five VDie ID words joined by ``-``, upper case: ``DcGetDieID`` in
ascend-common/devmanager/dcmi/dcmi.go), ``pcie_bus_info``, and ``container_name``,
``namespace``, ``pod_name``, empty on a host as npu-exporter prints them for a process outside a
pod.

Beyond npu-exporter (this program's own, prefixed ``ascend_serve_``):
``ascend_serve_npu_metrics_collect_success`` 1 when npu-smi answered and was read, else 0 (the
file then holds only that, with the reason in a comment), so a broken driver shows as an alert
instead of silently stale chips.

Exit codes: 0 written; 1 written, but npu-smi could not be read; 2 bad arguments or the file
could not be written.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from typing import TYPE_CHECKING, Any

from . import hccn, npu_smi

if TYPE_CHECKING:
    from collections.abc import Callable

    Runner = Callable[[list[str]], tuple[int, str, str]]

EXIT_OK, EXIT_NO_DEVICES, EXIT_BAD_INPUT = 0, 1, 2

# Where the driver puts its tools (doctor_collect.py: npu-smi; hccn.py: hccn_tool).
DEFAULT_NPU_SMI = "/usr/local/sbin/npu-smi"
DEFAULT_HCCN_TOOL = hccn.DEFAULT_TOOL
DEFAULT_OUTPUT = "/var/lib/ascend-serve/npu-metrics/ascend_npu.prom"
TOOL_TIMEOUT_S = 30.0
# Chip families whose device ports npu-exporter reads (training cards: setNetHealthStatus).
NETWORK_FAMILIES = frozenset({"910", "910B", "910C"})
# hccn_tool -net_health -g answers that npu-exporter counts as healthy (NetworkInit,
# NetworkSuccess in getNetworkHealthy), lower-cased as hccn.parse_net_health returns them.
NETWORK_HEALTHY = frozenset({"success", "init"})

# "Label 1" of npu-exporter (metrics_collector.go CardLabel); printed sorted, as its client
# library prints them.
CHIP_LABELS = ("id", "model_name", "vdie_id", "pcie_bus_info", "namespace", "pod_name",
               "container_name")
NAME_LABELS = ("id", "name", "vdie_id", "pcie_bus_info", "namespace", "pod_name",
               "container_name")

# The chip families written, with their HELP text (units as npu-exporter's API page gives them).
CHIP_METRICS: list[tuple[str, str]] = [
    ("npu_chip_info_health_status", "NPU chip health: 1 healthy, 0 unhealthy, -1 unknown."),
    ("npu_chip_info_temperature", "NPU chip temperature in degrees Celsius."),
    ("npu_chip_info_power", "NPU chip power in watts."),
    ("npu_chip_info_utilization", "NPU chip AI Core utilization in percent."),
    ("npu_chip_info_hbm_used_memory", "NPU chip HBM in use, in MB."),
    ("npu_chip_info_hbm_total_memory", "NPU chip HBM size, in MB."),
    ("npu_chip_info_used_memory", "NPU chip DDR memory in use, in MB."),
    ("npu_chip_info_total_memory", "NPU chip DDR memory size, in MB."),
    ("npu_chip_info_link_status", "NPU device port link: 1 UP, 0 DOWN, -1 unknown."),
    ("npu_chip_info_network_status", "NPU device network health: 1 healthy, 0 unhealthy, "
                                     "-1 unknown."),
]
SUCCESS_METRIC = "ascend_serve_npu_metrics_collect_success"
# npu-exporter's name for a chip's error code (its collector golden file in the corpus,
# fixture-910awn-8chip-testdata: "the npu error code", 0 for none); written with --fault-codes.
ERROR_CODE_METRIC = "npu_chip_info_error_code"
# npu-exporter has no class: this project's series, one per code, labels class and code.
FAULT_CLASS_METRIC = "ascend_serve_npu_chip_fault_class"
FAULT_LABELS = (*CHIP_LABELS, "class", "code")


def run_command(argv: list[str]) -> tuple[int, str, str]:
    """Run one tool (an argument list, never a shell); rc 127 when it cannot start."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S,
                              check=False)
    except OSError as exc:
        return 127, "", f"cannot run {argv[0]}: {exc}"
    except subprocess.TimeoutExpired:
        return 124, "", f"{argv[0]} did not answer within {TOOL_TIMEOUT_S:g} s"
    return proc.returncode, proc.stdout, proc.stderr


def _why(rc: int, out: str, err: str) -> str:
    text = (err.strip() or out.strip() or "no output").splitlines()[-1]
    return f"rc {rc}: {text}"


# --- reading -------------------------------------------------------------------------------------


def chip_id(chip: dict[str, Any]) -> int:
    """npu-exporter's ``id``: the physical id (A3 Phy-ID), else the NPU ID."""
    return int(chip["phy_id"]) if chip.get("phy_id") is not None else int(chip["npu"])


def chip_index(chip: dict[str, Any]) -> int:
    """The chip's number within its NPU (npu-smi's Chip column; ``-c`` of the board page)."""
    return int(chip.get("chip") or 0)


def board_labels(page: dict[str, Any]) -> dict[str, str]:
    """``model_name`` and ``vdie_id`` from a chip's board page (``read_board``)."""
    parts = [page.get("chip_name"), page.get("chip_type"), page.get("chip_version")]
    model = "-".join(p or "" for p in parts) if any(parts) else ""
    vdie = page.get("vdie_id") or ""
    return {"model_name": model, "vdie_id": "-".join(vdie.split()).upper()}


def read_faults(chip: dict[str, Any], npu_smi_path: str, table: dict[str, str],
                runner: Runner) -> str | None:
    """Set ``chip["faults"]`` (``[{code, class}]``) from ``npu-smi info -t health``; an error."""
    from . import fault_codes  # only with --fault-codes: the role copies it with the table

    argv = [npu_smi_path, "info", "-t", "health", "-i", str(chip["npu"]),
            "-c", str(chip_index(chip))]
    rc, out, err = runner(argv)
    if rc != 0:
        return f"{' '.join(argv[1:])} failed ({_why(rc, out, err)})"
    try:
        # Error Information may go on over lines with an empty key (the corpus's fixture).
        page = npu_smi.read_health("\n".join(
            line for line in out.splitlines() if not line.strip().startswith(":")) + "\n")
        codes = fault_codes.health_codes(page.get("error_code"))
    except (npu_smi.NpuSmiParseError, fault_codes.FaultCodeError) as exc:
        return f"{' '.join(argv[1:])} unreadable: {exc}"
    faults = [{"code": c, "class": fault_codes.classify(c, table)} for c in codes]
    chip["faults"] = sorted(faults, key=lambda f: fault_codes.rank(f["class"]))
    return None


def read_node(npu_smi_path: str, hccn_tool: str, runner: Runner = run_command,
              table: dict[str, str] | None = None) -> dict[str, Any]:
    """Everything one run reports: ``{"chips": [...], "errors": [...], "ok": bool}``; each chip
    is npu_smi's reading plus ``labels`` and, for training chips, ``link`` and ``net_health``;
    with a code ``table`` (vendor_codes.json), ``faults`` from each chip's health page."""
    rc, out, err = runner([npu_smi_path, "info"])
    if rc != 0:
        return {"ok": False, "chips": [], "errors": [f"npu-smi info failed ({_why(rc, out, err)})"]}
    try:
        chips = npu_smi.read_chips(out)
    except npu_smi.NpuSmiParseError as exc:
        return {"ok": False, "chips": [], "errors": [f"npu-smi info unreadable: {exc}"]}
    errors: list[str] = []
    for chip in chips:
        labels = {"id": str(chip_id(chip)), "pcie_bus_info": chip.get("bus_id") or "",
                  "model_name": "", "vdie_id": "", "namespace": "", "pod_name": "",
                  "container_name": ""}
        argv = [npu_smi_path, "info", "-t", "board", "-i", str(chip["npu"]),
                "-c", str(chip_index(chip))]
        rc, out, err = runner(argv)
        if rc != 0:
            errors.append(f"{' '.join(argv[1:])} failed ({_why(rc, out, err)})")
        else:
            try:
                labels.update(board_labels(npu_smi.read_board(out)))
            except npu_smi.NpuSmiParseError as exc:
                errors.append(f"{' '.join(argv[1:])} unreadable: {exc}")
        chip["labels"] = labels
        if table is not None:
            error = read_faults(chip, npu_smi_path, table, runner)
            if error:
                errors.append(error)
    network = [c for c in chips if c.get("family") in NETWORK_FAMILIES]
    if network and hccn.tool_usable(hccn_tool):
        devices = sorted({chip_id(c) for c in network})
        states = hccn.read_states(runner, hccn_tool, devices, getters=("link", "net_health"))
        by_device = {}
        for state, state_errors in states:
            by_device[state["device"]] = state
            errors.extend(state_errors)
        for chip in network:
            state = by_device.get(chip_id(chip), {})
            chip["link"] = state.get("link")
            chip["net_health"] = state.get("net_health")
            chip["network_read"] = True
    elif network:
        errors.append(hccn.missing_tool_message(hccn_tool))
    return {"ok": True, "chips": chips, "errors": errors}


# --- the values ----------------------------------------------------------------------------------


def health_code(health: Any) -> int:
    if health is None or str(health).strip() == "":
        return -1
    return 1 if health == npu_smi.HEALTH_OK else 0


def link_code(link: Any) -> int:
    if link is None:
        return -1
    return 1 if str(link).upper() == "UP" else 0


def network_code(net_health: Any) -> int:
    if net_health is None:
        return -1
    return 1 if str(net_health).lower() in NETWORK_HEALTHY else 0


def chip_values(chip: dict[str, Any]) -> dict[str, float]:
    """The metric values of one chip; a value npu-smi did not print is left out."""
    values: dict[str, float] = {"npu_chip_info_health_status": health_code(chip.get("health"))}
    for name, field in (("npu_chip_info_temperature", "temp_c"),
                        ("npu_chip_info_power", "power_w"),
                        ("npu_chip_info_utilization", "aicore_pct")):
        if chip.get(field) is not None:
            values[name] = float(chip[field])
    if chip.get("hbm_total_mb"):
        values["npu_chip_info_hbm_used_memory"] = float(chip.get("hbm_used_mb") or 0)
        values["npu_chip_info_hbm_total_memory"] = float(chip["hbm_total_mb"])
    if chip.get("memory_total_mb"):
        values["npu_chip_info_used_memory"] = float(chip.get("memory_used_mb") or 0)
        values["npu_chip_info_total_memory"] = float(chip["memory_total_mb"])
    if chip.get("network_read"):
        values["npu_chip_info_link_status"] = link_code(chip.get("link"))
        values["npu_chip_info_network_status"] = network_code(chip.get("net_health"))
    return values


# --- the text format -----------------------------------------------------------------------------

_ESCAPES = {"\\": "\\\\", "\n": "\\n", '"': '\\"'}
_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


def _label_value(value: str) -> str:
    return "".join(_ESCAPES.get(ch, ch) for ch in value)


def _labels(names: tuple[str, ...], values: dict[str, str]) -> str:
    """``{a="..",b=".."}`` in label-name order, as npu-exporter's client library prints them."""
    return "{" + ",".join(f'{n}="{_label_value(values.get(n, ""))}"'
                          for n in sorted(names)) + "}"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def render(reading: dict[str, Any]) -> str:
    """The Prometheus text format (0.0.4) of one reading: gauges, families sorted by name as
    npu-exporter prints them, no timestamps (the textfile collector refuses them)."""
    helps = dict(CHIP_METRICS)
    helps[SUCCESS_METRIC] = "1 when npu-smi answered and its output was read, else 0."
    helps["machine_npu_nums"] = "Number of NPU chips on this host."
    helps["npu_chip_info_name"] = "NPU chip name (in the label name), value 1."
    helps[ERROR_CODE_METRIC] = "the npu error code (the worst class's first code), 0 for none."
    helps[FAULT_CLASS_METRIC] = ("A chip fault code (label code) and its vendor action class "
                                 "(label class), value 1.")
    families: dict[str, list[str]] = {SUCCESS_METRIC: [
        f"{SUCCESS_METRIC} {1 if reading['ok'] else 0}"]}
    chips = reading["chips"] if reading["ok"] else []
    if reading["ok"]:
        families["machine_npu_nums"] = [f"machine_npu_nums {len(chips)}"]
    for chip in chips:
        labels = _labels(CHIP_LABELS, chip["labels"])
        for name, value in chip_values(chip).items():
            families.setdefault(name, []).append(f"{name}{labels} {_number(value)}")
        if "faults" in chip:
            first = chip["faults"][0]["code"] if chip["faults"] else "0"
            families.setdefault(ERROR_CODE_METRIC, []).append(
                f"{ERROR_CODE_METRIC}{labels} {int(first, 16)}")
            for fault in chip["faults"]:
                tagged = dict(chip["labels"], **{"class": fault["class"], "code": fault["code"]})
                families.setdefault(FAULT_CLASS_METRIC, []).append(
                    f"{FAULT_CLASS_METRIC}{_labels(FAULT_LABELS, tagged)} 1")
        named = dict(chip["labels"], name=chip["labels"]["model_name"])
        families.setdefault("npu_chip_info_name", []).append(
            f"npu_chip_info_name{_labels(NAME_LABELS, named)} 1")
    lines = ["# error: " + " ".join(str(error).split()) for error in reading["errors"]]
    for name in sorted(families):
        if not _METRIC_NAME.match(name):
            raise ValueError(f"not a metric name: {name!r}")
        lines += [f"# HELP {name} {helps[name]}", f"# TYPE {name} gauge", *families[name]]
    return "\n".join(lines) + "\n"


def write_atomic(path: str, text: str) -> None:
    """Replace ``path`` with ``text`` (mode 0644) so that a reader sees the old or the new file,
    never a part: a temporary file in the same directory, not named ``*.prom``, then a rename."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp",
                               dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# --- the command ---------------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="npu_metrics",
        description="Write NPU metrics (npu-exporter's names) for the node exporter's textfile "
                    "collector.")
    parser.add_argument("--output", default=DEFAULT_OUTPUT,
                        help="the .prom file to replace (default: %(default)s)")
    parser.add_argument("--npu-smi", default=DEFAULT_NPU_SMI, dest="npu_smi",
                        help="npu-smi (default: %(default)s)")
    parser.add_argument("--hccn-tool", default=DEFAULT_HCCN_TOOL, dest="hccn_tool",
                        help="hccn_tool (default: %(default)s)")
    parser.add_argument("--fault-codes", dest="fault_codes", default=None,
                        help="the collection's data/faults/vendor_codes.json: also read each "
                             "chip's health page and write its fault codes and classes")
    parser.add_argument("--stdout", action="store_true",
                        help="print the metrics instead of writing the file")
    args = parser.parse_args(argv)
    if not args.stdout and not args.output.endswith(".prom"):
        parser.error(f"--output must end in .prom (the textfile collector reads only those): "
                     f"{args.output}")
    return args


def main(argv: list[str] | None = None, runner: Runner = run_command) -> int:
    try:
        args = parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:
        return EXIT_OK if exc.code == 0 else EXIT_BAD_INPUT
    table = None
    if args.fault_codes:
        from . import fault_codes

        try:
            with open(args.fault_codes, encoding="utf-8") as handle:
                table = fault_codes.load_table(handle.read())
        except (OSError, fault_codes.FaultCodeError) as exc:
            sys.stderr.write(f"npu_metrics: cannot read --fault-codes {args.fault_codes}: {exc}\n")
            return EXIT_BAD_INPUT
    reading = read_node(args.npu_smi, args.hccn_tool, runner, table)
    text = render(reading)
    if args.stdout:
        sys.stdout.write(text)
    else:
        try:
            write_atomic(args.output, text)
        except OSError as exc:
            sys.stderr.write(f"npu_metrics: cannot write {args.output}: {exc}\n")
            return EXIT_BAD_INPUT
    for error in reading["errors"]:
        sys.stderr.write(f"npu_metrics: {error}\n")
    return EXIT_OK if reading["ok"] else EXIT_NO_DEVICES


if __name__ == "__main__":
    sys.exit(main())
