"""The locked version matrix (``stack-matrix.yml``): load it and resolve an inventory's choice.

An inventory names a set (``ascend_stack_set: vllm-ascend-0.13.0``), pins component versions
(``ascend_stack_pins: {cann: 8.5.0}``), or both. Resolution yields exactly one set or a
:class:`MatrixError` that says which component mismatches and which sets would fit.

A host's sets are resolved in one place, :func:`resolve_for_host`: the ``ascend_stack`` role
(filter ``ascend_serve.fleet.stack_resolve``, the fact ``ascend_stack_resolved``) and
``ascend-serve mirror`` call it with the same inventory variables, so they cannot disagree.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from ascend_serve.resources import data_path
from ascend_serve.stack.host_check import hdk_accepts

COMPONENTS = ("vllm_ascend", "vllm", "cann", "torch", "torch_npu", "hdk", "firmware")
# Components only an Ascend set has (firmware may be unresolved: its source then says why).
NPU_COMPONENTS = ("vllm_ascend", "cann", "torch_npu", "hdk")
CHIPS = ("910B", "910C")


class MatrixError(ValueError):
    """The inventory's choice is not one supported set; the message says why."""


class PipIndex(BaseModel):
    """A package index a set needs besides the site's PyPI mirror (PyTorch's, Huawei's)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    url: str
    # What the set takes from it, and the page that says so.
    packages: list[str] = Field(min_length=1)
    source: str


class StackSet(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    platform: Literal["ascend", "cpu"] = "ascend"
    vllm_ascend: str | None = None
    vllm: str
    cann: str | None = None
    torch: str
    torch_npu: str | None = None
    python: list[str] = Field(min_length=1)
    # The HDK (driver + firmware) release installed with the set, and the HDK release lines
    # the set's CANN supports (CANN release notes: "Ascend HDK 25.5.X ..."), written without the
    # last field ("25.5" accepts 25.5.0, 25.5.1, a hot patch of them): any of them is accepted.
    hdk: str | None = None
    hdk_supported: list[str] = Field(default_factory=list)
    # The NPU firmware of that HDK release (its installer's file name carries it:
    # Ascend-hdk-910b-npu-firmware_<firmware>.run); npu_driver installs it. None: no primary
    # source gave it; ``sources.firmware`` says so and the inventory sets it.
    firmware: str | None = None
    chips: list[str] = Field(default_factory=list)
    # Architectures the set is locked for; an ascend set: aarch64 (Kunpeng).
    architectures: list[str] = Field(default_factory=list)
    # Oldest host glibc the set's wheels run on (their manylinux tag); locks resolve for it.
    glibc: str = Field(pattern=r"^[0-9]+\.[0-9]+$")
    # Oldest running kernel the set's driver supports (empty: preflight_min_kernel decides).
    kernel: str = ""
    vllm_dist: str = "vllm"
    extras: list[str] = Field(default_factory=list)
    # Distributions the lock leaves out (and python_env removes if an older install left them).
    lock_exclude: list[str] = Field(default_factory=list)
    dist_aliases: dict[str, str] = Field(default_factory=dict)
    indexes: list[PipIndex] = Field(default_factory=list)
    # Why the repository carries no lock for this set (an index it cannot reach); empty: locked.
    unlocked: str = ""
    # Where each pinned value comes from: component -> docs page, release note or
    # repository + path + tag.
    sources: dict[str, str | list[str]] = Field(default_factory=dict)

    @field_validator("vllm_ascend", "vllm", "cann", "torch", "torch_npu", "hdk", "firmware",
                     mode="before")
    @classmethod
    def _as_text(cls, value: Any) -> str | None:
        return None if value is None else str(value)

    @field_validator("python", "hdk_supported", mode="before")
    @classmethod
    def _python_as_text(cls, value: Any) -> Any:
        return [str(v) for v in value] if isinstance(value, list) else value

    @field_validator("chips")
    @classmethod
    def _known_chips(cls, value: list[str]) -> list[str]:
        unknown = [c for c in value if c not in CHIPS]
        if unknown:
            raise ValueError(f"unknown chip families {unknown}; known: {', '.join(CHIPS)}")
        return value

    @model_validator(mode="after")
    def _platform_fields(self) -> StackSet:
        npu_only = {k: getattr(self, k) for k in NPU_COMPONENTS}
        if self.platform == "ascend":
            missing = [k for k, v in npu_only.items() if not v]
            if missing or not self.chips:
                raise ValueError(
                    f"set {self.name}: an ascend set needs "
                    + ", ".join(missing + ([] if self.chips else ["chips"]))
                )
            if not self.hdk_accepts(str(self.hdk)):
                raise ValueError(f"set {self.name}: hdk {self.hdk} is not in its hdk_supported")
            if "firmware" not in self.sources:
                raise ValueError(f"set {self.name}: sources.firmware must cite the firmware of "
                                 f"HDK {self.hdk}, or say why it is unresolved")
        else:
            present = [k for k, v in npu_only.items() if v] + (["chips"] if self.chips else [])
            present += ["firmware"] if self.firmware else []
            present += ["hdk_supported"] if self.hdk_supported else []
            if present:
                raise ValueError(f"set {self.name}: a cpu set has no {', '.join(present)}")
        unsourced = [k for k in (*COMPONENTS, "python", "glibc", "hdk_supported")
                     if getattr(self, k) and k not in self.sources]
        if unsourced:
            raise ValueError(f"set {self.name}: no source given for {', '.join(unsourced)}")
        return self

    def lock_architectures(self) -> list[str]:
        return self.architectures or ["aarch64"]

    def hdk_accepts(self, version: str) -> bool:
        """Whether an installed driver version is one of the set's supported HDK releases.

        Drivers print lower-case release candidates (``25.3.rc1``) where release notes write
        ``25.3.RC1``; a hot patch (``25.0.rc1.2.sph001``) belongs to its base release.
        """
        return hdk_accepts(self.hdk_supported, version)

    def component(self, key: str) -> str | None:
        value = getattr(self, key)
        return None if value is None else str(value)

    def alias_version(self) -> str:
        """Version of an aliased distribution: the platform as local label (0.32.0+cpu)."""
        return f"{self.vllm}+{self.platform}"

    def distributions(self, aliases: bool = True) -> dict[str, str]:
        """Distribution name -> the version an environment of this set must hold."""
        wanted = {self.vllm_dist: self.vllm, "torch": self.torch}
        if self.platform == "ascend":
            wanted |= {"vllm-ascend": str(self.vllm_ascend), "torch-npu": str(self.torch_npu)}
        if not aliases:
            return wanted
        return wanted | {alias: self.alias_version() for alias in self.dist_aliases}

    def imports(self) -> list[str]:
        """Modules an environment of this set must import."""
        if self.platform == "ascend":
            return ["torch", "torch_npu", "vllm", "vllm_ascend"]
        return ["torch", "vllm"]

    def as_facts(self) -> dict[str, Any]:
        """The set as Ansible sees it: every field plus what an environment must hold."""
        return {
            **self.model_dump(),
            "lock_targets": [f"py{py}-{arch}" for arch in self.lock_architectures()
                             for py in self.python],
            "distributions": self.distributions(),
            "imports": self.imports(),
            "alias_version": self.alias_version(),
        }


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
    return data_path("stack-matrix.yml")


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


# The inventory variables that choose a host's sets: the accelerator set (name, pins, chip) and
# the set the serving environment installs where it differs (python_env_set: the CPU test bed).
CHOICE = ("ascend_stack_set", "ascend_stack_pins", "ascend_stack_chip", "python_env_set")


def resolve_for_host(choice: Mapping[str, Any], matrix: Matrix | None = None) -> dict[str, Any]:
    """The fact ``ascend_stack_resolved`` of a host whose variables hold ``choice`` (the
    :data:`CHOICE` variables; a missing one is empty): the accelerator set, as
    :meth:`StackSet.as_facts`, plus ``serving``, the set the serving environment installs
    (``python_env_set``, else the accelerator set itself), and ``chosen``, the variables it was
    resolved from (a later play resolves again only where they differ). ``matrix``: the loaded
    matrix, else :func:`load_matrix` (``ASCEND_SERVE_MATRIX`` or the collection's)."""
    chosen = {key: choice.get(key) for key in CHOICE}
    chosen["ascend_stack_set"] = str(chosen["ascend_stack_set"] or "")
    chosen["ascend_stack_pins"] = dict(chosen["ascend_stack_pins"] or {})
    chosen["ascend_stack_chip"] = str(chosen["ascend_stack_chip"] or "")
    chosen["python_env_set"] = str(chosen["python_env_set"] or "")
    source = matrix if matrix is not None else load_matrix()
    accelerator = resolve(source, chosen["ascend_stack_set"] or None, chosen["ascend_stack_pins"],
                          chosen["ascend_stack_chip"] or None)
    serving = accelerator
    if chosen["python_env_set"] and chosen["python_env_set"] != accelerator.name:
        try:
            serving = resolve(source, chosen["python_env_set"])
        except MatrixError as exc:
            raise MatrixError(f"python_env_set: {exc}") from exc
    return {**accelerator.as_facts(), "serving": serving.as_facts(), "chosen": chosen}


def set_of_facts(facts: Mapping[str, Any]) -> StackSet:
    """The set a fact of :func:`resolve_for_host` (or its ``serving`` part) describes, without
    reading the matrix again."""
    try:
        return StackSet.model_validate(
            {key: value for key, value in facts.items() if key in StackSet.model_fields})
    except ValidationError as exc:
        raise MatrixError(f"not a resolved version set: {exc}") from exc


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
    if chip is not None and selected.platform == "cpu":
        raise MatrixError(
            f"set {selected.name} is a CPU set (no NPU driver or CANN); "
            f"the accelerator stack needs an ascend set for chip {chip}"
        )
    if chip is not None and chip not in selected.chips:
        raise MatrixError(
            f"set {selected.name} does not support chip {chip} "
            f"(supports {', '.join(selected.chips)})"
        )
    return selected
