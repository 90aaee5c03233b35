"""vLLM's /metrics text for the tests of the load readers (``fleet scale``, the router client):
the series the autoscalers and the drain read, in the shape vLLM 0.32 writes them (one series per
engine, labels ``engine`` and ``model_name``)."""

from __future__ import annotations


def exposition(waiting: float, kv: float, *, engines: int = 1, running: float | None = None,
               kv_other: float = 0.1) -> str:
    """``waiting`` and ``running`` requests split evenly over ``engines``; ``kv`` the first
    engine's KV-cache use and ``kv_other`` the others'; no running series when ``running`` is
    None."""
    lines = []
    if running is not None:
        lines += ["# TYPE vllm:num_requests_running gauge"]
        lines += [f'vllm:num_requests_running{{engine="{e}",model_name="m"}} {running / engines}'
                  for e in range(engines)]
    lines += ["# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
              "# TYPE vllm:num_requests_waiting gauge"]
    lines += [f'vllm:num_requests_waiting{{engine="{e}",model_name="m"}} {waiting / engines}'
              for e in range(engines)]
    lines += ["# TYPE vllm:kv_cache_usage_perc gauge"]
    lines += [f'vllm:kv_cache_usage_perc{{engine="{e}",model_name="m"}} '
              f'{kv if e == 0 else kv_other}' for e in range(engines)]
    return "\n".join(lines) + "\n"
