"""``ascend-serve fleet status``: every host's versions, reboot state and serving state;
``ascend-serve fleet scale``: grow or shrink the replicas behind the router."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated

import httpx
import typer
from rich.markup import escape
from rich.table import Table

from ansible_collections.ascend_serve.fleet.plugins.module_utils.validate import resolve_api_key
from ansible_collections.ascend_serve.fleet.plugins.module_utils.validate_wire import (
    DEFAULT_API_KEY_ENV,
)
from ascend_serve.cli.console import (
    EXIT_CHECK_FAILED,
    EXIT_FAILED,
    EXIT_OK,
    console,
    fail,
    read_input,
)
from ascend_serve.cli.options import Inventory, JsonFlag, Limit, RunDir
from ascend_serve.fleet.request import DeployInputError, prepare
from ascend_serve.fleet.rundir import new_run_dir
from ascend_serve.fleet.scale import (
    Decision,
    Policy,
    RouterActuator,
    Sample,
    Scaler,
    StandbyError,
    Step,
    checks_validator,
    decide,
    inventory_standby,
    run,
)
from ascend_serve.fleet.status import collect, fleet_problems
from ascend_serve.serving.load_metrics import (
    MetricInputError,
    parse_range,
    parse_targets,
    replica_values,
)
from ascend_serve.serving.router_api import RouterApiError, RouterClient, url_scheme_problem

STATUS_PLAYBOOK = "fleet_status"

fleet_app = typer.Typer(help="The state of a whole fleet, from the roles' own records, and "
                        "its elastic scaling.",
                        no_args_is_help=True)


def _dash(value: object) -> str:
    return "-" if value in (None, "", []) else escape(str(value))


@fleet_app.command("status")
def status(
    inventory: Inventory = None,
    limit: Limit = None,
    run_dir: RunDir = None,
    as_json: JsonFlag = False,
) -> None:
    """Per host: version set, driver, firmware, CANN, serving environment, reboot pending,
    serving profile and unit state (read-only: playbooks/fleet_status.yml).

    Exit codes: 0 every host read and consistent, 1 a problem (a host unreachable, a configured
    server not active, an incomplete model, hosts on different version sets), 2 bad input, 3 the
    status playbook itself could not run.
    """
    try:
        request = prepare(STATUS_PLAYBOOK, inventory or [], limit=limit)
    except DeployInputError as exc:
        raise fail(str(exc)) from exc
    result, states = collect(request, run_dir or new_run_dir(request.playbook))
    if result.outcome == "ansible_failed" and not states:
        raise fail(f"the status playbook did not run: {result.error or result.status}",
                   EXIT_FAILED)
    problems = fleet_problems(states)
    bad = problems or any(s.problems for s in states)
    if as_json:
        typer.echo(json.dumps({"hosts": [s.to_dict() for s in states],
                               "fleet_problems": problems, "ok": not bad,
                               "run_dir": str(result.run_dir)}, indent=2))
    else:
        table = Table(title=f"fleet status ({len(states)} host(s))")
        for col in ("host", "set", "driver", "firmware", "CANN", "env set", "reboot pending",
                    "profile", "unit", "rollout", "fault", "problems"):
            table.add_column(col, overflow="fold")
        for s in states:
            reboot = {None: "-", True: "[yellow]yes[/yellow]", False: "no"}[s.reboot_pending]
            unit = _dash(s.unit_state)
            if s.profile:
                unit = f"[green]{unit}[/green]" if s.serving else f"[red]{unit}[/red]"
            table.add_row(escape(s.host), _dash(s.stack_set), _dash(s.driver),
                          _dash(s.firmware), _dash(s.cann), _dash(s.env_set), reboot,
                          _dash(f"{s.profile} ({s.role}"
                                + (f", in {s.image}" if s.runtime == "container" else "") + ")"
                                if s.profile else None), unit,
                          _dash(f"{s.rollout_phase} {s.rollout_set}" if s.rollout_phase else None),
                          _dash(s.fault_class),
                          "[red]" + escape("; ".join(s.problems)) + "[/red]"
                          if s.problems else "")
        console.print(table)
        for problem in problems:
            console.print(f"[red]fleet: {escape(problem)}[/red]")
        console.print(f"run directory: {result.run_dir}")
    raise typer.Exit(EXIT_CHECK_FAILED if bad else EXIT_OK)


def _replay(path: Path) -> list[Sample]:
    """A recorded series: JSON lines ``{"t": s, "replicas": {name: /metrics text}}``, or the
    one-replica ``{"t": s, "text": /metrics text}`` bench/record_load_metrics.py writes."""
    samples = []
    for number, line in enumerate(read_input(str(path)).splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            texts = row["replicas"] if "replicas" in row else {"replica-0": row["text"]}
            samples.append(Sample(float(row["t"]), {
                name: replica_values(text) for name, text in texts.items()}))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise fail(f"{path}:{number}: not a recorded sample ({exc})") from exc
    return samples


def _scrape(urls: dict[str, str], started: float) -> Sample:
    values = {}
    with httpx.Client(timeout=10) as client:
        for name, url in urls.items():
            try:
                values[name] = replica_values(client.get(f"{url.rstrip('/')}/metrics").text)
            except httpx.HTTPError:
                values[name] = {}
    return Sample(time.monotonic() - started, values)


def _router_scrape(client: RouterClient, started: float) -> Callable[[Sequence[str]], Sample]:
    """Each routed replica's gauges; one that does not answer reports nothing (a hold)."""

    def scrape(names: Sequence[str]) -> Sample:
        values: dict[str, Mapping[str, float]] = {}
        for name in names:
            try:
                values[name] = client.replica_load(name).values
            except RouterApiError:
                values[name] = {}
        return Sample(time.monotonic() - started, values)

    return scrape


