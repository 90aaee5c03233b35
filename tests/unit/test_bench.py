"""``ascend-serve bench``: metric math, prompts, the load generator against a local streaming
stub, the command line and its reports, and real runs against the tiny vLLM server checked
against the server's own ``/metrics`` counters. No timing thresholds: relations and counts."""

from __future__ import annotations

import itertools
import json
import math
import stat
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import typer
from terminal import uncolored
from typer.testing import CliRunner
from vllm_server import VllmServer, free_port, server_counters, settled_counter_delta

from ascend_serve.bench import energy, slo
from ascend_serve.bench import metrics as benchmetrics
from ascend_serve.bench.metrics import RequestRecord, compute, parse_percentiles
from ascend_serve.bench.openai_stub import StubServer
from ascend_serve.bench.prompts import (
    PromptError,
    conversation_pair,
    dataset_prompts,
    load_tokenizer,
    random_prompts,
    read_dataset,
)
from ascend_serve.bench.runner import (
    BenchConfig,
    BenchConfigError,
    BenchUnreachableError,
    Endpoint,
    arrival_offsets,
    run_benchmark,
    run_sweep,
)
from ascend_serve.cli.bench import bench as bench_command
from ascend_serve.cli.bench import parse_concurrency

# The keys of `vllm bench serve --save-result --save-detailed --metric-percentiles 50,90,99
# --percentile-metrics ttft,tpot,itl,e2el` (vLLM 0.32), copied from a real result file.
VLLM_SAVE_RESULT_FIELDS = [
    "date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts",
    "request_rate", "burstiness", "max_concurrency", "duration", "completed", "failed",
    "total_input_tokens", "total_output_tokens", "request_throughput", "request_goodput",
    "output_throughput", "total_token_throughput", "input_lens", "output_lens", "ttfts", "itls",
    "latencies", "start_times", "queue_times", "generated_texts", "errors",
    "max_output_tokens_per_s", "max_concurrent_requests", "rtfx",
    "mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p50_ttft_ms", "p90_ttft_ms", "p99_ttft_ms",
    "mean_tpot_ms", "median_tpot_ms", "std_tpot_ms", "p50_tpot_ms", "p90_tpot_ms", "p99_tpot_ms",
    "mean_itl_ms", "median_itl_ms", "std_itl_ms", "p50_itl_ms", "p90_itl_ms", "p99_itl_ms",
    "mean_e2el_ms", "median_e2el_ms", "std_e2el_ms", "p50_e2el_ms", "p90_e2el_ms", "p99_e2el_ms",
]
OUR_EXTRA_FIELDS = {"config", "server", "slo", "telemetry", "cost", "warmup"}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

cli = typer.Typer()
cli.command("bench")(bench_command)
cli.command("noop", hidden=True)(lambda: None)
runner = CliRunner()


# ---------------------------------------------------------------------------------------------
# Tokenizers built here in milliseconds (the tiny models' own need torch to build)


@pytest.fixture(scope="module")
def word_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A word-level tokenizer (w0 … w299, BOS <s> added): one whitespace word = one token, as
    the stub counts prompt tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab = {"<s>": 0, **{f"w{i}": i + 1 for i in range(300)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=next(iter(vocab))))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(["<s>"])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A",
                                                       special_tokens=[("<s>", 0)])
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return path


@pytest.fixture(scope="module")
def bpe_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A byte-level BPE trained on a little text, with a BOS: merges re-tokenise decoded text
    differently, which random prompts must cope with."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<bos>", "<eos>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    corpus = ["The quick brown fox jumps over the lazy dog. 中文的句子还有标点。"] * 50 + [
        "Ascend NPUs serve DeepSeek models with vLLM; latency and throughput matter."] * 50
    tok.train_from_iterator(corpus, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A",
                                                       special_tokens=[("<bos>", 0)])
    path = tmp_path_factory.mktemp("bpe") / "tokenizer.json"
    tok.save(str(path))
    return path


