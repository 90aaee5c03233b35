"""``ascend-serve bench`` with prices and ``bench compare``: two real runs against the local
streaming stub, compared (table, --json, --plot); bad prices and bad files exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from terminal import uncolored
from typer.testing import CliRunner

from ascend_serve.bench.openai_stub import StubServer
from ascend_serve.cli.main import app

runner = CliRunner()
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def word_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {f"w{i}": i for i in range(300)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=next(iter(vocab))))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return path


def _flat(text: str) -> str:
    return " ".join(uncolored(text).split())


@pytest.mark.parametrize(("prices", "message"), [
    (["12.5"], "write AMOUNT CURRENCY/UNIT"),
    (["12.5 USD"], "has no unit"),
    (["12.5 USD/fortnight"], "unknown unit 'fortnight'"),
    (["12.5 USD/card-hour", "0.8 CNY/kWh"], "more than one currency"),
])
def test_bad_prices_exit_2_before_any_request(prices: list[str], message: str,
                                              word_tokenizer: Path) -> None:
    with StubServer() as server:
        args = ["bench", server.url, "--tokenizer", str(word_tokenizer)]
        for p in prices:
            args += ["--price", p]
        result = runner.invoke(app, args)
        assert result.exit_code == 2, result.output
        assert message in _flat(result.output)
        assert server.counters.requests == 0


def test_prices_from_an_inventory_and_its_errors(tmp_path: Path, word_tokenizer: Path) -> None:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  hosts:\n    node-a:\n      ascend_serve_bench_prices: ['2 USD/card-hour']\n"
        "    node-b:\n      ascend_serve_bench_prices: ['3 USD/card-hour']\n")
    with StubServer() as server:
        base = ["bench", server.url, "--tokenizer", str(word_tokenizer), "--num-prompts", "2",
                "--input-len", "4", "--output-len", "2", "--warmup", "0", "--json",
                "--prices-inventory", str(inventory)]
        differ = runner.invoke(app, base)
        assert differ.exit_code == 2 and "name one with --prices-host" in _flat(differ.output)
        missing = runner.invoke(app, [*base, "--prices-host", "node-c"])
        assert missing.exit_code == 2 and "node-c" in _flat(missing.output)
        done = runner.invoke(app, [*base, "--prices-host", "node-b"])
        assert done.exit_code == 0, done.output
        cost = json.loads(done.stdout)["cost"]
        assert cost["prices"] == ["3 USD/card-hour"] and cost["currency"] == "USD"
        # The command line's price of a unit wins over the inventory's.
        override = runner.invoke(app, [*base, "--prices-host", "node-a",
                                       "--price", "5 USD/card-hour"])
        assert json.loads(override.stdout)["cost"]["prices"] == ["5 USD/card-hour"]
        assert server.counters.requests == 2 * 2


def test_two_runs_compared(tmp_path: Path, word_tokenizer: Path) -> None:
    files = []
    with StubServer(itl_s=0.002) as server:
        for name, concurrency in (("a", "1"), ("b", "4")):
            out = tmp_path / name
            result = runner.invoke(app, [
                "bench", server.url, "--tokenizer", str(word_tokenizer), "--num-prompts", "8",
                "--input-len", "8", "--output-len", "4", "--concurrency", concurrency,
                "--price", "12.5 USD/card-hour", "--price", "0.8 USD/kWh", "--out", str(out)])
            assert result.exit_code == 0, result.output
            assert "cost per million output tokens" in _flat(result.output)
            saved = json.loads((out / "bench.json").read_text())
            cost = saved["cost"]
            capacity = 12.5 / (3600 * saved["output_throughput"]) * 1e6
            assert cost["capacity_per_mtok"] == pytest.approx(capacity)
            if saved["telemetry"]["available"]:  # a host with an energy meter
                assert cost["energy_per_mtok"] is not None
            else:  # this machine: no RAPL, hwmon or IPMI
                assert cost["energy_per_mtok"] is None and cost["total_per_mtok"] is None
                assert "energy not measured" in (out / "bench.md").read_text()
            files.append(out / "bench.json")
    table = runner.invoke(app, ["bench", "compare", *map(str, files)])
    assert table.exit_code == 0, table.output
    text = _flat(table.output)
    assert "TTFT p50 (ms)" in text and "Output throughput (tok/s)" in text
    assert "Cost per Mtok (USD)" in text and "B/A" in text
    plot = tmp_path / "cmp.png"
    data = runner.invoke(app, ["bench", "compare", *map(str, files), "--json",
                               "--plot", str(plot)])
    assert data.exit_code == 0, data.output
    report = json.loads(data.stdout)
    rows = {r["metric"]: r for r in report["rows"]}
    a, b = (json.loads(f.read_text()) for f in files)
    assert rows["output_throughput"]["ratio"] == pytest.approx(
        b["output_throughput"] / a["output_throughput"])
    assert report["a"]["file"] == str(files[0]) and report["plot"] == str(plot)
    assert plot.read_bytes().startswith(PNG_MAGIC)


@pytest.mark.parametrize(("content", "extra", "message"), [
    (None, [], "cannot read"),
    ("not json", [], "is not JSON"),
    ('{"runs": []}', [], "sweep summary"),
    ('{"hello": 1}', [], "is not an ascend-serve bench result"),
    ("GOOD", ["--plot", "out.svg"], "write a .png file"),
    ("GOOD", ["--plot", "/nonexistent/dir/x.png"], "is not a directory"),
])
def test_bad_compare_input_exits_2(tmp_path: Path, content: str | None, extra: list[str],
                                   message: str) -> None:
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"completed": 1, "duration": 1.0, "output_throughput": 4.0,
                                "config": {}}))
    other = tmp_path / "other.json"
    if content is not None:
        other.write_text(good.read_text() if content == "GOOD" else content)
    result = runner.invoke(app, ["bench", "compare", str(good), str(other), *extra])
    assert result.exit_code == 2, result.output
    assert message in _flat(result.output)
    assert "Traceback" not in result.output