def _print(decisions: Sequence[Decision], steps: Sequence[Step] | None = None) -> None:
    done = {id(s.decision): s.done for s in steps or []}
    for d in decisions:
        if d.action != "hold" or d is decisions[-1]:
            load = "-" if d.load is None else f"{d.load:.2f}"
            extra = f" -> {done[id(d)]}" if done.get(id(d)) else ""
            console.print(f"t={d.t:8.1f}s replicas={d.replicas} load={load} "
                          f"{d.action}: {escape(d.reason)}{escape(extra)}", highlight=False)


@fleet_app.command("scale")
def scale(
    replicas_range: Annotated[str, typer.Option(
        "--replicas", metavar="MIN:MAX",
        help="The inventory's minimum and maximum replica count behind the router.")],
    targets: Annotated[list[str] | None, typer.Option(
        "--target", metavar="METRIC=VALUE",
        help="Per-replica target: 'waiting' (requests, default 2) or 'kv_cache' (fraction, "
        "default 0.8); repeatable; naming any uses only those named.")] = None,
    load_s: Annotated[float, typer.Option(
        help="A replica's model load (the profile's health_timeout_s): cool-down after a "
        "change, twice it of low use before a removal.", min=0)] = 600.0,
    up_after_s: Annotated[float, typer.Option(
        help="Seconds over target before a replica is added.", min=0)] = 180.0,
    series: Annotated[Path | None, typer.Option(
        help="Replay a recorded metric series (JSON lines) instead of scraping.")] = None,
    replica_urls: Annotated[list[str] | None, typer.Option(
        "--replica", metavar="NAME=URL",
        help="A replica's base URL to scrape /metrics from; repeatable (decides only).")] = None,
    router: Annotated[str | None, typer.Option(
        metavar="URL",
        help="The running vllm-router (e.g. http://10.0.0.1:30000): scrape the replicas it "
        "routes to and act through its worker API (/add_worker, /remove_worker).")] = None,
    standby: Annotated[list[str] | None, typer.Option(
        metavar="URL", help="With --router: a running vLLM server that may be added (after "
        "validate passes); repeatable.")] = None,
    inventory: Annotated[Path | None, typer.Option(
        "-i", "--inventory", metavar="INVENTORY",
        help="With --router: the serving hosts of --group are standby replicas (address and "
        "port as the router role computes them).")] = None,
    group: Annotated[str, typer.Option(
        help="The inventory group of serving hosts (the router role's "
        "router_worker_group).")] = "ascend_nodes",
    drain_timeout_s: Annotated[float, typer.Option(
        help="With --router: seconds to wait for a removed replica's running requests to reach "
        "0 (the router role's router_drain_timeout).", min=0)] = 300.0,
    api_key_env: Annotated[str | None, typer.Option(
        metavar="NAME", help=f"Environment variable holding the replicas' API key, for validate "
        f"(default: {DEFAULT_API_KEY_ENV}, when set).")] = None,
    api_key_file: Annotated[Path | None, typer.Option(
        metavar="PATH", help="File holding the replicas' API key.")] = None,
    rounds: Annotated[int, typer.Option(help="Scrape rounds (with --replica or --router).",
                                        min=1)] = 1,
    once: Annotated[bool, typer.Option(
        "--once", help="One round (scrape, decide, act) and exit: for a timer.")] = False,
    interval_s: Annotated[float, typer.Option(
        "--interval-s", "--interval", help="Seconds between rounds.", min=0)] = 15.0,
    as_json: JsonFlag = False,
) -> None:
    """Grow or shrink the set of replicas behind the router, from vLLM's waiting requests and
    KV-cache use, between MIN and MAX.

    With --router it acts: a standby replica (--standby, or the inventory's serving hosts not
    behind the router) is added only after `ascend-serve validate`'s checks pass on it; the
    newest replica is removed from the router, drained (its running requests reach 0), then
    left as standby. Changes are the router's runtime state: a router restart returns to the
    worker list the router role rendered. With --replica or --series it decides only.

    Exit codes: 0 ran, 2 bad input (MIN > MAX, an unknown metric, not exactly one metric
    source, a URL that is not http(s)://HOST:PORT, a series that is not one), 3 the router's
    API failed.
    """
    try:
        low, high = parse_range(replicas_range)
        policy = Policy(low, high, parse_targets(targets), up_after_s=up_after_s,
                        cooldown_s=load_s, down_after_s=2 * load_s)
    except MetricInputError as exc:
        raise fail(str(exc)) from exc
    if (standby or inventory) and router is None:
        raise fail("--standby and --inventory need --router")
    if sum(x is not None and x != [] for x in (series, replica_urls, router)) != 1:
        raise fail("give either --series FILE or --replica NAME=URL (decide only), or --router "
                   "URL (act)")
    rounds = 1 if once else rounds
    if router is not None:
        _act(router, policy, standby or [], inventory, group, drain_timeout_s, api_key_env,
             api_key_file, rounds, interval_s, as_json)
        return
    if series is not None:
        decisions = decide(policy, _replay(series))
    else:
        urls = {}
        for item in replica_urls or []:
            name, sep, url = item.partition("=")
            if not sep or not url.startswith(("http://", "https://")):
                raise fail(f"--replica {item!r}: write NAME=http://HOST:PORT")
            urls[name] = url
        started = time.monotonic()
        scaler = Scaler(policy)
        decisions = []
        for index in range(rounds):
            decisions.append(scaler.observe(_scrape(urls, started)))
            if index + 1 < rounds:
                time.sleep(interval_s)
    if as_json:
        typer.echo(json.dumps({"min": low, "max": high, "targets": dict(policy.targets),
                               "decisions": [d.to_dict() for d in decisions]}, indent=2))
        return
    _print(decisions)


