"""Bare-metal elastic scaling: how many replicas the router should have, from vLLM's load metrics.

Pure: a series of samples (each replica's metric values at one time) in, a decision per sample
out. The same metrics and targets as the Kubernetes autoscalers
(:mod:`ascend_serve.serving.load_metrics`), and the same idea of pace:

- **load** is the mean per-replica value over target, the highest of the metrics (1.0: on
  target);
- **add** one replica when the load has stayed above 1.0 for ``up_after_s`` and the last change
  is at least ``cooldown_s`` old (a model load: a new replica needs that long before it takes
  work, and the queue it was ordered for persists meanwhile);
- **remove** one replica when the load the others would carry without it (load x n / (n-1)) has
  stayed below ``low_water`` for ``down_after_s`` (hysteresis: a removal must not bring the load
  straight back over target), the cool-down has passed, and more than the minimum remain;
- never outside ``[min_replicas, max_replicas]``; a sample without a metric of a replica holds
  (no decision on missing data).

:func:`run` drives an :class:`Actuator` (the router role's interface): it adds a replica only
once ``add_replica`` reports it validated, and removes one only after ``drain_replica``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from ascend_serve.serving.load_metrics import METRICS, MetricInputError

Action = Literal["add", "remove", "hold"]


@dataclass(frozen=True)
class Policy:
    min_replicas: int
    max_replicas: int
    targets: Mapping[str, float]
    up_after_s: float = 180.0
    down_after_s: float = 1200.0
    cooldown_s: float = 600.0
    low_water: float = 0.6

    def __post_init__(self) -> None:
        if self.min_replicas < 1:
            raise MetricInputError(f"minimum {self.min_replicas}: must be at least 1")
        if self.min_replicas > self.max_replicas:
            raise MetricInputError(f"minimum ({self.min_replicas}) is greater than maximum "
                                   f"({self.max_replicas})")
        if not self.targets:
            raise MetricInputError("no metric to scale on")
        for key in self.targets:
            if key not in METRICS:
                raise MetricInputError(
                    f"unknown metric {key!r}: use one of {', '.join(sorted(METRICS))}")
        if not 0 < self.low_water < 1:
            raise MetricInputError(f"low water {self.low_water}: must be between 0 and 1")
        if min(self.up_after_s, self.down_after_s, self.cooldown_s) < 0:
            raise MetricInputError("windows and cool-down must not be negative")

    @classmethod
    def for_load(cls, min_replicas: int, max_replicas: int, targets: Mapping[str, float],
                 load_s: float) -> Policy:
        """Cool-down one model load, removal after twice a load of low use (the pace of
        :func:`ascend_serve.k8s.autoscale.behavior`)."""
        return cls(min_replicas, max_replicas, targets, cooldown_s=load_s,
                   down_after_s=2 * load_s)


@dataclass(frozen=True)
class Sample:
    """Each replica's metric values (:func:`load_metrics.replica_values`) at time ``t`` (s)."""

    t: float
    replicas: Mapping[str, Mapping[str, float]]


@dataclass(frozen=True)
class Decision:
    t: float
    action: Action
    replicas: int  # before the action
    load: float | None  # None: a metric was missing
    reason: str

    def to_dict(self) -> dict[str, object]:
        return {"t": self.t, "action": self.action, "replicas": self.replicas,
                "load": None if self.load is None else round(self.load, 3),
                "reason": self.reason}


def load(sample: Sample, targets: Mapping[str, float]) -> float | None:
    """Mean per-replica value over target, the highest metric; None when a replica lacks one."""
    if not sample.replicas:
        return None
    worst = 0.0
    for key, target in targets.items():
        values = [r.get(key) for r in sample.replicas.values()]
        if any(v is None for v in values):
            return None
        worst = max(worst, sum(v for v in values if v is not None) / len(values) / target)
    return worst


