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

:func:`run` drives an :class:`Actuator`: it adds a replica only once ``add_replica`` reports it
validated, and removes one only after ``drain_replica``. :class:`RouterActuator` is the bare-metal
one: the running vllm-router's worker API (:mod:`ascend_serve.serving.router_api`) over standby
replicas, vLLM servers that run (deployed by the ``vllm_service`` role) but are not behind the
router. It starts and stops no server: a replica comes out of and goes back to the standby set.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from ansible_collections.ascend_serve.fleet.plugins.module_utils.validate import run_checks
from ascend_serve.serving.load_metrics import METRICS, MetricInputError
from ascend_serve.serving.router_api import RouterApiError, RouterClient

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


# --- the bare-metal actuator: vllm-router's worker API -----------------------------------------

Validator = Callable[[str], tuple[bool, str]]


def checks_validator(api_key: str | None, served_name: str | None = None, concurrency: int = 2,
                     max_tokens: int = 4, timeout_s: float = 120.0) -> Validator:
    """``ascend-serve validate``'s checks (the module_utils ``run_checks`` its command runs) as a
    replica's gate: (passed, "N/M checks passed" or the failed checks)."""

    def validate(url: str) -> tuple[bool, str]:
        report = run_checks(url, api_key=api_key, served_name=served_name,
                            concurrency=concurrency, max_tokens=max_tokens, timeout=timeout_s)
        failed = [f"{c.name}: {c.detail}" for c in report.checks if not c.ok]
        passed = len(report.checks) - len(failed)
        return report.ok, (f"{passed}/{len(report.checks)} checks passed" if report.ok
                           else "; ".join(failed)[:500])

    return validate


@dataclass
class RouterActuator:
    """The replicas behind a running vllm-router, from a set of standby replica URLs.

    - ``replicas()``: the router's ``/list_workers``, oldest first (those there at the start in
      URL order, then those this actuator added, in order);
    - ``add_replica()``: the first standby URL not behind the router that passes ``validate``
      is added (``/add_worker``); one that fails is not added and the next is tried;
    - ``drain_replica(url)``: ``/remove_worker`` (no new request goes there), then its
      ``vllm:num_requests_running`` read every ``drain_poll_s`` until 0 or ``drain_timeout_s``;
    - ``remove_replica(url)``: the router no longer lists it (removed again if it came back, a
      router restart meanwhile), and it joins the standby set.

    ``events`` says what was done, in order, for the operator.
    """

    client: RouterClient
    standby: list[str]
    validate: Validator
    drain_timeout_s: float = 300.0
    drain_poll_s: float = 5.0
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    events: list[str] = field(default_factory=list)
    _order: list[str] = field(default_factory=list)

    def _routed(self) -> list[str]:
        """The router's workers; those not seen before join the order (in URL order)."""
        urls = self.client.workers()
        self._order += sorted(u for u in urls if u not in self._order)
        return urls

    def replicas(self) -> Sequence[str]:
        return sorted(self._routed(), key=self._order.index)

    def add_replica(self) -> str | None:
        routed = set(self._routed())
        candidates = [u for u in self.standby if u not in routed]
        if not candidates:
            self.events.append("add: no standby replica left (every one is behind the router)")
            return None
        for url in candidates:
            ok, detail = self.validate(url)
            if not ok:
                self.events.append(f"validate {url} failed, not added: {detail}")
                continue
            self.events.append(f"validate {url} passed: {detail}")
            try:
                answer = self.client.add_worker(url)
            except RouterApiError as exc:
                self.events.append(f"add {url} refused: {exc}")
                continue
            self.events.append(f"added {url}: {answer}")
            if url in self._order:
                self._order.remove(url)
            self._order.append(url)
            return url
        return None

    def drain_replica(self, name: str) -> None:
        self.client.remove_worker(name)
        started = self.clock()
        reads = 0
        while True:
            try:
                running = self.client.replica_load(name).running
            except RouterApiError as exc:
                self.events.append(f"drained {name}: its /metrics does not answer ({exc}): "
                                   "nothing runs there")
                return
            reads += 1
            if not running:
                self.events.append(f"drained {name}: vllm:num_requests_running 0 "
                                   f"({reads} read(s))")
                return
            if self.clock() - started >= self.drain_timeout_s:
                self.events.append(f"drain of {name} timed out after {self.drain_timeout_s:g} s "
                                   f"with {running:g} request(s) running; removed anyway")
                return
            self.sleep(self.drain_poll_s)

    def remove_replica(self, name: str) -> None:
        if name in self.client.workers():
            self.client.remove_worker(name)
            if name in self.client.workers():
                raise RouterApiError(f"router {self.client.base_url} still lists {name} after "
                                     "/remove_worker")
        if name not in self.standby:
            self.standby.append(name)
        if name in self._order:
            self._order.remove(name)
        self.events.append(f"removed {name}: out of the router, back to standby")


class StandbyError(ValueError):
    """An inventory whose serving hosts cannot be read; the message names host and cause."""


def inventory_standby(inventory: Path, group: str) -> list[str]:
    """The replica URLs of an inventory group's serving hosts, as the router role computes its
    workers (``plugins/filter/router.py``): the host's ``router_worker_address``, else its
    ``ansible_host``, else its name; its ``router_worker_ports``, else its serving profile's
    port; a host with neither serves nothing and is left out."""
    from ascend_serve.mirror.inventory import InventoryError, read_hosts
    from ascend_serve.serving.replicas import worker_host
    from ascend_serve.serving.router import RouterPlanError

    urls: list[str] = []
    try:
        for host in read_hosts(inventory, limit=group):
            urls += [w.url for w in worker_host(host.name, host.get).workers()]
    except (InventoryError, RouterPlanError, TypeError, ValueError) as exc:
        raise StandbyError(f"inventory {inventory}, group {group!r}: {exc}") from exc
    return urls
