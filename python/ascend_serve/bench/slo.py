"""Service-level objectives for ``ascend-serve bench`` and ``tune``: presets, parsing, verdicts.

An :class:`Slo` has two parts:

* per-request thresholds (ms) on ``ttft``, ``tpot`` and ``e2el``: a completed request that
  meets all of them is "good"; they give the run's ``request_goodput`` (good requests per
  second, vLLM's ``--goodput``);
* aggregate targets on the run's metrics, by their ``vllm bench serve`` names
  (``p99_ttft_ms <= 2000``, ``request_throughput >= 120`` per card, ``failed <= 0``). A target
  marked per card is multiplied by the number of cards served (``cards``).

Written on the command line (``--slo``, repeatable, comma-separated) as a preset name, a YAML
file, or expressions:

* ``ttft_ms:p99<=2000`` — a statistic of a latency: ``METRIC:STAT OP VALUE`` with METRIC one
  of ``ttft``, ``tpot``, ``itl``, ``e2el`` (``_ms`` optional) and STAT ``mean``, ``median``,
  ``std`` or ``pNN`` (the run computes the percentiles its targets need);
* ``request_throughput>=120/card`` — a run metric, ``/card`` for a per-card target;
* ``tpot_ms<=100`` — a latency without a statistic is a per-request threshold (goodput).

A YAML file holds ``name``, ``description``, ``per_request`` (``{ttft_ms: 2000, …}``) and
``targets`` (expressions, or mappings ``{metric, op, value, per_card}``).

:func:`evaluate` gives a :class:`Verdict`: each target's measured value against its threshold,
and PASS only when every target passes. A latency target cannot pass on a run without a
completed request (vLLM reports 0 ms there).
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from ascend_serve.bench.metrics import GOODPUT_METRICS, LATENCY_METRICS, percentile_label

RUN_METRICS = ("duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
               "request_throughput", "request_goodput", "output_throughput",
               "total_token_throughput", "max_output_tokens_per_s", "max_concurrent_requests")
OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt}
_STAT_RE = re.compile(r"^(mean|median|std|p(\d+(?:\.\d+)?))$")
_LATENCY_FIELD_RE = re.compile(r"^(mean|median|std|p(\d+(?:\.\d+)?))_(ttft|tpot|itl|e2el)_ms$")
_EXPR_RE = re.compile(r"^\s*([A-Za-z0-9_.:]+)\s*(<=|>=|<|>)\s*([-+0-9.eE]+)\s*"
                      r"(/\s*card)?\s*$")


class SloError(ValueError):
    """An SLO expression, file or preset name that cannot be used."""


@dataclass(frozen=True)
class Target:
    """An aggregate target: ``metric op value`` (times the cards when ``per_card``)."""

    metric: str
    op: str
    value: float
    per_card: bool = False

    def threshold(self, cards: int = 1) -> float:
        return self.value * cards if self.per_card else self.value

    def text(self, cards: int = 1) -> str:
        if self.per_card:
            return (f"{self.metric} {self.op} {_num(self.threshold(cards))} "
                    f"({_num(self.value)}/card x {cards} cards)")
        return f"{self.metric} {self.op} {_num(self.value)}"

    @property
    def percentile(self) -> float | None:
        match = _LATENCY_FIELD_RE.match(self.metric)
        return float(match.group(2)) if match and match.group(2) else None

    @property
    def is_latency(self) -> bool:
        return _LATENCY_FIELD_RE.match(self.metric) is not None

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "op": self.op, "value": self.value,
                "per_card": self.per_card}


@dataclass(frozen=True)
class Slo:
    """Per-request thresholds (ms, for goodput) and aggregate targets; see the module doc."""

    name: str
    description: str = ""
    per_request_ms: Mapping[str, float] = field(default_factory=dict)
    targets: tuple[Target, ...] = ()
    # The workload the figures were measured with (informational: bench with it to compare).
    workload: Mapping[str, Any] = field(default_factory=dict)

    def percentiles(self) -> set[float]:
        """The percentiles the targets need computed."""
        return {p for t in self.targets if (p := t.percentile) is not None}

    def merged(self, other: Slo) -> Slo:
        """Both SLOs' thresholds (the stricter per metric) and targets."""
        per_request = dict(self.per_request_ms)
        for key, value in other.per_request_ms.items():
            per_request[key] = min(value, per_request.get(key, math.inf))
        targets = self.targets + tuple(t for t in other.targets if t not in self.targets)
        return Slo(name=f"{self.name}+{other.name}",
                   description="; ".join(d for d in (self.description, other.description) if d),
                   per_request_ms=per_request, targets=targets,
                   workload={**self.workload, **other.workload})

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description,
                "per_request_ms": dict(self.per_request_ms),
                "targets": [t.to_dict() for t in self.targets],
                "workload": dict(self.workload)}


