"""The router's worker API client (vllm-router 0.1.17's endpoints, ``src/server.rs``) and the
bare-metal actuator of ``ascend-serve fleet scale``, against an in-memory router
(``httpx.MockTransport``) that answers as that version does: ``GET /list_workers`` ->
``{"urls": [...]}``; ``POST /add_worker?url=`` 200, or 400 "Worker URL already exists";
``POST /remove_worker?url=`` always 200."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest
from terminal import uncolored
from typer.testing import CliRunner
from vllm_metrics import exposition

from ascend_serve.cli import fleet as fleet_cli
from ascend_serve.cli.fleet import fleet_app
from ascend_serve.fleet.scale import Policy, RouterActuator, Sample, run
from ascend_serve.serving.load_metrics import DEFAULT_TARGETS
from ascend_serve.serving.router_api import RouterApiError, RouterClient, url_scheme_problem

ROUTER = "http://router:30000"
A, B, C = "http://10.0.0.1:8000", "http://10.0.0.2:8000", "http://10.0.0.3:8000"


class FakeRouter:
    """vllm-router 0.1.17's worker API in memory, and replicas' /metrics (``running``: the
    successive vllm:num_requests_running values each read of a replica gets)."""

    def __init__(self, workers: Sequence[str]) -> None:
        self.workers = list(workers)
        self.calls: list[str] = []
        self.running: dict[str, list[float]] = {}
        self.headers: dict[str, str | None] = {}

    def handle(self, request: httpx.Request) -> httpx.Response:
        url = str(request.url.copy_with(query=None))
        target = request.url.params.get("url")
        self.calls.append(f"{request.method} {request.url.path}"
                          + (f" {target}" if target else "")
                          + (f" {url.rsplit('/metrics', 1)[0]}" if url.endswith("/metrics")
                             else ""))
        self.headers[url] = request.headers.get("authorization")
        if url.startswith(ROUTER):
            path = request.url.path
            if (request.method, path) == ("GET", "/list_workers"):
                return httpx.Response(200, json={"urls": list(self.workers)})
            if (request.method, path) == ("POST", "/add_worker") and target:
                if target in self.workers:
                    return httpx.Response(400, text=f"Worker {target} already exists")
                self.workers.append(target)
                return httpx.Response(200, text=f"Successfully added worker: {target}")
            if (request.method, path) == ("POST", "/remove_worker") and target:
                if target in self.workers:
                    self.workers.remove(target)
                return httpx.Response(200, text=f"Successfully removed worker: {target}")
            return httpx.Response(404)
        base = url.rsplit("/metrics", 1)[0]
        if base not in self.running:
            raise httpx.ConnectError("connection refused", request=request)
        values = self.running[base]
        now = values.pop(0) if len(values) > 1 else values[0]
        return httpx.Response(200, text=exposition(0.0, 0.1, engines=2, running=now, kv_other=0.0))

    def client(self, admin_key: str | None = None, replica_key: str | None = None) -> RouterClient:
        return RouterClient(ROUTER, admin_key=admin_key, replica_key=replica_key,
                            transport=httpx.MockTransport(self.handle))


def test_the_client_speaks_the_routers_endpoints() -> None:
    router = FakeRouter([A])
    router.running[A] = [3.0]
    with router.client(admin_key="admin", replica_key="replica") as client:
        assert client.workers() == [A]
        assert client.add_worker(B) == f"Successfully added worker: {B}"
        with pytest.raises(RouterApiError, match=r"HTTP 400: Worker .* already exists"):
            client.add_worker(B)
        assert client.remove_worker(B).startswith("Successfully removed")
        load = client.replica_load(A)
    assert router.calls == ["GET /list_workers", f"POST /add_worker {B}",
                            f"POST /add_worker {B}", f"POST /remove_worker {B}",
                            f"GET /metrics {A}"]
    assert load.running == pytest.approx(3.0)  # summed over the two engines
    assert load.values == {"waiting": 0.0, "kv_cache": pytest.approx(0.1)}
    # The admin key goes to the router only, the replicas' key to the replicas only.
    assert router.headers[f"{ROUTER}/list_workers"] == "Bearer admin"
    assert router.headers[f"{A}/metrics"] == "Bearer replica"


def test_the_client_reports_what_failed() -> None:
    def broken(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/list_workers":
            return httpx.Response(200, text="<html>")
        raise httpx.ConnectError("connection refused", request=request)

    with RouterClient(ROUTER, transport=httpx.MockTransport(broken)) as client:
        with pytest.raises(RouterApiError, match=r'not \{"urls"'):
            client.workers()
        with pytest.raises(RouterApiError, match="POST /remove_worker: connection refused"):
            client.remove_worker(A)
        with pytest.raises(RouterApiError, match=f"replica {A}: GET /metrics"):
            client.replica_load(A)


@pytest.mark.parametrize(("url", "message"), [
    ("ftp://router:30000", "unknown URL scheme 'ftp'"),
    ("router:30000", "unknown URL scheme"),
    ("http://:30000", "no host"),
    ("http://router:30000/v1", "base URL only"),
])
def test_bad_urls_are_refused(url: str, message: str) -> None:
    assert message in (url_scheme_problem(url, "router") or "")
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        RouterClient(url)


def actuator(router: FakeRouter, standby: list[str], broken: frozenset[str] = frozenset(),
             log: list[str] | None = None) -> RouterActuator:
    def validate(url: str) -> tuple[bool, str]:
        router.calls.append(f"validate {url}")
        return url not in broken, "failed: health" if url in broken else "12/12 checks passed"

    sleeps = log if log is not None else []
    return RouterActuator(router.client(), standby, validate, drain_timeout_s=30,
                          drain_poll_s=5, sleep=lambda s: sleeps.append(f"sleep {s:g}"))


def test_add_validates_before_routing_and_skips_a_failing_replica() -> None:
    router = FakeRouter([A])
    act = actuator(router, [A, B, C], broken=frozenset({B}))
    assert act.add_replica() == C
    # A is routed already (not a candidate); B failed validate and was never added.
    assert router.calls == ["GET /list_workers", f"validate {B}", f"validate {C}",
                            f"POST /add_worker {C}"]
    assert router.workers == [A, C]
    assert act.replicas() == [A, C]  # oldest first: the newest is the one just added
    router.calls.clear()
    assert act.add_replica() is None  # B still fails; nothing else is on standby
    assert router.calls == ["GET /list_workers", f"validate {B}"]
    assert "validate" in act.events[-1] and "not added" in act.events[-1]


def test_drain_removes_first_then_waits_for_running_requests() -> None:
    router = FakeRouter([A, B])
    router.running[B] = [2.0, 1.0, 0.0]
    log: list[str] = []
    act = actuator(router, [], log=log)
    act.drain_replica(B)
    act.remove_replica(B)
    assert router.calls == [f"POST /remove_worker {B}", f"GET /metrics {B}", f"GET /metrics {B}",
                            f"GET /metrics {B}", "GET /list_workers"]
    assert log == ["sleep 5", "sleep 5"]  # two reads with requests running, then 0
    assert router.workers == [A] and act.standby == [B]
    assert act.events == [f"drained {B}: vllm:num_requests_running 0 (3 read(s))",
                          f"removed {B}: out of the router, back to standby"]


def test_a_drain_stops_waiting_at_the_timeout() -> None:
    router = FakeRouter([A, B])
    router.running[B] = [4.0]
    now = [0.0]
    act = actuator(router, [])
    act.clock = lambda: now[0]
    act.sleep = lambda s: now.__setitem__(0, now[0] + s)
    act.drain_replica(B)
    # Reads at 0, 5, ..., 30 s: seven, the last at the timeout.
    assert router.calls.count(f"GET /metrics {B}") == 7
    assert "timed out after 30 s with 4 request(s) running" in act.events[-1]


def test_remove_takes_out_a_replica_that_came_back() -> None:
    router = FakeRouter([A, B])
    act = actuator(router, [])
    act.remove_replica(B)  # as after a router restart between drain and removal
    assert router.calls == ["GET /list_workers", f"POST /remove_worker {B}", "GET /list_workers"]
    assert router.workers == [A]


def test_the_loop_adds_a_validated_replica_then_drains_and_removes_it() -> None:
    router = FakeRouter([A])
    router.running = {A: [0.0], B: [1.0, 0.0]}
    act = actuator(router, [B])
    waiting = iter([6.0, 0.0])
    seen: list[list[str]] = []

    def scrape(names: Sequence[str]) -> Sample:
        w = next(waiting)
        return Sample(len(seen), {n: {"waiting": w, "kv_cache": 0.1} for n in names})

    policy = Policy(1, 2, DEFAULT_TARGETS, up_after_s=0, down_after_s=0, cooldown_s=0)
    result = run(policy, act, scrape, steps=2, sleep=lambda: seen.append(list(router.workers)))
    seen.append(list(router.workers))
    assert seen == [[A, B], [A]]
    assert [s.done for s in result.steps] == [f"added {B}", f"drained and removed {B}"]
    assert router.calls == [
        "GET /list_workers",  # round 1: the replicas
        "GET /list_workers", f"validate {B}", f"POST /add_worker {B}",  # add
        "GET /list_workers",  # round 2
        f"POST /remove_worker {B}", f"GET /metrics {B}", f"GET /metrics {B}",  # drain
        "GET /list_workers",  # remove
    ]


runner = CliRunner()


@pytest.mark.parametrize(("args", "message"), [
    (["--replicas", "3:2", "--router", ROUTER], "MIN (3) is greater than MAX (2)"),
    (["--replicas", "1:2", "--router", "ftp://r:1"], "--router 'ftp://r:1': unknown URL scheme"),
    (["--replicas", "1:2", "--router", ROUTER, "--standby", "10.0.0.2:8000"],
     "--standby '10.0.0.2:8000': unknown URL scheme"),
    (["--replicas", "1:2", "--standby", B], "--standby and --inventory need --router"),
    (["--replicas", "1:2", "--series", "x", "--router", ROUTER], "--router URL (act)"),
])
def test_the_command_refuses_bad_router_input(args: list[str], message: str) -> None:
    result = runner.invoke(fleet_app, ["scale", *args])
    assert result.exit_code == 2
    assert message in uncolored(result.stderr)


def test_the_command_acts_through_the_router(monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    router = FakeRouter([A])
    router.running = {A: [0.0], B: [0.0]}
    validated: list[tuple[str, str | None]] = []

    def validator(api_key: str | None) -> object:
        def validate(url: str) -> tuple[bool, str]:
            validated.append((url, api_key))
            return True, "10/10 checks passed"
        return validate

    def client(base_url: str, **kwargs: object) -> RouterClient:
        return RouterClient(base_url, transport=httpx.MockTransport(router.handle),
                            **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(fleet_cli, "checks_validator", validator)
    monkeypatch.setattr(fleet_cli, "RouterClient", client)
    key = tmp_path / "key"
    key.write_text("sekret\n")
    # Over target with one replica, below the minimum of 2: one round adds B.
    result = runner.invoke(fleet_app, ["scale", "--replicas", "2:3", "--router", ROUTER,
                                       "--standby", B, "--api-key-file", str(key), "--once",
                                       "--json"])
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert [s["action"] for s in report["steps"]] == ["add"]
    assert report["workers"] == [A, B] and report["standby"] == []
    assert validated == [(B, "sekret")]
    assert router.headers[f"{A}/metrics"] == "Bearer sekret"


def test_standby_replicas_from_an_inventory_group(tmp_path: Path) -> None:
    (tmp_path / "hosts.yml").write_text(
        "all:\n  children:\n    ascend_nodes:\n      hosts:\n"
        "        n1: {ansible_host: 192.0.2.1, router_worker_address: 10.0.0.1}\n"
        "        n2: {ansible_host: 192.0.2.2, router_worker_ports: [8100, 8101]}\n"
        "        n3: {}\n"  # no profile, no ports: serves nothing
        "      vars: {vllm_service_profile: ''}\n"
        "    other:\n      hosts:\n        o1: {router_worker_ports: [9000]}\n")
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars" / "n1.yml").write_text(
        "vllm_service_profile: deepseek-v4-flash-w8a8-a2\n")
    from ascend_serve.fleet.scale import StandbyError, inventory_standby
    from ascend_serve.serving.profiles import resolve

    port = resolve("deepseek-v4-flash-w8a8-a2").port
    assert inventory_standby(tmp_path / "hosts.yml", "ascend_nodes") == [
        f"http://10.0.0.1:{port}", "http://192.0.2.2:8100", "http://192.0.2.2:8101"]
    with pytest.raises(StandbyError, match=r"group 'nosuch'.*no host"):
        inventory_standby(tmp_path / "hosts.yml", "nosuch")
