"""``ascend-serve bench compare A.json B.json``: two bench runs side by side, with ratios.

The rows: TTFT and TPOT at the median (p50) and p99, E2E latency p99, request and output
throughput, request goodput, tokens per joule, and the cost per million output tokens. The
ratio is B / A; ``better`` says which run is better on that row (lower is better for latency
and cost, higher for the rest), or ``=`` within 1%. A value a run did not measure (no p99 asked,
no energy meter, no prices) is None and its ratio too.

The input is a bench result file (``bench.json``, a sweep's ``bench-c<N>.json``, or
``ascend-serve bench --json``'s output of one run): a JSON object with vLLM's
``completed``/``output_throughput`` fields and bench's ``config``. Anything else is a
:class:`CompareError` (exit 2 on the command line).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

Direction = Literal["lower", "higher"]

# (key, label, unit, better direction, where to read it: a top-level field or a dotted path)
ROWS: tuple[tuple[str, str, str, Direction], ...] = (
    ("median_ttft_ms", "TTFT p50", "ms", "lower"),
    ("p99_ttft_ms", "TTFT p99", "ms", "lower"),
    ("median_tpot_ms", "TPOT p50", "ms", "lower"),
    ("p99_tpot_ms", "TPOT p99", "ms", "lower"),
    ("p99_e2el_ms", "E2E latency p99", "ms", "lower"),
    ("request_throughput", "Request throughput", "req/s", "higher"),
    ("request_goodput", "Request goodput", "req/s", "higher"),
    ("output_throughput", "Output throughput", "tok/s", "higher"),
    ("telemetry.tokens_per_joule", "Tokens per joule", "tok/J", "higher"),
    ("cost.total_per_mtok", "Cost per Mtok", "", "lower"),
)
SAME_WITHIN = 0.01


class CompareError(ValueError):
    """An input that is not a readable bench result."""


def load(path: Path) -> dict[str, Any]:
    """A bench result file, checked; :class:`CompareError` saying what is wrong."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CompareError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CompareError(f"{path} is not JSON: {exc}") from exc
    if isinstance(data, dict) and "runs" in data and "completed" not in data:
        raise CompareError(f"{path} is a sweep summary: compare one run's bench-c<N>.json")
    if not isinstance(data, dict) or not isinstance(data.get("config"), dict) or any(
            not isinstance(data.get(k), (int, float)) or isinstance(data.get(k), bool)
            for k in ("completed", "duration", "output_throughput")):
        raise CompareError(f"{path} is not an ascend-serve bench result (no completed, "
                           "duration, output_throughput and config)")
    return data


def _value(data: dict[str, Any], key: str) -> float | None:
    node: Any = data
    for part in key.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    if isinstance(node, bool) or not isinstance(node, (int, float)) or math.isnan(node):
        return None
    return float(node)


@dataclass(frozen=True)
class Row:
    key: str
    label: str
    unit: str
    direction: Direction
    a: float | None
    b: float | None

    @property
    def ratio(self) -> float | None:
        if self.a is None or self.b is None or self.a == 0:
            return None
        return self.b / self.a

    @property
    def better(self) -> str | None:
        """``A``, ``B``, ``=`` or None (not comparable)."""
        ratio = self.ratio
        if ratio is None:
            return None
        if abs(ratio - 1) <= SAME_WITHIN:
            return "="
        return "B" if (ratio < 1) == (self.direction == "lower") else "A"

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.key, "label": self.label, "unit": self.unit,
                "better_is": self.direction, "a": self.a, "b": self.b, "ratio": self.ratio,
                "better": self.better}


def describe(data: dict[str, Any], path: Path) -> str:
    """A short name of a run: its label or file, the model and the concurrency."""
    cfg = data.get("config") or {}
    name = data.get("label") or cfg.get("label") or path.name
    c = data.get("max_concurrency")
    return f"{name}: {data.get('model_id', '?')}, concurrency {c if c is not None else 'uncapped'}"


def compare(a: dict[str, Any], b: dict[str, Any]) -> list[Row]:
    rows = []
    for key, label, unit, direction in ROWS:
        if key == "cost.total_per_mtok":
            currencies = {str(c) for d in (a, b) if (c := (d.get("cost") or {}).get("currency"))}
            unit = "/".join(sorted(currencies))
            if len(currencies) > 1:  # never divide yuan by dollars
                rows.append(Row(key, label, unit, direction, _value(a, key), None))
                continue
        rows.append(Row(key, label, unit, direction, _value(a, key), _value(b, key)))
    return rows


def report(path_a: Path, path_b: Path) -> dict[str, Any]:
    """Both files loaded and compared: what ``--json`` prints."""
    a, b = load(path_a), load(path_b)
    notes = []
    if a.get("model_id") != b.get("model_id"):
        notes.append(f"different models: {a.get('model_id')} and {b.get('model_id')}")
    ca, cb = (d.get("cost") or {} for d in (a, b))
    if ca.get("currency") and cb.get("currency") and ca["currency"] != cb["currency"]:
        notes.append(f"costs in different currencies ({ca['currency']}, {cb['currency']}): "
                     "no ratio")
    for side, data in (("A", a), ("B", b)):
        telemetry = data.get("telemetry") or {}
        if telemetry.get("available") is False:
            notes.append(f"{side}: energy not measured ({telemetry.get('reason')})")
    return {"a": {"file": str(path_a), "run": describe(a, path_a)},
            "b": {"file": str(path_b), "run": describe(b, path_b)},
            "rows": [r.to_dict() for r in compare(a, b)], "notes": notes}


def plot(result: dict[str, Any], path: Path) -> Path:
    """Bars of A and B per metric, grouped by unit, and B/A ratios (log scale, 1 marked)."""
    from ascend_serve.bench.report import pyplot

    plt = pyplot()
    rows = [r for r in result["rows"] if r["a"] is not None or r["b"] is not None]
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r["unit"] or "cost", []).append(r)
    panels = len(groups) + 1
    fig, axes = plt.subplots(1, panels, figsize=(4 * panels, 4.5), squeeze=False)
    for ax, (unit, items) in zip(axes[0], groups.items(), strict=False):
        xs = range(len(items))
        ax.bar([x - 0.2 for x in xs], [r["a"] or 0 for r in items], 0.4, label="A")
        ax.bar([x + 0.2 for x in xs], [r["b"] or 0 for r in items], 0.4, label="B")
        ax.set_xticks(list(xs), [r["label"] for r in items], rotation=30, ha="right")
        ax.set_ylabel(unit)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend()
    ratios = [r for r in rows if r["ratio"] is not None]
    ax = axes[0][-1]
    ax.barh([r["label"] for r in ratios], [r["ratio"] for r in ratios],
            color=["tab:green" if r["better"] == "B" else "tab:red" if r["better"] == "A"
                   else "tab:grey" for r in ratios])
    ax.axvline(1.0, color="black", linewidth=1)
    if ratios:
        ax.set_xscale("log")
    ax.set_title("B / A (green: B better)")
    fig.suptitle(f"A = {result['a']['run']}\nB = {result['b']['run']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
