"""``ascend-serve fleet status``: every host's versions, reboot state and serving state."""

from __future__ import annotations

import json

import typer
from rich.markup import escape
from rich.table import Table

from ascend_serve.cli.console import EXIT_CHECK_FAILED, EXIT_FAILED, EXIT_OK, console, fail
from ascend_serve.cli.options import Inventory, JsonFlag, Limit, RunDir
from ascend_serve.fleet.request import DeployInputError, prepare
from ascend_serve.fleet.rundir import new_run_dir
from ascend_serve.fleet.status import collect, fleet_problems

STATUS_PLAYBOOK = "fleet_status"

fleet_app = typer.Typer(help="The state of a whole fleet, from the roles' own records.",
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
                    "profile", "unit", "rollout", "problems"):
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
                          "[red]" + escape("; ".join(s.problems)) + "[/red]"
                          if s.problems else "")
        console.print(table)
        for problem in problems:
            console.print(f"[red]fleet: {escape(problem)}[/red]")
        console.print(f"run directory: {result.run_dir}")
    raise typer.Exit(EXIT_CHECK_FAILED if bad else EXIT_OK)
