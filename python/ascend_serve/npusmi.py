"""Read the output of the vendor's ``npu-smi`` tool: ``info`` (the chip table), ``info -l``.

``npu-smi info`` prints, per chip, a pair of rows under two header rows (columns narrowed)::

    | NPU   Name      | Health       | Power(W)  Temp(C)          Hugepages-Usage(page) |
    | Chip            | Bus-Id       | AICore(%) Memory-Usage(MB) HBM-Usage(MB)         |
    +=================+==============+==================================================+
    | 0     910B1     | OK           | 271.1     41               0    / 0              |
    | 0               | 0000:C1:00.0 | 55        0    / 0         65099/ 65536          |

The layout changes with the hardware and the driver: A3 (910C) says ``Chip  Phy-ID`` in the
second header and prints two chips per NPU (``-`` for the power of chip 1); 310P says
``Chip  Device`` and has no HBM column; newer drivers (26.x) widen the columns. So nothing here
relies on column offsets: like the vendor's own scripts, a row is split on ``[|/\\s]+`` and the
fields are named by the words of the two header rows (a ``…-Usage(…)`` word stands for two
fields, used and total). Below the chip table ``npu-smi`` prints a process table
(``| NPU  Chip | Process id | Process name | Process memory(MB) |``), read by
:func:`parse_processes`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass

from pydantic import BaseModel, Field, ValidationError

HEALTH_OK = "OK"
# The values npu-smi prints for a missing number: "NA", and "-" for the power of A3 chip 1.
_MISSING = frozenset({"-", "NA", "N/A", "--"})
_SPLIT = re.compile(r"[|/\s]+")  # how the vendor's scripts split a table row
_BUS_ID = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")
_VERSION = re.compile(r"\bnpu-smi\b.*?\bversion\s*:\s*(\S+)", re.IGNORECASE)
_TOOL_VERSION = re.compile(r"\bnpu-smi\s+v?(\d\S*)", re.IGNORECASE)
_NO_PROCESSES = re.compile(r"^No running processes found in NPU\s+(\d+)$", re.IGNORECASE)


class NpuSmiParseError(ValueError):
    """The text is not ``npu-smi`` output this module can read; the message says where."""


class Chip(BaseModel):
    """One chip (die) of ``npu-smi info``; ``None`` where the table has no value or no column."""

    npu: int = Field(description="NPU (card) id, the first column of the name row")
    chip: int = Field(description="chip id within the NPU")
    phy_id: int | None = Field(default=None, description="A3: the chip's physical id, 0-15")
    device_id: int | None = Field(default=None, description="310P: the device id column")
    name: str = Field(description="chip name as printed: 910B1, Ascend910, 310P3")
    health: str = Field(description="OK, Warning, Alarm, Critical or UNKNOWN")
    power_w: float | None = None
    temp_c: float | None = None
    aicore_pct: float | None = None
    hbm_used_mb: int | None = None
    hbm_total_mb: int | None = None
    memory_used_mb: int | None = None
    memory_total_mb: int | None = None
    hugepages_used: int | None = None
    hugepages_total: int | None = None
    bus_id: str = Field(description="PCI address, upper-case: 0000:C1:00.0")
    extra: dict[str, str] = Field(
        default_factory=dict, description="columns of header words this module does not know"
    )

    @property
    def ok(self) -> bool:
        return self.health == HEALTH_OK


class NpuProcess(BaseModel):
    """One row of the process table below the chip table."""

    npu: int
    chip: int
    pid: int
    name: str
    memory_mb: int | None = None
    container_pid: int | None = None


class NpuListEntry(BaseModel):
    """One NPU of ``npu-smi info -l``."""

    npu: int
    chip_count: int | None = None
    fields: dict[str, str] = Field(default_factory=dict, description="every key of the block")


class NpuList(BaseModel):
    """``npu-smi info -l``: how many NPUs, and per NPU its chip count."""

    total_count: int
    npus: list[NpuListEntry]


# --- the chip table ----------------------------------------------------------------------------

# Header word (lower-case, unit in brackets dropped) -> the field(s) it names.
_KNOWN_COLUMNS: dict[str, tuple[str, ...]] = {
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
_FLOAT_FIELDS = frozenset({"power_w", "temp_c", "aicore_pct"})
_REQUIRED_FIELDS = frozenset({"npu", "chip"})


def _tokens(line: str) -> list[str]:
    return [t for t in _SPLIT.split(line) if t]


def _header_fields(words: list[str]) -> list[str]:
    """The field name of every token position of a data row under these header words."""
    fields: list[str] = []
    for word in words:
        key = re.sub(r"\(.*\)$", "", word).lower()
        if key in _KNOWN_COLUMNS:
            fields.extend(_KNOWN_COLUMNS[key])
        elif key.endswith("-usage"):  # an unknown "X-Usage(unit)": used / total
            fields.extend((f"{word}:used", f"{word}:total"))
        else:
            fields.append(word)
    return fields


@dataclass
class _Layout:
    """What the two header rows say: the field of each token of a name row and a chip row."""

    name_fields: list[str]
    chip_fields: list[str]
    header_line: int  # index of the second header row

    @property
    def bus_index(self) -> int:
        return self.chip_fields.index("bus_id")


def _find_layout(lines: list[str]) -> _Layout:
    for index, line in enumerate(lines):
        words = _tokens(line)
        if not line.lstrip().startswith("|") or words[:2] != ["NPU", "Name"]:
            continue
        if index + 1 >= len(lines) or _tokens(lines[index + 1])[:1] != ["Chip"]:
            raise NpuSmiParseError(
                f"line {index + 2}: expected the second header row (starting 'Chip') "
                f"below the 'NPU Name' header, got {_show(lines, index + 1)}"
            )
        name_fields = _header_fields(words)
        chip_fields = _header_fields(_tokens(lines[index + 1]))
        for needed, fields, row in (("health", name_fields, index), ("bus_id", chip_fields,
                                                                     index + 1)):
            if needed not in fields:
                raise NpuSmiParseError(
                    f"line {row + 1}: header row has no {needed} column: {lines[row].strip()!r}"
                )
        return _Layout(name_fields, chip_fields, index + 1)
    raise NpuSmiParseError(
        "no 'NPU Name | Health' header row: not the output of 'npu-smi info'"
        + (f" (first line: {lines[0].strip()!r})" if lines and lines[0].strip() else "")
    )


def _show(lines: list[str], index: int) -> str:
    return repr(lines[index].strip()) if index < len(lines) else "the end of the text"


def _is_rule(line: str) -> bool:
    stripped = line.strip()
    return len(stripped) > 1 and stripped[0] == "+" and set(stripped) <= set("+-=")


def _is_process_header(words: list[str]) -> bool:
    return words[:2] == ["NPU", "Chip"] and "Process" in words


def _convert(field: str, value: str, line_no: int, line: str) -> int | float | str | None:
    if field in _INT_FIELDS or field in _FLOAT_FIELDS:
        if value in _MISSING and field not in _REQUIRED_FIELDS:
            return None
        try:
            return int(value) if field in _INT_FIELDS else float(value)
        except ValueError:
            raise NpuSmiParseError(
                f"line {line_no}: {field} is {value!r}, not a number: {line.strip()!r}"
            ) from None
    if field == "bus_id":
        return value.upper()
    return value


def _row_values(fields: list[str], words: list[str], line_no: int,
                line: str) -> dict[str, int | float | str | None]:
    return {f: _convert(f, w, line_no, line) for f, w in zip(fields, words, strict=True)}


def _chip(values: dict[str, int | float | str | None], line_no: int, line: str) -> Chip:
    known = {k: v for k, v in values.items() if k in Chip.model_fields}
    extra = {k: str(v) for k, v in values.items() if k not in Chip.model_fields}
    try:
        return Chip.model_validate({**known, "extra": extra})
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise NpuSmiParseError(f"line {line_no}: cannot read this chip ({problems}): "
                               f"{line.strip()!r}") from None


def parse_info(text: str) -> list[Chip]:
    """The chips of ``npu-smi info`` output, in the order printed.

    Each chip row takes the name, health, power, temperature and hugepages of the name row
    above it (npu-smi prints one name row per chip; the A3 name row of chip 1 repeats the NPU's
    name). Raises :class:`NpuSmiParseError` naming the line it could not read.
    """
    lines = text.splitlines()
    layout = _find_layout(lines)
    chips: list[Chip] = []
    name_row: dict[str, int | float | str | None] | None = None
    name_line = 0
    chips_of_row = 0  # chip rows read below the current name row
    for index in range(layout.header_line + 1, len(lines)):
        line, line_no = lines[index], index + 1
        if _is_rule(line):
            if name_row is not None and not chips_of_row:
                raise NpuSmiParseError(f"line {line_no}: no chip row below the name row on "
                                       f"line {name_line}")
            name_row, chips_of_row = None, 0
            continue
        if not line.strip():
            continue
        words = _tokens(line)
        if not line.lstrip().startswith("|") or _is_process_header(words):
            break  # end of the chip table
        if name_row is not None and (not chips_of_row or _looks_like_chip_row(layout, words)):
            if len(words) != len(layout.chip_fields):
                raise NpuSmiParseError(
                    f"line {line_no}: chip row has {len(words)} fields, the header "
                    f"({' '.join(layout.chip_fields)}) needs {len(layout.chip_fields)}: "
                    f"{line.strip()!r}"
                )
            values = _row_values(layout.chip_fields, words, line_no, line)
            chips.append(_chip({**name_row, **values}, line_no, line))
            chips_of_row += 1
            continue
        if len(words) != len(layout.name_fields):
            raise NpuSmiParseError(
                f"line {line_no}: cannot read this row of the chip table (a name row has "
                f"{len(layout.name_fields)} fields: {' '.join(layout.name_fields)}): "
                f"{line.strip()!r}"
            )
        name_row = _row_values(layout.name_fields, words, line_no, line)
        name_line, chips_of_row = line_no, 0
    if name_row is not None and not chips_of_row:
        raise NpuSmiParseError(f"the table ends without a chip row below the name row on line "
                               f"{name_line}")
    return chips


def _looks_like_chip_row(layout: _Layout, words: list[str]) -> bool:
    return (len(words) == len(layout.chip_fields)
            and bool(_BUS_ID.match(words[layout.bus_index])))


def parse_version(text: str) -> str | None:
    """The npu-smi (driver) version of ``npu-smi info`` or ``npu-smi -v`` output, if printed."""
    for line in text.splitlines():
        match = _VERSION.search(line) or _TOOL_VERSION.search(line)
        if match:
            return match.group(1).rstrip("|")
    return None


def unhealthy(chips: Iterable[Chip]) -> list[Chip]:
    """The chips whose health is not ``OK``."""
    return [c for c in chips if c.health != HEALTH_OK]


# --- the process table -------------------------------------------------------------------------

_PROCESS_COLUMNS = {
    "process id": "pid",
    "process name": "name",
    "process memory(mb)": "memory_mb",
    "process id in container": "container_pid",
}


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def parse_processes(text: str) -> list[NpuProcess]:
    """The rows of the process table below the chip table (empty when no process runs).

    Text without a process table (an ``info`` output cut after the chips) gives an empty list.
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if _is_process_header(_tokens(line))), None)
    if start is None:
        return []
    header = _cells(lines[start])
    columns = [_PROCESS_COLUMNS.get(cell.lower(), cell) for cell in header[1:]]
    processes: list[NpuProcess] = []
    for index in range(start + 1, len(lines)):
        line, line_no = lines[index], index + 1
        if _is_rule(line) or not line.strip():
            continue
        cells = _cells(line)
        if len(cells) == 1 and _NO_PROCESSES.match(cells[0]):
            continue
        ids = cells[0].split()
        if len(cells) != len(header) or len(ids) != 2:
            raise NpuSmiParseError(f"line {line_no}: cannot read this row of the process table "
                                   f"({' | '.join(header)}): {line.strip()!r}")
        values: dict[str, int | str | None] = {}
        for column, cell in zip(columns, cells[1:], strict=True):
            if column in ("pid", "memory_mb", "container_pid"):
                values[column] = _process_int(column, cell, line_no, line)
            elif column == "name":
                values[column] = cell
        try:
            processes.append(NpuProcess.model_validate(
                {"npu": int(ids[0]), "chip": int(ids[1]), **values}))
        except ValidationError as exc:
            raise NpuSmiParseError(f"line {line_no}: cannot read this process row: "
                                   f"{line.strip()!r}") from exc
    return processes


