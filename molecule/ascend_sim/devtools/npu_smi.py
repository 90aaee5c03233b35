"""``npu-smi``: the vendor's device query tool, answering from the node description.

Output layouts follow the vendor's formats (see the project's Ascend reference): the ``info``
table in its A2 (910B), A3 (``Chip  Phy-ID``, two chips per NPU, ``-`` for power on chip 1) and
310P (``Chip  Device``, no HBM column) variants, ``info -l``, ``info -m`` and the
``info -t <type> -i <npu> [-c <chip>]`` key/value pages.
"""

from __future__ import annotations

import sys
from typing import Any

from . import hw

WIDTH = 98
RULE = "+" + "-" * 27 + "+" + "-" * 15 + "+" + "-" * 52 + "+"
DOUBLE_RULE = "+" + "=" * 27 + "+" + "=" * 15 + "+" + "=" * 52 + "+"
FULL_RULE = "+" + "-" * (WIDTH - 2) + "+"


def _row(col1: str, col2: str, col3: str) -> str:
    return f"| {col1:<26}| {col2:<14}| {col3:<51}|"


def _full_row(text: str) -> str:
    return f"| {text:<{WIDTH - 3}}|"


def _power(chip: dict[str, Any]) -> str:
    value = chip.get("power_w")
    if value is None:
        return "-" if chip.get("chip", 0) else "NA"
    return f"{float(value):.1f}"


def render_info(node: dict[str, Any], version: str) -> str:
    layout = hw.chip_layout(node)
    second_header = {
        "a2": ("Chip", "Bus-Id", "AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)"),
        "a3": ("Chip  Phy-ID", "Bus-Id", "AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)"),
        "310p": ("Chip  Device", "Bus-Id", "AICore(%)   Memory-Usage(MB)"),
    }[layout]
    lines = [
        FULL_RULE,
        _full_row(f"npu-smi {version:<25}Version: {version}"),
        RULE,
        _row("NPU   Name", "Health", "Power(W)    Temp(C)           Hugepages-Usage(page)"),
        _row(*second_header),
        DOUBLE_RULE,
    ]
    for npu in hw.npus(node):
        chips = hw.chips_of(node, npu)
        for index, chip in enumerate(chips):
            if index:
                lines.append(FULL_RULE)
            hugepages = f"{chip['hugepages_used']:<5}/ {chip['hugepages_total']}"
            lines.append(
                _row(
                    f"{npu:<6}{chip['name']}",
                    chip["health"],
                    f"{_power(chip):<12}{chip['temp_c']:<18}{hugepages}",
                )
            )
            memory = f"{chip['mem_used_mb']:<5}/ {chip['mem_total_mb']}"
            if layout == "a2":
                first = f"{chip['chip']}"
            else:
                first = f"{chip['chip']:<6}{chip['phy_id'] if layout == 'a3' else chip['chip']}"
            if layout == "310p":
                usage = f"{chip['aicore_pct']:<12}{memory}"
            else:
                hbm = f"{chip['hbm_used_mb']:<5}/ {chip['hbm_total_mb']}"
                usage = f"{chip['aicore_pct']:<12}{memory:<18}{hbm}"
            lines.append(_row(first, chip["bus_id"], usage))
        lines.append(DOUBLE_RULE)
    lines += [
        RULE,
        _row("NPU     Chip", "Process id", "Process name             | Process memory(MB)"),
        DOUBLE_RULE,
    ]
    for npu in hw.npus(node):
        lines.append(_full_row(f"No running processes found in NPU {npu}"))
        lines.append(DOUBLE_RULE)
    return "\n".join(lines) + "\n"


def _kv(pairs: list[tuple[str, Any]]) -> str:
    return "".join(f"\t{key:<31}: {value}\n" for key, value in pairs)


def render_list(node: dict[str, Any]) -> str:
    ids = hw.npus(node)
    out = _kv([("Total Count", len(ids))])
    for npu in ids:
        out += "\n" + _kv([("NPU ID", npu), ("Chip Count", len(hw.chips_of(node, npu)))])
    return out


def render_mapping(node: dict[str, Any]) -> str:
    out = "\t" + "".join(
        f"{h:<31}" for h in ("NPU ID", "Chip ID", "Chip Logic ID")
    ) + "Chip Name\n"
    logic = 0
    for npu in hw.npus(node):
        chips = hw.chips_of(node, npu)
        for chip in chips:
            out += f"\t{npu:<31}{chip['chip']:<31}{logic:<31}Ascend {chip['name']}\n"
            logic += 1
        out += f"\t{npu:<31}{len(chips):<31}{'-':<31}Mcu\n"
    return out


def compatibility(chip: dict[str, Any], driver: str | None) -> str:
    """Firmware and driver belong to one HDK release, or the board says NOK."""
    if not driver or not chip.get("firmware_hdk"):
        return "NOK"
    return "OK" if chip["firmware_hdk"] == driver else "NOK"


