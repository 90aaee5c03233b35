"""The one reader of the vendor's ``npu-smi`` output: ``info`` (chip and process tables),
``info -l``, ``info -m`` and the ``info -t <page>`` key/value pages (``board``, ``health``).

Every layout here was read off real output (``tests/data/corpus/npu-smi/``, each sample with its
``.expected.json`` and a line in ``SOURCES``); the sample behind each rule is named next to it.

``npu-smi info`` prints, per chip, a name row and a chip row under two header rows (the
corpus sample a2-910b4-25.0.rc1.1-8card, third column cut here)::

    | NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-...
    | Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)...
    +===========================+===============+==========================================...
    | 0     910B4               | OK            | 87.2        33                0    / 0   ...
    | 0                         | 0000:C1:00.0  | 0           0    / 0          2654 / 32768...

The columns move with hardware and driver (A3 ``Chip  Phy-ID`` with two chips per NPU, 310/310P
``Chip    Device`` without HBM, 26.x 116 columns wide, an old internal 910A build 93 wide, a 310P3
header cut short at ``Hugepages-Usage(page|``), so nothing relies on offsets: a row is split on
``[|/\\s]+`` and its fields are named by the words of the two header rows (a ``...-Usage(...)``
word names two fields, used and total). The process table below it is split on ``|`` (its
``Process name`` cell can be empty). Every reader raises :class:`NpuSmiParseError` naming the
line number and text it could not read: unreadable output is never taken for "no chips".

Values: ``-`` and ``NA`` (the only "no value" marks the corpus shows) become None; versions are
kept as printed (``25.0.rc1.2``, ``24.1.rc3.3``, ``23.0.rc1.b070``); bus ids are upper-cased.
Results are plain dicts and lists. Standard library only; runs on managed nodes inside the
Ansible module (Python 3.8+): annotations are not evaluated.

Not covered, for want of a real sample (the corpus README lists them as not found): ``info -t
spod-info`` (the vendor docs only show ``This device does not support querying spod-info.``),
``info -l`` with ``Card Count`` (read as an alias of ``Total Count``, never seen), ``npu-smi -v``.
"""

from __future__ import annotations

import re
from typing import Any

# "-" (power of A3 chip 1: a3-25.0.rc1-16chip) and "NA" (310P power: 310p3-23.0.0-npu24; board
# Class ID: 910-23.0.5-info-t-board-doc; health Error Code: info-t-health-ok-doc).
MISSING = frozenset({"-", "NA"})
HEALTH_OK = "OK"

_SPLIT = re.compile(r"[|/\s]+")  # how the vendor's own scripts split a table row
# "| npu-smi 25.0.rc1.2               Version: 25.0.rc1.2     |" (every info sample, first lines)
_TITLE = re.compile(r"\bnpu-smi\s+(\S+)\s+Version:\s*([^\s|]+)")
# Older forms kept from the previous parser (no corpus sample): "npu-smi version: X", "npu-smi X".
_VERSION_LINE = re.compile(r"\bnpu-smi\b.*?\bversion\s*:\s*([^\s|]+)", re.IGNORECASE)
_TOOL_VERSION = re.compile(r"\bnpu-smi\s+v?(\d[^\s|]*)", re.IGNORECASE)
_NO_PROCESSES = re.compile(r"^No running processes found in NPU\s+(\d+)$")
_INT = re.compile(r"^-?\d+$")
_KEY_VALUE = re.compile(r"^\s*(\S(?:.*?\S)?)\s*:\s*(.*?)\s*$")

# 26.x widens the third column of the chip table to 70 (26x-910b4-26.0.rc1-1card-doc,
# 26x-a3-26.0.rc1-fixture-procs); up to 25.x it is 52 (A2/A3/910), 54 (310/310P), 49 (310P3 cut).
WIDE_THIRD_COLUMN = 70


class NpuSmiParseError(ValueError):
    """The text is not ``npu-smi`` output this module can read; the message says where."""


def _show(lines: list[str], index: int) -> str:
    return repr(lines[index].strip()) if 0 <= index < len(lines) else "the end of the text"


def _fail(line_no: int, what: str, line: str) -> NpuSmiParseError:
    return NpuSmiParseError(f"line {line_no}: {what}: {line.strip()!r}")


def missing(value: str | None) -> bool:
    return value is None or value.strip() in MISSING