@pytest.fixture
def stub() -> Iterator[StubServer]:
    with StubServer() as server:
        yield server


# ---------------------------------------------------------------------------------------------
# Metric math on synthetic records


def rec(ttft: float, itl: list[float], output_len: int | None = None, prompt_len: int = 10,
        start: float = 0.0) -> RequestRecord:
    return RequestRecord(success=True, prompt_len=prompt_len,
                         output_len=len(itl) + 1 if output_len is None else output_len,
                         ttft=ttft, itl=itl, latency=ttft + sum(itl), start_time=start)


def failed(prompt_len: int = 10) -> RequestRecord:
    return RequestRecord(success=False, error="HTTP 500: boom", prompt_len=prompt_len)


def test_tpot_excludes_the_first_token() -> None:
    r = rec(0.5, [0.1, 0.2, 0.3])  # 4 tokens, 0.6 s after the first
    assert r.latency == pytest.approx(1.1)
    assert r.tpot == pytest.approx(0.2)
    assert rec(0.5, []).tpot == 0.0  # one token: no TPOT
    # The server's token count wins over the chunk count (a chunk may carry two tokens).
    assert rec(0.5, [0.1, 0.2, 0.3], output_len=7).tpot == pytest.approx(0.1)


def test_metrics_follow_vllm_definitions() -> None:
    records = [rec(0.1, [0.01, 0.03]), rec(0.3, [0.02] * 4), rec(0.2, []), failed(99)]
    m = compute(records, duration=2.0, percentiles=[50, 90, 99])
    assert (m["completed"], m["failed"]) == (3, 1)
    assert m["total_input_tokens"] == 30  # the failed request's prompt is not counted
    assert m["output_lens"] == [3, 5, 1, 0]
    assert m["total_output_tokens"] == 9
    assert m["request_throughput"] == pytest.approx(1.5)
    assert m["output_throughput"] == pytest.approx(4.5)
    assert m["total_token_throughput"] == pytest.approx(19.5)
    assert m["request_goodput"] is None  # no SLO
    assert m["mean_ttft_ms"] == pytest.approx(200.0)
    assert m["median_ttft_ms"] == pytest.approx(200.0)
    assert m["std_ttft_ms"] == pytest.approx(np.std([100, 300, 200]))
    # TPOT only over requests of more than one token: 0.04/2 and 0.08/4.
    assert m["mean_tpot_ms"] == pytest.approx(20.0)
    # ITLs: every gap of every completed request.
    itls_ms = [10, 30, 20, 20, 20, 20]
    assert m["mean_itl_ms"] == pytest.approx(np.mean(itls_ms))
    assert m["p90_itl_ms"] == pytest.approx(np.percentile(itls_ms, 90))
    assert m["p99_e2el_ms"] == pytest.approx(np.percentile([140, 380, 200], 99))
    # Per-request arrays keep the failed request, as vLLM saves them.
    assert m["errors"] == ["", "", "", "HTTP 500: boom"]
    assert m["input_lens"] == [10, 10, 10, 99]
    assert len(m["ttfts"]) == len(m["itls"]) == len(m["latencies"]) == 4


def test_percentiles_interpolate_linearly() -> None:
    records = [rec(i / 1000, [0.001]) for i in range(1, 101)]  # TTFT 1..100 ms
    m = compute(records, 1.0, percentiles=[50, 90, 99, 99.9])
    assert m["p50_ttft_ms"] == pytest.approx(50.5)
    assert m["p90_ttft_ms"] == pytest.approx(90.1)
    assert m["p99_ttft_ms"] == pytest.approx(99.01)
    assert m["p99.9_ttft_ms"] == pytest.approx(99.901)
    assert "p95_ttft_ms" not in m


