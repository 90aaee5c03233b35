"""The metrics of a benchmark run, defined and named as ``vllm bench serve`` saves them.

Per request (:class:`RequestRecord`, times in seconds on ``time.perf_counter``): TTFT is the
time from sending to the first streamed chunk that carries a token; each later token chunk adds
an inter-token latency (ITL, the gap since the previous token chunk); the end-to-end latency
(E2EL) ends at the last token chunk; TPOT is ``(e2el - ttft) / (output_tokens - 1)`` for
requests of more than one output token.

Over the run (:func:`compute`): failed requests count in ``failed`` and add nothing else;
``request_throughput`` = completed / duration; ``output_throughput`` = output tokens /
duration; ``total_token_throughput`` adds the prompt tokens; TTFT, TPOT and E2EL statistics are
over the completed requests and ITL statistics over every ITL of every completed request
(``numpy`` mean, median, population std and linearly interpolated percentiles, in ms; 0 when
there is no value, as vLLM does). ``request_goodput`` is the number of completed requests that
meet every per-request threshold (``ttft``/``tpot``/``e2el`` in ms; a request of one token has
TPOT 0 there) per second of the run, and None without thresholds. ``max_output_tokens_per_s``
and ``max_concurrent_requests`` are the busiest one-second bucket's token count and the most
requests active in one bucket.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

LATENCY_METRICS = ("ttft", "tpot", "itl", "e2el")
GOODPUT_METRICS = ("ttft", "tpot", "e2el")
DEFAULT_PERCENTILES = (50.0, 90.0, 99.0)
MS = 1000.0


@dataclass
class RequestRecord:
    """One request's outcome; ``prompt_len``/``output_len`` come from the server's usage."""

    success: bool = False
    error: str = ""
    prompt_len: int = 0
    output_len: int = 0
    ttft: float = 0.0
    itl: list[float] = field(default_factory=list)
    latency: float = 0.0
    start_time: float = 0.0
    queue_time: float = 0.0  # waiting for a concurrency slot before sending

    @property
    def tpot(self) -> float:
        """Seconds per output token after the first (0 for one token)."""
        if self.output_len > 1:
            return (self.latency - self.ttft) / (self.output_len - 1)
        return 0.0


def percentile_label(p: float) -> str:
    """``99`` → ``"99"``, ``99.9`` → ``"99.9"``: the ``p{…}`` of vLLM's field names."""
    return str(int(p)) if int(p) == p else str(p)


def parse_percentiles(text: str) -> list[float]:
    """``"50,90,99"`` → ``[50.0, 90.0, 99.0]``; raises ``ValueError`` outside 0..100."""
    values = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            value = float(part)
        except ValueError as exc:
            raise ValueError(f"percentile {part!r} is not a number") from exc
        if not 0 <= value <= 100 or math.isnan(value):
            raise ValueError(f"percentile {part} is not within 0..100")
        values.append(value)
    if not values:
        raise ValueError("no percentile given")
    return sorted(set(values))


def _stats(name: str, values: Sequence[float], percentiles: Sequence[float]) -> dict[str, float]:
    data = np.asarray(values if values else [0.0], dtype=float) * MS
    out = {
        f"mean_{name}_ms": float(np.mean(data)),
        f"median_{name}_ms": float(np.median(data)),
        f"std_{name}_ms": float(np.std(data)),
    }
    for p in percentiles:
        out[f"p{percentile_label(p)}_{name}_ms"] = float(np.percentile(data, p))
    return out


def goodput_count(records: Sequence[RequestRecord], thresholds_ms: Mapping[str, float]) -> int:
    """Completed requests meeting every threshold (``ttft``/``tpot``/``e2el``, ms)."""
    unknown = set(thresholds_ms) - set(GOODPUT_METRICS)
    if unknown:
        raise ValueError(f"goodput thresholds are on {', '.join(GOODPUT_METRICS)}, not "
                         f"{', '.join(sorted(unknown))}")
    good = 0
    for r in records:
        if not r.success:
            continue
        values = {"ttft": r.ttft, "tpot": r.tpot, "e2el": r.latency}
        if all(values[k] * MS <= limit for k, limit in thresholds_ms.items()):
            good += 1
    return good


def _peaks(records: Sequence[RequestRecord]) -> tuple[float, int]:
    """The most token chunks in one second and the most requests active in one second."""
    done = [r for r in records if r.success]
    if not done:
        return 0.0, 0
    t0 = min(r.start_time for r in done)
    end = max(r.start_time + r.latency for r in done)
    buckets = math.ceil(end - t0) + 1
    tokens = np.zeros(buckets)
    active = np.zeros(buckets)
    for r in done:
        t = r.start_time + r.ttft
        times = [t]
        for gap in r.itl:
            t += gap
            times.append(t)
        for when in times:
            b = int(when - t0)
            if 0 <= b < buckets:
                tokens[b] += 1
        first, last = int(r.start_time - t0), int(r.start_time + r.latency - t0)
        active[first:min(last, buckets - 1) + 1] += 1
    return float(tokens.max()), int(active.max())


def compute(records: Sequence[RequestRecord], duration: float,
            percentiles: Sequence[float] = DEFAULT_PERCENTILES,
            goodput_ms: Mapping[str, float] | None = None) -> dict[str, Any]:
    """The run's metrics and per-request arrays under ``vllm bench serve``'s field names."""
    if duration <= 0:
        raise ValueError(f"the duration must be positive, not {duration}")
    done = [r for r in records if r.success]
    output_lens = [r.output_len if r.success else 0 for r in records]
    total_input = sum(r.prompt_len for r in done)
    total_output = sum(output_lens)
    ttfts = [r.ttft for r in done]
    tpots = [r.tpot for r in done if r.output_len > 1]
    itls = [gap for r in done for gap in r.itl]
    e2els = [r.latency for r in done]
    peak_tokens, peak_requests = _peaks(records)
    result: dict[str, Any] = {
        "duration": duration,
        "completed": len(done),
        "failed": len(records) - len(done),
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": len(done) / duration,
        "request_goodput": (goodput_count(records, goodput_ms) / duration
                            if goodput_ms else None),
        "output_throughput": total_output / duration,
        "total_token_throughput": (total_input + total_output) / duration,
        "input_lens": [r.prompt_len for r in records],
        "output_lens": output_lens,
        "ttfts": [r.ttft for r in records],
        "itls": [list(r.itl) for r in records],
        "latencies": [r.latency for r in records],
        "start_times": [r.start_time for r in records],
        "queue_times": [r.queue_time for r in records],
        "errors": [r.error for r in records],
        "max_output_tokens_per_s": peak_tokens,
        "max_concurrent_requests": peak_requests,
    }
    for name, values in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2el", e2els)):
        result.update(_stats(name, values, percentiles))
    return result


def headline(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The scalar metrics (no per-request arrays, no None): what a sweep or ``tune`` keeps."""
    return {k: float(v) for k, v in metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}
