"""The locked version matrix (``stack-matrix.yml``): load it and resolve an inventory's choice.

An inventory names a set (``ascend_stack_set: vllm-ascend-0.13.0``), pins component versions
(``ascend_stack_pins: {cann: 8.5.0}``), or both. Resolution yields exactly one set or a
:class:`MatrixError` that says which component mismatches and which sets would fit. The Ansible
filter ``ascend_serve.fleet.stack_resolve`` calls :func:`resolve`, so roles and CLI agree.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

COMPONENTS = ("vllm_ascend", "vllm", "cann", "torch", "torch_npu", "hdk")
CHIPS = ("910B", "910C")


class MatrixError(ValueError):
    """The inventory's choice is not one supported set; the message says why."""


class StackSet(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    vllm_ascend: str
    vllm: str
    cann: str
    torch: str
    torch_npu: str
    python: list[str] = Field(min_length=1)
    hdk: str
    chips: list[str] = Field(min_length=1)

    @field_validator("vllm_ascend", "vllm", "cann", "torch", "torch_npu", "hdk", mode="before")
    @classmethod
    def _as_text(cls, value: Any) -> str:
        return str(value)

    @field_validator("chips")
    @classmethod
    def _known_chips(cls, value: list[str]) -> list[str]:
        unknown = [c for c in value if c not in CHIPS]
        if unknown:
            raise ValueError(f"unknown chip families {unknown}; known: {', '.join(CHIPS)}")
        return value

    def component(self, key: str) -> str:
        return str(getattr(self, key))


class Matrix(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    sets: list[StackSet] = Field(min_length=1)

    @field_validator("sets")
    @classmethod
    def _unique_names(cls, value: list[StackSet]) -> list[StackSet]:
        names = [s.name for s in value]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate set names: {', '.join(dupes)}")
        return value

    def names(self) -> list[str]:
        return [s.name for s in self.sets]


def default_matrix_path() -> Path:
    """``ASCEND_SERVE_MATRIX`` when set, else ``stack-matrix.yml`` of the source tree."""
    env = os.environ.get("ASCEND_SERVE_MATRIX")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "stack-matrix.yml"


def parse_matrix(data: Any) -> Matrix:
    try:
        return Matrix.model_validate(data)
    except ValidationError as exc:
        raise MatrixError(f"invalid version matrix: {exc}") from exc


def load_matrix(path: Path | None = None) -> Matrix:
    source = path or default_matrix_path()
    try:
        data = yaml.safe_load(source.read_text(encoding="utf-8"))
    except OSError as exc:
        raise MatrixError(f"cannot read the version matrix {source}: {exc.strerror}") from exc
    return parse_matrix(data)


def _mismatches(candidate: StackSet, pins: Mapping[str, str]) -> list[str]:
    return [
        f"{key} {pins[key]} (set has {candidate.component(key)})"
        for key in COMPONENTS
        if key in pins and candidate.component(key) != pins[key]
    ]


def resolve(
    matrix: Matrix,
    name: str | None = None,
    pins: Mapping[str, Any] | None = None,
    chip: str | None = None,
) -> StackSet:
    """Return the one set that the name, the pins and the chip family select."""
    pin_map = {k: str(v) for k, v in (pins or {}).items() if v not in (None, "")}
    unknown = sorted(set(pin_map) - set(COMPONENTS))
    if unknown:
        raise MatrixError(
            f"unknown components pinned: {', '.join(unknown)}; known: {', '.join(COMPONENTS)}"
        )
    if not name and not pin_map:
        raise MatrixError(
            f"no version set chosen: set ascend_stack_set to one of {', '.join(matrix.names())}"
        )
    pool = matrix.sets
    if name:
        pool = [s for s in matrix.sets if s.name == name]
        if not pool:
            raise MatrixError(
                f"unknown version set {name!r}; known sets: {', '.join(matrix.names())}"
            )
    fitting = [s for s in pool if not _mismatches(s, pin_map)]
    if not fitting:
        chosen = pool[0] if name else None
        if chosen is not None:
            detail = "; ".join(_mismatches(chosen, pin_map))
            lead = f"set {name} does not fit the pinned versions: {detail}"
        else:
            lead = "no supported set has " + ", ".join(f"{k} {v}" for k, v in pin_map.items())
        best = sorted(matrix.sets, key=lambda s: len(_mismatches(s, pin_map)))
        closest = [
            f"{s.name} (differs in: {', '.join(_mismatches(s, pin_map))})"
            if _mismatches(s, pin_map)
            else f"{s.name} (fits every pin)"
            for s in best[:3]
        ]
        per_component = [
            f"{key} {value} fits: "
            + (", ".join(s.name for s in matrix.sets if s.component(key) == value) or "no set")
            for key, value in pin_map.items()
        ]
        raise MatrixError(
            f"{lead}. "
            + "; ".join(per_component)
            + ". Closest sets: "
            + "; ".join(closest)
        )
    if len(fitting) > 1:
        raise MatrixError(
            "the pinned versions fit several sets: "
            + ", ".join(s.name for s in fitting)
            + "; set ascend_stack_set to choose one"
        )
    selected = fitting[0]
    if chip is not None and chip not in selected.chips:
        raise MatrixError(
            f"set {selected.name} does not support chip {chip} "
            f"(supports {', '.join(selected.chips)})"
        )
    return selected
