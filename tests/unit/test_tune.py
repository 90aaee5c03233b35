"""``ascend-serve tune``: the sweep's bookkeeping, the choice of the winner, the files it writes."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from paths import DATA
from vllm_server import VLLM_VENV, VllmPool, build_tiny_model

from ascend_serve.bench import tune
from ascend_serve.bench.tune import Measurement, Setting, Trial
from ascend_serve.serving.profiles import load_profiles, resolve
from ascend_serve.serving.server import ServerError

CLI = str(Path(sys.executable).parent / "ascend-serve")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def measurement(out_tps: float, ok: bool = True, req_tps: float = 1.0) -> Measurement:
    return Measurement(metrics={"output_throughput": out_tps, "request_throughput": req_tps,
                                "p99_ttft_ms": 10.0},
                       slo_ok=ok, slo_detail=[] if ok else ["p99_ttft_ms 900 > 500"])


def test_grid_is_every_combination_without_duplicates() -> None:
    assert tune.grid([4, 8, 4], [512, 1024]) == [
        Setting(4, 512), Setting(4, 1024), Setting(8, 512), Setting(8, 1024)]
    assert tune.grid([16], []) == [Setting(16, None)]
    assert Setting(8, 1024).vllm_flags() == {"max-num-seqs": 8, "max-num-batched-tokens": 1024}
    assert Setting(8).vllm_flags() == {"max-num-seqs": 8} and Setting(8).label == "seqs8"
    with pytest.raises(tune.TuneError, match="at least one"):
        tune.grid([], [512])
    with pytest.raises(tune.TuneError, match="positive"):
        tune.grid([4, 0], [])


def test_pick_takes_the_best_trial_that_meets_the_slo() -> None:
    trials = [
        Trial(Setting(4), 1, measurement(100.0)),
        Trial(Setting(4), 8, measurement(900.0, ok=False)),  # fastest, but misses the SLO
        Trial(Setting(8), 4, measurement(300.0, req_tps=5.0)),
        Trial(Setting(16), 4, measurement(300.0)),  # a tie: the smaller max-num-seqs wins
        Trial(Setting(32), None, error="vLLM exited with status 1 while starting"),
    ]
    best = tune.pick(trials)
    assert best is trials[2]
    assert tune.pick(trials, "request_throughput") is trials[2]
    assert tune.pick([trials[1], trials[4]]) is None
    with pytest.raises(tune.TuneError, match="objective"):
        tune.pick(trials, "fastest")


def test_sweep_starts_one_server_per_setting_and_records_failures() -> None:
    events: list[tuple[str, str, int | None]] = []
    served: list[str] = []
    stopped: list[str] = []

    @contextlib.contextmanager
    def serve(setting: Setting) -> Iterator[str]:
        if setting.max_num_seqs == 64:
            raise ServerError("vLLM exited with status 1 while starting", "ValueError: too big")
        served.append(setting.label)
        try:
            yield f"http://server/{setting.label}"
        finally:
            stopped.append(setting.label)

    def measure(url: str, setting: Setting, concurrency: int) -> Measurement:
        assert url.endswith(setting.label)
        if concurrency == 8 and setting.max_num_seqs == 4:
            raise RuntimeError("12 of 20 requests failed")
        return measurement(float(setting.max_num_seqs * concurrency))

    trials = tune.sweep(tune.grid([4, 16, 64], []), [2, 8], serve, measure,
                        lambda event, s, c, detail: events.append((event, s.label, c)))
    assert served == stopped == ["seqs4", "seqs16"]
    assert [(t.setting.label, t.concurrency, t.ok) for t in trials] == [
        ("seqs4", 2, True), ("seqs4", 8, False), ("seqs16", 2, True), ("seqs16", 8, True),
        ("seqs64", None, False)]
    assert "12 of 20 requests failed" in (trials[1].error or "")
    assert "ValueError: too big" in (trials[4].error or "")
    assert ("failed", "seqs64", None) in events and ("ready", "seqs16", None) in events
    assert tune.pick(trials) is trials[3]
    with pytest.raises(tune.TuneError, match="concurrency"):
        tune.sweep([Setting(4)], [], serve, measure)


def test_outputs_a_profile_file_that_loads_and_the_inventory_overrides(tmp_path: Path) -> None:
    overrides = {"vllm": {"max-model-len": 256}}
    winner = Trial(Setting(8, 1024), 4, measurement(321.5))
    trials = [Trial(Setting(4, 1024), 4, measurement(100.0)), winner,
              Trial(Setting(16, 1024), None, error="died\nmore")]
    tuned = tune.tuned_profile(None, "tiny-deepseek-v3", overrides, winner)
    paths = tune.write_outputs(tmp_path, name="tiny-deepseek-v3", trials=trials, winner=winner,
                               objective="output_throughput", slo="tiny-cpu", tuned=tuned)
    profiles = load_profiles([paths["profile"]])
    assert list(profiles) == ["tiny-deepseek-v3-tuned"]
    # The file works the way an operator uses it: as an extra profiles file.
    tuned_profile = resolve("tiny-deepseek-v3-tuned", None,
                            [DATA / "serving-profiles.yml", paths["profile"]])
    base = resolve("tiny-deepseek-v3")
    assert tuned_profile.vllm == {**base.vllm, "max-model-len": 256, "max-num-seqs": 8,
                                  "max-num-batched-tokens": 1024}
    assert tuned_profile.model == base.model and tuned_profile.env == base.env
    assert yaml.safe_load(paths["overrides"].read_text()) == {
        "vllm_service_overrides": {"vllm": {"max-num-seqs": 8, "max-num-batched-tokens": 1024}}}
    report = json.loads(paths["json"].read_text())
    assert report["winner"]["label"] == "seqs8-bt1024" and len(report["trials"]) == 3
    assert report["trials"][2]["error"] == "died\nmore"
    md = paths["markdown"].read_text()
    assert "seqs8-bt1024 **(winner)**" in md and "| 321.5 |" in md and "| died |" in md


def test_no_winner_writes_no_profile(tmp_path: Path) -> None:
    trials = [Trial(Setting(4), 1, measurement(10.0, ok=False))]
    paths = tune.write_outputs(tmp_path, name="p", trials=trials, winner=None,
                               objective="output_throughput", slo="interactive", tuned=None)
    assert set(paths) == {"json", "markdown"}
    assert "No setting met the SLO" in paths["markdown"].read_text()
    assert "p99_ttft_ms 900 > 500" in paths["markdown"].read_text()


@pytest.mark.vllm
def test_tune_for_real_on_the_tiny_cpu_profile(tmp_path_factory: pytest.TempPathFactory,
                                               vllm_pool: VllmPool) -> None:
    vllm_pool.use()  # one vLLM at a time on this machine: tune starts its own, one by one
    model = build_tiny_model("deepseek_v3", tmp_path_factory.mktemp("models") / "tiny-v3")
    out = tmp_path_factory.mktemp("tune")
    port = _free_port()
    done = subprocess.run(
        [CLI, "tune", "tiny-deepseek-v3", "--model-dir", str(model), "--venv", str(VLLM_VENV),
         "--host", "127.0.0.1", "--port", str(port), "--max-num-seqs", "2,8",
         "--concurrency", "4", "--num-prompts", "8", "--input-len", "24", "--output-len", "8",
         "--set", "vllm.max-model-len=256", "--out", str(out)],
        capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((out / "tune.json").read_text())
    trials = report["trials"]
    assert [(t["label"], t["concurrency"], t["error"]) for t in trials] == [
        ("seqs2", 4, None), ("seqs8", 4, None)]
    for trial in trials:
        saved = json.loads(Path(trial["result_file"]).read_text())
        assert saved["completed"] == 8 and saved["failed"] == 0
        assert saved["total_output_tokens"] == 8 * 8  # ignore_eos: exactly the asked length
        assert saved["max_concurrency"] == 4 and saved["slo"]["verdict"] == "PASS"
        assert trial["metrics"]["output_throughput"] == saved["output_throughput"]
    best = max(trials, key=lambda t: t["metrics"]["output_throughput"])
    assert report["winner"]["label"] == best["label"]
    # Each setting's server ran with its own flags and is gone.
    for label, seqs in (("seqs2", "2"), ("seqs8", "8")):
        launch = (out / "servers" / label / "launch.sh").read_text()
        assert f"--max-num-seqs {seqs} " in launch
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # free again: no server left behind
    tuned = resolve("tiny-deepseek-v3-tuned", None,
                    [DATA / "serving-profiles.yml", out / "tiny-deepseek-v3-tuned.yml"])
    assert tuned.vllm["max-num-seqs"] == int(best["label"].removeprefix("seqs"))
    assert tuned.vllm["max-model-len"] == 256  # the operator's --set is kept
    assert (tuned.host, tuned.port) == (resolve("tiny-deepseek-v3").host, 8000)  # not the run's
    assert "winner:" in done.stdout


def test_npu_set_env_comes_from_the_cann_fact(tmp_path: Path) -> None:
    from ascend_serve.serving.nodecheck import ASCEND_SET_ENV, ascend_set_env

    fact = tmp_path / "ascend_cann.fact"
    assert ascend_set_env(fact) == list(ASCEND_SET_ENV)  # no fact: the classic paths
    fact.write_text(json.dumps({"set_env": ["/usr/local/Ascend/cann-8.5.0/set_env.sh"]}))
    assert ascend_set_env(fact) == ["/usr/local/Ascend/cann-8.5.0/set_env.sh"]
    fact.write_text(json.dumps({"set_env": []}))
    assert ascend_set_env(fact) == list(ASCEND_SET_ENV)
