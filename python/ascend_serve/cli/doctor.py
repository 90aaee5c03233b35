"""``ascend-serve doctor``: the command (registered in :mod:`ascend_serve.cli.main`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from ascend_serve.cli.console import EXIT_BAD_INPUT, console, err_console, fail
from ascend_serve.cli.options import JsonFlag
from ascend_serve.doctor.bundle import write_bundle
from ascend_serve.doctor.collected import collector_command
from ascend_serve.doctor.diagnose import examine_all, exit_code
from ascend_serve.doctor.findings import Context, HostResult
from ascend_serve.doctor.remote import (
    DEFAULT_KNOWN_HOSTS,
    LocalTransport,
    SSHTarget,
    SSHTransport,
    Transport,
)
from ascend_serve.stack.matrix import MatrixError, load_matrix

_STYLE = {"error": "red", "warning": "yellow", "info": "cyan"}


def _render(results: list[HostResult], verbose: bool) -> None:
    table = Table(title="ascend-serve doctor", show_lines=True, expand=False)
    for column, ratio in (("host", None), ("severity", None), ("finding", 2), ("evidence", 3),
                          ("remedy", 3)):
        table.add_column(column, overflow="fold", ratio=ratio)
    shown = 0
    for result in results:
        report = result.report
        if not report.collected:
            table.add_row(escape(report.host), "[red]not collected[/red]",
                          "could not collect this host", escape(report.error or ""),
                          "check that the host is up, SSH access (user, key) and its host key")
            continue
        for item in report.findings:
            if item.severity == "info" and not verbose:
                continue
            shown += 1
            evidence = item.evidence if verbose else item.evidence[:6]
            table.add_row(
                escape(report.host),
                f"[{_STYLE[item.severity]}]{item.severity}[/]",
                f"[bold]{escape(item.id)}[/bold]\n{escape(item.title)}"
                + (f"\n{escape(item.detail)}" if item.detail else ""),
                escape("\n".join(evidence)),
                escape(item.remedy),
            )
    if shown or any(not r.report.collected for r in results):
        console.print(table)
    for result in results:
        report = result.report
        if not report.collected:
            console.print(f"{escape(report.host)}: [red]not collected[/red]")
            continue
        counts = {s: sum(1 for f in report.findings if f.severity == s)
                  for s in ("error", "warning", "info")}
        verdict = ("[red]problems found[/red]" if counts["error"] or counts["warning"]
                   else "[green]no problems[/green]")
        console.print(f"{escape(report.host)}: {verdict} ({counts['error']} error, "
                      f"{counts['warning']} warning, {counts['info']} info; "
                      f"{report.duration_s:.1f} s)", highlight=False)


def doctor(
    hosts: Annotated[
        list[str] | None,
        typer.Argument(help="Hosts to examine over SSH, as \\[user@]host\\[:port]. None: this "
                            "machine (same as --local).", show_default=False),
    ] = None,
    local: Annotated[bool, typer.Option("--local", help="Examine this machine.")] = False,
    as_json: JsonFlag = False,
    bundle: Annotated[
        Path | None,
        typer.Option("--bundle", help="Write a support tarball (FILE.tar.gz) of everything "
                                      "collected, secrets redacted."),
    ] = None,
    known_hosts: Annotated[
        Path, typer.Option("--known-hosts", help="known_hosts file the host keys are checked "
                                                 "against.")
    ] = DEFAULT_KNOWN_HOSTS,
    accept_unknown_host: Annotated[
        bool,
        typer.Option("--accept-unknown-host",
                     help="Trust a host whose key is not in --known-hosts (warns, and adds the "
                          "key to that file). A changed key is always refused."),
    ] = False,
    identity: Annotated[
        Path | None, typer.Option("--identity", "-i", help="SSH private key file.")
    ] = None,
    user: Annotated[str | None, typer.Option("--user", "-u", help="SSH user (default: "
                                                                  "user@ or ssh's).")] = None,
    port: Annotated[int, typer.Option("--port", "-p", min=1, max=65535,
                                      help="SSH port when a host gives none.")] = 22,
    sudo: Annotated[bool, typer.Option("--sudo", help="Run the collector with sudo -n "
                                                      "(needed when not root).")] = False,
    remote_python: Annotated[str, typer.Option("--remote-python",
                                               help="Python 3.7+ on the hosts.")] = "python3",
    facts_dir: Annotated[str, typer.Option("--facts-dir", help="Ansible local facts on the "
                                                               "hosts.")] = "/etc/ansible/facts.d",
    journal_lines: Annotated[int, typer.Option("--journal-lines", min=10, max=100000,
                                               help="Journal lines of the vLLM unit to read."
                                               )] = 300,
    matrix_file: Annotated[Path | None, typer.Option("--matrix", help="Version matrix "
                                                     "(default: stack-matrix.yml).")] = None,
    timeout: Annotated[float, typer.Option("--timeout", min=1.0,
                                           help="Seconds per host.")] = 300.0,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show info findings and all "
                                                                   "evidence.")] = False,
) -> None:
    """Diagnose Ascend serving hosts: NPUs, versions, set_env, device network, HCCL, swap and
    tuning, the vLLM service; map findings to known problems with remedies.

    Exit 0: nothing at warning level or above; 1: findings; 2: bad input; 3: a host could not
    be collected (unreachable, SSH authentication or host key refused).
    """
    names = list(hosts or [])
    if local and names:
        raise fail("give hosts or --local, not both")
    if bundle is not None and not (bundle.name.endswith(".tar.gz") or
                                   bundle.name.endswith(".tgz")):
        raise fail(f"--bundle must name a .tar.gz file, not {bundle}")
    if bundle is not None and not bundle.parent.is_dir() and str(bundle.parent) != "":
        raise fail(f"--bundle: directory {bundle.parent} does not exist")
    if identity is not None and not identity.expanduser().is_file():
        raise fail(f"--identity: {identity} is not a file")
    try:
        targets = [SSHTarget.parse(name, port) for name in names]
    except ValueError as exc:
        raise fail(str(exc)) from exc
    try:
        matrix = load_matrix(matrix_file)
        ctx = Context(matrix=matrix)
    except MatrixError as exc:
        if matrix_file is not None:
            raise fail(str(exc), EXIT_BAD_INPUT) from exc
        ctx = Context(matrix=None, matrix_error=str(exc))

    def warn(message: str) -> None:
        err_console.print(f"[yellow]{escape(message)}[/yellow]", highlight=False)

    def ssh(target: SSHTarget) -> Callable[[], Transport]:
        if user and not target.user:
            target = SSHTarget(target.host, user, target.port)
        return lambda: SSHTransport(target, known_hosts=known_hosts,
                                    accept_unknown_host=accept_unknown_host,
                                    identity=identity, warn=warn)

    pairs: list[tuple[str, Callable[[], Transport]]]
    pairs = [(str(t), ssh(t)) for t in targets] if targets else [("local", LocalTransport)]
    command = collector_command(remote_python, facts_dir=facts_dir,
                                journal_lines=journal_lines, sudo=sudo)
    results = examine_all(pairs, command, ctx, timeout=timeout)
    if bundle is not None:
        try:
            write_bundle(bundle, results)
        except OSError as exc:
            raise fail(f"cannot write {bundle}: {exc.strerror}") from exc
    code = exit_code(results)
    if as_json:
        typer.echo(json.dumps({
            "exit_code": code,
            "hosts": [r.report.model_dump() for r in results],
            **({"bundle": str(bundle)} if bundle is not None else {}),
        }, indent=2))
    else:
        _render(results, verbose)
        for result in results:
            if not result.report.collected:
                err_console.print(f"[red]{escape(result.report.host)}: "
                                  f"{escape(result.report.error or '')}[/red]", highlight=False)
        if bundle is not None:
            console.print(f"support bundle: {escape(str(bundle))} (secrets redacted)")
    raise typer.Exit(code)