def render_board(node: dict[str, Any], npu: int, chip_id: int | None) -> str:
    chips = hw.chips_of(node, npu)
    first = chips[0]
    driver = hw.driver_version() or "NA"
    if chip_id is None:
        faulty = sum(1 for c in chips if c["health"] != "OK")
        return _kv(
            [
                ("NPU ID", npu),
                ("Product Name", "IT21PDDA01"),
                ("Model", "NA"),
                ("Manufacturer", "Huawei"),
                ("Serial Number", f"{node.get('serial_prefix', '102408')}{npu:06d}"),
                ("Software Version", driver),
                ("Firmware Version", first.get("firmware_version") or "NA"),
                ("Compatibility", compatibility(first, hw.driver_version())),
                ("Board Type", "0x0"),
                ("BOM Version", "NA"),
                ("PCB Version", "A"),
                ("Board ID", "0x0"),
                ("PCIe Slot", f"0x{npu:x}"),
                ("Chip Count", len(chips)),
                ("Faulty Chip Count", faulty),
            ]
        )
    chip = chips[chip_id]
    return _kv(
        [
            ("NPU ID", npu),
            ("Chip ID", chip_id),
            ("Chip Type", "Ascend"),
            ("Chip Name", chip["name"]),
            ("Chip Version", "V1"),
            ("Board ID", "0x0"),
            ("PCIe Bus Info", chip["bus_id"]),
            ("Firmware Version", chip.get("firmware_version") or "NA"),
        ]
    )


def render_type(node: dict[str, Any], kind: str, npu: int, chip_id: int | None) -> str:
    chips = hw.chips_of(node, npu)
    selected = chips if chip_id is None else [chips[chip_id]]
    if kind == "board":
        return render_board(node, npu, chip_id)
    if kind == "health":
        worst = "OK"
        order = ["OK", "Warning", "Alarm", "Critical", "UNKNOWN"]
        for chip in selected:
            if order.index(chip["health"]) > order.index(worst):
                worst = chip["health"]
        code = "NA" if worst == "OK" else "0x80E18402"
        info = "NA" if worst == "OK" else "node heartbeat lost (simulated fault)"
        return _kv(
            [("Health Status", worst), ("Error Code", code), ("Error Information", info)]
        )
    chip = selected[0]
    pages: dict[str, list[tuple[str, Any]]] = {
        "usages": [
            ("Memory Capacity(MB)", chip["mem_total_mb"]),
            ("Memory Usage Rate(%)", 0),
            ("HBM Capacity(MB)", chip["hbm_total_mb"]),
            (
                "HBM Usage Rate(%)",
                (chip["hbm_used_mb"] * 100 // chip["hbm_total_mb"]) if chip["hbm_total_mb"] else 0,
            ),
            ("Aicore Usage Rate(%)", chip["aicore_pct"]),
            ("Aicpu Usage Rate(%)", 0),
            ("Ctrlcpu Usage Rate(%)", 1),
        ],
        "power": [("Power Dissipation(W)", _power(chip))],
        "temp": [("Chip Temperature(C)", chip["temp_c"])],
        "ecc": [
            ("NPU ID", npu),
            ("Chip ID", chip["chip"]),
            ("DDR Single Bit Error Count", 0),
            ("DDR Double Bit Error Count", 0),
            ("HBM Single Bit Error Count", 0),
            ("HBM Double Bit Error Count", 0),
        ],
    }
    if kind not in pages:
        raise KeyError(kind)
    return _kv(pages[kind])


USAGE = """\
Usage: npu-smi info [-l | -m | -t <type> -i <npu_id> [-c <chip_id>]]
       type: board, health, usages, power, temp, ecc
"""


def _option(args: list[str], flag: str) -> str | None:
    if flag in args:
        pos = args.index(flag)
        if pos + 1 < len(args):
            return args[pos + 1]
        raise ValueError(f"option {flag} needs a value")
    return None


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] != "info":
        sys.stderr.write(USAGE)
        return 1
    version = hw.driver_version()
    if version is None:
        sys.stderr.write("dcmi module initialize failed. ret is -8005\n")
        return 1
    node = hw.load_node()
    rest = args[1:]
    try:
        if not rest:
            sys.stdout.write(render_info(node, version))
        elif rest == ["-l"]:
            sys.stdout.write(render_list(node))
        elif rest == ["-m"]:
            sys.stdout.write(render_mapping(node))
        else:
            kind = _option(rest, "-t")
            npu_text = _option(rest, "-i")
            chip_text = _option(rest, "-c")
            if kind is None or npu_text is None:
                raise ValueError("need -t <type> and -i <npu_id>")
            npu = int(npu_text)
            if npu not in hw.npus(node):
                sys.stderr.write(f"Usage: the npu_id {npu} is invalid.\n")
                return 255
            chip_id = int(chip_text) if chip_text is not None else None
            if chip_id is not None and not 0 <= chip_id < len(hw.chips_of(node, npu)):
                sys.stderr.write(f"Usage: the chip_id {chip_id} is invalid.\n")
                return 255
            sys.stdout.write(render_type(node, kind, npu, chip_id))
    except (KeyError, ValueError) as exc:
        sys.stderr.write(f"{exc}\n{USAGE}")
        return 1
    return 0
