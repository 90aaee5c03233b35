"""``ascend-serve tune --search``: an optuna study over a profile's engine knobs, maximising
goodput under the SLO, instead of the full grid of :mod:`ascend_serve.bench.tune`.

The space: a list of values per knob (:data:`KNOBS`: ``max-num-seqs``,
``max-num-batched-tokens``, ``gpu-memory-utilization``, ``enable-chunked-prefill``), sampled
with optuna's TPE sampler (``suggest_categorical``; ``random`` is the baseline sampler).

Restarts. A knob is either a server knob (an engine argument: vLLM reads it when the engine
starts, so a new value needs a new server) or a client knob (the load: the client
concurrency). All four knobs are server knobs in vLLM (``EngineArgs``, vllm/engine/arg_utils.py),
so a trial batches them into one :class:`~ascend_serve.bench.tune.Setting` and starts the
server at most once: one ``serve(setting)`` per trial, inside which every client concurrency
is measured. A trial whose setting was already measured in the study (this run or an earlier
one) starts nothing: it is told the recorded value (``reused_from``), so a resumed study never
restarts a completed trial's server.

The value of a trial: its goodput, ``request_goodput`` (requests/s that met the SLO's
per-request thresholds; ``request_throughput`` without such thresholds), the best among its
client concurrencies, preferring those whose run met the SLO's targets (p99 TTFT/TPOT...). The
SLO is a constraint (optuna's ``Trial.set_constraint``, which its TPE sampler reads): a trial
none of whose runs met it is infeasible, by how far its closest run missed
(:func:`~ascend_serve.bench.tune.slo_violation`: p99 TTFT 3 s against 2 s is 0.5), and a server
that did not start by :data:`NOT_STARTED`. TPE ranks infeasible trials by that distance (not by
their goodput), so a near miss guides it more than a wide one. The winner is the feasible trial
with the highest goodput. (``replay(..., infeasible_as_zero=True)`` is the simpler formulation,
a miss told as goodput 0 without a constraint, kept to compare the two.)

The study lives in SQLite (``--study-db``, ``--study-name``) and is resumed when both name an
existing study: its space must be the same (the space is kept in the study's user attributes).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ascend_serve.bench.tune import Measure, Measurement, Serve, Setting, Trial, TuneError
from ascend_serve.serving.server import ServerError

SamplerName = Literal["tpe", "random"]
SAMPLERS: tuple[str, ...] = ("tpe", "random")

# The knobs, by their vLLM flag names, and the Setting field each sets. ``restart``: the knob is
# an engine argument (a new value needs a new server); every knob here is one.
KnobType = type[int] | type[float] | type[bool]


@dataclass(frozen=True)
class Knob:
    name: str
    field: str
    kind: KnobType
    restart: bool = True

    def parse(self, text: str) -> int | float | bool:
        raw = text.strip().lower()
        if self.kind is bool:
            if raw in ("true", "on", "yes", "1"):
                return True
            if raw in ("false", "off", "no", "0"):
                return False
            raise TuneError(f"{self.name}: {text!r} is not true or false")
        try:
            value: int | float = int(raw) if self.kind is int else float(raw)
        except ValueError as exc:
            raise TuneError(f"{self.name}: {text!r} is not "
                            f"{'an integer' if self.kind is int else 'a number'}") from exc
        if self.kind is float and not 0 < value <= 1:
            raise TuneError(f"{self.name}: {text!r} is not a fraction in (0, 1]")
        if self.kind is int and value < 1:
            raise TuneError(f"{self.name}: {text!r} is not a positive integer")
        return value


KNOBS: dict[str, Knob] = {k.name: k for k in (
    Knob("max-num-seqs", "max_num_seqs", int),
    Knob("max-num-batched-tokens", "max_num_batched_tokens", int),
    Knob("gpu-memory-utilization", "gpu_memory_utilization", float),
    Knob("enable-chunked-prefill", "enable_chunked_prefill", bool),
)}

Space = dict[str, list[Any]]


def parse_space(specs: Sequence[str], defaults: Mapping[str, Sequence[Any]] | None = None
                ) -> Space:
    """``["max-num-seqs=4,8,16", "enable-chunked-prefill=true,false"]`` → the space (knob →
    values, duplicates dropped), over ``defaults`` for the knobs not given. Unknown knobs,
    bad values and a space without ``max-num-seqs`` raise :class:`TuneError`."""
    space: Space = {k: list(v) for k, v in (defaults or {}).items()}
    for spec in specs:
        name, sep, values = spec.partition("=")
        name = name.strip()
        if not sep or not values.strip():
            raise TuneError(f"--space {spec!r}: write KNOB=V1,V2,... (knobs: "
                            f"{', '.join(KNOBS)})")
        if name not in KNOBS:
            raise TuneError(f"--space: unknown knob {name!r}; the knobs are "
                            f"{', '.join(KNOBS)}")
        parsed = [KNOBS[name].parse(v) for v in values.split(",") if v.strip()]
        space[name] = list(dict.fromkeys(parsed))
    for name in space:
        if name not in KNOBS:
            raise TuneError(f"unknown knob {name!r}; the knobs are {', '.join(KNOBS)}")
    if not space.get("max-num-seqs"):
        raise TuneError("the space needs max-num-seqs values")
    return space


# vLLM's default of gpu_memory_utilization (CacheConfig, vllm/config/cache.py, v0.32.0).
VLLM_GPU_MEMORY_UTILIZATION = 0.92


def default_space(vllm: Mapping[str, Any], seqs: Sequence[int] | None = None,
                  batched_tokens: Sequence[int] | None = None) -> Space:
    """A space around a profile's ``vllm`` flags: max-num-seqs at half, once and twice the
    profile's (default 16); max-num-batched-tokens at half, once and twice the profile's, or
    once, twice and four times max-model-len when it sets none (and none without either);
    gpu-memory-utilization 0.05 below, at and above the profile's (vLLM's default without
    one), at most 0.95; chunked prefill on and off. ``seqs`` and ``batched_tokens`` replace
    the first two."""
    space: Space = {}
    base = int(vllm.get("max-num-seqs", 16))
    space["max-num-seqs"] = (list(dict.fromkeys(seqs)) if seqs
                             else sorted({max(1, base // 2), base, base * 2}))
    tokens = vllm.get("max-num-batched-tokens")
    model_len = vllm.get("max-model-len")
    if batched_tokens:
        space["max-num-batched-tokens"] = list(dict.fromkeys(batched_tokens))
    elif isinstance(tokens, int):
        space["max-num-batched-tokens"] = sorted({max(1, tokens // 2), tokens, tokens * 2})
    elif isinstance(model_len, int):
        space["max-num-batched-tokens"] = [model_len, model_len * 2, model_len * 4]
    gmu = float(vllm.get("gpu-memory-utilization", VLLM_GPU_MEMORY_UTILIZATION))
    space["gpu-memory-utilization"] = sorted({round(max(0.05, gmu - 0.05), 2), round(gmu, 2),
                                              round(min(0.95, gmu + 0.05), 2)})
    space["enable-chunked-prefill"] = [True, False]
    return space


def space_size(space: Mapping[str, Sequence[Any]]) -> int:
    return math.prod(len(v) for v in space.values())


def setting_of(params: Mapping[str, Any]) -> Setting:
    """The server setting of a trial's parameters (every knob is a server knob)."""
    unknown = set(params) - set(KNOBS)
    if unknown:
        raise TuneError(f"unknown knob(s) {', '.join(sorted(unknown))}")
    fields = {KNOBS[name].field: value for name, value in params.items()
              if KNOBS[name].restart}
    return Setting(**fields)