def test_no_completed_request_gives_zeros_not_errors() -> None:
    m = compute([failed(), failed()], 1.0)
    assert (m["completed"], m["failed"], m["total_output_tokens"]) == (0, 2, 0)
    assert m["mean_ttft_ms"] == m["p99_e2el_ms"] == 0.0
    assert (m["max_output_tokens_per_s"], m["max_concurrent_requests"]) == (0.0, 0)
    with pytest.raises(ValueError, match="duration"):
        compute([], 0.0)


def test_goodput_counts_requests_meeting_every_threshold() -> None:
    records = [rec(0.1, [0.01] * 3),   # ttft 100 ms, tpot 10 ms: good
               rec(0.1, [0.05] * 3),   # tpot 50 ms: too slow
               rec(0.9, [0.01] * 3),   # ttft 900 ms: too slow
               rec(0.1, []),           # one token: tpot counts as 0
               failed()]
    m = compute(records, 2.0, goodput_ms={"ttft": 500, "tpot": 20})
    assert m["request_goodput"] == pytest.approx(2 / 2.0)
    assert benchmetrics.goodput_count(records, {"e2el": 200}) == 2
    with pytest.raises(ValueError, match="goodput thresholds"):
        benchmetrics.goodput_count(records, {"itl": 5})


def test_peaks_bucket_tokens_and_requests_by_second() -> None:
    records = [rec(0.1, [0.1] * 4, start=0.0), rec(0.2, [0.1] * 2, start=0.5),
               rec(0.1, [0.1], start=2.2)]
    m = compute(records, 3.0)
    assert m["max_output_tokens_per_s"] == 8.0  # 5 + 3 tokens in second 0
    assert m["max_concurrent_requests"] == 2


def test_headline_keeps_the_scalars() -> None:
    m = compute([rec(0.1, [0.01])], 1.0)
    head = benchmetrics.headline(m)
    assert "ttfts" not in head and "request_goodput" not in head
    assert head["completed"] == 1.0


@pytest.mark.parametrize(("text", "message"), [
    ("", "no percentile"), ("50,x", "not a number"), ("101", "within 0..100"),
    ("nan", "within 0..100")])
