"""``ascend-serve fleet scale``: the decision logic on metric series (recorded from a tiny vLLM
server under a burst, tests/data/scale, and built in vLLM's exposition format), the loop against
a fake router, and bad input."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from paths import ROOT
from terminal import uncolored
from typer.testing import CliRunner
from vllm_metrics import exposition

from ascend_serve.cli.fleet import fleet_app
from ascend_serve.fleet.scale import Policy, Sample, decide, load, run
from ascend_serve.serving.load_metrics import (
    DEFAULT_TARGETS,
    MetricInputError,
    parse_range,
    parse_targets,
    replica_values,
)

runner = CliRunner()
RECORDED = ROOT / "tests" / "data" / "scale" / "tiny-qwen2-burst.jsonl"


def series(points: Sequence[tuple[float, int, float, float]]) -> list[Sample]:
    """(t, replicas, waiting per replica, kv per replica) -> samples."""
    return [Sample(t, {f"r{i}": replica_values(exposition(w, kv)) for i in range(n)})
            for t, n, w, kv in points]


POLICY = Policy(1, 3, DEFAULT_TARGETS, up_after_s=60, down_after_s=300, cooldown_s=120)


def test_replica_values_combine_engines() -> None:
    values = replica_values(exposition(6, 0.7, engines=3))
    assert values == {"waiting": pytest.approx(6.0), "kv_cache": pytest.approx(0.7)}
    assert replica_values("vllm:num_requests_running 3\n") == {}


def test_a_short_burst_orders_nothing() -> None:
    decisions = decide(POLICY, series([(0, 1, 0, 0.1), (15, 1, 9, 0.9), (30, 1, 9, 0.9),
                                       (45, 1, 0, 0.1), (60, 1, 0, 0.1)]))
    assert [d.action for d in decisions] == ["hold"] * 5


def test_a_sustained_queue_adds_one_replica_then_cools_down() -> None:
    points = [(t, 1 if t <= 60 else 2, 6.0, 0.5) for t in range(0, 181, 15)]
    actions = [d.action for d in decide(POLICY, series(points))]
    # Over target from t=0; added at t=60 (up_after_s); the queue persists, but the cool-down
    # (120 s) holds the next one until t=180.
    assert actions.index("add") == 4
    assert actions.count("add") == 2 and actions[-1] == "add"


def test_no_more_than_the_maximum() -> None:
    points = [(t, 3, 10.0, 0.95) for t in range(0, 1000, 30)]
    decisions = decide(POLICY, series(points))
    assert {d.action for d in decisions} == {"hold"}
    assert "maximum" in decisions[-1].reason


def test_low_use_removes_one_only_after_the_window_and_with_hysteresis() -> None:
    # Two replicas at 0.25 of target: without one, 0.5 < low water 0.6: removable after 300 s.
    low = [(t, 2, 0.5, 0.2) for t in range(0, 331, 30)]
    actions = [d.action for d in decide(POLICY, series(low))]
    assert actions.index("remove") == 10  # t=300
    # At 0.4 of target, one fewer would carry 0.8 >= 0.6: keep both (no flapping).
    mid = [(t, 2, 0.8, 0.2) for t in range(0, 1000, 30)]
    assert {d.action for d in decide(POLICY, series(mid))} == {"hold"}


def test_never_below_the_minimum_and_missing_data_holds() -> None:
    idle = [(t, 1, 0.0, 0.0) for t in range(0, 1000, 60)]
    assert {d.action for d in decide(POLICY, series(idle))} == {"hold"}
    gap = Sample(0, {"r0": replica_values(exposition(9, 0.9)), "r1": {}})
    assert load(gap, DEFAULT_TARGETS) is None
    assert decide(POLICY, [gap])[0].action == "hold"


def test_the_recorded_burst_is_the_one_sources_names() -> None:
    line = (RECORDED.parent / "SOURCES").read_text().splitlines()[0]
    assert line.startswith(RECORDED.name + " |")
    assert hashlib.sha256(RECORDED.read_bytes()).hexdigest() == line.rsplit("sha256 ", 1)[1]


def test_the_recorded_burst_orders_a_replica_once_the_queue_lasts() -> None:
    samples = [Sample(row["t"], {"r0": replica_values(row["text"])})
               for row in map(json.loads, RECORDED.read_text().splitlines())]
    waiting = [s.replicas["r0"].get("waiting", 0.0) for s in samples]
    assert max(waiting) >= 2 and waiting[0] == 0 and waiting[-1] == 0  # a real queue, drained
    # Seconds-scale windows so the recorded half minute of load decides.
    policy = Policy(1, 2, DEFAULT_TARGETS, up_after_s=3, down_after_s=3, cooldown_s=0)
    actions = [d.action for d in decide(policy, samples)]
    assert actions[0] == "hold" and "add" in actions
    # The replay keeps the recorded single replica: it never removes below the minimum.
    assert "remove" not in actions


class FakeRouter:
    """An Actuator: validate fails for the replica names in ``broken``."""

    def __init__(self, broken: set[str]) -> None:
        self.names = ["r0"]
        self.broken = broken
        self.log: list[str] = []
        self.counter = 0

    def replicas(self) -> Sequence[str]:
        return list(self.names)

    def add_replica(self) -> str | None:
        self.counter += 1
        name = f"r{self.counter}"
        self.log.append(f"start {name}")
        if name in self.broken:
            self.log.append(f"validate {name} failed")
            return None
        self.log.append(f"validate {name}")
        self.names.append(name)
        return name

    def drain_replica(self, name: str) -> None:
        self.log.append(f"drain {name}")

    def remove_replica(self, name: str) -> None:
        assert self.log[-1] == f"drain {name}"  # removed only after draining
        self.names.remove(name)
        self.log.append(f"remove {name}")


def test_the_loop_routes_only_validated_replicas_and_drains_before_removal() -> None:
    router = FakeRouter(broken={"r1"})
    waits = iter([8.0] * 12 + [0.0] * 30)
    clock = iter(range(0, 10_000, 30))

    def scrape(names: Sequence[str]) -> Sample:
        w = next(waits)
        return Sample(next(clock), {n: replica_values(exposition(w, 0.1)) for n in names})

    result = run(POLICY, router, scrape, steps=40)
    # r1 failed validate and was never routed; r2 and r3 (the maximum) were; when the queue
    # was gone, the newest went first, each drained before removal, down to the minimum.
    assert router.log == ["start r1", "validate r1 failed", "start r2", "validate r2",
                          "start r3", "validate r3", "drain r3", "remove r3", "drain r2",
                          "remove r2"]
    assert router.names == ["r0"]
    done = [s.done for s in result.steps if s.done]
    assert done[0] == "add failed validate: not routed" and done[-1] == "drained and removed r2"


@pytest.mark.parametrize(("make", "message"), [
    (lambda: parse_range("3:1"), "MIN (3) is greater than MAX (1)"),
    (lambda: parse_targets(["queue=2"]), "unknown metric 'queue'"),
    (lambda: parse_targets(["waiting=-1"]), "above 0"),
    (lambda: Policy(2, 1, DEFAULT_TARGETS), "minimum (2) is greater than maximum (1)"),
    (lambda: Policy(1, 2, {"tokens": 1.0}), "unknown metric 'tokens'"),
])
def test_bad_policy_input(make: object, message: str) -> None:
    with pytest.raises(MetricInputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make()  # type: ignore[operator]


@pytest.mark.parametrize(("args", "message"), [
    (["--replicas", "4:2", "--series", "x"], "MIN (4) is greater than MAX (2)"),
    (["--replicas", "1:2", "--target", "gpu=1", "--series", "x"], "unknown metric 'gpu'"),
    (["--replicas", "1:2"], "either --series FILE or --replica"),
    (["--replicas", "1:2", "--replica", "a=localhost:8000"], "NAME=http://HOST:PORT"),
])
def test_the_command_refuses_bad_input(args: list[str], message: str) -> None:
    result = runner.invoke(fleet_app, ["scale", *args])
    assert result.exit_code == 2
    assert message in uncolored(result.stderr)


def test_the_command_replays_a_series(tmp_path: Path) -> None:
    path = tmp_path / "series.jsonl"
    path.write_text("".join(
        json.dumps({"t": t, "replicas": {"a": exposition(5, 0.5)}}) + "\n"
        for t in range(0, 400, 30)))
    result = runner.invoke(fleet_app, ["scale", "--replicas", "1:2", "--series", str(path),
                                       "--load-s", "100", "--json"])
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    actions = [d["action"] for d in report["decisions"]]
    # up after 180 s (the default), then the 100 s cool-down from the recorded count.
    assert actions.index("add") == 6
    assert (report["min"], report["max"]) == (1, 2)