def _num(value: float) -> str:
    return f"{value:g}" if abs(value) < 1e6 else f"{value:.6g}"


def _latency_name(name: str) -> str | None:
    base = name.removesuffix("_ms")
    return base if base in LATENCY_METRICS else None


def metric_field(name: str) -> str:
    """``ttft_ms:p99`` → ``p99_ttft_ms``; a run metric or a vLLM latency field as it is."""
    name = name.strip()
    if ":" in name:
        metric, _, stat = name.partition(":")
        base = _latency_name(metric)
        if base is None:
            raise SloError(f"{metric!r} is not a latency ({', '.join(LATENCY_METRICS)}; "
                           "e.g. ttft_ms:p99)")
        match = _STAT_RE.match(stat.strip().lower())
        if not match:
            raise SloError(f"{stat!r} is not a statistic (mean, median, std or pNN, e.g. p99)")
        if match.group(2) is not None:
            p = float(match.group(2))
            if not 0 <= p <= 100:
                raise SloError(f"percentile {p:g} is not within 0..100")
            return f"p{percentile_label(p)}_{base}_ms"
        return f"{match.group(1)}_{base}_ms"
    if name in RUN_METRICS or _LATENCY_FIELD_RE.match(name):
        return name
    raise SloError(f"unknown metric {name!r}: a latency statistic (e.g. ttft_ms:p99) or one of "
                   f"{', '.join(RUN_METRICS)}")


def parse_expression(text: str) -> Target | tuple[str, float]:
    """One expression: a :class:`Target`, or ``(latency, ms)`` for a per-request threshold."""
    match = _EXPR_RE.match(text)
    if not match:
        raise SloError(f"cannot read the SLO {text!r}: expected e.g. 'ttft_ms:p99<=2000', "
                       "'request_throughput>=120/card' or 'tpot_ms<=100'")
    name, op, raw, per_card = match.groups()
    try:
        value = float(raw)
    except ValueError as exc:
        raise SloError(f"{raw!r} in {text!r} is not a number") from exc
    if not math.isfinite(value) or value < 0:
        raise SloError(f"the value of {text!r} must be a number >= 0")
    base = _latency_name(name) if ":" not in name else None
    if base is not None:
        if base not in GOODPUT_METRICS:
            raise SloError(f"per-request thresholds are on {', '.join(GOODPUT_METRICS)} (ms); "
                           f"for ITL give a statistic, e.g. itl_ms:p99{op}{raw}")
        if op not in ("<=", "<") or per_card:
            raise SloError(f"a per-request threshold is an upper bound in ms: {base}_ms<=VALUE "
                           f"(not {text!r})")
        return base, value
    return Target(metric_field(name), op, value, per_card=bool(per_card))


def from_expressions(expressions: Iterable[str], name: str = "custom",
                     description: str = "") -> Slo:
    per_request: dict[str, float] = {}
    targets: list[Target] = []
    for text in expressions:
        parsed = parse_expression(text)
        if isinstance(parsed, Target):
            targets.append(parsed)
        else:
            per_request[parsed[0]] = parsed[1]
    return Slo(name=name, description=description, per_request_ms=per_request,
               targets=tuple(targets))


def _target_from_mapping(item: Mapping[str, Any], where: str) -> Target:
    metric, op, value = item.get("metric"), item.get("op", "<="), item.get("value")
    if not isinstance(metric, str) or op not in OPS or isinstance(value, bool) \
            or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise SloError(f"{where}: a target needs metric (text), op ({', '.join(OPS)}) and "
                       f"value (a number), not {dict(item)!r}")
    return Target(metric_field(metric), op, float(value), bool(item.get("per_card", False)))