def test_bad_percentiles(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_percentiles(text)
    assert parse_percentiles("99, 50,90,50") == [50.0, 90.0, 99.0]


def test_arrivals() -> None:
    assert arrival_offsets(3, math.inf, "poisson") == [0.0, 0.0, 0.0]
    assert arrival_offsets(4, 2.0, "constant") == [0.0, 0.5, 1.0, 1.5]
    poisson = arrival_offsets(200, 10.0, "poisson", seed=1)
    assert poisson == arrival_offsets(200, 10.0, "poisson", seed=1)
    assert poisson != arrival_offsets(200, 10.0, "poisson", seed=2)
    assert poisson[0] == 0.0 and all(b >= a for a, b in itertools.pairwise(poisson))
    assert 10 < poisson[-1] < 40  # 199 gaps of mean 0.1 s


# ---------------------------------------------------------------------------------------------
# Prompts


def test_random_prompts_have_the_asked_length(word_tokenizer: Path, bpe_tokenizer: Path
                                              ) -> None:
    for path in (word_tokenizer, bpe_tokenizer):
        tok = load_tokenizer(path)
        assert tok.num_special_tokens == 1
        prompts = random_prompts(tok, 20, 33, 7, seed=3)
        assert [p.prompt_len for p in prompts] == [33] * 20
        assert all(p.output_len == 7 for p in prompts)
        for p in prompts:  # the BOS is counted; the text re-encodes to the rest
            assert len(tok.encode(p.text)) == 32
        assert prompts == random_prompts(tok, 20, 33, 7, seed=3)
        assert prompts != random_prompts(tok, 20, 33, 7, seed=4)
    with pytest.raises(PromptError, match="no room"):
        random_prompts(load_tokenizer(word_tokenizer), 1, 1, 1)


def test_tokenizer_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(PromptError, match="does not exist"):
        load_tokenizer(tmp_path / "nothing")
    with pytest.raises(PromptError, match="no usable tokenizer"):
        load_tokenizer(tmp_path)  # an empty directory: transformers finds nothing, offline


SHAREGPT = [
    {"id": "a", "conversations": [{"from": "human", "value": "w1 w2 w3 w4 w5"},
                                  {"from": "gpt", "value": "w6 w7 w8"}]},
    {"id": "b", "conversations": [{"from": "system", "value": "be nice"},
                                  {"from": "human", "value": "w1 w2 w3 w4 w5 w6"},
                                  {"from": "gpt", "value": " ".join(["w9"] * 50)},
                                  {"from": "human", "value": "ignored later turn"}]},
    {"id": "short", "conversations": [{"from": "human", "value": "w1 w2"},
                                      {"from": "gpt", "value": "w3"}]},
    {"id": "no-answer", "conversations": [{"from": "human", "value": "w1 w2 w3 w4 w5"}]},
    {"id": "answer-first", "conversations": [{"from": "gpt", "value": "w1"}]},
    "not an object",
]


def test_conversation_pairs() -> None:
    assert conversation_pair(SHAREGPT[1]) == ("w1 w2 w3 w4 w5 w6", " ".join(["w9"] * 50))
    assert conversation_pair({"messages": [{"role": "user", "content": "q"},
                                           {"role": "assistant", "content": "a"}]}) == ("q", "a")
    for entry in SHAREGPT[3:]:
        assert conversation_pair(entry) is None


def test_dataset_prompts(tmp_path: Path, word_tokenizer: Path) -> None:
    tok = load_tokenizer(word_tokenizer)
    listed = tmp_path / "share.json"
    listed.write_text(json.dumps(SHAREGPT))
    lines = tmp_path / "share.jsonl"
    lines.write_text("\n".join(json.dumps(e) for e in SHAREGPT[:3]) + "\n\n")
    for path in (listed, lines):
        prompts = dataset_prompts(read_dataset(path), tok, 5, seed=0, max_output_len=20)
        assert len(prompts) == 5  # two usable conversations, cycled
        assert {(p.prompt_len, p.output_len) for p in prompts} == {(6, 3), (7, 20)}
    fixed = dataset_prompts(read_dataset(listed), tok, 2, output_len=4)
    assert {p.output_len for p in fixed} == {4}
    fits = dataset_prompts(read_dataset(listed), tok, 3, max_total_len=10)
    assert {p.text for p in fits} == {"w1 w2 w3 w4 w5"}
    with pytest.raises(PromptError, match="no conversation"):
        dataset_prompts(read_dataset(listed), tok, 1, max_total_len=5)
    with pytest.raises(PromptError, match="human/user turn followed by"):
        dataset_prompts(SHAREGPT[3:], tok, 1)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"conversations": []}\nnot json\n')
    with pytest.raises(PromptError, match="line 2 is not JSON"):
        read_dataset(bad)


# ---------------------------------------------------------------------------------------------
# The load generator against a local streaming stub


def test_stub_delays_show_in_ttft_and_itl(word_tokenizer: Path) -> None:
    ttft_s, itl_s, out = 0.04, 0.01, 5
    with StubServer(ttft_s=ttft_s, itl_s=itl_s) as server:
        endpoints: tuple[Endpoint, ...] = ("completions", "chat")
        for endpoint in endpoints:
            before = server.counters.requests
            config = BenchConfig(url=server.url, endpoint=endpoint,
                                 tokenizer=str(word_tokenizer), num_prompts=8, max_concurrency=4,
                                 input_len=12, output_len=out, warmup=1)
            result = run_benchmark(config)
            assert (result.completed, result.failed) == (8, 0)
            assert server.counters.requests - before == 8 + 1
            for r in result.records:
                assert r.success
                assert r.ttft >= ttft_s  # the stub sleeps before the first token
                assert len(r.itl) == out - 1  # one gap per later token chunk
                assert r.latency == pytest.approx(r.ttft + sum(r.itl))
                assert r.latency >= ttft_s + (out - 1) * itl_s
                assert (r.prompt_len, r.output_len) == (11, out)  # the stub's usage
                assert r.tpot == pytest.approx(sum(r.itl) / (out - 1))
            m = result.metrics
            assert m["total_output_tokens"] == 8 * out
            assert m["mean_itl_ms"] == pytest.approx(m["mean_tpot_ms"])  # equal-length requests
            assert m["p99_ttft_ms"] >= m["median_ttft_ms"] >= ttft_s * 1000


