"""Typed view of the vendor's ``npu-smi`` output, and running the tool.

The text is read by the collection's ``plugins/module_utils/npu_smi.py``, the one reader of
npu-smi output in this project (it also runs on managed nodes: standard library only, plain
dicts). Every layout it reads comes from a real
sample under ``tests/data/corpus/npu-smi/``. This module turns its dicts into pydantic models:
:class:`Chip` (``npu-smi info`` chip table), :class:`NpuProcess` (the process table below it),
:class:`NpuList` (``info -l``), :class:`NpuMapping` (``info -m``), and the board and health
pages as dicts. Missing values (``-``, ``NA``) are None; versions are kept as printed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from ansible_collections.ascend_serve.fleet.plugins.module_utils import npu_smi as reader
from ansible_collections.ascend_serve.fleet.plugins.module_utils.npu_smi import NpuSmiParseError

__all__ = [
    "DEFAULT_NPU_SMI",
    "HEALTH_OK",
    "NPU_SMI_TIMEOUT_S",
    "Chip",
    "NpuList",
    "NpuListEntry",
    "NpuMapping",
    "NpuMappingRow",
    "NpuProcess",
    "NpuSmiParseError",
    "NpuSmiRunError",
    "chip_family",
    "locate",
    "parse_board",
    "parse_health",
    "parse_info",
    "parse_list",
    "parse_mapping",
    "parse_processes",
    "parse_version",
    "query_info",
    "unhealthy",
]

HEALTH_OK = reader.HEALTH_OK
chip_family = reader.chip_family


class Chip(BaseModel):
    """One chip (die) of ``npu-smi info``; ``None`` where the table has no value or no column."""

    npu: int = Field(description="NPU (card) id, the first column of the name row")
    chip: int = Field(description="chip id within the NPU")
    phy_id: int | None = Field(default=None, description="A3: the chip's physical id, 0-15")
    device_id: int | None = Field(default=None, description="310/310P: the Device column")
    name: str = Field(description="chip name as printed: 910B4, Ascend910, 310P3, 910A")
    family: str | None = Field(
        default=None,
        description="910B (A2), 910C (A3), 910 (910A/910ProB, bare 910B of old drivers), 310P, "
                    "310; None for a name no corpus sample shows",
    )
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
    bus_id: str = Field(
        description="PCI address, upper-case: 0000:C1:00.0; '' when the table shows NA (no real "
                    "sample shows that; the reader gives None)"
    )
    extra: dict[str, str] = Field(
        default_factory=dict, description="columns of header words the reader does not know"
    )

    @property
    def ok(self) -> bool:
        return self.health == HEALTH_OK


class NpuProcess(BaseModel):
    """One row of the process table below the chip table."""

    npu: int
    chip: int
    pid: int
    name: str | None = Field(default=None, description="None when the cell is empty")
    memory_mb: int | None = None
    container_pid: int | None = None


class NpuListEntry(BaseModel):
    """One NPU of ``npu-smi info -l``."""

    npu: int
    chip_count: int | None = None
    fields: dict[str, str | None] = Field(default_factory=dict,
                                          description="every key of the block")


class NpuList(BaseModel):
    """``npu-smi info -l``: how many NPUs, and per NPU its chip count."""

    total_count: int
    npus: list[NpuListEntry]


class NpuMappingRow(BaseModel):
    """One row of ``npu-smi info -m``."""

    npu: int
    chip: int
    chip_logic_id: int | None = None
    chip_phy_id: int | None = None
    chip_name: str


class NpuMapping(BaseModel):
    """``npu-smi info -m``: NPU ID, Chip ID, Chip Logic ID and Chip Name per chip (and Mcu)."""

    rows: list[NpuMappingRow]


def _model(model: type[BaseModel], values: dict[str, Any], what: str) -> Any:
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise NpuSmiParseError(f"cannot read {what} ({problems})") from None


def _chip(values: dict[str, Any]) -> Chip:
    data = dict(values)
    data["extra"] = {k: str(v) for k, v in (data.get("extra") or {}).items()}
    if data.get("bus_id") is None:
        data["bus_id"] = ""
    chip: Chip = _model(Chip, data, f"NPU {data.get('npu')} chip {data.get('chip')}")
    return chip


def parse_info(text: str) -> list[Chip]:
    """The chips of ``npu-smi info`` output, in the order printed.

    Raises :class:`NpuSmiParseError` naming the line it could not read.
    """
    return [_chip(c) for c in reader.read_info(text)["chips"]]


def parse_version(text: str) -> str | None:
    """The driver version of ``npu-smi info`` output (as printed, e.g. ``25.0.rc1.2``)."""
    return reader.read_version(text)


def unhealthy(chips: Iterable[Chip]) -> list[Chip]:
    """The chips whose health is not ``OK``."""
    return [c for c in chips if c.health != HEALTH_OK]


def parse_processes(text: str) -> list[NpuProcess]:
    """The rows of the process table below the chip table (empty when no process runs).

    Text without a process table (an ``info`` output cut after the chips) gives an empty list.
    """
    processes: list[NpuProcess] = []
    for row in reader.read_processes(text):
        processes.append(_model(NpuProcess, row, f"the process row of pid {row.get('pid')}"))
    return processes


def parse_list(text: str) -> NpuList:
    """``npu-smi info -l``: ``Total Count``, then per NPU a block starting ``NPU ID``."""
    listing = reader.read_list(text)
    total = listing["total_count"]
    if total is None:
        total = listing["card_count"]
    result: NpuList = _model(NpuList, {"total_count": total, "npus": listing["npus"]},
                             "npu-smi info -l")
    return result


def parse_mapping(text: str) -> NpuMapping:
    """``npu-smi info -m``."""
    result: NpuMapping = _model(NpuMapping, {"rows": reader.read_mapping(text)["rows"]},
                                "npu-smi info -m")
    return result


def parse_board(text: str) -> dict[str, Any]:
    """``npu-smi info -t board -i N [-c C]``: snake_case keys (``firmware_version``)."""
    return reader.read_board(text)


def parse_health(text: str) -> dict[str, Any]:
    """``npu-smi info -t health -i N [-c C]``: ``health_status``, ``error_code``, ..."""
    return reader.read_health(text)


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