# --- family ------------------------------------------------------------------------------------

# (name pattern, family, corpus samples). Conservative: a name no sample shows gives None.
FAMILY_RULES: list[tuple[re.Pattern[str], str, str]] = [
    # Atlas A2: 910B3 (a2-910b3-24.1.rc1-procs-java), 910B4 (a2-910b4-*), 910B2C
    # (a2-910b2c-25.0.rc1.2-procs); the 910B1..910B4 series with an optional C.
    (re.compile(r"^910B[1-4]C?$"), "910B", "a2-910b3/910b4/910b2c samples"),
    # Old training 910: 910A (910a-23.0.rc3-warning-1card), 910ProB (910prob-24.1.0-8card), and
    # a bare "910B" printed by driver 24.1.0 on a 910A host (910-24.1.0-name910B-8card: no A2
    # sample ever prints a bare 910B; its DDR Memory-Usage is populated as on 910A).
    (re.compile(r"^(?:910A|910ProB|910B)$"), "910", "910a-*, 910prob-*, 910-24.1.0-name910B"),
    # 310P3 (310p3-* samples) and 310 (310-23.0.0-1card).
    (re.compile(r"^310P\d*$"), "310P", "310p3-* samples"),
    (re.compile(r"^310$"), "310", "310-23.0.0-1card"),
]
# Atlas A3 prints "Ascend910" with a "Chip  Phy-ID" header (a3-*, 26x-a3-*): family 910C. The
# name alone is not enough: no sample shows "Ascend910" without Phy-ID, nor a "910C" name.
A3_NAME = "Ascend910"


def chip_family(name: str, has_phy_id: bool) -> str | None:
    """The chip family of an ``npu-smi info`` name: 910B (A2), 910C (A3), 910, 310P, 310 or None."""
    if name == A3_NAME:
        return "910C" if has_phy_id else None
    for pattern, family, _sample in FAMILY_RULES:
        if pattern.match(name):
            return family
    return None


# --- npu-smi info: the chip table --------------------------------------------------------------

# Header word (lower-case, "(unit)" dropped) -> the field(s) it names.
_COLUMNS: dict[str, tuple[str, ...]] = {
    "npu": ("npu",),
    "name": ("name",),
    "health": ("health",),
    "power": ("power_w",),
    "temp": ("temp_c",),
    "hugepages-usage": ("hugepages_used", "hugepages_total"),
    "chip": ("chip",),
    "phy-id": ("phy_id",),
    "device": ("device_id",),
    "bus-id": ("bus_id",),
    "aicore": ("aicore_pct",),
    "memory-usage": ("memory_used_mb", "memory_total_mb"),
    "hbm-usage": ("hbm_used_mb", "hbm_total_mb"),
}
_INT_FIELDS = frozenset({
    "npu", "chip", "phy_id", "device_id", "hugepages_used", "hugepages_total",
    "memory_used_mb", "memory_total_mb", "hbm_used_mb", "hbm_total_mb",
})
_NUMBER_FIELDS = frozenset({"power_w", "temp_c", "aicore_pct"})
_REQUIRED = frozenset({"npu", "chip"})
CHIP_FIELDS = (
    "npu", "chip", "phy_id", "device_id", "name", "family", "health", "power_w", "temp_c",
    "aicore_pct", "memory_used_mb", "memory_total_mb", "hbm_used_mb", "hbm_total_mb",
    "hugepages_used", "hugepages_total", "bus_id",
)


def _tokens(line: str) -> list[str]:
    return [t for t in _SPLIT.split(line) if t]


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _is_rule(line: str) -> bool:
    stripped = line.strip()
    return len(stripped) > 1 and stripped[0] == "+" and set(stripped) <= set("+-=")


def _header_fields(words: list[str]) -> list[str]:
    """The field of every token position of a data row under these header words."""
    fields: list[str] = []
    for word in words:
        # "(page|" of the 310P3 header cut short (310p3-23.0.rc3-short-header) has no ")".
        key = re.sub(r"\(.*$", "", word).lower()
        if key in _COLUMNS:
            fields.extend(_COLUMNS[key])
        elif key.endswith("-usage"):  # an unknown "X-Usage(unit)": used / total
            fields.extend((word + ":used", word + ":total"))
        else:
            fields.append(word)
    return fields