def grid_settings(space: Mapping[str, Sequence[Any]]) -> list[Setting]:
    """Every setting of the space, in the order of the knobs and values given."""
    names = list(space)
    combos: list[dict[str, Any]] = [{}]
    for name in names:
        combos = [{**c, name: v} for c in combos for v in space[name]]
    return [setting_of(c) for c in combos]


# The constraint value of a setting whose server did not start: ten times an SLO missed by
# 100%, so that TPE ranks it below every setting it could measure.
NOT_STARTED = 10.0


def goodput_value(trials: Sequence[Trial]) -> tuple[float, float, Trial | None]:
    """A setting's value: (goodput, SLO violation, the winning run). The goodput is the best
    ``request_goodput`` (``request_throughput`` when the SLO has no per-request threshold)
    among the runs that met the SLO (violation 0, that run), else the best among all measured
    runs with the smallest violation among them (no run); (0, :data:`NOT_STARTED`, None)
    without a measured run."""

    def goodput(t: Trial) -> float:
        metrics = t.measurement.metrics if t.measurement is not None else {}
        value = metrics.get("request_goodput", metrics.get("request_throughput"))
        return 0.0 if value is None or math.isnan(value) else float(value)

    feasible = [t for t in trials if t.meets_slo]
    if feasible:
        best = max(feasible, key=goodput)
        return goodput(best), 0.0, best
    measured = [t for t in trials if t.ok and t.measurement is not None]
    if not measured:
        return 0.0, NOT_STARTED, None
    return (max(goodput(t) for t in measured),
            min(t.measurement.violation for t in measured if t.measurement is not None), None)


