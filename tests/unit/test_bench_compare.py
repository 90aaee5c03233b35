"""``bench compare``'s rows: values read from two results, ratios B/A, which run is better,
files that are not bench results refused; the plot is a PNG."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ascend_serve.bench import compare

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def result(*, ttft: float = 100.0, tpot: float = 20.0, out_tps: float = 500.0,
           tpj: float | None = 2.0, cost: float | None = 1.5, currency: str = "USD",
           model: str = "tiny") -> dict[str, Any]:
    return {
        "model_id": model, "label": None, "max_concurrency": 8, "completed": 64,
        "duration": 10.0, "request_throughput": 6.4, "request_goodput": 6.0,
        "output_throughput": out_tps, "median_ttft_ms": ttft, "p99_ttft_ms": ttft * 3,
        "median_tpot_ms": tpot, "p99_tpot_ms": tpot * 2, "p99_e2el_ms": 900.0,
        "config": {"label": None, "cards": 1},
        "telemetry": ({"available": True, "tokens_per_joule": tpj} if tpj is not None else
                      {"available": False, "reason": "host energy not measured: no RAPL"}),
        "cost": None if cost is None else {"currency": currency, "total_per_mtok": cost},
    }


def write(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data))
    return path


def test_rows_ratios_and_the_better_run(tmp_path: Path) -> None:
    a = write(tmp_path / "a.json", result())
    b = write(tmp_path / "b.json", result(ttft=50.0, tpot=20.1, out_tps=1000.0, tpj=6.0,
                                          cost=0.5))
    report = compare.report(a, b)
    rows = {r["metric"]: r for r in report["rows"]}
    assert list(rows) == [key for key, *_ in compare.ROWS]
    assert rows["median_ttft_ms"]["ratio"] == pytest.approx(0.5)
    assert rows["median_ttft_ms"]["better"] == "B"  # lower latency
    assert rows["p99_tpot_ms"]["better"] == "="  # within 1%
    assert rows["output_throughput"]["ratio"] == pytest.approx(2.0)
    assert rows["output_throughput"]["better"] == "B"  # higher throughput
    assert rows["telemetry.tokens_per_joule"]["ratio"] == pytest.approx(3.0)
    assert rows["cost.total_per_mtok"]["ratio"] == pytest.approx(1 / 3)
    assert rows["cost.total_per_mtok"]["unit"] == "USD"
    assert rows["cost.total_per_mtok"]["better"] == "B"
    assert report["notes"] == []
    reverse = {r["metric"]: r for r in compare.report(b, a)["rows"]}
    assert reverse["output_throughput"]["better"] == "A"  # B (here a.json) is slower


def test_unmeasured_values_and_other_currencies_have_no_ratio(tmp_path: Path) -> None:
    a = write(tmp_path / "a.json", result(tpj=None, cost=None))
    b = write(tmp_path / "b.json", result(model="other"))
    rows = {r["metric"]: r for r in compare.report(a, b)["rows"]}
    assert rows["telemetry.tokens_per_joule"]["a"] is None
    assert rows["telemetry.tokens_per_joule"]["ratio"] is None
    assert rows["telemetry.tokens_per_joule"]["better"] is None
    notes = compare.report(a, b)["notes"]
    assert "different models: tiny and other" in notes
    assert "A: energy not measured (host energy not measured: no RAPL)" in notes
    c = write(tmp_path / "c.json", result(currency="CNY", cost=10.0))
    report = compare.report(b, c)
    rows = {r["metric"]: r for r in report["rows"]}
    assert rows["cost.total_per_mtok"]["ratio"] is None  # never USD against CNY
    assert any("different currencies" in n for n in report["notes"])


@pytest.mark.parametrize(("content", "message"), [
    ("{not json", "is not JSON"),
    ('{"runs": [], "sweep": []}', "is a sweep summary"),
    ('{"runs": []}', "is a sweep summary"),
    ("[1, 2]", "is not an ascend-serve bench result"),
    ('{"completed": 3, "duration": 1.0}', "is not an ascend-serve bench result"),
    ('{"completed": true, "duration": 1.0, "output_throughput": 1, "config": {}}',
     "is not an ascend-serve bench result"),
])
def test_inputs_that_are_not_bench_results(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "x.json"
    path.write_text(content)
    with pytest.raises(compare.CompareError, match=message):
        compare.load(path)
    with pytest.raises(compare.CompareError, match="cannot read"):
        compare.load(tmp_path / "missing.json")


def test_plot_is_a_png(tmp_path: Path) -> None:
    a = write(tmp_path / "a.json", result())
    b = write(tmp_path / "b.json", result(ttft=80.0, tpj=None))
    out = compare.plot(compare.report(a, b), tmp_path / "cmp.png")
    assert out.read_bytes().startswith(PNG_MAGIC)
    import matplotlib.image

    assert matplotlib.image.imread(out).shape[2] in (3, 4)