def test_failed_requests_are_counted_and_left_out(word_tokenizer: Path) -> None:
    with StubServer(fail_every=3) as server:
        config = BenchConfig(url=server.url, tokenizer=str(word_tokenizer), num_prompts=9,
                             max_concurrency=1, input_len=8, output_len=4, warmup=0)
        result = run_benchmark(config)
    assert (result.completed, result.failed) == (6, 3)
    assert result.metrics["total_output_tokens"] == 6 * 4
    assert all("HTTP 500" in e and "planted failure" in e for e in result.first_errors())
    assert result.metrics["output_lens"].count(0) == 3


def test_a_finite_rate_spreads_the_arrivals(word_tokenizer: Path, stub: StubServer) -> None:
    config = BenchConfig(url=stub.url, tokenizer=str(word_tokenizer), num_prompts=6,
                         request_rate=50.0, arrival="constant", input_len=8, output_len=2,
                         warmup=0)
    result = run_benchmark(config)
    starts = [r.start_time for r in result.records]
    assert starts == sorted(starts)  # sent one by one, in order
    assert result.duration >= 5 / 50.0  # the last one leaves 5 intervals after the first


def test_a_sweep_reuses_the_prompts(word_tokenizer: Path, stub: StubServer) -> None:
    config = BenchConfig(url=stub.url, tokenizer=str(word_tokenizer), num_prompts=6,
                         input_len=8, output_len=3, warmup=1, slo=slo.PRESETS["tiny-cpu"])
    results = run_sweep(config, [1, 3])
    assert [r.config.max_concurrency for r in results] == [1, 3]
    assert [r.metrics["input_lens"] for r in results] == [[7] * 6, [7] * 6]
    assert all(r.verdict is not None and r.verdict.passed for r in results)
    assert stub.counters.requests == 2 * (6 + 1)


def test_config_errors_come_before_any_request(word_tokenizer: Path, stub: StubServer) -> None:
    good = BenchConfig(url=stub.url, tokenizer=str(word_tokenizer), num_prompts=2,
                       input_len=8, output_len=2)
    bad: list[dict[str, Any]] = [{"url": "ftp://x"}, {"max_concurrency": 0}, {"request_rate": 0.0},
           {"num_prompts": 0}, {"warmup": -1}, {"percentiles": (101.0,)},
           {"dataset": "/nonexistent.json"}, {"tokenizer": "/nonexistent"},
           {"endpoint": "embeddings"}]
    for change in bad:
        with pytest.raises(BenchConfigError):
            run_benchmark(replace(good, **change))
    assert stub.counters.hits == 0
    with pytest.raises(BenchConfigError, match="serves stub"):
        run_benchmark(replace(good, model="other"))
    with pytest.raises(BenchConfigError, match="--tokenizer PATH"):
        run_benchmark(replace(good, tokenizer=None))
    assert stub.counters.requests == 0


def test_an_unreachable_server() -> None:
    config = BenchConfig(url=f"http://127.0.0.1:{free_port()}", tokenizer="/", num_prompts=1)
    with pytest.raises(BenchUnreachableError, match="cannot connect"):
        run_benchmark(config)


# ---------------------------------------------------------------------------------------------
# The command line and its reports