def from_mapping(data: Any, where: str = "SLO") -> Slo:
    """An SLO from parsed YAML (see the module docstring for the keys)."""
    if not isinstance(data, dict):
        raise SloError(f"{where}: expected a mapping with per_request and/or targets")
    unknown = set(data) - {"name", "description", "per_request", "targets", "workload"}
    if unknown:
        raise SloError(f"{where}: unknown keys {', '.join(sorted(map(str, unknown)))}")
    per_request: dict[str, float] = {}
    for key, value in (data.get("per_request") or {}).items():
        base = _latency_name(str(key))
        if base not in GOODPUT_METRICS or isinstance(value, bool) \
                or not isinstance(value, (int, float)) or value < 0:
            raise SloError(f"{where}: per_request takes {', '.join(GOODPUT_METRICS)} (ms) with "
                           f"numbers >= 0, not {key}: {value!r}")
        per_request[base] = float(value)
    targets: list[Target] = []
    for item in data.get("targets") or []:
        if isinstance(item, str):
            parsed = parse_expression(item)
            if isinstance(parsed, Target):
                targets.append(parsed)
            else:
                per_request[parsed[0]] = parsed[1]
        elif isinstance(item, dict):
            targets.append(_target_from_mapping(item, where))
        else:
            raise SloError(f"{where}: a target is an expression or a mapping, not {item!r}")
    workload = data.get("workload") or {}
    if not isinstance(workload, dict):
        raise SloError(f"{where}: workload must be a mapping")
    if not per_request and not targets:
        raise SloError(f"{where}: no per_request threshold and no target")
    return Slo(name=str(data.get("name") or where), description=str(data.get("description", "")),
               per_request_ms=per_request, targets=tuple(targets), workload=dict(workload))


def load_file(path: str | Path) -> Slo:
    file = Path(path).expanduser()
    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise SloError(f"cannot read the SLO file {file}: {exc}") from exc
    return from_mapping(data, where=str(file))


PRESETS: dict[str, Slo] = {
    "guide-customer-service": Slo(
        name="guide-customer-service",
        description=(
            "The deployment guide's customer-service case: '35 ms latency, 120 requests/s per "
            "card (480 QPS on 4 cards)'. The guide does not say which latency; 35 ms is mapped "
            "to the time per output token (mean TPOT, and per request for goodput), the only "
            "LLM serving latency of that size: a whole answer (E2EL) or a first token (TTFT) "
            "after a prompt of any length takes far longer on a DeepSeek model, and the "
            "guide's CPU baseline of 120 ms is a per-token figure too. The throughput is "
            "request_throughput per card: run with --cards equal to the cards serving."),
        per_request_ms={"tpot": 35.0},
        targets=(Target("mean_tpot_ms", "<=", 35.0),
                 Target("request_throughput", ">=", 120.0, per_card=True),
                 Target("failed", "<=", 0.0)),
    ),
    "interactive": Slo(
        name="interactive",
        description="A chat user's patience: the first token within 2 s and at least 10 "
                    "tokens/s after it (TPOT 100 ms), for 99% of the requests.",
        per_request_ms={"ttft": 2000.0, "tpot": 100.0},
        targets=(Target("p99_ttft_ms", "<=", 2000.0), Target("p99_tpot_ms", "<=", 100.0),
                 Target("failed", "<=", 0.0)),
    ),
    "vllm-ascend-r1-0528-a2-pd": Slo(
        name="vllm-ascend-r1-0528-a2-pd",
        description="vllm-ascend's published reference: DeepSeek-R1-0528 W8A8 on 8x A2 "
                    "(PD-disaggregated), ~7k input / 2k output tokens, concurrency 8: TTFT "
                    "3.7 s, TPOT 42 ms (means). Bench with that workload to compare.",
        per_request_ms={"ttft": 3700.0, "tpot": 42.0},
        targets=(Target("mean_ttft_ms", "<=", 3700.0), Target("mean_tpot_ms", "<=", 42.0),
                 Target("failed", "<=", 0.0)),
        workload={"input_len": 7168, "output_len": 2048, "concurrency": 8},
    ),
    "vllm-ascend-v3.1-a3": Slo(
        name="vllm-ascend-v3.1-a3",
        description="vllm-ascend's published reference: DeepSeek-V3.1 W8A8 on 4x A3 (2P1D), "
                    "3.5k input / 1.5k output tokens: TTFT 6.2 s, TPOT 49 ms (means), 478 "
                    "output tokens/s per card (--cards: the cards serving).",
        per_request_ms={"ttft": 6200.0, "tpot": 49.0},
        targets=(Target("mean_ttft_ms", "<=", 6200.0), Target("mean_tpot_ms", "<=", 49.0),
                 Target("output_throughput", ">=", 478.0, per_card=True),
                 Target("failed", "<=", 0.0)),
        workload={"input_len": 3584, "output_len": 1536},
    ),
    "tiny-cpu": Slo(
        name="tiny-cpu",
        description="Loose bounds for the tiny random models on a shared 2-core CPU (tests, "
                    "CI): every request answered, p99 TTFT <= 30 s, p99 TPOT <= 5 s.",
        per_request_ms={"ttft": 30000.0, "tpot": 5000.0},
        targets=(Target("p99_ttft_ms", "<=", 30000.0), Target("p99_tpot_ms", "<=", 5000.0),
                 Target("failed", "<=", 0.0), Target("completed", ">=", 1.0)),
    ),
}