def _is_process_header(words: list[str]) -> bool:
    return words[:2] == ["NPU", "Chip"] and "Process" in words


def _convert(field: str, value: str, line_no: int, line: str) -> Any:
    if field in _INT_FIELDS or field in _NUMBER_FIELDS:
        if value in MISSING and field not in _REQUIRED:
            return None
        try:
            if field in _INT_FIELDS or _INT.match(value):
                return int(value)
            return float(value)
        except ValueError:
            raise _fail(line_no, f"{field} is {value!r}, not a number", line) from None
    if field == "bus_id":
        return None if value in MISSING else value.upper()
    if field in ("name", "health"):
        return value
    return None if value in MISSING else value


def _find_header(lines: list[str]) -> int:
    for index, line in enumerate(lines):
        if line.lstrip().startswith("|") and _tokens(line)[:2] == ["NPU", "Name"]:
            return index
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is None:
        raise NpuSmiParseError("no 'NPU Name | Health' header row: the text is empty")
    raise NpuSmiParseError(
        f"line {first + 1}: no 'NPU Name | Health' header row: not the output of 'npu-smi "
        f"info' (first line: {lines[first].strip()!r})")


def _wide(lines: list[str], header: int) -> bool:
    """The 26.x layout: the rule above the header has a third column of 70 (or more)."""
    if header == 0 or not _is_rule(lines[header - 1]):
        return False
    segments = lines[header - 1].strip().strip("+").split("+")
    return len(segments) >= 3 and len(segments[2]) >= WIDE_THIRD_COLUMN


def _layout(chip_fields: list[str], wide: bool, chips: list[dict[str, Any]]) -> str:
    """310p ("Chip Device"), 26x (wide), a3 ("Chip Phy-ID"), else 910 when every chip is of the
    old 910 family, else a2 (the narrow "Chip" layout 910B shares with 910A/910ProB)."""
    if "device_id" in chip_fields:
        return "310p"
    if wide:
        return "26x"
    if "phy_id" in chip_fields:
        return "a3"
    if chips and all(c["family"] == "910" for c in chips):
        return "910"
    return "a2"


def read_version(text: str) -> str | None:
    """The driver version of ``npu-smi info`` (``Version:`` of its title row), as printed."""
    for line in text.splitlines():
        match = _TITLE.search(line) or _VERSION_LINE.search(line) or _TOOL_VERSION.search(line)
        if match:
            return match.group(match.lastindex or 1)
    return None


def read_tool_version(text: str) -> str | None:
    """The ``npu-smi <version>`` of the title row (equal to the driver version in the corpus)."""
    for line in text.splitlines():
        match = _TITLE.search(line)
        if match:
            return match.group(1)
    return None


def read_chips(text: str) -> list[dict[str, Any]]:
    """The chips of ``npu-smi info``, in the order printed (see :data:`CHIP_FIELDS`).

    Each chip row takes the name, health, power, temperature and hugepages of the name row
    above it (A3 and 310P Duo print a name row per chip). A header word this reader does not
    know becomes a key of the chip's ``extra``.
    """
    return read_info(text)["chips"]  # type: ignore[no-any-return]