@pytest.mark.parametrize(("args", "message"), [
    (["ftp://host"], "invalid URL"),
    (["{url}", "--concurrency", "0"], "at least 1"),
    (["{url}", "--concurrency", "2,x"], "not a whole number"),
    (["{url}", "--endpoint", "embeddings"], "--endpoint must be one of"),
    (["{url}", "--arrival", "bursty"], "--arrival must be"),
    (["{url}", "--percentiles", "50,101"], "within 0..100"),
    (["{url}", "--slo", "fastest"], "not a preset"),
    (["{url}", "--slo", "ttft_ms:p99=5"], "cannot read the SLO"),
    (["{url}", "--num-prompts", "0"], "num_prompts must be at least 1"),
    (["{url}", "--request-rate", "0"], "request rate must be > 0"),
    (["{url}", "--dataset", "/nonexistent.jsonl"], "does not exist"),
    (["{url}", "--tokenizer", "/nonexistent"], "does not exist"),
    (["{url}", "--npu-smi", "/nonexistent/npu-smi"], "not found"),
    (["{url}", "--input-len", "400", "--output-len", "200"], "max_model_len 512"),
])
def test_cli_argument_errors(args: list[str], message: str, word_tokenizer: Path) -> None:
    with StubServer(max_model_len=512) as server:
        argv = [a.replace("{url}", server.url) for a in args]
        result = runner.invoke(cli, ["bench", *argv, "--tokenizer", str(word_tokenizer)]
                               if "--tokenizer" not in argv else ["bench", *argv])
        assert result.exit_code == 2, result.output
        assert message in uncolored(result.output).replace("\n", " ")
        assert "Traceback" not in result.output
        assert server.counters.requests == 0  # no generation request was sent


def test_cli_unreachable_is_exit_3() -> None:
    result = runner.invoke(cli, ["bench", f"http://127.0.0.1:{free_port()}", "--tokenizer", "/"])
    assert result.exit_code == 3, result.output
    assert "cannot connect" in result.output


def test_cli_slo_missed_is_exit_1(word_tokenizer: Path) -> None:
    with StubServer(ttft_s=0.02) as server:
        result = runner.invoke(cli, [
            "bench", server.url, "--tokenizer", str(word_tokenizer), "--num-prompts", "3",
            "--input-len", "8", "--output-len", "2", "--slo", "ttft_ms:p99<=1",
            "--slo", "failed<=0"])
    assert result.exit_code == 1, result.output
    out = uncolored(result.output)
    assert "SLO custom (no concurrency cap): FAIL" in out
    assert "FAIL p99_ttft_ms <= 1: measured" in out
    assert "PASS failed <= 0: measured 0" in out


def test_cli_writes_reports_with_vllm_field_names(word_tokenizer: Path, tmp_path: Path) -> None:
    out = tmp_path / "single"
    with StubServer(api_key="sk-test") as server:
        result = runner.invoke(cli, [
            "bench", server.url, "--tokenizer", str(word_tokenizer), "--num-prompts", "5",
            "--concurrency", "2", "--input-len", "8", "--output-len", "3", "--slo", "tiny-cpu",
            "--out", str(out), "--json"], env={"VLLM_API_KEY": "sk-test"})
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    saved = json.loads((out / "bench.json").read_text())
    assert printed["completed"] == saved["completed"] == 5
    assert set(VLLM_SAVE_RESULT_FIELDS) <= set(saved)
    assert set(saved) - set(VLLM_SAVE_RESULT_FIELDS) == OUR_EXTRA_FIELDS
    assert saved["slo"]["verdict"] == "PASS"
    assert saved["config"]["api_key"] is True and "sk-test" not in result.stdout
    assert saved["max_concurrency"] == 2 and saved["request_rate"] == "inf"
    assert saved["output_lens"] == [3] * 5
    # No npu-smi here: the host's energy meter, or why there is none (this machine has none).
    probe = energy.host_meter()
    if probe.meter is None:
        assert saved["telemetry"] == {"available": False, "reason": "no npu-smi found on this "
                                      f"host; {probe.reason}"}
    else:
        assert saved["telemetry"]["kind"] == "host"
        assert saved["telemetry"]["meter"] == probe.meter.kind
    assert saved["cost"] is None  # no prices
    assert (out / "latency.png").read_bytes().startswith(PNG_MAGIC)
    import matplotlib.image

    assert matplotlib.image.imread(out / "latency.png").shape[2] in (3, 4)
    report = (out / "bench.md").read_text()
    assert "**Verdict: PASS**" in report and "![latency](latency.png)" in report


