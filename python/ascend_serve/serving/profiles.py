"""Serving profiles (``serving-profiles.yml``): load, override and check them.

A profile is a model, its parallel layout, vLLM's own flags and the environment, under one name.
A prefill/decode (PD) profile's layout is its ``pd`` section (:mod:`ascend_serve.serving.pd`);
every refusal of that layout (:func:`ascend_serve.serving.router.check_pd` and the PD router's)
is a validation error of the profile, so it fires wherever a profile is loaded or resolved.
The CLI (``ascend-serve serve``) and the ``vllm_service`` role (through the filter
``ascend_serve.fleet.serving_profile``) both resolve profiles here, and both render the command
line from ``templates/vllm-launch.sh.j2`` (:mod:`ascend_serve.serving.launcher`).
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ascend_serve.resources import data_path
from ascend_serve.serving import pd as pd_layout
from ascend_serve.serving.fit import HBM_GIB
from ascend_serve.serving.router import RouterPlanError
from ascend_serve.stack.matrix import Matrix, StackSet

# Flags the layout, the node or the secret handling own: a profile's `vllm` mapping must not set
# them, or the command line would say two things (or put the API key where `ps` shows it).
RESERVED_FLAGS: dict[str, str] = {
    "model": "model.name / the node's model directory",
    "served-model-name": "model.served_name",
    "host": "the node's listen address (host)",
    "port": "port",
    "headless": "the node's rank (nodes > 1)",
    "tensor-parallel-size": "parallel.tensor",
    "data-parallel-size": "parallel.data",
    "data-parallel-size-local": "parallel.data_local",
    "data-parallel-address": "the head node's address",
    "data-parallel-rpc-port": "parallel.rpc_port",
    "data-parallel-start-rank": "the node's rank",
    "enable-expert-parallel": "parallel.expert",
    "reasoning-parser": "reasoning_parser",
    "enable-auto-tool-choice": "tool_call_parser (set, it turns automatic tool choice on)",
    "tool-call-parser": "tool_call_parser",
    "api-key": "the API key file (VLLM_API_KEY in the environment, never on the command line)",
}
# A PD profile's engines set these per rank (ascend_serve.serving.router.vllm_serve_argv).
PD_RESERVED_FLAGS: dict[str, str] = {
    **RESERVED_FLAGS,
    "kv-transfer-config": "pd (connector, kv_ports, engine_ids, extra_config)",
    "data-parallel-rank": "pd (each rank's place in its engine)",
}
# vLLM flags that take a count of tokens or sequences: a whole number of at least 1 (vLLM's
# ModelConfig.max_model_len and SchedulerConfig.max_num_seqs / max_num_batched_tokens are ints;
# vllm-project/vllm vllm/config/model.py, vllm/config/scheduler.py). The memory fit reads
# max-model-len as a number too (Profile.max_model_len).
POSITIVE_INT_FLAGS = ("max-model-len", "max-num-seqs", "max-num-batched-tokens")
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_FLAG = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ProfileError(ValueError):
    """A profile that does not exist or is not valid; the message says which and why."""


def _check_flags(value: dict[str, Any], reserved: Mapping[str, str] = RESERVED_FLAGS
                 ) -> dict[str, Any]:
    for key in value:
        flag = key.removeprefix("--")
        if flag != key or not _FLAG.match(flag):
            raise ValueError(
                f"vllm flag {key!r}: write flags without dashes, e.g. max-model-len")
        if flag in reserved:
            raise ValueError(f"vllm flag {flag!r} is set through {reserved[flag]}")
        item = value[key]
        if flag in POSITIVE_INT_FLAGS and (
                isinstance(item, bool) or not isinstance(item, int) or item < 1):
            raise ValueError(f"vllm flag {flag!r} must be a whole number of at least 1, "
                             f"not {item!r}")
    return value


def _env_text(value: Any) -> Any:
    if not isinstance(value, Mapping):
        return value
    out: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not _ENV.match(key):
            raise ValueError(f"environment variable name {key!r} is not valid")
        if isinstance(item, (dict, list)) or item is None:
            raise ValueError(f"environment variable {key} must be a string, not {item!r}")
        out[key] = str(item).lower() if isinstance(item, bool) else str(item)
    return out


class ModelSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    served_name: str
    hf_id: str | None = None
    weights: Literal["bf16", "fp16", "fp32", "w8a8", "w4a8"] = "bf16"
    # config.json fields of the public checkpoint (for the fit estimate without local weights).
    config: dict[str, Any] | None = None

    @field_validator("name", "served_name")
    @classmethod
    def _plain_name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(f"{value!r}: use lower-case letters, digits, '.', '_' and '-'")
        return value


class Tutorial(BaseModel):
    """The vendor's tutorial a profile follows: repository, file, tag and the deployment in it."""

    model_config = ConfigDict(extra="forbid")

    repo: str
    path: str
    tag: str
    deployment: str = Field(min_length=1)

    @property
    def url(self) -> str:
        return f"https://github.com/{self.repo}/blob/{self.tag}/{self.path}"