def read_info(text: str) -> dict[str, Any]:
    """``npu-smi info``: layout, versions, chips and processes."""
    lines = text.splitlines()
    header = _find_header(lines)
    if header + 1 >= len(lines) or _tokens(lines[header + 1])[:1] != ["Chip"]:
        raise NpuSmiParseError(
            f"line {header + 2}: expected the second header row (starting 'Chip') below the "
            f"'NPU Name' header, got {_show(lines, header + 1)}")
    name_fields = _header_fields(_tokens(lines[header]))
    chip_fields = _header_fields(_tokens(lines[header + 1]))
    for needed, fields, row in (("health", name_fields, header),
                                ("bus_id", chip_fields, header + 1)):
        if needed not in fields:
            raise _fail(row + 1, f"header row has no {needed} column", lines[row])
    has_phy = "phy_id" in chip_fields
    chips: list[dict[str, Any]] = []
    name_row: dict[str, Any] | None = None
    name_line = 0
    chip_rows = 0  # chip rows read below the current name row
    end = len(lines)
    for index in range(header + 2, len(lines)):
        line, line_no = lines[index], index + 1
        if _is_rule(line):
            if name_row is not None and not chip_rows:
                raise _fail(line_no, f"no chip row below the name row on line {name_line}",
                            line)
            name_row, chip_rows = None, 0
            continue
        if not line.strip():
            continue
        words = _tokens(line)
        if not line.lstrip().startswith("|") or _is_process_header(words):
            end = index
            break
        if name_row is not None and not chip_rows:
            if len(words) != len(chip_fields):
                raise _fail(line_no, f"chip row has {len(words)} fields, the header "
                            f"({' '.join(chip_fields)}) needs {len(chip_fields)}", line)
            values = {f: _convert(f, w, line_no, line)
                      for f, w in zip(chip_fields, words)}  # noqa: B905 - Python 3.8
            chips.append(_chip(name_row, values, has_phy))
            chip_rows += 1
            continue
        if len(words) != len(name_fields):
            raise _fail(line_no, f"cannot read this row of the chip table (a name row has "
                        f"{len(name_fields)} fields: {' '.join(name_fields)})", line)
        name_row = {f: _convert(f, w, line_no, line)
                    for f, w in zip(name_fields, words)}  # noqa: B905 - Python 3.8
        name_line, chip_rows = line_no, 0
    if name_row is not None and not chip_rows:
        raise _fail(name_line, "the table ends without a chip row below the name row on line "
                    f"{name_line}", lines[name_line - 1])
    return {
        "command": "npu-smi info",
        "layout": _layout(chip_fields, _wide(lines, header), chips),
        "driver_version": read_version("\n".join(lines[:header])),
        "tool_version": read_tool_version("\n".join(lines[:header])),
        "chips": chips,
        "processes": _read_processes(lines, end),
    }


def _chip(name_row: dict[str, Any], values: dict[str, Any], has_phy: bool) -> dict[str, Any]:
    merged = dict(name_row)
    merged.update(values)
    chip: dict[str, Any] = {field: merged.pop(field, None) for field in CHIP_FIELDS}
    chip["family"] = chip_family(str(chip["name"]), has_phy)
    chip["extra"] = {k: v for k, v in merged.items()}
    return chip


def hbm_total_mb(chips: list[dict[str, Any]]) -> int | None:
    """The HBM of one chip in MB as ``npu-smi info`` prints it (``HBM-Usage(MB)`` used / total),
    the smallest over the chips: what a profile that spreads over all of them can count on per
    chip. None where no chip prints an HBM total (310/310P print ``Memory-Usage`` only, and a
    table without chips tells nothing). Samples: a2-910b4-25.0.rc1.1-8card (32768 per 910B4),
    a2-910b3-24.1.rc1-procs-java (65536 per 910B3), a3-25.0.rc1-16chip (65536 per A3 chip).
    """
    totals = [int(c["hbm_total_mb"]) for c in chips
              if isinstance(c.get("hbm_total_mb"), int) and c["hbm_total_mb"] > 0]
    return min(totals) if totals else None


def info_facts(text: str) -> dict[str, Any]:
    """The ``ascend_npu_smi`` fact of one ``npu-smi info`` output (module ``npu_smi_facts``, and
    ``npu_faults``, which reads the same table): versions, layout, chips, HBM per chip, processes.
    Raises NpuSmiParseError naming the line."""
    info = read_info(text)
    return {
        "present": True,
        "version": info["driver_version"] or "",
        "tool_version": info["tool_version"] or "",
        "layout": info["layout"],
        "chips": info["chips"],
        "hbm_total_mb": hbm_total_mb(info["chips"]),
        "processes": info["processes"],
    }