@dataclass
class Scaler:
    """The decision state between samples (above/below since, last change)."""

    policy: Policy
    above_since: float | None = None
    below_since: float | None = None
    last_change: float | None = None

    def _cooling(self, t: float) -> bool:
        return self.last_change is not None and t - self.last_change < self.policy.cooldown_s

    def observe(self, sample: Sample) -> Decision:
        p = self.policy
        n = len(sample.replicas)
        now = load(sample, p.targets)
        if now is None:
            self.above_since = self.below_since = None
            return Decision(sample.t, "hold", n, None, "a replica reported no value of a metric")
        if n < p.min_replicas:
            return self._change(sample.t, "add", n, now, f"below the minimum {p.min_replicas}")
        if n > p.max_replicas:
            return self._change(sample.t, "remove", n, now, f"above the maximum {p.max_replicas}")
        if now > 1.0:
            self.below_since = None
            self.above_since = sample.t if self.above_since is None else self.above_since
            if n >= p.max_replicas:
                return Decision(sample.t, "hold", n, now, f"over target at the maximum {n}")
            if sample.t - self.above_since < p.up_after_s:
                return Decision(sample.t, "hold", n, now, "over target, not for long enough")
            if self._cooling(sample.t):
                return Decision(sample.t, "hold", n, now, "over target, cooling down")
            return self._change(sample.t, "add", n, now, "over target")
        self.above_since = None
        without_one = now * n / (n - 1) if n > 1 else float("inf")
        if without_one >= p.low_water:
            self.below_since = None
            return Decision(sample.t, "hold", n, now, "on target")
        self.below_since = sample.t if self.below_since is None else self.below_since
        if n <= p.min_replicas:
            return Decision(sample.t, "hold", n, now, f"low, at the minimum {n}")
        if sample.t - self.below_since < p.down_after_s:
            return Decision(sample.t, "hold", n, now, "low, not for long enough")
        if self._cooling(sample.t):
            return Decision(sample.t, "hold", n, now, "low, cooling down")
        return self._change(sample.t, "remove", n, now, "low without one replica")

    def _change(self, t: float, action: Action, n: int, now: float, reason: str) -> Decision:
        self.last_change = t
        self.above_since = self.below_since = None
        return Decision(t, action, n, now, reason)


def decide(policy: Policy, samples: Iterable[Sample]) -> list[Decision]:
    """One decision per sample of a recorded series (the replica count is the sample's)."""
    scaler = Scaler(policy)
    return [scaler.observe(s) for s in samples]


class Actuator(Protocol):
    """What the router role provides to ``fleet scale`` (module docstring of the CLI)."""

    def replicas(self) -> Sequence[str]:
        """The replicas behind the router now."""

    def add_replica(self) -> str | None:
        """Start one more replica, run validate on it and put it behind the router; its name,
        or None when it did not validate (then it is not behind the router)."""

    def drain_replica(self, name: str) -> None:
        """Take ``name`` out of the router's rotation and wait for its requests to finish."""

    def remove_replica(self, name: str) -> None:
        """Stop the drained replica ``name``."""


@dataclass
class Step:
    decision: Decision
    done: str = ""  # what the actuator did


@dataclass
class LoopResult:
    steps: list[Step] = field(default_factory=list)


def run(policy: Policy, actuator: Actuator,
        scrape: Callable[[Sequence[str]], Sample], steps: int,
        sleep: Callable[[], None] = lambda: None) -> LoopResult:
    """``steps`` rounds of scrape -> decide -> act. A failed validate leaves the count as it
    was; removal picks the newest replica, drained first."""
    scaler = Scaler(policy)
    result = LoopResult()
    for index in range(steps):
        names = list(actuator.replicas())
        decision = scaler.observe(scrape(names))
        step = Step(decision)
        if decision.action == "add":
            added = actuator.add_replica()
            step.done = f"added {added}" if added else "add failed validate: not routed"
            if not added:
                scaler.last_change = decision.t  # retry after the cool-down, not every round
        elif decision.action == "remove" and len(names) > 1:
            victim = names[-1]
            actuator.drain_replica(victim)
            actuator.remove_replica(victim)
            step.done = f"drained and removed {victim}"
        result.steps.append(step)
        if index + 1 < steps:
            sleep()
    return result
