"""``npu-smi``: the vendor's device query tool, answering from the node description.

It prints only layouts a real sample shows (``tests/data/corpus/npu-smi/``, see its README; the
fidelity test ``tests/unit/test_corpus_npu_smi.py`` compares their structure):

- ``info`` up to 25.x, 98 columns: A2 (``Chip``; a2-910b4-25.0.rc1.1-8card, also 910A/910ProB)
  and A3 (``Chip  Phy-ID``, two chips per NPU, ``-`` for the power of chip 1;
  a3-25.0.rc1-16chip);
- ``info`` from 26.x, 116 columns, process table with ``Process id in container``
  (26x-910b4-26.0.rc1-1card-doc, 26x-a3-26.0.rc1-fixture-procs);
- ``info`` of 310P, 106 columns (``Chip    Device``, no HBM, power ``NA``;
  310p3-duo-24.1.0.1-8chip), whatever the driver (no 26.x 310P sample exists);
- process rows (a2-910b2c-25.0.rc1.2-procs, 26x-a3-26.0.rc1-fixture-procs) from the node's
  ``npu_processes`` knob: ``[{"npu", "chip", "pid", "name", "memory_mb"}]`` (``name`` ``""``
  prints an empty cell as in a2-910b4-24.1.rc3-procs-noname). No 310P sample shows process rows,
  so a 310P node prints none;
- ``info -l`` (a2-910b4-info-l-8card), ``info -m`` (a2-910b4-info-m-8card), the ``board`` page
  (910-23.0.5-info-t-board-doc, 910-info-c-board-doc-redacted) and ``health``
  (info-t-health-ok-doc). ``usages``, ``power``, ``temp`` and ``ecc`` pages have no sample yet.

The version in the title row is the installed driver's ``Version=`` as written (so a hot-patch
``25.0.rc1.2`` prints as such).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from . import hw


@dataclass(frozen=True)
class Frame:
    """Column widths of one ``npu-smi info`` layout, as the corpus sample shows them."""

    columns: tuple[int, int, int]  # widths between the "+" of the rules
    title_pad: int  # "npu-smi <version padded to this>Version: <version>"
    header1: tuple[str, str, str]
    header2: dict[str, tuple[str, str, str]]
    id_width: int  # "0     910B4": NPU id padded to this in the first column
    chip_id_width: int  # "0     1" (A3 chip, Phy-ID) / "0       0" (310P chip, Device)
    power_width: int
    temp_width: int
    hugepages_used_width: int
    memory_width: int  # Memory-Usage cell, before HBM-Usage
    usage_used_width: int  # "2654 / 32768": used padded to this
    process_header: tuple[str, ...]
    process_widths: tuple[int, ...]

    @property
    def width(self) -> int:
        return sum(self.columns) + 4


NARROW = Frame(  # a2-910b4-25.0.rc1.1-8card, a3-25.0.rc1-16chip, a2-910b2c-25.0.rc1.2-procs
    columns=(27, 15, 52),
    title_pad=25,
    header1=("NPU   Name", "Health", "Power(W)    Temp(C)           Hugepages-Usage(page)"),
    header2={
        "a2": ("Chip", "Bus-Id", "AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)"),
        "a3": ("Chip  Phy-ID", "Bus-Id", "AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)"),
    },
    id_width=6, chip_id_width=6, power_width=12, temp_width=18, hugepages_used_width=5,
    memory_width=18, usage_used_width=5,
    process_header=("NPU     Chip", "Process id", "Process name", "Process memory(MB)"),
    process_widths=(26, 14, 25, 24),
)
WIDE = Frame(  # 26x-910b4-26.0.rc1-1card-doc, 26x-a3-26.0.rc1-fixture-procs
    columns=(27, 15, 70),
    title_pad=36,
    header1=("NPU   Name", "Health",
             "Power(W)             Temp(C)                 Hugepages-Usage(page)"),
    header2={
        "a2": ("Chip", "Bus-Id", "AICore(%)            Memory-Usage(MB)        HBM-Usage(MB)"),
        "a3": ("Chip  Phy-ID", "Bus-Id",
               "AICore(%)            Memory-Usage(MB)        HBM-Usage(MB)"),
    },
    id_width=6, chip_id_width=6, power_width=21, temp_width=24, hugepages_used_width=5,
    memory_width=24, usage_used_width=5,
    process_header=("NPU     Chip", "Process id", "Process name", "Process memory(MB)",
                    "Process id in container"),
    process_widths=(26, 14, 19, 22, 24),
)
FRAME_310P = Frame(  # 310p3-duo-24.1.0.1-8chip, 310p3-23.0.0-npu24, 310-23.0.0-1card
    columns=(31, 17, 54),
    title_pad=41,
    header1=("NPU     Name", "Health", "Power(W)     Temp(C)           Hugepages-Usage(page)"),
    header2={"310p": ("Chip    Device", "Bus-Id", "AICore(%)    Memory-Usage(MB)")},
    id_width=8, chip_id_width=8, power_width=13, temp_width=18, hugepages_used_width=6,
    memory_width=0, usage_used_width=5,
    process_header=("NPU     Chip", "Process id", "Process name", "Process memory(MB)"),
    process_widths=(30, 16, 25, 26),
)
# The driver release from which npu-smi prints the wide table (both 26.x samples are wide).
WIDE_FROM_MAJOR = 26


def _rule(frame: Frame, fill: str) -> str:
    return "+" + "+".join(fill * w for w in frame.columns) + "+"


def _full_rule(frame: Frame) -> str:
    return "+" + "-" * (frame.width - 2) + "+"


def _row(frame: Frame, *cells: str) -> str:
    return "".join(f"| {cell:<{w - 1}}" for cell, w in zip(cells, frame.columns, strict=True)) + "|"


def _full_row(frame: Frame, text: str) -> str:
    return f"| {text:<{frame.width - 3}}|"


def _process_row(frame: Frame, *cells: str) -> str:
    return "".join(f"| {cell:<{w}}" for cell, w in zip(cells, frame.process_widths,
                                                        strict=True)) + "|"


def _usage(used: Any, total: Any, width: int) -> str:
    return f"{used!s:<{width}}/ {total}"


def _power(chip: dict[str, Any], layout: str) -> str:
    value = chip.get("power_w")
    if value is None:
        # A3 prints "-" for chip 1 (a3-25.0.rc1-16chip); 310P prints "NA" for every chip
        # (310p3-duo-24.1.0.1-8chip).
        return "-" if layout == "a3" and chip.get("chip", 0) else "NA"
    return f"{float(value):.1f}"


def _major(version: str) -> int | None:
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() else None


def frame_of(layout: str, version: str) -> Frame:
    if layout == "310p":
        return FRAME_310P
    major = _major(version)
    return WIDE if major is not None and major >= WIDE_FROM_MAJOR else NARROW


def render_info(node: dict[str, Any], version: str) -> str:
    layout = hw.chip_layout(node)
    frame = frame_of(layout, version)
    rule, double = _rule(frame, "-"), _rule(frame, "=")
    lines = [
        _full_rule(frame),
        _full_row(frame, f"npu-smi {version:<{frame.title_pad}}Version: {version}"),
        rule,
        _row(frame, *frame.header1),
        _row(frame, *frame.header2[layout]),
        double,
    ]
    for npu in hw.npus(node):
        for index, chip in enumerate(hw.chips_of(node, npu)):
            if index:
                # Between the chips of one NPU: a full-width rule on A3, a ruled one on 310P.
                lines.append(rule if layout == "310p" else _full_rule(frame))
            third = (f"{_power(chip, layout):<{frame.power_width}}"
                     f"{chip['temp_c']!s:<{frame.temp_width}}"
                     + _usage(chip["hugepages_used"], chip["hugepages_total"],
                              frame.hugepages_used_width))
            lines.append(_row(frame, f"{npu:<{frame.id_width}}{chip['name']}", chip["health"],
                              third))
            memory = _usage(chip["mem_used_mb"], chip["mem_total_mb"], frame.usage_used_width)
            if layout == "a2":
                first = f"{chip['chip']}"
            elif layout == "a3":
                first = f"{chip['chip']:<{frame.chip_id_width}}{chip['phy_id']}"
            else:  # 310P: Device is the running number of the chip (310p3-duo-24.1.0.1-8chip)
                first = f"{chip['chip']:<{frame.chip_id_width}}{chip['phy_id']}"
            if layout == "310p":
                usage = f"{chip['aicore_pct']!s:<{frame.power_width}}{memory}"
            else:
                hbm = _usage(chip["hbm_used_mb"], chip["hbm_total_mb"], frame.usage_used_width)
                usage = (f"{chip['aicore_pct']!s:<{frame.power_width}}"
                         f"{memory:<{frame.memory_width}}{hbm}")
            lines.append(_row(frame, first, chip["bus_id"], usage))
        lines.append(double)
    lines += [rule, _process_row(frame, *frame.process_header), double]
    processes = [] if layout == "310p" else list(node.get("npu_processes") or [])
    for npu in hw.npus(node):
        rows = [p for p in processes if int(p["npu"]) == npu]
        if not rows:
            lines.append(_full_row(frame, f"No running processes found in NPU {npu}"))
        for proc in rows:
            cells = [f"{npu:<8}{proc.get('chip', 0)}", str(proc["pid"]),
                     str(proc.get("name") or ""), str(proc.get("memory_mb", 0))]
            if frame is WIDE:
                # "NA" outside a container (26x-a3-26.0.rc1-fixture-procs, the only sample).
                cells.append("NA")
            lines.append(_process_row(frame, *cells))
        lines.append(double)
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
    """``info -m``: columns 31 wide after a TAB; ``Chip Name`` and ``Mcu`` padded to 30, the
    ``Ascend <name>`` rows not (a2-910b4-info-m-8card). The old 910 prints no Mcu row
    (910a-info-m-8card)."""
    out = "\t" + "".join(
        f"{h:<31}" for h in ("NPU ID", "Chip ID", "Chip Logic ID")
    ) + f"{'Chip Name':<30}\n"
    logic = 0
    mcu = str(node.get("chip_type", "")) != "910"
    for npu in hw.npus(node):
        chips = hw.chips_of(node, npu)
        for chip in chips:
            out += f"\t{npu:<31}{chip['chip']:<31}{logic:<31}Ascend {chip['name']}\n"
            logic += 1
        if mcu:
            out += f"\t{npu:<31}{len(chips):<31}{'-':<31}{'Mcu':<30}\n"
    return out


def compatibility(chip: dict[str, Any], driver: str | None) -> str:
    """Firmware and driver belong to one HDK release, or the board says NOK."""
    if not driver or not chip.get("firmware_hdk"):
        return "NOK"
    return "OK" if chip["firmware_hdk"] == driver else "NOK"


# PCI device ids (the board page prints 0xD801 for a 910: 910-23.0.5-info-t-board-doc).
PCI_DEVICE = {"910": "0xD801", "910B": "0xD802", "910C": "0xD803", "310P": "0xD500"}


def _pci_device(node: dict[str, Any]) -> str:
    chip_type = str(node.get("chip_type", ""))
    for prefix in ("910B", "910C", "310P", "910"):
        if chip_type.startswith(prefix):
            return PCI_DEVICE[prefix]
    return "NA"


def _die_id(node: dict[str, Any], npu: int, chip: int, salt: int) -> str:
    seed = (int(str(node.get("serial_prefix", "102408"))) * 131 + npu * 17 + chip * 7 + salt)
    return " ".join(f"{(seed * (k + 3) * 2654435761) & 0xFFFFFFFF:08X}" for k in range(5))


def render_board(node: dict[str, Any], npu: int, chip_id: int | None) -> str:
    """The board page of an NPU, or of one chip with ``-c``: the keys, their order and the value
    forms of 910-23.0.5-info-t-board-doc and 910-info-c-board-doc-redacted."""
    chips = hw.chips_of(node, npu)
    first = chips[0]
    driver = hw.driver_version() or "NA"
    if chip_id is None:
        return _kv(
            [
                ("NPU ID", npu),
                ("Software Version", driver),
                ("Firmware Version", first.get("firmware_version") or "NA"),
                ("Compatibility", compatibility(first, hw.driver_version())),
                ("Board ID", "0x02"),
                ("PCB ID", "A"),
                ("BOM ID", "1"),
                ("PCIe Bus Info", first["bus_id"]),
                ("Slot ID", npu),
                ("Class ID", "NA"),
                ("PCI Vendor ID", "0x19e5"),
                ("PCI Device ID", _pci_device(node)),
                ("Subsystem Vendor ID", "0x0200"),
                ("Subsystem Device ID", "0x0100"),
                ("Chip Count", len(chips)),
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
            ("Board ID", "0x02"),
            ("PCB ID", "NA"),
            ("BOM ID", "1"),
            ("VDie ID", _die_id(node, npu, chip_id, 1)),
            ("NDie ID", _die_id(node, npu, chip_id, 2)),
            ("Chip Position ID", chip_id),
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
        codes = [c for chip in selected for c in chip.get("error_codes") or []]
        if codes:
            # Several codes separated by one blank, no 0x (the MindCluster fixture in
            # tests/data/corpus/faults/npu-smi-t-health-alarm-3codes-mindcluster-fixture.txt).
            code = " ".join(dict.fromkeys(codes))
            info = next((c.get("error_information") for c in selected
                         if c.get("error_information")), "NA")
        else:
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
        "power": [("Power Dissipation(W)", _power(chip, hw.chip_layout(node)))],
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