def unhealthy(chips: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chips whose health is not ``OK`` (Warning in 910a-23.0.rc3-warning-1card)."""
    return [c for c in chips if c.get("health") != HEALTH_OK]


# --- npu-smi info: the process table -----------------------------------------------------------

# Header cell (lower-case) -> field. "(B)" in 910a-23.0.rc1.b070-warning-4card (no rows there).
_PROCESS_COLUMNS = {
    "process id": "pid",
    "process name": "name",
    "process memory(mb)": "memory_mb",
    "process memory(b)": "memory_bytes",
    "process id in container": "container_pid",  # 26x-a3-26.0.rc1-fixture-procs: "NA"
}
_PROCESS_INTS = frozenset({"pid", "memory_mb", "memory_bytes", "container_pid"})


def read_processes(text: str) -> list[dict[str, Any]]:
    """The rows of the process table below the chip table (empty when no process runs, or when
    the text has no process table: 910-24.1.0-name910B-8card was pasted without one)."""
    return _read_processes(text.splitlines(), 0)


def _read_processes(lines: list[str], start: int) -> list[dict[str, Any]]:
    header_index = next((i for i in range(start, len(lines))
                         if lines[i].lstrip().startswith("|")
                         and _is_process_header(_tokens(lines[i]))), None)
    if header_index is None:
        return []
    header = _cells(lines[header_index])
    columns = [_PROCESS_COLUMNS.get(cell.lower(), cell) for cell in header[1:]]
    processes: list[dict[str, Any]] = []
    for index in range(header_index + 1, len(lines)):
        line, line_no = lines[index], index + 1
        if _is_rule(line) or not line.strip():
            continue
        if not line.lstrip().startswith("|"):
            raise _fail(line_no, "not a row of the process table", line)
        cells = _cells(line)
        if len(cells) == 1 and _NO_PROCESSES.match(cells[0]):
            continue
        ids = cells[0].split()
        if len(cells) != len(header) or len(ids) != 2 or not all(_INT.match(i) for i in ids):
            columns_text = " | ".join(header)
            raise _fail(line_no, f"cannot read this row of the process table ({columns_text})",
                        line)
        row: dict[str, Any] = {"npu": int(ids[0]), "chip": int(ids[1])}
        for column, cell in zip(columns, cells[1:]):  # noqa: B905 - Python 3.8
            if column in _PROCESS_INTS:
                if cell in MISSING:
                    row[column] = None
                elif _INT.match(cell):
                    row[column] = int(cell)
                else:
                    raise _fail(line_no, f"{column} is {cell!r}, not a number", line)
            else:
                # An empty "Process name" (a2-910b4-24.1.rc3-procs-noname) is no name.
                row[column] = cell or None
        processes.append(row)
    return processes


# --- key : value pages: info -l, info -t board / health ----------------------------------------


def read_key_values(text: str) -> list[tuple[int, str, str | None]]:
    """(line number, key, value) of every ``key : value`` line; ``NA``/``-`` values are None.

    Leading TAB or spaces are ignored (the corpus has both: a2-910b4-info-l-8card was pasted with
    the TAB as 8 spaces). A non-blank line that is not ``key : value`` raises.
    """
    pairs: list[tuple[int, str, str | None]] = []
    for line_no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        match = _KEY_VALUE.match(line)
        if not match:
            raise _fail(line_no, "not 'key : value'", line)
        key, value = match.groups()
        pairs.append((line_no, key, None if value in MISSING else value))
    return pairs


def read_page(text: str) -> dict[str, str | None]:
    """A ``npu-smi info -t <type>`` page as printed: key -> value (None for NA)."""
    return {key: value for _line, key, value in read_key_values(text)}


def snake(key: str) -> str:
    """``PCIe Bus Info`` -> ``pcie_bus_info``, ``VDie ID`` -> ``vdie_id``."""
    return re.sub(r"[^a-z0-9]+", "_", key.lower()).strip("_")


# Keys of the board pages that are numbers (910-23.0.5-info-t-board-doc,
# 910-info-c-board-doc-redacted); every other value is kept as printed (Board ID 0x02, BOM ID 1).
_BOARD_INTS = frozenset({"NPU ID", "Chip ID", "Slot ID", "Chip Count", "Chip Position ID"})


def read_board(text: str) -> dict[str, Any]:
    """``npu-smi info -t board -i N [-c C]``: snake_case keys, the ids in _BOARD_INTS as ints."""
    page: dict[str, Any] = {}
    for line_no, key, value in read_key_values(text):
        if key in _BOARD_INTS and value is not None:
            if not _INT.match(value):
                raise NpuSmiParseError(f"line {line_no}: {key} is {value!r}, not a number")
            page[snake(key)] = int(value)
        else:
            page[snake(key)] = value
    if "npu_id" not in page:
        raise NpuSmiParseError("no 'NPU ID': not the output of 'npu-smi info -t board'")
    page["npu"] = page.pop("npu_id")
    if "chip_id" in page:
        page["chip"] = page.pop("chip_id")
    return page


def read_health(text: str) -> dict[str, Any]:
    """``npu-smi info -t health -i N [-c C]`` (info-t-health-ok-doc): Health Status, Error Code,
    Error Information; NA becomes None."""
    page = {snake(key): value for _line, key, value in read_key_values(text)}
    if "health_status" not in page:
        raise NpuSmiParseError("no 'Health Status': not the output of 'npu-smi info -t health'")
    return page


def read_list(text: str) -> dict[str, Any]:
    """``npu-smi info -l`` (a2-910b4-info-l-8card): ``Total Count``, then per NPU a block starting
    ``NPU ID``. ``Card Count`` is read like ``Total Count`` (reported for 310/310P drivers but no
    sample of it was found)."""
    total: int | None = None
    card: int | None = None
    npus: list[dict[str, Any]] = []
    for line_no, key, value in read_key_values(text):
        if key in ("Total Count", "Card Count"):
            count = _list_int(key, value, line_no)
            if key == "Total Count":
                total = count
            else:
                card = count
        elif key == "NPU ID":
            npus.append({"npu": _list_int(key, value, line_no), "chip_count": None,
                         "fields": {key: value}})
        elif not npus:
            raise NpuSmiParseError(f"line {line_no}: {key!r} before the first 'NPU ID'")
        else:
            npus[-1]["fields"][key] = value
            if key == "Chip Count":
                npus[-1]["chip_count"] = _list_int(key, value, line_no)
    announced = total if total is not None else card
    if announced is None:
        raise NpuSmiParseError("no 'Total Count': not the output of 'npu-smi info -l'")
    if announced != len(npus):
        name = "Total Count" if total is not None else "Card Count"
        raise NpuSmiParseError(f"{name} is {announced} but {len(npus)} NPU ID block(s) follow")
    return {"command": "npu-smi info -l", "total_count": total, "card_count": card,
            "npus": npus}


def _list_int(key: str, value: str | None, line_no: int) -> int:
    if value is None or not _INT.match(value):
        raise NpuSmiParseError(f"line {line_no}: {key} is {value!r}, not a number")
    return int(value)


# --- npu-smi info -m ---------------------------------------------------------------------------

_MAPPING_HEADER = ["NPU ID", "Chip ID", "Chip Logic ID", "Chip Name"]
_MAPPING_HEADER_PHY = ["NPU ID", "Chip ID", "Chip Logic ID", "Chip Phy-ID", "Chip Name"]


def read_mapping(text: str) -> dict[str, Any]:
    """``npu-smi info -m`` (910a-info-m-8card, a2-910b4-info-m-8card): columns 31 wide after a
    TAB, ``Chip Name`` last and possibly two words (``Ascend 910B4``); the A2 ``Mcu`` row has
    Chip Logic ID ``-`` (None). A ``Chip Phy-ID`` column is read when the header has it (no
    sample has it: ``chip_phy_id`` is None otherwise)."""
    lines = text.splitlines()
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is None:
        raise NpuSmiParseError("no 'NPU ID  Chip ID  Chip Logic ID  Chip Name' header: the text "
                               "is empty")
    header = re.split(r"\s{2,}", lines[first].strip())
    if header not in (_MAPPING_HEADER, _MAPPING_HEADER_PHY):
        expected = "  ".join(_MAPPING_HEADER)
        raise _fail(first + 1, f"not the 'npu-smi info -m' header ({expected})", lines[first])
    numbers = len(header) - 1
    rows: list[dict[str, Any]] = []
    for index in range(first + 1, len(lines)):
        line, line_no = lines[index], index + 1
        if not line.strip():
            continue
        words = line.split()
        if len(words) <= numbers or not all(_INT.match(w) or w == "-" for w in words[:numbers]):
            raise _fail(line_no, "cannot read this row of 'npu-smi info -m'", line)
        ids = [None if w in MISSING else int(w) for w in words[:numbers]]
        row = {"npu": ids[0], "chip": ids[1], "chip_logic_id": ids[2],
               "chip_phy_id": ids[3] if numbers == 4 else None,
               "chip_name": " ".join(words[numbers:])}
        if row["npu"] is None or row["chip"] is None:
            raise _fail(line_no, "NPU ID and Chip ID must be numbers", line)
        rows.append(row)
    return {"command": "npu-smi info -m", "rows": rows}
