"""``ascend-serve deploy``: ansible-runner runs for real over local-connection hosts (fast), and
once over two simulated Ascend nodes in podman containers where one fails preflight."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from paths import PLAYBOOKS
from typer.testing import CliRunner, Result

from ascend_serve.cli.console import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, EXIT_FAILED, EXIT_OK
from ascend_serve.cli.deploy import deploy
from ascend_serve.fleet import deploy as d
from ascend_serve.fleet import events as ev
from ascend_serve.fleet import request as rq
from ascend_serve.fleet import rundir as rd
from ascend_serve.resources import collections_path
from ascend_sim import proxyssh

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = ROOT / "tests" / "playbooks" / "deploy_two_hosts.yml"
SECRET = "s3cr3t-do-not-show-7f1c"  # noqa: S105 - a test value that must never be shown
ASSERT_MESSAGE = "h2 is not ready: deploy_test_ok is false in the inventory"

app = typer.Typer()
app.command()(deploy)  # the only command: invoked without its name
runner = CliRunner()


def _inventory(tmp_path: Path, hosts: dict[str, dict[str, Any]]) -> Path:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    inventory = {"all": {"hosts": hosts, "vars": {
        "ansible_connection": "local",
        "ansible_python_interpreter": "{{ ansible_playbook_python }}",
        "deploy_test_dir": str(out),
    }}}
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(inventory), encoding="utf-8")
    return path


def _invoke(args: list[str], env: dict[str, str] | None = None) -> Result:
    return runner.invoke(app, args, env=env, catch_exceptions=False)


def _run_dirs(base: Path) -> list[Path]:
    runs = base / ".ascend-serve" / "runs"
    return sorted(runs.iterdir()) if runs.is_dir() else []


def _files_text(directory: Path) -> str:
    return "\n".join(p.read_text(encoding="utf-8", errors="replace")
                     for p in directory.rglob("*") if p.is_file())


# --- real runs over local-connection hosts ------------------------------------------------------


def test_one_host_fails_summary_lines_and_run_dir(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """h1 passes, h2 fails the assert, h3 fails a no_log task whose message holds a secret, h4
    is unreachable (ssh to a closed local port)."""
    inventory = _inventory(tmp_path, {
        "h1": {"deploy_test_ok": True},
        "h2": {"deploy_test_ok": False},
        "h3": {"deploy_test_ok": True, "deploy_test_secret_ok": False},
        "h4": {"deploy_test_ok": True, "ansible_connection": "ssh", "ansible_host": "127.0.0.1",
               "ansible_port": 1},
    })
    monkeypatch.chdir(tmp_path)
    result = _invoke([str(PLAYBOOK), "-i", str(inventory), "-e", f"deploy_test_secret={SECRET}"])
    out = result.output
    assert result.exit_code == EXIT_CHECK_FAILED, out
    # Not a terminal: one line per play and per finished task per host, Ansible's recap lines.
    assert "PLAY [1/2] Configure the test hosts" in out
    assert "PLAY [2/2] Finish on the hosts left" in out
    assert re.search(r"^ok: +\[h1\] Say hello$", out, re.M)
    assert re.search(r"^changed: +\[h1\] Write the marker file$", out, re.M)
    assert re.search(r"^skipped: +\[h2\] Skip a task on every host$", out, re.M)
    assert re.search(rf"^failed: +\[h2\] Check that the host may be deployed -- {ASSERT_MESSAGE}$",
                     out, re.M)
    assert re.search(r"^h1 +: ok=5 +changed=1 +unreachable=0 +failed=0 +skipped=2", out, re.M)
    assert "3 of 4 host(s) failed" in out
    assert re.search(r"^unreachable: \[h4\] Write the marker file -- .*Connection refused", out,
                     re.M)
    assert "UNREACHABLE h4: task Write the marker file" in out
    assert "FAILED h2: task Check that the host may be deployed" in out
    assert f"    {ASSERT_MESSAGE}" in out
    assert f"    {ev.CENSORED}" in out  # h3: only what Ansible shows of a no_log result
    assert SECRET not in out

    (run_dir,) = _run_dirs(tmp_path)
    assert re.fullmatch(r"\d{8}T\d{6}Z-deploy_two_hosts", run_dir.name)
    assert {"job_events", "stdout", "status", "rc", "command", rd.SUMMARY_FILE} <= {
        p.name for p in run_dir.iterdir()}
    events = [json.loads(p.read_text()) for p in (run_dir / "job_events").glob("*.json")]
    assert {"playbook_on_play_start", "runner_on_ok", "runner_on_failed",
            "playbook_on_stats"} <= {e["event"] for e in events}
    assert (run_dir / "status").read_text() == "failed"
    assert SECRET not in _files_text(run_dir)  # nor in the runner's artifacts or our summary

    summary = json.loads((run_dir / rd.SUMMARY_FILE).read_text())
    assert summary["exit_code"] == EXIT_CHECK_FAILED and summary["outcome"] == "hosts_failed"
    assert summary["hosts"]["h1"] == {"ok": 5, "changed": 1, "failed": 0, "unreachable": 0,
                                      "skipped": 2, "rescued": 0, "ignored": 0}
    assert summary["hosts"]["h2"]["failed"] == 1 and summary["hosts"]["h2"]["ok"] == 2
    failures = {f["host"]: f for f in summary["failures"]}
    assert set(failures) == {"h2", "h3", "h4"}
    assert failures["h4"]["kind"] == "unreachable"
    assert summary["hosts"]["h4"]["unreachable"] == 1
    assert failures["h2"]["message"] == ASSERT_MESSAGE
    assert failures["h2"]["action"] == "ansible.builtin.assert"
    assert failures["h3"]["message"] == ev.CENSORED
    assert summary["extra_vars"] == ["inline: deploy_test_secret"]
    assert summary["plays"] == ["Configure the test hosts", "Finish on the hosts left"]
    assert (tmp_path / "out" / "h1.txt").read_text() == "deployed marker\n"


def test_check_mode_json(tmp_path: Path) -> None:
    """--check reaches Ansible (changed, nothing written); --json prints the summary only."""
    inventory = _inventory(tmp_path, {"h1": {"deploy_test_ok": True},
                                      "h2": {"deploy_test_ok": False}})
    run_dir = tmp_path / "run"
    result = _invoke([str(PLAYBOOK), "-i", str(inventory), "--check", "--json",
                      "--run-dir", str(run_dir)])
    assert result.exit_code == EXIT_CHECK_FAILED, result.output
    summary = json.loads(result.stdout)
    assert summary == json.loads((run_dir / rd.SUMMARY_FILE).read_text())
    assert summary["check"] is True and summary["run_dir"] == str(run_dir)
    assert summary["hosts"]["h1"]["changed"] == 1  # the copy would change the file
    assert not (tmp_path / "out" / "h1.txt").exists()  # ... and did not
    assert [(f["host"], f["message"]) for f in summary["failures"]] == [("h2", ASSERT_MESSAGE)]
    assert summary["rc"] != 0 and summary["exit_code"] == EXIT_CHECK_FAILED
    assert "--check" in json.loads((run_dir / "command").read_text())["command"]


def test_limit_and_extra_vars(tmp_path: Path) -> None:
    """--limit h1 leaves h2 out (exit 0); -e key=value reaches the play."""
    inventory = _inventory(tmp_path, {"h1": {"deploy_test_ok": True},
                                      "h2": {"deploy_test_ok": False}})
    run_dir = tmp_path / "run"
    result = _invoke([str(PLAYBOOK), "-i", str(inventory), "--limit", "h1", "--run-dir",
                      str(run_dir), "-e", "deploy_test_marker=limited", "-q", "--diff"])
    assert result.exit_code == EXIT_OK, result.output
    summary = json.loads((run_dir / rd.SUMMARY_FILE).read_text())
    assert list(summary["hosts"]) == ["h1"] and summary["outcome"] == "ok"
    assert (tmp_path / "out" / "h1.txt").read_text() == "deployed limited\n"
    assert not (tmp_path / "out" / "h2.txt").exists()
    assert "all hosts ok" in result.output
    # --diff: Ansible's own rendering of each change, under the host and task.
    assert "diff [h1] Write the marker file:\n--- before\n" in result.output
    assert "\n+deployed limited\n" in result.output


def test_broken_playbook_exits_3_with_ansible_error(tmp_path: Path) -> None:
    inventory = _inventory(tmp_path, {"h1": {"deploy_test_ok": True}})
    broken = tmp_path / "broken.yml"
    broken.write_text("- name: Broken\n  hosts: all\n  tasks:\n    - name: Unknown module\n"
                      "      ansible.builtin.no_such_module:\n        msg: hi\n", encoding="utf-8")
    run_dir = tmp_path / "run"
    result = _invoke([str(broken), "-i", str(inventory), "--run-dir", str(run_dir)])
    assert result.exit_code == EXIT_FAILED, result.output
    assert "ansible-playbook failed" in result.stderr
    assert "no_such_module" in result.stderr  # the tail of Ansible's own error
    summary = json.loads((run_dir / rd.SUMMARY_FILE).read_text())
    assert summary["outcome"] == "ansible_failed" and summary["hosts"] == {}
    assert "no_such_module" in summary["error"]


@pytest.mark.parametrize(("args", "message"), [
    (["site.yml", "-i", "missing.yml"], "inventory missing.yml does not exist"),
    (["no-such-playbook", "-i", "INV"], "no playbook 'no-such-playbook'"),
    (["PB", "-i", "INV", "-e", "novalue"], "expected key=value pairs"),
    (["PB", "-i", "INV", "-e", "{unclosed: [1"], "is not valid YAML/JSON"),
    (["PB", "-i", "INV", "-e", "[1, 2]"], "is not a mapping"),
    (["PB", "-i", "INV", "-e", "@missing-vars.yml"], "cannot read"),
    (["PB", "-i", "INV", "-e", "./vars.yml"], "is given as @./vars.yml"),
    (["PB", "-i", "INV", "-e", "bad-name=1"], "not a variable name: bad-name"),
    (["PB", "-i", "INV", "--vault-password-file", "nope"],
     "vault password file nope does not exist"),
    (["PB", "-i", "INV", "--run-dir", "full"], "exists and is not empty"),
])
def test_bad_input_exits_2_before_running(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          args: list[str], message: str) -> None:
    inventory = _inventory(tmp_path, {"h1": {"deploy_test_ok": True}})
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    monkeypatch.chdir(tmp_path)
    argv = [{"PB": str(PLAYBOOK), "INV": str(inventory)}.get(a, a) for a in args]
    result = _invoke(argv)
    assert result.exit_code == EXIT_BAD_INPUT, result.output
    assert message in result.stderr
    assert not (tmp_path / ".ascend-serve").exists()  # nothing ran, no run directory
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full", "hosts.yml", "out"]


def test_ctrl_c_cancels_the_run(tmp_path: Path) -> None:
    """SIGINT stops ansible-playbook (the runner's cancel callback): exit 130, status canceled."""
    inventory = _inventory(tmp_path, {"h1": {"deploy_test_ok": True, "deploy_test_wait": 120}})
    run_dir = tmp_path / "run"
    env = dict(os.environ)
    proc = subprocess.Popen(
        [sys.executable, "-m", "ascend_serve.cli.deploy", str(PLAYBOOK), "-i", str(inventory),
         "--run-dir", str(run_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # the wait task starts right after this one
            if "Say hello" in line:
                break
        time.sleep(1.5)
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert time.monotonic() - started < 30
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == d.EXIT_CANCELED, out + err
    assert "cancelling the run" in err and "the run was cancelled" in err
    # ansible-playbook stopped its workers (each in a session of its own) and their module.
    left = [p for p in Path("/proc").glob("[0-9]*/cmdline")
            if str(inventory).encode() in _read(p)]
    assert not left, "ansible processes outlived the cancelled run"
    assert (run_dir / "status").read_text() == "canceled"
    summary = json.loads((run_dir / rd.SUMMARY_FILE).read_text())
    assert summary["outcome"] == "canceled" and summary["exit_code"] == d.EXIT_CANCELED


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


# --- the model, without running Ansible ---------------------------------------------------------


def test_input_resolution(tmp_path: Path) -> None:
    assert rq.resolve_playbook("site.yml", ROOT, tmp_path) == ROOT / "site.yml"
    assert rq.resolve_playbook("preflight", ROOT, tmp_path) == PLAYBOOKS / "preflight.yml"
    assert rq.resolve_playbook("network.yml", ROOT, tmp_path) == PLAYBOOKS / "network.yml"
    assert rq.resolve_playbook("ascend_serve.fleet.stack", ROOT, tmp_path) == (
        PLAYBOOKS / "stack.yml")
    local = tmp_path / "mine.yml"
    local.write_text("[]\n")
    assert rq.resolve_playbook("mine.yml", ROOT, tmp_path) == local
    assert rq.resolve_inventories([], ROOT, tmp_path) == [str(ROOT / rq.DEFAULT_INVENTORY)]
    assert rq.resolve_inventories(["h1,h2,"], ROOT, tmp_path) == ["h1,h2,"]
    assert rq.count_plays(PLAYBOOK) == 2
    # imports followed: site.yml -> ascend_serve.fleet.site -> its five playbooks
    assert (rq.count_plays(ROOT / "site.yml") or 0) >= 5
    assert rq.count_plays(ROOT / "site.yml") == rq.count_plays(PLAYBOOKS / "site.yml")
    templated = tmp_path / "templated.yml"
    templated.write_text("- ansible.builtin.import_playbook: '{{ x }}.yml'\n")
    assert rq.count_plays(templated) is None
    # ansible-runner turns host key checking off unless told: the project's ansible.cfg is kept.
    request = rq.prepare("site.yml", [], cwd=tmp_path)
    assert d._environment(request)["ANSIBLE_HOST_KEY_CHECKING"] in ("True", os.environ.get(
        "ANSIBLE_HOST_KEY_CHECKING"))


def test_find_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkout (here, above, or the one an editable install runs from), else none."""
    monkeypatch.delenv(rq.PROJECT_ENV, raising=False)
    assert rq.find_project(ROOT / "tests" / "cli") == ROOT
    assert rq.find_project(tmp_path) == ROOT  # this package's own checkout (editable install)
    installed = tmp_path / "site-packages" / "ansible_collections" / "ascend_serve" / "fleet"
    installed.mkdir(parents=True)
    monkeypatch.setattr(rq, "collection_dir", lambda: installed)  # a wheel's copy
    assert rq.find_project(tmp_path) is None
    assert rq.find_project(ROOT) == ROOT
    monkeypatch.setenv(rq.PROJECT_ENV, str(tmp_path))
    with pytest.raises(rq.DeployInputError, match=r"has no ansible\.cfg"):
        rq.find_project(ROOT)


def test_without_a_project_the_packaged_collection_runs(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """An installed wheel away from a checkout: the collection's playbooks by name, found on
    ANSIBLE_COLLECTIONS_PATH (the packaged collection first); an inventory must be given."""
    monkeypatch.setattr(rq, "find_project", lambda cwd=None: None)
    monkeypatch.delenv("ANSIBLE_COLLECTIONS_PATH", raising=False)
    request = rq.prepare("site.yml", ["h1,"], cwd=tmp_path)
    assert request.project is None and request.playbook == PLAYBOOKS / "site.yml"
    assert request.name == request.playbook_arg == "ascend_serve.fleet.site"
    assert rq.prepare("ascend_serve.fleet.network", ["h1,"], cwd=tmp_path).playbook_arg == (
        "ascend_serve.fleet.network")
    mine = tmp_path / "mine.yml"
    mine.write_text("[]\n")
    assert rq.prepare("mine.yml", ["h1,"], cwd=tmp_path).playbook_arg == str(mine)
    env = d._environment(request)
    assert env["ANSIBLE_COLLECTIONS_PATH"].split(os.pathsep) == [
        str(collections_path()), *d.ANSIBLE_DEFAULT_COLLECTIONS]
    monkeypatch.setenv("ANSIBLE_COLLECTIONS_PATH", "/opt/mine")
    assert d._environment(request)["ANSIBLE_COLLECTIONS_PATH"].split(os.pathsep) == [
        str(collections_path()), "/opt/mine"]
    with pytest.raises(rq.DeployInputError, match=r"no inventory given \(-i\), and no project"):
        rq.prepare("site.yml", [], cwd=tmp_path)
    # A checkout's runs are left to its ansible.cfg.
    checkout = rq.DeployRequest(project=ROOT, playbook=ROOT / "site.yml", inventories=["h1,"])
    assert "ANSIBLE_COLLECTIONS_PATH" not in d._environment(checkout)
    assert checkout.playbook_arg == str(ROOT / "site.yml")


def test_command_line_options(tmp_path: Path) -> None:
    vault = tmp_path / "vault-pass"
    vault.write_text("pw\n")
    request = rq.prepare("network", ["h1,"], tags=["a,b", "c"], skip_tags=["d"], check=True,
                        diff=True, vault_password_files=[str(vault)], forks=3, limit="h1",
                        cwd=tmp_path)
    assert request.playbook == PLAYBOOKS / "network.yml"
    assert request.name == "ascend_serve.fleet.network"
    assert (request.tags, request.skip_tags, request.forks) == (["a", "b", "c"], ["d"], 3)
    assert d._cmdline(request, ["-e", "@/x.yml"]) == (
        f"-e @/x.yml --check --diff --vault-password-file {vault}")


def test_extra_vars_forms(tmp_path: Path) -> None:
    kv = rq.parse_extra_vars("a=1 b='two words'", tmp_path)
    assert json.loads(kv.text or "") == {"a": "1", "b": "two words"}
    assert kv.describe() == "inline: a, b"
    assert rq.parse_extra_vars('{"c": [1, 2]}', tmp_path).keys == ("c",)
    vault = tmp_path / "vars.yml"
    vault.write_text("token: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  6162\n"
                     "plain: !unsafe '{{x}}'\n")
    parsed = rq.parse_extra_vars("@vars.yml", tmp_path)
    assert parsed.path == vault and parsed.keys == ("token", "plain")
    encrypted = tmp_path / "enc.yml"
    encrypted.write_text("$ANSIBLE_VAULT;1.1;AES256\n6162\n")
    assert rq.parse_extra_vars(f"@{encrypted}", tmp_path).path == encrypted


def _event(kind: str, **data: Any) -> dict[str, Any]:
    return {"event": kind, "event_data": {"play": "P", "task": "T", **data}}


def test_tracker_counts_messages_and_recap() -> None:
    tracker = ev.Tracker(total_plays=1)
    notices = tracker.handle(_event("playbook_on_play_start", play="P", play_pattern="all"))
    assert notices == [ev.PlayStarted(1, 1, "P", "all")]
    tracker.handle(_event("playbook_on_task_start", task="T", role="r"))
    tracker.handle(_event("runner_on_start", host="a"))
    assert tracker.hosts["a"].task == "T"
    tracker.handle(_event("runner_on_ok", host="a", res={"changed": True}))
    tracker.handle(_event("runner_on_failed", host="b", task_action="ansible.builtin.command",
                          res={"msg": "non-zero return code", "rc": 3, "stderr": "boom\nbad"}))
    tracker.handle(_event("runner_on_failed", host="a", ignore_errors=True, res={"msg": "meh"}))
    (unreachable,) = tracker.handle(_event("runner_on_unreachable", host="c",
                                           res={"msg": "Failed to connect", "unreachable": True}))
    assert isinstance(unreachable, ev.HostResult) and unreachable.status == "unreachable"
    assert tracker.hosts["a"].counters() == {"ok": 2, "changed": 1, "failed": 0,
                                             "unreachable": 0, "skipped": 0, "rescued": 0,
                                             "ignored": 1}
    failures = tracker.failures_by_host()
    assert list(failures) == ["b", "c"]
    assert failures["b"].message == "non-zero return code\nstderr:\nboom\nbad\nrc: 3"
    assert failures["b"].role is None and failures["b"].task == "T"
    # Ansible's recap wins: a failure rescued later is not a failed host.
    tracker.handle(_event("playbook_on_stats", ok={"a": 2, "b": 1}, failures={}, rescued={"b": 1},
                          dark={"c": 1}, changed={"a": 1}, ignored={"a": 1}, skipped={},
                          processed={"a": 1, "b": 1, "c": 1}))
    assert not tracker.hosts["b"].bad and tracker.hosts["b"].rescued == 1
    assert list(tracker.failures_by_host()) == ["c"]
    assert re.fullmatch(r"a +: ok=2 +changed=1 +unreachable=0 +failed=0 +skipped=0 +rescued=0"
                        r" +ignored=1", ev.stats_line("a", tracker.hosts["a"]))


def test_result_messages() -> None:
    assert ev.result_message({"msg": ["Preflight failed:", "found 4 NPU(s)"]}) == (
        "Preflight failed:\nfound 4 NPU(s)")
    assert ev.result_message({"censored": ev.CENSORED, "msg": "x"}) == ev.CENSORED
    loop = {"msg": "One or more items failed", "results": [
        {"item": "ok-one", "failed": False, "msg": "fine"},
        {"_ansible_item_label": "bad", "failed": True, "msg": "no such package"}]}
    assert ev.result_message(loop) == 'One or more items failed\nitem "bad": no such package'
    assert ev.result_message({"module_stderr": "Traceback\nKeyError: x", "msg": "MODULE FAILURE"}
                            ) == "MODULE FAILURE\nmodule_stderr:\nTraceback\nKeyError: x"


def test_censored_event_stdout_is_cut() -> None:
    event: dict[str, Any] = {
        "event": "runner_on_failed",
        "stdout": f"[ERROR]: Task failed: {SECRET}\r\nOrigin: x.yml:3\r\n\r\n"
                  "fatal: [h]: FAILED! => \r\n    censored: hidden",
        "event_data": {"res": {"censored": ev.CENSORED}}}
    ev.censor_event_stdout(event)
    assert SECRET not in event["stdout"]
    assert event["stdout"].endswith("fatal: [h]: FAILED! => \r\n    censored: hidden")
    plain: dict[str, Any] = {"event": "runner_on_failed", "stdout": "[ERROR]: shown",
                             "event_data": {"res": {}}}
    ev.censor_event_stdout(plain)
    assert plain["stdout"] == "[ERROR]: shown"


# --- two simulated Ascend nodes in containers ----------------------------------------------------

OK_NODE, BAD_NODE = "ascend-deploy-ok", "ascend-deploy-bad"
# Written on the bad node before the run: whatever preflight writes is newer.
MARKER = "/root/preflight-marker"
# The bad node presents itself as Debian 11, a release the support table lacks.
DEBIAN_11 = {
    "/etc/os-release": 'PRETTY_NAME="Debian GNU/Linux 11 (bullseye)"\nNAME="Debian GNU/Linux"\n'
                       'VERSION_ID="11"\nVERSION="11 (bullseye)"\nVERSION_CODENAME=bullseye\n'
                       "ID=debian\n",
    "/etc/debian_version": "11.11\n",
}


def _sim(*args: str, env: dict[str, str]) -> None:
    subprocess.run([sys.executable, "-m", "ascend_sim", *args], check=True, capture_output=True,
                   env=env, timeout=120)


def _exec(node: str, *argv: str, stdin: str = "", check: bool = True
          ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", "exec", "-i", node, *argv], input=stdin, text=True,
                          capture_output=True, check=check, timeout=120)


@pytest.fixture
def two_nodes(tmp_path: Path) -> Iterator[Path]:
    """A good Atlas 800 A2 node (8 NPUs) and one with 4 of its 8 cards that presents itself as
    Debian 11, with a time marker written after both; an inventory of both."""
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed")
    env = {**os.environ, "ASCEND_SIM_STATE": str(tmp_path / "sim")}
    try:
        _sim("node", "up", OK_NODE, "--model", "atlas800-a2", "--ssh", env=env)
        _sim("node", "up", BAD_NODE, "--model", "atlas800-a2", "--npus", "4", "--ssh", env=env)
        # Let the node finish booting (systemd writes under /var/lib while it starts), make it
        # Debian 11, wait a second so that later writes have a newer mtime, then mark the time.
        _exec(BAD_NODE, "timeout", "60", "systemctl", "is-system-running", "--wait", check=False)
        for path, content in DEBIAN_11.items():
            _exec(BAD_NODE, "tee", path, stdin=content)
        time.sleep(1)
        _exec(BAD_NODE, "touch", MARKER)
        inventory = tmp_path / "inventory"
        (inventory / "group_vars" / "ascend_nodes").mkdir(parents=True)
        # The local inventory's settings (8 x 910B expected), over the two containers.
        shutil.copy(ROOT / "inventories/local/group_vars/ascend_nodes/main.yml",
                    inventory / "group_vars" / "ascend_nodes" / "main.yml")
        hosts = {"all": {"children": {"ascend_nodes": {
            "hosts": {OK_NODE: None, BAD_NODE: None},
            "vars": proxyssh.inventory_vars()}}}}
        (inventory / "hosts.yml").write_text(yaml.safe_dump(hosts), encoding="utf-8")
        yield inventory / "hosts.yml"
    finally:
        for name in (OK_NODE, BAD_NODE):
            subprocess.run(["podman", "rm", "-f", "--ignore", name], capture_output=True,
                           check=False, timeout=120)


NPU_PROBLEM = "found 4 NPU(s) on the PCI bus, the inventory expects 8"
OS_PROBLEM = "OS Debian 11.11 is not supported (supported Debian releases: 12)"


@pytest.mark.molecule
def test_site_preflight_on_two_nodes_one_fails(two_nodes: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    # A terminal as far as rich can tell: the live display, as an operator sees it.
    result = _invoke(["site.yml", "--tags", "preflight", "-i", str(two_nodes), "--run-dir",
                      str(run_dir)], env={"TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "1"})
    out = result.output
    assert result.exit_code == EXIT_CHECK_FAILED, out
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out)
    assert re.search(r"PLAY \[1/\d+\] Preflight checks", plain)
    assert re.search(r"task \d+ of this play \(\d+ in all\): preflight : ", plain)  # live lines
    assert re.search(rf"{OK_NODE} +\d+ +0 +0 +0 +\d+", plain)  # the live host counters
    assert re.search(rf"failed: \[{BAD_NODE}\] preflight : Fail once.*found 4 NPU\(s\) on the "
                     r"PCI bus, the inventory expects 8", plain)
    assert "1 of 2 host(s) failed" in plain
    assert f"FAILED {BAD_NODE}: task preflight : Fail once, listing every problem" in plain
    # The single failure names both problems (each once: the summary's message, below).
    assert f"    {NPU_PROBLEM}" in plain
    assert f"    {OS_PROBLEM}" in plain
    assert re.search(r"the run stopped in play 1 of \d+ \(Preflight checks\)", plain)

    summary = json.loads((run_dir / rd.SUMMARY_FILE).read_text())
    hosts = summary["hosts"]
    assert hosts[OK_NODE]["failed"] == 0 and hosts[OK_NODE]["unreachable"] == 0
    assert hosts[OK_NODE]["ok"] >= 5
    assert hosts[BAD_NODE]["failed"] == 1
    (failure,) = summary["failures"]
    assert failure["host"] == BAD_NODE and failure["role"] == "preflight"
    assert failure["message"].splitlines() == [
        f"Preflight failed on {BAD_NODE} with 2 problem(s); nothing was changed:",
        OS_PROBLEM, NPU_PROBLEM]
    assert summary["tags"] == ["preflight"] and summary["exit_code"] == EXIT_CHECK_FAILED
    assert (run_dir / "rc").read_text() != "0"
    command = json.loads((run_dir / "command").read_text())
    assert command["cwd"] == str(ROOT)  # the project's ansible.cfg: roles, collections
    assert command["command"][-1] == str(ROOT / "site.yml")
    assert command["command"][-3:-1] == ["--tags", "preflight"]
    assert len(list((run_dir / "job_events").glob("*.json"))) > 10
    assert "Preflight checks" in (run_dir / "stdout").read_text()

    # The failed preflight changed nothing on its host: no report, no local fact, no file under
    # the system paths newer than the marker written before the run.
    written = _exec(BAD_NODE, "ls", "-d", "/var/lib/ascend-serve",
                    "/etc/ansible/facts.d/ascend_preflight.fact", check=False)
    assert written.stdout == "", written.stdout
    newer = _exec(BAD_NODE, "find", "/etc", "/usr", "/var/lib", "/opt", "-xdev", "-newer", MARKER,
                  "-not", "-type", "d")
    assert newer.stdout.splitlines() == []