def test_cli_sweep_reports(word_tokenizer: Path, tmp_path: Path, stub: StubServer) -> None:
    result = runner.invoke(cli, [
        "bench", stub.url, "--tokenizer", str(word_tokenizer), "--num-prompts", "4",
        "--concurrency", "1,2,4", "--input-len", "8", "--output-len", "3", "--warmup", "0",
        "--out", str(tmp_path), "--no-telemetry"])
    assert result.exit_code == 0, result.output
    files = {p.name for p in tmp_path.iterdir()}
    assert files == {"bench-c1.json", "bench-c2.json", "bench-c4.json", "sweep.json",
                     "bench.md", "sweep.png", "latency-c1.png", "latency-c2.png",
                     "latency-c4.png"}
    rows = json.loads((tmp_path / "sweep.json").read_text())["runs"]
    assert [r["max_concurrency"] for r in rows] == [1, 2, 4]
    assert all(r["completed"] == 4 for r in rows)
    assert json.loads((tmp_path / "bench-c2.json").read_text())["telemetry"] is None
    for png in ("sweep.png", "latency-c4.png"):
        assert (tmp_path / png).read_bytes().startswith(PNG_MAGIC)
    out = uncolored(result.output)
    assert "concurrency 1" in out and "concurrency 4" in out and "Output throughput" in out
    assert stub.counters.requests == 12


def test_cli_puts_npu_telemetry_in_the_result(word_tokenizer: Path, tmp_path: Path,
                                              stub: StubServer) -> None:
    table = Path(__file__).parents[1] / "data" / "npu-smi" / "a2.txt"
    tool = tmp_path / "npu-smi"
    tool.write_text(f'#!/bin/sh\n[ "$1" = info ] || exit 2\ncat {table}\n')
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    result = runner.invoke(cli, [
        "bench", stub.url, "--tokenizer", str(word_tokenizer), "--num-prompts", "3",
        "--input-len", "8", "--output-len", "2", "--npu-smi", str(tool), "--json"])
    assert result.exit_code == 0, result.output
    telemetry = json.loads(result.stdout)["telemetry"]
    assert telemetry["available"] is True
    assert telemetry["source"] == str(tool)
    assert telemetry["samples"] >= 2 and telemetry["chips"]
    if telemetry["energy_j"]:  # two samples may land in the same instant
        assert telemetry["tokens_per_joule"] == pytest.approx(6 / telemetry["energy_j"], rel=1e-3)


def test_parse_concurrency() -> None:
    assert parse_concurrency(None) == [None]
    assert parse_concurrency("8") == [8]
    assert parse_concurrency("1, 2,4,2,") == [1, 2, 4]
    with pytest.raises(ValueError, match="at least one"):
        parse_concurrency(",")


# ---------------------------------------------------------------------------------------------
# The real tiny vLLM server: metrics against its own /metrics counters


