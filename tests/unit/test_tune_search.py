"""``ascend-serve tune --search``: the space, one server start per trial, the stored and resumed
study, on a fake server and a deterministic goodput landscape (no vLLM, no timing)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from ascend_serve.bench import tune_search as ts
from ascend_serve.bench.tune import Measurement, Setting, Trial, TuneError
from ascend_serve.serving.server import ServerError

SPACE = ["max-num-seqs=2,4,8,16", "max-num-batched-tokens=256,1024",
         "gpu-memory-utilization=0.8,0.9", "enable-chunked-prefill=true,false"]


def landscape(setting: Setting, concurrency: int) -> float:
    """Goodput (req/s) of a setting: grows with max-num-seqs up to 8 then falls off (latency
    SLO misses), chunked prefill helps, more memory helps a little."""
    seqs = setting.max_num_seqs
    value = float(min(seqs, 8) - max(0, seqs - 8) * 0.5)
    value += 1.0 if setting.enable_chunked_prefill else 0.0
    value += (setting.gpu_memory_utilization or 0.0)
    return value * concurrency / 4


class FakeServer:
    """Counts starts and stops; a setting vLLM would refuse (batched tokens below the model
    length without chunked prefill) fails to start."""

    def __init__(self) -> None:
        self.starts: list[str] = []
        self.stops: list[str] = []
        self.running = 0

    @contextlib.contextmanager
    def __call__(self, setting: Setting) -> Iterator[str]:
        self.starts.append(setting.label)
        if setting.max_num_batched_tokens == 256 and setting.enable_chunked_prefill is False:
            raise ServerError("vLLM exited with status 1 while starting",
                              "ValueError: max_num_batched_tokens (256) is smaller than "
                              "max_model_len (512)")
        assert self.running == 0, "two servers at once"
        self.running += 1
        try:
            yield f"http://fake/{setting.label}"
        finally:
            self.running -= 1
            self.stops.append(setting.label)


def measure(url: str, setting: Setting, concurrency: int) -> Measurement:
    assert url.endswith(setting.label)
    value = landscape(setting, concurrency)
    ok = setting.max_num_seqs <= 8  # p99 TPOT missed above 8 sequences, the more the worse
    return Measurement(metrics={"request_goodput": value, "request_throughput": value + 1},
                       slo_ok=ok, slo_detail=[] if ok else ["FAIL p99_tpot_ms <= 100"],
                       slo_miss=None if ok else (setting.max_num_seqs - 8) / 8)


def test_space_parses_values_and_refuses_unknown_knobs() -> None:
    space = ts.parse_space(SPACE)
    assert space == {"max-num-seqs": [2, 4, 8, 16], "max-num-batched-tokens": [256, 1024],
                     "gpu-memory-utilization": [0.8, 0.9],
                     "enable-chunked-prefill": [True, False]}
    assert ts.space_size(space) == 32 and len(ts.grid_settings(space)) == 32
    assert ts.parse_space(["max-num-seqs=4,4,8"]) == {"max-num-seqs": [4, 8]}
    assert ts.parse_space(["max-num-batched-tokens=512"], {"max-num-seqs": [8]}) == {
        "max-num-seqs": [8], "max-num-batched-tokens": [512]}
    for bad, message in (("max-num-sequences=4", "unknown knob 'max-num-sequences'"),
                         ("max-num-seqs", "KNOB=V1,V2"),
                         ("max-num-seqs=four", "not an integer"),
                         ("max-num-seqs=0", "positive"),
                         ("gpu-memory-utilization=1.5", r"fraction in \(0, 1\]"),
                         ("enable-chunked-prefill=maybe", "true or false")):
        with pytest.raises(TuneError, match=message):
            ts.parse_space([bad])
    with pytest.raises(TuneError, match="needs max-num-seqs"):
        ts.parse_space(["max-num-batched-tokens=512"])
    with pytest.raises(TuneError, match="unknown knob"):
        ts.setting_of({"swap-space": 4})


def test_setting_flags_render_both_spellings_of_chunked_prefill() -> None:
    on = ts.setting_of({"max-num-seqs": 4, "enable-chunked-prefill": True,
                        "gpu-memory-utilization": 0.9})
    off = ts.setting_of({"max-num-seqs": 4, "enable-chunked-prefill": False})
    assert on.vllm_flags() == {"max-num-seqs": 4, "gpu-memory-utilization": 0.9,
                               "enable-chunked-prefill": True,
                               "no-enable-chunked-prefill": False}
    assert off.vllm_flags()["no-enable-chunked-prefill"] is True
    assert off.vllm_flags()["enable-chunked-prefill"] is False
    assert (on.label, off.label) == ("seqs4-gmu0.9-cp", "seqs4-nocp")


def test_goodput_value_prefers_the_runs_that_met_the_slo() -> None:
    s = Setting(4)
    runs = [Trial(s, 1, Measurement({"request_goodput": 3.0}, slo_ok=True)),
            Trial(s, 8, Measurement({"request_goodput": 9.0}, slo_ok=False)),
            Trial(s, 4, Measurement({"request_goodput": 5.0}, slo_ok=True)),
            Trial(s, 16, error="all requests failed")]
    assert ts.goodput_value(runs) == (5.0, 0.0, runs[2])
    # None met the SLO: the best goodput measured, infeasible (by how far: unknown here, 1),
    # no winning run; nothing measured: the server did not start.
    assert ts.goodput_value(runs[1:2] + runs[3:]) == (9.0, 1.0, None)
    assert ts.goodput_value(runs[3:]) == (0.0, ts.NOT_STARTED, None)
    near = Trial(s, 2, Measurement({"request_goodput": 1.0}, slo_ok=False, slo_miss=0.25))
    assert ts.goodput_value([runs[1], near]) == (9.0, 0.25, None)
    # Without per-request thresholds there is no goodput: the request throughput counts.
    plain = [Trial(s, 2, Measurement({"request_throughput": 2.5}, slo_ok=True))]
    assert ts.goodput_value(plain) == (2.5, 0.0, plain[0])


def test_each_trial_starts_the_server_at_most_once(tmp_path: Path) -> None:
    server = FakeServer()
    space = ts.parse_space(SPACE)
    outcome = ts.search(space, [1, 4], server, measure, n_trials=12,
                        storage=ts.sqlite_url(tmp_path / "study.db"), study_name="s", seed=3)
    assert len(outcome.trials) == 12 and outcome.previous == 0
    fresh = [t for t in outcome.trials if t.reused_from is None]
    reused = [t for t in outcome.trials if t.reused_from is not None]
    # One start per measured trial, none for a trial whose setting was measured before; both
    # concurrencies were measured within that one start.
    assert outcome.restarts == len(fresh) == len(server.starts)
    assert len(set(server.starts)) == len(server.starts)
    assert sorted(server.starts) == sorted(t.setting.label for t in fresh)
    for t in fresh:
        if t.runs[0].concurrency is None:  # the server refused the setting
            assert t.value == 0.0 and "smaller than max_model_len" in (t.runs[0].error or "")
        else:
            assert [r.concurrency for r in t.runs] == [1, 4]
    for t in reused:
        assert t.runs == [] and t.value == next(
            f.value for f in outcome.trials if f.number == t.reused_from)
    # The value told to optuna: the best goodput of the concurrencies, the SLO a constraint.
    for t in fresh:
        started = t.runs[0].ok
        assert t.value == (landscape(t.setting, 4) if started else 0.0)
        assert t.feasible == (started and t.setting.max_num_seqs <= 8)
        assert t.violation == (ts.NOT_STARTED if not started else
                               max(0.0, (t.setting.max_num_seqs - 8) / 8))
    best = outcome.best
    assert best is not None and best.feasible
    assert best.value == max(t.value for t in outcome.trials if t.feasible)


def test_a_resumed_study_adds_trials_and_restarts_no_completed_one(tmp_path: Path) -> None:
    db = tmp_path / "studies" / "tune.db"
    storage = ts.sqlite_url(db)
    space = ts.parse_space(["max-num-seqs=1,2,4,8,16,32", "enable-chunked-prefill=true,false"])
    first_server = FakeServer()
    first = ts.search(space, [4], first_server, measure, n_trials=3, storage=storage,
                      study_name="tiny", seed=1)
    assert first.previous == 0 and len(first.trials) == 3
    second_server = FakeServer()
    second = ts.search(space, [4], second_server, measure, n_trials=3, storage=storage,
                       study_name="tiny", seed=2)
    assert second.previous == 3 and [t.number for t in second.trials] == [3, 4, 5]
    stored = ts.study_trials(storage, "tiny")
    assert [t["number"] for t in stored] == [0, 1, 2, 3, 4, 5]
    # Every server started once in all: the resumed run started none of the first run's.
    assert not set(first_server.starts) & set(second_server.starts)
    assert len(first_server.starts) + len(second_server.starts) == \
        first.restarts + second.restarts == len({t["label"] for t in stored if "label" in t})
    for t in second.trials:
        if t.reused_from is not None:
            assert t.setting in {f.setting for f in first.trials + second.trials
                                 if f.number == t.reused_from}
    # The winner is the study's: an earlier run's trial when this run found nothing better.
    everything = [t for t in first.trials + second.trials if t.feasible]
    assert second.best is not None
    assert second.best.value == max(t.value for t in everything)
    assert second.best.best is not None and second.best.best.concurrency == 4
    third = ts.search(space, [4], FakeServer(), lambda url, s, c: Measurement(
        {"request_goodput": 0.1}, slo_ok=True), n_trials=1, storage=storage,
        study_name="tiny", seed=3)
    assert third.best is not None and third.best.number < 6
    assert third.best.value == second.best.value
    # The study is an SQLite file holding the trials.
    with sqlite3.connect(db) as conn:
        assert conn.execute("select count(*) from trials").fetchone() == (7,)


def test_a_study_refuses_another_space_and_bad_arguments(tmp_path: Path) -> None:
    storage = ts.sqlite_url(tmp_path / "s.db")
    space = ts.parse_space(["max-num-seqs=2,4"])
    ts.search(space, [1], FakeServer(), measure, n_trials=1, storage=storage, study_name="a",
              seed=0)
    with pytest.raises(TuneError, match="another space"):
        ts.search(ts.parse_space(["max-num-seqs=2,4,8"]), [1], FakeServer(), measure,
                  n_trials=1, storage=storage, study_name="a")
    with pytest.raises(TuneError, match="--trials"):
        ts.search(space, [1], FakeServer(), measure, n_trials=0, storage=storage,
                  study_name="b")
    with pytest.raises(TuneError, match="concurrency"):
        ts.search(space, [], FakeServer(), measure, n_trials=1, storage=storage,
                  study_name="b")
    with pytest.raises(TuneError, match="sampler"):
        ts.search(space, [1], FakeServer(), measure, n_trials=1, storage=storage,
                  study_name="c", sampler="annealing")
    with pytest.raises(TuneError, match="no study 'missing'"):
        ts.study_trials(storage, "missing")


def test_replay_counts_distinct_settings_until_the_target() -> None:
    space = ts.parse_space(["max-num-seqs=1,2,4,8,16,32", "max-num-batched-tokens=256,1024",
                            "enable-chunked-prefill=true,false"])
    recorded = {s: (landscape(s, 4), max(0.0, (s.max_num_seqs - 8) / 8))
                for s in ts.grid_settings(space)}
    best = max(v for v, miss in recorded.values() if miss == 0)
    counts = [ts.replay(recorded, space, sampler=m, seed=seed, target=0.95 * best,
                        infeasible_as_zero=zero)
              for m in ("tpe", "random") for zero in (False, True) for seed in range(3)]
    assert all(c is not None and 1 <= c <= len(recorded) for c in counts)
    # An unreachable target: every distinct setting is measured once, then it gives up.
    assert ts.replay(recorded, space, sampler="random", seed=0, target=best + 1) is None
    # Only a feasible setting counts: here the infeasible ones have the higher goodput.
    steep = {s: (float(s.max_num_seqs), miss) for s, (_, miss) in recorded.items()}
    assert ts.replay(steep, space, sampler="tpe", seed=0, target=9.0) is None
    assert ts.replay(steep, space, sampler="tpe", seed=0, target=8.0) is not None
    assert ts.trials_to_reach([1.0, 3.0, 2.0, 5.0], 4.75) == 4
    assert ts.trials_to_reach([1.0], 2.0) is None


def test_default_space_is_around_the_profile() -> None:
    assert ts.default_space({"max-num-seqs": 16, "max-model-len": 512}) == {
        "max-num-seqs": [8, 16, 32], "max-num-batched-tokens": [512, 1024, 2048],
        "gpu-memory-utilization": [0.87, 0.92, 0.95],  # vLLM's default 0.92 (v0.32.0)
        "enable-chunked-prefill": [True, False]}
    space = ts.default_space({"max-num-batched-tokens": 4096, "gpu-memory-utilization": 0.9},
                             seqs=[4, 4, 8])
    assert space["max-num-seqs"] == [4, 8]
    assert space["max-num-batched-tokens"] == [2048, 4096, 8192]
    assert space["gpu-memory-utilization"] == [0.85, 0.9, 0.95]
    assert "max-num-batched-tokens" not in ts.default_space({})
    assert ts.default_space({}, batched_tokens=[512, 512])["max-num-batched-tokens"] == [512]


def test_slo_violation_is_the_relative_miss_of_the_failed_targets() -> None:
    from ascend_serve.bench import slo
    from ascend_serve.bench.tune import slo_violation

    target = slo.PRESETS["interactive"]  # p99 TTFT <= 2000, p99 TPOT <= 100, failed <= 0
    met = slo.evaluate({"p99_ttft_ms": 1500.0, "p99_tpot_ms": 50.0, "failed": 0,
                        "completed": 8}, target)
    assert slo_violation(met) == 0.0
    missed = slo.evaluate({"p99_ttft_ms": 3000.0, "p99_tpot_ms": 150.0, "failed": 0,
                           "completed": 8}, target)
    assert slo_violation(missed) == pytest.approx(0.5 + 0.5)
    unmeasured = slo.evaluate({"p99_ttft_ms": 100.0, "completed": 8, "failed": 0}, target)
    assert slo_violation(unmeasured) == pytest.approx(1.0)  # no p99 TPOT: counts 1
    assert Measurement({}, slo_ok=False).violation == 1.0
    assert Measurement({}, slo_ok=True, slo_miss=3.0).violation == 0.0