def resolve(specs: Iterable[str]) -> Slo | None:
    """The SLO of ``--slo`` values: preset names, YAML files and expressions, merged."""
    parts: list[Slo] = []
    expressions: list[str] = []
    for spec in specs:
        for item in (s.strip() for s in spec.split(",")):
            if not item:
                continue
            if item in PRESETS:
                parts.append(PRESETS[item])
            elif item.endswith((".yml", ".yaml")) or Path(item).expanduser().is_file():
                parts.append(load_file(item))
            elif any(c in item for c in "<>="):
                parse_expression(item)  # raises with what is wrong
                expressions.append(item)
            else:
                raise SloError(f"--slo {item!r} is not a preset ({', '.join(PRESETS)}), a YAML "
                               "file or an expression like 'ttft_ms:p99<=2000'")
    if expressions:
        parts.append(from_expressions(expressions))
    if not parts:
        return None
    slo = parts[0]
    for other in parts[1:]:
        slo = slo.merged(other)
    return slo


@dataclass(frozen=True)
class TargetResult:
    target: Target
    threshold: float
    measured: float | None
    passed: bool
    note: str = ""

    def to_dict(self, cards: int = 1) -> dict[str, Any]:
        return {"metric": self.target.metric, "op": self.target.op,
                "target": self.threshold, "per_card": self.target.per_card,
                "measured": self.measured, "passed": self.passed, "note": self.note,
                "text": self.target.text(cards)}


@dataclass(frozen=True)
class Verdict:
    slo: Slo
    cards: int
    results: tuple[TargetResult, ...]

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    def lines(self) -> list[str]:
        """One line a target: ``PASS p99_ttft_ms <= 2000: 153.2``."""
        out = []
        for r in self.results:
            measured = "n/a" if r.measured is None else f"{r.measured:.4g}"
            note = f" ({r.note})" if r.note else ""
            out.append(f"{'PASS' if r.passed else 'FAIL'} {r.target.text(self.cards)}: "
                       f"measured {measured}{note}")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"slo": self.slo.to_dict(), "cards": self.cards,
                "verdict": "PASS" if self.passed else "FAIL", "passed": self.passed,
                "targets": [r.to_dict(self.cards) for r in self.results]}


class HasMetrics(Protocol):
    @property
    def metrics(self) -> Mapping[str, Any]: ...


def evaluate(result: Mapping[str, Any] | HasMetrics, slo: Slo, cards: int = 1) -> Verdict:
    """Each target of ``slo`` against a run's metrics (a mapping of vLLM field names, or an
    object with such a ``metrics`` mapping, e.g. a
    :class:`~ascend_serve.bench.runner.BenchResult`)."""
    if cards < 1:
        raise SloError(f"cards must be at least 1, not {cards}")
    metrics: Mapping[str, Any] = result if isinstance(result, Mapping) else result.metrics
    completed = metrics.get("completed")
    results = []
    for target in slo.targets:
        threshold = target.threshold(cards)
        raw = metrics.get(target.metric)
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            results.append(TargetResult(target, threshold, None, False,
                                        "not measured in this run"))
            continue
        measured = float(raw)
        if target.is_latency and not completed:
            results.append(TargetResult(target, threshold, measured, False,
                                        "no completed request"))
            continue
        results.append(TargetResult(target, threshold, measured,
                                    OPS[target.op](measured, threshold)))
    return Verdict(slo=slo, cards=cards, results=tuple(results))