def _process_int(column: str, cell: str, line_no: int, line: str) -> int | None:
    if cell in _MISSING:
        return None
    try:
        return int(cell)
    except ValueError:
        raise NpuSmiParseError(
            f"line {line_no}: {column} is {cell!r}, not a number: {line.strip()!r}"
        ) from None


# --- npu-smi info -l ---------------------------------------------------------------------------

_KEY_VALUE = re.compile(r"^\s*([^:]+?)\s*:\s*(.*?)\s*$")


def parse_list(text: str) -> NpuList:
    """``npu-smi info -l``: ``Total Count``, then per NPU a block starting ``NPU ID``."""
    total: int | None = None
    entries: list[NpuListEntry] = []
    for line_no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        match = _KEY_VALUE.match(line)
        if not match:
            raise NpuSmiParseError(f"line {line_no}: not 'key : value': {line.strip()!r}")
        key, value = match.groups()
        if key == "Total Count":
            total = _list_int(key, value, line_no)
        elif key == "NPU ID":
            entries.append(NpuListEntry(npu=_list_int(key, value, line_no),
                                        fields={key: value}))
        elif not entries:
            raise NpuSmiParseError(f"line {line_no}: {key!r} before the first 'NPU ID'")
        else:
            entries[-1].fields[key] = value
            if key == "Chip Count":
                entries[-1].chip_count = _list_int(key, value, line_no)
    if total is None:
        raise NpuSmiParseError("no 'Total Count': not the output of 'npu-smi info -l'")
    if total != len(entries):
        raise NpuSmiParseError(f"Total Count is {total} but {len(entries)} NPU ID block(s) follow")
    return NpuList(total_count=total, npus=entries)