class Parallel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tensor: int = Field(1, ge=1, le=64)
    data: int = Field(1, ge=1, le=1024)
    # Data-parallel ranks per node; default: data / nodes.
    data_local: int | None = Field(None, ge=1)
    expert: bool = False
    rpc_port: int = Field(13389, ge=1, le=65535)


class Profile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    model: ModelSpec
    device: Literal["npu", "cpu"]
    chip: str
    nodes: int = Field(1, ge=1, le=64)
    chips_per_node: int = Field(1, ge=1, le=16)
    # Memory the CPU build may use for weights and KV cache (cpu profiles).
    memory_gib: float | None = Field(None, gt=0)
    parallel: Parallel = Field(default_factory=Parallel)  # type: ignore[arg-type]
    reasoning_parser: str | None = None
    # vLLM's tool-call parser for the model (--enable-auto-tool-choice --tool-call-parser X).
    tool_call_parser: str | None = None
    # NPU profiles: the tutorial followed, the lowest vllm-ascend that serves the model that way,
    # and every setting that differs from the tutorial with the reason.
    tutorial: Tutorial | None = None
    min_vllm_ascend: str | None = None
    differences: list[str] = Field(default_factory=list)
    vllm: dict[str, Any] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    health_timeout_s: int = Field(600, ge=10, le=86400)
    host: str = "0.0.0.0"  # noqa: S104 - a server's listen address; the inventory narrows it
    port: int = Field(8000, ge=1, le=65535)
    # Prefill/decode disaggregation (ascend_serve.serving.pd): the sides' layouts replace
    # `parallel`, `nodes` is the hosts of all engines, and `port` is the router's.
    pd: pd_layout.PdLayout | None = None

    @field_validator("name")
    @classmethod
    def _plain_name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(f"{value!r}: use lower-case letters, digits, '.', '_' and '-'")
        return value

    @field_validator("env", mode="before")
    @classmethod
    def _env_as_text(cls, value: Any) -> Any:
        return _env_text(value)

    @field_validator("vllm")
    @classmethod
    def _flags(cls, value: dict[str, Any]) -> dict[str, Any]:
        return _check_flags(value)

    @model_validator(mode="after")
    def _layout(self) -> Profile:
        if self.pd is not None:
            return self._pd_layout(self.pd)
        par = self.parallel
        if par.data % self.nodes:
            raise ValueError(f"parallel.data {par.data} is not a multiple of nodes {self.nodes}")
        if par.data_local is None:
            par.data_local = par.data // self.nodes
        if par.data_local * self.nodes != par.data:
            raise ValueError(
                f"parallel.data_local {par.data_local} x nodes {self.nodes} != parallel.data "
                f"{par.data}"
            )
        if self.device == "npu":
            if self.tutorial is None or self.min_vllm_ascend is None:
                raise ValueError("an npu profile names its tutorial (repo, path, tag, deployment) "
                                 "and min_vllm_ascend, the lowest vllm-ascend that serves it")
            if self.chip not in HBM_GIB:
                raise ValueError(f"chip {self.chip!r} is not one of {', '.join(HBM_GIB)}")
            need = par.tensor * par.data_local
            if need > self.chips_per_node:
                raise ValueError(
                    f"the layout needs {need} chips per node (tensor {par.tensor} x data_local "
                    f"{par.data_local}) but chips_per_node is {self.chips_per_node}"
                )
        else:
            if self.memory_gib is None:
                raise ValueError("a cpu profile needs memory_gib (the memory vLLM may use)")
        return self

    def _pd_layout(self, layout: pd_layout.PdLayout) -> Profile:
        if self.device != "npu":
            raise ValueError("pd: prefill/decode disaggregation is an npu profile's (Mooncake "
                             "over the NPUs' network)")
        if "parallel" in self.model_fields_set:
            raise ValueError("pd: a PD profile's layout is pd.prefill and pd.decode (tensor, "
                             "data, data_local, expert); remove parallel")
        if "nodes" in self.model_fields_set and self.nodes != layout.hosts:
            raise ValueError(f"nodes {self.nodes} but pd's engines run on {layout.hosts} "
                             f"host(s): set nodes to {layout.hosts} or leave it out")
        self.nodes = max(layout.hosts, 1)
        if self.tutorial is None or self.min_vllm_ascend is None:
            raise ValueError("an npu profile names its tutorial (repo, path, tag, deployment) "
                             "and min_vllm_ascend, the lowest vllm-ascend that serves it")
        if self.chip not in HBM_GIB:
            raise ValueError(f"chip {self.chip!r} is not one of {', '.join(HBM_GIB)}")
        _check_flags(self.vllm, PD_RESERVED_FLAGS)
        for name in pd_layout.SIDES:
            side = layout.side(name)
            try:
                _check_flags({k: v for k, v in side.vllm.items() if v is not None},
                             PD_RESERVED_FLAGS)
                _env_text(side.env)
            except ValueError as exc:
                raise ValueError(f"pd.{name}: {exc}") from exc
        try:
            pd_layout.check(layout, self.chips_per_node)
        except RouterPlanError as exc:
            raise ValueError(f"pd: {exc}") from exc
        return self

    @property
    def max_model_len(self) -> int | None:
        value = self.vllm.get("max-model-len")
        return int(value) if value is not None else None

    def as_dict(self) -> dict[str, Any]:
        """The resolved profile as plain data (what templates and ``--json`` see)."""
        return self.model_dump(mode="json")