def measure_setting(setting: Setting, concurrencies: Sequence[int], serve: Serve,
                    measure: Measure) -> list[Trial]:
    """One server start for ``setting``, every concurrency measured in it (as the grid sweep
    does for one setting); a server that does not start gives one failed trial."""
    trials: list[Trial] = []
    try:
        with serve(setting) as url:
            for concurrency in concurrencies:
                try:
                    trials.append(Trial(setting, concurrency, measure(url, setting, concurrency)))
                except Exception as exc:  # a failed run is this trial's result; the study goes on
                    trials.append(Trial(setting, concurrency, error=str(exc)))
    except ServerError as exc:
        trials.append(Trial(setting, None, error=f"{exc}; last log lines:\n{exc.log_tail}"))
    return trials


@dataclass
class SearchTrial:
    """One trial of the study: its setting, the value told to optuna, what was measured."""

    number: int
    setting: Setting
    value: float
    violation: float = NOT_STARTED  # 0: a run met the SLO
    runs: list[Trial] = field(default_factory=list)
    best: Trial | None = None
    reused_from: int | None = None  # the earlier trial whose measurement this one reused

    @property
    def feasible(self) -> bool:
        return self.violation <= 0

    def to_dict(self) -> dict[str, Any]:
        return {"number": self.number, "label": self.setting.label,
                "setting": self.setting.to_dict(), "goodput": self.value,
                "slo_met": self.feasible, "slo_violation": self.violation,
                "best_concurrency": self.best.concurrency if self.best else None,
                "reused_from": self.reused_from, "runs": [r.to_dict() for r in self.runs]}


@dataclass
class SearchOutcome:
    study_name: str
    storage: str
    sampler: str
    space: Space
    trials: list[SearchTrial]  # this run's
    previous: int  # complete trials the study held before this run
    restarts: int  # servers started by this run
    earlier: list[SearchTrial] = field(default_factory=list)  # feasible trials of earlier runs

    @property
    def best(self) -> SearchTrial | None:
        """The feasible trial of the whole study (earlier runs too) with the highest goodput
        (ties: fewer sequences); a trial of an earlier run carries its recorded value and
        concurrency, not its measurements."""
        good = [t for t in [*self.earlier, *self.trials] if t.feasible and t.best is not None]
        return max(good, key=lambda t: (t.value, -t.setting.max_num_seqs), default=None)


def _earlier(trial: Any) -> SearchTrial | None:
    """A feasible, measured trial of an earlier run, as far as the study recorded it."""
    if trial.constraints.get("slo", NOT_STARTED) > 0 or "reused_from" in trial.user_attrs:
        return None
    setting = setting_of(trial.params)
    value = float(trial.value or 0.0)
    run = Trial(setting, trial.user_attrs.get("best_concurrency"),
                Measurement(metrics={"request_goodput": value}, slo_ok=True))
    return SearchTrial(trial.number, setting, value, 0.0, [], run)


Notify = Callable[[str, SearchTrial | None, str], None]


def _sampler(name: str, seed: int | None, startup: int) -> Any:
    import optuna

    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, multivariate=True)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise TuneError(f"sampler {name!r} is not one of {', '.join(SAMPLERS)}")