def _list_int(key: str, value: str, line_no: int) -> int:
    try:
        return int(value)
    except ValueError:
        raise NpuSmiParseError(f"line {line_no}: {key} is {value!r}, not a number") from None


# ---- running the tool -----------------------------------------------------------------------

# Where the driver package installs npu-smi when it is not on PATH (sudo's secure_path, cron).
DEFAULT_NPU_SMI = "/usr/local/sbin/npu-smi"
NPU_SMI_TIMEOUT_S = 60.0


class NpuSmiRunError(RuntimeError):
    """npu-smi could not be run, timed out or failed; the message says which."""


def locate(path: str | None = None, fallback: str = DEFAULT_NPU_SMI) -> str | None:
    """``path`` resolved on PATH if given; else ``npu-smi`` on PATH, else ``fallback`` if it is
    executable; None when nothing is found."""
    if path is not None:
        return shutil.which(path)
    found = shutil.which("npu-smi")
    if found is not None:
        return found
    return fallback if os.access(fallback, os.X_OK) else None


def query_info(tool: str, timeout: float = NPU_SMI_TIMEOUT_S) -> str:
    """The output of ``tool info``."""
    try:
        done = subprocess.run([tool, "info"], capture_output=True, text=True, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired as exc:
        raise NpuSmiRunError(f"{tool} info: no answer in {timeout:.0f} s") from exc
    except OSError as exc:
        raise NpuSmiRunError(f"cannot run {tool}: {exc}") from exc
    if done.returncode != 0:
        detail = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:] or ["no output"]
        raise NpuSmiRunError(f"{tool} info failed (exit {done.returncode}): {detail[0]}")
    return done.stdout