def default_profiles_path() -> Path:
    """``ASCEND_SERVE_PROFILES`` when set, else ``serving-profiles.yml`` of the source tree."""
    env = os.environ.get("ASCEND_SERVE_PROFILES")
    if env:
        return Path(env)
    return data_path("serving-profiles.yml")


def with_extra_files(extra: Iterable[Path | str] | None) -> list[Path] | None:
    """The profile files to read: the default one, then the operator's ``extra`` files
    (None, meaning the default alone, when there are none)."""
    files = [Path(str(f)) for f in extra or []]
    return [default_profiles_path(), *files] if files else None


def _describe(exc: ValidationError, name: str) -> str:
    problems = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"])
        message = err["msg"].removeprefix("Value error, ")
        problems.append(f"{where}: {message}" if where else message)
    return f"profile {name}: " + "; ".join(problems)


def _raw_profiles(path: Path) -> list[dict[str, Any]]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ProfileError(f"cannot read the profiles file {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ProfileError(f"the profiles file {path} is not valid YAML: {exc}") from exc
    items = data.get("profiles") if isinstance(data, dict) else None
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise ProfileError(f"{path}: expected a mapping with a 'profiles' list of mappings")
    return items


def load_raw(paths: Iterable[Path] | None = None) -> dict[str, dict[str, Any]]:
    """Profiles as plain mappings by name; later files add profiles or replace whole ones."""
    out: dict[str, dict[str, Any]] = {}
    for path in list(paths or []) or [default_profiles_path()]:
        seen: set[str] = set()
        for item in _raw_profiles(path):
            name = str(item.get("name", ""))
            if not name:
                raise ProfileError(f"{path}: a profile has no name")
            if name in seen:
                raise ProfileError(f"{path}: profile {name} is defined twice")
            seen.add(name)
            out[name] = copy.deepcopy(item)
    return out


def load_profiles(paths: Iterable[Path] | None = None) -> dict[str, Profile]:
    """Every profile, validated."""
    out = {}
    for name, raw in load_raw(paths).items():
        try:
            out[name] = Profile.model_validate(raw)
        except ValidationError as exc:
            raise ProfileError(_describe(exc, name)) from exc
    return out


def merge(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``overrides`` merged in: mappings recursively, everything else replaced.

    A null override removes a ``vllm`` flag or an ``env`` variable
    (``--set vllm.enforce-eager=null``).
    """
    out = copy.deepcopy(dict(base))
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _drop_nulls(raw: dict[str, Any]) -> dict[str, Any]:
    for section in ("vllm", "env"):
        if isinstance(raw.get(section), dict):
            raw[section] = {k: v for k, v in raw[section].items() if v is not None}
    return raw


def parse_assignments(items: Iterable[str]) -> dict[str, Any]:
    """``["vllm.max-model-len=1024", "parallel.tensor=8"]`` -> nested overrides.

    Values are read as YAML (``8`` is a number, ``true`` a boolean, ``{a: 1}`` a mapping).
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        path = [p for p in key.strip().split(".")]
        if not sep or not all(path):
            raise ProfileError(
                f"--set {item!r}: expected FIELD=VALUE, e.g. vllm.max-model-len=8192")
        try:
            value = yaml.safe_load(text) if text.strip() else ""
        except yaml.YAMLError as exc:
            raise ProfileError(f"--set {item!r}: the value is not valid YAML ({exc})") from exc
        node = out
        for part in path[:-1]:
            nxt = node.setdefault(part, {})
            if not isinstance(nxt, dict):
                raise ProfileError(f"--set {item!r}: {part} is set to a value and a mapping")
            node = nxt
        node[path[-1]] = value
    return out


def resolve(
    name: str,
    overrides: Mapping[str, Any] | None = None,
    paths: Iterable[Path] | None = None,
) -> Profile:
    """The named profile with the operator's overrides applied, validated as a whole."""
    raw = load_raw(paths)
    if name not in raw:
        raise ProfileError(f"unknown profile {name!r}; known: {', '.join(sorted(raw))}")
    merged = _drop_nulls(merge(raw[name], overrides or {}))
    if merged.get("name") != name:
        raise ProfileError(f"profile {name}: the name cannot be overridden")
    try:
        return Profile.model_validate(merged)
    except ValidationError as exc:
        raise ProfileError(_describe(exc, name)) from exc


def resolve_options(
    name: str,
    assignments: Iterable[str] = (),
    extra_files: Iterable[Path | str] | None = None,
    *,
    host: str | None = None,
    port: int | None = None,
) -> Profile:
    """The profile a command line asks for: ``--set`` assignments (:func:`parse_assignments`),
    extra profile files read after the default one, ``--host`` and ``--port``."""
    overrides = parse_assignments(assignments)
    if host is not None:
        overrides["host"] = host
    if port is not None:
        overrides["port"] = port
    return resolve(name, overrides, with_extra_files(extra_files))


def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def serves(profile: Profile, stack: StackSet) -> bool:
    """Can the version set ``stack`` serve ``profile`` (platform, chip, vllm-ascend release)?"""
    return not _set_reasons(profile, stack)


def _set_reasons(profile: Profile, stack: StackSet) -> list[str]:
    if profile.device == "cpu":
        return [] if stack.platform == "cpu" else [
            f"profile {profile.name} serves on CPU; set {stack.name} is an Ascend set"]
    if stack.platform != "ascend":
        return [f"profile {profile.name} serves on {profile.chip} NPUs; set {stack.name} is a "
                f"{stack.platform} set without vllm-ascend"]
    reasons = []
    if profile.chip not in stack.chips:
        reasons.append(f"set {stack.name} does not support {profile.chip} (it supports "
                       f"{', '.join(stack.chips)})")
    wanted = _version(profile.min_vllm_ascend or "")
    have = _version(stack.vllm_ascend or "")
    if wanted is not None and (have is None or have < wanted):
        tutorial = profile.tutorial
        since = f" ({tutorial.path} appears at {tutorial.repo} {tutorial.tag})" if tutorial else ""
        reasons.append(f"profile {profile.name} needs vllm-ascend >= {profile.min_vllm_ascend}"
                       f"{since}; set {stack.name} has vllm-ascend {stack.vllm_ascend}")
    return reasons


def set_problems(profile: Profile, stack: StackSet, matrix: Matrix | None = None) -> list[str]:
    """Why the version set ``stack`` cannot serve ``profile``, each with the fix (empty: it can).

    The fix names the lowest set of ``matrix`` that serves the profile, when there is one.
    """
    reasons = _set_reasons(profile, stack)
    if not reasons:
        return []
    fitting = [s for s in (matrix.sets if matrix else []) if serves(profile, s)]
    if fitting:
        lowest = min(fitting, key=lambda s: _version(s.vllm_ascend or "0") or Version("0"))
        fix = f"fix: install set {lowest.name} (ascend_stack_set) or pick another profile"
    else:
        fix = "fix: no version set in the matrix serves it; pick another profile"
    return [f"{reason}; {fix}" for reason in reasons]
