"""``ascend-serve doctor``: the commands (registered in :mod:`ascend_serve.cli.main`).

``doctor [HOST ...]`` examines hosts (this machine without any); ``doctor explain FILE|-``
explains a log. The first word picks: ``explain`` is the subcommand, anything else is a host
(:class:`HostsOrExplain`), so ``ascend-serve doctor node1 node2`` works as it always did.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table
from typer.core import TyperGroup

from ascend_serve.cli.console import EXIT_BAD_INPUT, console, err_console, fail
from ascend_serve.cli.options import JsonFlag, host_problem
from ascend_serve.doctor.bundle import write_bundle
from ascend_serve.doctor.collected import collector_command
from ascend_serve.doctor.diagnose import examine_all, exit_code
from ascend_serve.doctor.faults import (
    FaultDataError,
    classifier,
    load_knowledge_base,
    with_knowledge_base,
)
from ascend_serve.doctor.faults.explain import InputError, read_input
from ascend_serve.doctor.faults.explain import explain as explain_text
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

    `ascend-serve doctor explain FILE|-` explains a saved log or tool output instead.
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
    for target in targets:
        problem = host_problem(target.host)
        if problem:
            raise fail(f"{target}: {problem}")
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


# --- doctor explain ------------------------------------------------------------------------------

_CLASS_STYLE = {True: "red", False: "yellow"}


def _render_explained(source: str, data: dict[str, Any]) -> None:
    clf = classifier()
    faults = data["faults"]
    if faults:
        table = Table(title=f"ascend-serve doctor explain {escape(source)}", show_lines=True)
        for column, ratio in (("code", None), ("component", None), ("class", None),
                              ("meaning", 3), ("fix", 3), ("source", 2), ("lines", None)):
            table.add_column(column, overflow="fold", ratio=ratio)
        for fault in faults:
            blocks = clf.classes[fault["class"]].blocks_service
            table.add_row(
                escape(fault["code"] or "-"), escape(fault["component"]),
                f"[{_CLASS_STYLE[blocks]}]{escape(fault['class'])}[/]",
                escape(fault["meaning"]), escape(fault["fix"]),
                escape(fault["source"] + (" (" + fault["rule"] + ")"
                                          if fault["source"] == "ascend-serve" else "")),
                escape(", ".join(map(str, fault["lines"]))
                       + (f" (x{fault['count']})" if fault["count"] > 1 else "")))
        console.print(table)
    for code, lines in data["unknown_codes"].items():
        console.print(f"{escape(code)}: a vendor error code this classifier does not know "
                      f"(line {', '.join(map(str, lines))}); search the vendor's docs for it",
                      highlight=False)
    if faults:
        worst = data["worst_class"]
        fc = clf.classes[worst]
        console.print(f"{len(faults)} known fault(s); worst class [bold]{escape(worst)}[/bold]: "
                      f"{escape(fc.does)}", highlight=False)
    elif data["lines"]:
        console.print(f"{escape(source)}: no known fault in {data['lines']} line(s)",
                      highlight=False)


def explain(
    source: Annotated[str, typer.Argument(
        metavar="FILE|-", help="The log or tool output to read (- reads standard input): a vLLM "
        "log or journal, a CANN plog, dmesg, npu-smi info (-t health), hccn_tool output.",
        show_default=False)],
    as_json: JsonFlag = False,
    knowledge_base: Annotated[Path | None, typer.Option(
        "--knowledge-base", metavar="KG_CONFIG_JSON",
        help="MindCluster's fault-diagnosis knowledge base (kg-config.json) where a site has it "
        "installed: adds its cause to the chip codes found.")] = None,
) -> None:
    """Explain a log: each known fault code in it with its component, meaning, action class, fix
    and source (the vendor's fault tables or this project's own).

    Exit 0: no known fault (an empty input included: it says so); 1: faults found; 2: the input
    cannot be read (missing, unreadable, a directory, binary).
    """
    try:
        text = read_input(source)
    except InputError as exc:
        raise fail(str(exc), EXIT_BAD_INPUT) from exc
    try:
        if knowledge_base is not None:
            clf = with_knowledge_base(load_knowledge_base(knowledge_base))
        else:
            clf = classifier()
    except (OSError, ValueError) as exc:
        raise fail(f"--knowledge-base {knowledge_base}: {exc}", EXIT_BAD_INPUT) from exc
    except FaultDataError as exc:  # a broken install, not the operator's input
        raise fail(f"the fault data shipped with ascend-serve is broken: {exc}", 3) from exc
    name = "standard input" if source == "-" else source
    data = {"source": name, "empty": not text.strip(), **explain_text(text, clf).as_dict()}
    code = 1 if data["faults"] else 0
    if as_json:
        typer.echo(json.dumps({"exit_code": code, **data}, indent=2))
    elif data["empty"]:
        console.print(f"{escape(name)} is empty: nothing to explain", highlight=False)
    else:
        _render_explained(name, data)
    raise typer.Exit(code)


# --- the group: hosts or explain ---------------------------------------------------------------

HOSTS = "hosts"


class HostsOrExplain(TyperGroup):
    """``doctor explain ...`` runs the subcommand; anything else (hosts, options, --help, nothing)
    runs ``doctor hosts ...``, the host examination."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if not args or args[0] not in self.commands:
            args = [HOSTS, *args]
        return super().parse_args(ctx, args)


doctor_app = typer.Typer(cls=HostsOrExplain, add_completion=False,
                         help="Diagnose Ascend serving hosts, or explain a log "
                              "(doctor explain FILE|-).")
doctor_app.command(HOSTS)(doctor)
doctor_app.command("explain")(explain)