def _act(router: str, policy: Policy, standby: list[str], inventory: Path | None, group: str,
         drain_timeout_s: float, api_key_env: str | None, api_key_file: Path | None,
         rounds: int, interval_s: float, as_json: bool) -> None:
    for index, url in enumerate([router, *standby]):
        problem = url_scheme_problem(url, "--standby" if index else "--router")
        if problem:
            raise fail(problem)
    try:
        api_key = resolve_api_key(api_key_env, api_key_file)
        urls = list(standby)
        if inventory is not None:
            urls += [u for u in inventory_standby(inventory, group) if u not in urls]
    except (ValueError, StandbyError) as exc:
        raise fail(str(exc)) from exc
    with RouterClient(router, replica_key=api_key) as client:
        actuator = RouterActuator(client, urls, checks_validator(api_key),
                                  drain_timeout_s=drain_timeout_s)
        try:
            result = run(policy, actuator, _router_scrape(client, time.monotonic()), rounds,
                         sleep=lambda: time.sleep(interval_s))
            workers = list(actuator.replicas())
        except RouterApiError as exc:
            for event in actuator.events:
                console.print(escape(event), highlight=False)
            raise fail(str(exc), EXIT_FAILED) from exc
    decisions = [s.decision for s in result.steps]
    if as_json:
        typer.echo(json.dumps({
            "min": policy.min_replicas, "max": policy.max_replicas, "router": router,
            "targets": dict(policy.targets),
            "steps": [{**s.decision.to_dict(), "done": s.done} for s in result.steps],
            "events": actuator.events, "workers": workers,
            "standby": [u for u in actuator.standby if u not in workers]}, indent=2))
        return
    _print(decisions, result.steps)
    for event in actuator.events:
        console.print(escape(event), highlight=False)
    console.print(f"behind the router now: {', '.join(workers) or 'none'}", highlight=False)