@pytest.mark.vllm
def test_vllm_completions_agree_with_the_server_counters(vllm_deepseek_v3: VllmServer) -> None:
    server = vllm_deepseek_v3
    before = server_counters(server)
    config = BenchConfig(url=server.url, api_key=server.api_key, max_concurrency=3,
                         num_prompts=6, input_len=24, output_len=6, warmup=1,
                         slo=slo.PRESETS["tiny-cpu"])
    result = run_benchmark(config)  # the tokenizer: the served model's local directory
    data = result.to_json_dict()
    assert result.tokenizer_id == str(server.model_dir / "tokenizer.json")
    assert (result.completed, result.failed) == (6, 0), result.first_errors()
    assert data["model_id"] == server.served_name
    warm = data["warmup"]
    assert (warm["completed"], warm["output_tokens"]) == (1, 6)
    expected = {"vllm:request_success": 6 + 1,
                "vllm:generation_tokens": data["total_output_tokens"] + warm["output_tokens"],
                "vllm:prompt_tokens": data["total_input_tokens"] + warm["prompt_tokens"]}
    assert settled_counter_delta(server, before, expected) == expected
    # ignore_eos: exactly the asked output; the prompts are exactly input_len tokens (BOS too).
    assert data["output_lens"] == [6] * 6
    assert data["input_lens"] == [24] * 6
    assert data["total_output_tokens"] == 36
    # One ITL per streamed chunk after the first (as vllm bench serve counts them). vLLM's V1
    # engine folds the tokens a lagging stream has not read yet into one chunk, so under load a
    # request can arrive in fewer than 6 chunks; E2EL = TTFT + the ITLs either way.
    for ttft, itl, latency in zip(data["ttfts"], data["itls"], data["latencies"], strict=True):
        assert 1 <= len(itl) <= 5
        assert latency == pytest.approx(ttft + sum(itl))
        assert (latency - ttft) / 5 <= max(itl)  # TPOT spreads the gaps over all 5 tokens
        if len(itl) == 5:
            assert min(itl) <= (latency - ttft) / 5
    assert 0 < data["mean_ttft_ms"] <= data["mean_e2el_ms"]
    assert data["p50_e2el_ms"] <= data["p90_e2el_ms"] <= data["p99_e2el_ms"]
    assert data["output_throughput"] == pytest.approx(36 / data["duration"])
    assert data["request_goodput"] is not None
    assert data["slo"]["verdict"] == "PASS"


@pytest.mark.vllm
def test_vllm_chat_through_the_cli(vllm_deepseek_v3: VllmServer, tmp_path: Path) -> None:
    server = vllm_deepseek_v3
    assert server.api_key is not None
    before = server_counters(server)
    result = runner.invoke(cli, [
        "bench", server.url + "/v1", "--endpoint", "chat", "--concurrency", "2",
        "--num-prompts", "4", "--input-len", "16", "--output-len", "5", "--warmup", "1",
        "--slo", "tiny-cpu", "--json"], env={"VLLM_API_KEY": server.api_key})
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (data["completed"], data["failed"], data["endpoint_type"]) == (4, 0, "openai-chat")
    assert data["output_lens"] == [5] * 4  # reasoning tokens count as generated tokens
    # The chat template adds its own tokens to the 16 of each prompt.
    assert all(n > 16 for n in data["input_lens"])
    # The role announcement is not a token: at most one gap per token after the first (fewer
    # when the engine folds tokens a lagging stream has not read into one chunk).
    assert all(1 <= len(itl) <= 4 for itl in data["itls"])
    warm = data["warmup"]
    expected = {"vllm:request_success": 4 + 1,
                "vllm:generation_tokens": data["total_output_tokens"] + warm["output_tokens"],
                "vllm:prompt_tokens": data["total_input_tokens"] + warm["prompt_tokens"]}
    assert settled_counter_delta(server, before, expected) == expected
    assert server.api_key not in result.stdout


@pytest.mark.vllm
def test_vllm_without_the_api_key_fails_clearly(vllm_deepseek_v3: VllmServer) -> None:
    result = runner.invoke(cli, ["bench", vllm_deepseek_v3.url], env={"VLLM_API_KEY": ""})
    assert result.exit_code == 3, result.output
    assert "401 Unauthorized" in result.output
