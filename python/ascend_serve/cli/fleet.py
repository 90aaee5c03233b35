"""``ascend-serve fleet status``: every host's versions, reboot state and serving state;
``ascend-serve fleet scale``: grow or shrink the replicas behind the router."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import httpx
import typer
from rich.markup import escape
from rich.table import Table

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
from ascend_serve.fleet.scale import Policy, Sample, Scaler, decide
from ascend_serve.fleet.status import collect, fleet_problems
from ascend_serve.serving.load_metrics import (
    MetricInputError,
    parse_range,
    parse_targets,
    replica_values,
)

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
    series: Annotated[Path | None, typer.Option(
        help="Replay a recorded metric series (JSON lines) instead of scraping.")] = None,
    replica_urls: Annotated[list[str] | None, typer.Option(
        "--replica", metavar="NAME=URL",
        help="A replica's base URL to scrape /metrics from; repeatable.")] = None,
    rounds: Annotated[int, typer.Option(help="Scrape rounds (with --replica).", min=1)] = 1,
    interval_s: Annotated[float, typer.Option(help="Seconds between rounds.", min=0)] = 15.0,
    as_json: JsonFlag = False,
) -> None:
    """Decide whether the set of replicas behind the router grows or shrinks, from vLLM's
    waiting requests and KV-cache use, between MIN and MAX.

    Decides only: the router role that adds a validated replica and drains one before removal
    implements ascend_serve.fleet.scale.Actuator (docs/operating.md, "Elastic scaling").

    Exit codes: 0 decided, 2 bad input (MIN > MAX, an unknown metric, no or two metric
    sources, a series that is not one).
    """
    try:
        low, high = parse_range(replicas_range)
        policy = Policy.for_load(low, high, parse_targets(targets), load_s)
    except MetricInputError as exc:
        raise fail(str(exc)) from exc
    if (series is None) == (not replica_urls):
        raise fail("give either --series FILE or --replica NAME=URL")
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
    for d in decisions:
        if d.action != "hold" or d is decisions[-1]:
            load = "-" if d.load is None else f"{d.load:.2f}"
            console.print(f"t={d.t:8.1f}s replicas={d.replicas} load={load} "
                          f"{d.action}: {escape(d.reason)}", highlight=False)