def default_startup(space: Mapping[str, Sequence[Any]]) -> int:
    """TPE's random start: a tenth of the space, at least 2 and at most 10 (optuna's default)."""
    return max(2, min(10, space_size(space) // 10))


def open_study(storage: str, name: str, space: Space, sampler: Any) -> Any:
    """Create or load (resume) the study; refuse a study whose space differs."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name=name, storage=storage, direction="maximize",
                                sampler=sampler, load_if_exists=True)
    kept = study.user_attrs.get("space")
    wanted = json.loads(json.dumps(space))
    if kept is None:
        study.set_user_attr("space", wanted)
    elif kept != wanted:
        raise TuneError(f"study {name!r} in {storage} was run over another space "
                        f"({json.dumps(kept)}); use another --study-name or the same space")
    return study


def search(space: Space, concurrencies: Sequence[int], serve: Serve, measure: Measure, *,
           n_trials: int, storage: str, study_name: str, sampler: str = "tpe",
           seed: int | None = None, startup: int | None = None,
           notify: Notify | None = None) -> SearchOutcome:
    """Run ``n_trials`` more trials of the study (see the module doc)."""
    import optuna

    if n_trials < 1:
        raise TuneError(f"--trials must be at least 1, not {n_trials}")
    if not concurrencies or any(c < 1 for c in concurrencies):
        raise TuneError("give at least one positive --concurrency value")
    say = notify or (lambda event, trial, detail: None)
    study = open_study(storage, study_name,
                       space, _sampler(sampler, seed, startup or default_startup(space)))
    complete = optuna.trial.TrialState.COMPLETE
    done = study.get_trials(deepcopy=False, states=(complete,))
    measured: dict[Setting, tuple[int, float, float]] = {}
    for old in done:
        measured.setdefault(setting_of(old.params), (
            old.number, float(old.value or 0.0),
            float(old.constraints.get("slo", NOT_STARTED))))
    outcome = SearchOutcome(study_name=study_name, storage=storage, sampler=sampler,
                            space=space, trials=[], previous=len(done), restarts=0,
                            earlier=[e for e in map(_earlier, done) if e is not None])
    for _ in range(n_trials):
        trial = study.ask()
        try:
            params = {name: trial.suggest_categorical(name, values)
                      for name, values in space.items()}
        except ValueError as exc:  # optuna: a parameter's distribution changed
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            raise TuneError(f"study {study_name!r}: {exc}") from exc
        setting = setting_of(params)
        if setting in measured:
            number, value, violation = measured[setting]
            trial.set_user_attr("reused_from", number)
            trial.set_constraint("slo", violation)
            result = SearchTrial(trial.number, setting, value, violation, reused_from=number)
            study.tell(trial, value)
            outcome.trials.append(result)
            say("reused", result, f"trial {number}")
            continue
        say("starting", SearchTrial(trial.number, setting, 0.0), "")
        outcome.restarts += 1
        runs = measure_setting(setting, concurrencies, serve, measure)
        value, violation, best = goodput_value(runs)
        result = SearchTrial(trial.number, setting, value, violation, runs, best)
        trial.set_user_attr("label", setting.label)
        trial.set_constraint("slo", violation)
        trial.set_user_attr("best_concurrency", best.concurrency if best else None)
        trial.set_user_attr("errors", [r.error for r in runs if r.error][:3])
        study.tell(trial, value)
        measured[setting] = (trial.number, value, violation)
        outcome.trials.append(result)
        say("measured", result, "")
    return outcome


def sqlite_url(path: Path) -> str:
    """optuna's storage URL of an SQLite file (its folder is created)."""
    path = path.expanduser().absolute()
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


def study_trials(storage: str, name: str) -> list[dict[str, Any]]:
    """Every complete trial of a stored study: number, params, value, user attributes."""
    import optuna

    try:
        study = optuna.load_study(study_name=name, storage=storage)
    except KeyError as exc:
        raise TuneError(f"no study {name!r} in {storage}") from exc
    return [{"number": t.number, "params": t.params, "value": t.value, **t.user_attrs}
            for t in study.get_trials(deepcopy=False,
                                      states=(optuna.trial.TrialState.COMPLETE,))]


# ---------------------------------------------------------------------------------------------
# A recorded landscape (bench/tune_search.py): the search run against measured values


def trials_to_reach(order: Sequence[float], target: float) -> int | None:
    """1-based index of the first value >= ``target`` in measurement order; None if never."""
    for i, value in enumerate(order, start=1):
        if value >= target:
            return i
    return None


def replay(landscape: Mapping[Setting, tuple[float, float]], space: Space, *, sampler: str,
           seed: int, target: float, max_asks: int | None = None, startup: int | None = None,
           infeasible_as_zero: bool = False) -> int | None:
    """Distinct settings a sampler measures before a feasible one reaches ``target``, on a
    recorded landscape (setting → (goodput, SLO violation)), told to an in-memory study as
    :func:`search` tells them (``infeasible_as_zero``: an SLO miss told as goodput 0, no
    constraint); None when it never does."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize",
                                sampler=_sampler(sampler, seed,
                                                 startup or default_startup(space)))
    seen: set[Setting] = set()
    asks = 0
    limit = max_asks or 50 * space_size(space)
    while len(seen) < len(landscape) and asks < limit:
        asks += 1
        trial = study.ask()
        setting = setting_of({n: trial.suggest_categorical(n, v) for n, v in space.items()})
        value, violation = landscape[setting]
        feasible = violation <= 0
        if infeasible_as_zero:
            study.tell(trial, value if feasible else 0.0)
        else:
            trial.set_constraint("slo", violation)
            study.tell(trial, value)
        if setting in seen:
            continue
        seen.add(setting)
        if feasible and value >= target:
            return len(seen)
    return None
