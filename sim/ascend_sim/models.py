"""Node descriptions: what a simulated Kunpeng + Ascend server "is".

A node description is plain JSON (``node.json``) so that the simulated vendor tools, which run
inside the test container with nothing but the system Python, can read it with the standard
library. It plays the part of the hardware: chip health, HBM, temperature, power, utilisation,
the firmware flashed on each chip, device NIC settings, and the fault knobs that tests turn.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HUAWEI_PCI_VENDOR = "0x19e5"
PCI_CLASS_PROCESSING_ACCELERATOR = "0x120000"


@dataclass
class ChipSpec:
    """A chip family as the PCI bus and npu-smi show it."""

    family: str  # 910, 910B, 910C, 310P
    pci_device: str
    npu_smi_name: str
    hbm_mb: int
    chips_per_npu: int
    layout: str  # npu-smi table layout: "a2", "a3" or "310p"


CHIP_SPECS: dict[str, ChipSpec] = {
    "910": ChipSpec("910", "0xd801", "910A", 32768, 1, "a2"),
    "910B1": ChipSpec("910B", "0xd802", "910B1", 65536, 1, "a2"),
    "910B4": ChipSpec("910B", "0xd802", "910B4", 32768, 1, "a2"),
    "910C": ChipSpec("910C", "0xd803", "Ascend910", 65536, 2, "a3"),
    "310P3": ChipSpec("310P", "0xd500", "310P3", 0, 1, "310p"),
}

# Server models: chip type and how many NPUs (cards) the board carries.
SERVER_MODELS: dict[str, tuple[str, int]] = {
    "atlas800-910": ("910", 8),
    "atlas800-a2": ("910B1", 8),
    "atlas800-a2-32g": ("910B4", 8),
    "atlas800-a3": ("910C", 8),  # 8 cards x 2 dies = 16 chips
    "atlas300i-duo": ("310P3", 2),
}

# PCI bus numbers the chips sit on, as on a real A2 board.
_BUS_NUMBERS = ["c1", "c2", "81", "82", "01", "02", "41", "42"]


@dataclass
class Chip:
    npu: int
    chip: int
    phy_id: int
    name: str
    bus_id: str
    health: str = "OK"
    power_w: float | None = 92.5
    temp_c: int = 41
    aicore_pct: int = 0
    hbm_used_mb: int = 3340
    hbm_total_mb: int = 65536
    mem_used_mb: int = 0
    mem_total_mb: int = 0
    hugepages_used: int = 0
    hugepages_total: int = 0
    firmware_version: str = ""
    firmware_hdk: str = ""
    # Fault knob: the chip's error codes as `npu-smi info -t health` prints them (injected by
    # `python -m ascend_sim fault-code`; only codes a real sample of the corpus shows).
    error_codes: list[str] = field(default_factory=list)
    error_information: str = ""


@dataclass
class Node:
    model: str
    chip_type: str
    chips: list[Chip]
    serial_prefix: str = "102408"
    faults: dict[str, Any] = field(default_factory=dict)
    device_net: dict[str, dict[str, str]] = field(default_factory=dict)
    # Processes npu-smi lists below the chip table: {"npu", "chip", "pid", "name", "memory_mb"}.
    npu_processes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def spec(self) -> ChipSpec:
        return CHIP_SPECS[self.chip_type]

    @property
    def npu_count(self) -> int:
        return len({c.npu for c in self.chips})

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    def save(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(self.to_json())
        tmp.replace(path)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Node:
        chips = [Chip(**c) for c in data["chips"]]
        return cls(
            model=data["model"],
            chip_type=data["chip_type"],
            chips=chips,
            serial_prefix=data.get("serial_prefix", "102408"),
            faults=dict(data.get("faults", {})),
            device_net=dict(data.get("device_net", {})),
            npu_processes=[dict(p) for p in data.get("npu_processes", [])],
        )

    @classmethod
    def load(cls, path: Path) -> Node:
        return cls.from_dict(json.loads(path.read_text()))


def make_node(model: str, npus: int | None = None) -> Node:
    """Build the description of a healthy, idle server of a known model.

    ``npus`` lowers the number of cards (a board with missing or dead cards).
    """
    if model not in SERVER_MODELS:
        raise ValueError(f"unknown server model {model!r}; known: {', '.join(SERVER_MODELS)}")
    chip_type, default_npus = SERVER_MODELS[model]
    count = default_npus if npus is None else npus
    if not 0 <= count <= default_npus:
        raise ValueError(f"{model} carries 0..{default_npus} NPUs, not {count}")
    spec = CHIP_SPECS[chip_type]
    chips: list[Chip] = []
    for npu in range(count):
        for die in range(spec.chips_per_npu):
            phy = npu * spec.chips_per_npu + die
            bus = f"0000:{_BUS_NUMBERS[npu % len(_BUS_NUMBERS)].upper()}:{die:02X}.0"
            chips.append(
                Chip(
                    npu=npu,
                    chip=die,
                    phy_id=phy,
                    name=spec.npu_smi_name,
                    bus_id=bus,
                    # A3 reports power once per card, on chip 0; 310P3 prints NA for every
                    # chip (tests/data/corpus/npu-smi/310p3-*).
                    power_w=None if die > 0 or spec.family == "310P" else 92.5 + npu,
                    temp_c=38 + (phy % 5),
                    hbm_total_mb=spec.hbm_mb,
                    hbm_used_mb=3340 if spec.hbm_mb else 0,
                    mem_total_mb=0 if spec.hbm_mb else 44280,
                    mem_used_mb=0 if spec.hbm_mb else 1210,
                )
            )
    return Node(model=model, chip_type=chip_type, chips=chips)
