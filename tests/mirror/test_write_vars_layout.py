"""``--write-vars`` and the inventory's group_vars layout: no variable may silently disappear.

Ansible reads a group's variables from only one of ``group_vars/<group>/`` (every file in it),
``<group>.yml``, ``<group>.yaml`` and ``<group>.json``: the first that exists (ansible-core
``DataLoader.find_vars_files``). A vars file written into ``group_vars/<group>/`` beside an
existing ``group_vars/<group>.yml`` makes Ansible drop every variable of that file. These tests
show the drop with Ansible itself (so the refusal guards a real effect), the refusals (exit 2,
nothing fetched or written), and, on copies of the shipped example inventories, that a vars file
written where docs/mirror.md says leaves every variable of the example's group files resolving
to the value it had (read back through Ansible's InventoryManager and VariableManager).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from paths import ROOT
from typer.testing import CliRunner

from ascend_serve.cli.mirror import mirror_app
from ascend_serve.mirror.inventory import read_hosts
from ascend_serve.mirror.pointing import VarsLayoutError, check_vars_path, write_image_var

runner = CliRunner()
# Every shipped example inventory (inventories/<name>/hosts.yml).
EXAMPLES = sorted(p.parent.name for p in (ROOT / "inventories").glob("*/hosts.yml"))
GROUP = "ascend_nodes"
IMAGE = "registry.example.internal/vllm-ascend@sha256:" + "ab" * 32


def group_files(inventory: Path) -> dict[Path, dict[str, Any]]:
    """Every group_vars file of an inventory with the variables it sets (plain YAML)."""
    files = sorted(p for p in (inventory / "group_vars").rglob("*")
                   if p.is_file() and p.suffix in (".yml", ".yaml", ".json"))
    return {p: yaml.safe_load(p.read_text()) or {} for p in files}


def flat_layout(tmp_path: Path) -> Path:
    """The local example with its group variables in one file, group_vars/ascend_nodes.yml
    (the layout the issue's inventory had)."""
    inventory = tmp_path / "inv"
    (inventory / "group_vars").mkdir(parents=True)
    shutil.copy(ROOT / "inventories/local/hosts.yml", inventory / "hosts.yml")
    shutil.copy(ROOT / "inventories/local/group_vars/ascend_nodes/main.yml",
                inventory / "group_vars" / f"{GROUP}.yml")
    return inventory


def test_ansible_drops_the_group_file_beside_a_directory(tmp_path: Path) -> None:
    """What the refusal prevents, shown by Ansible: once group_vars/ascend_nodes/ exists, the
    variables of group_vars/ascend_nodes.yml no longer reach the host."""
    inventory = flat_layout(tmp_path)
    original = yaml.safe_load((inventory / "group_vars" / f"{GROUP}.yml").read_text())
    (host,) = read_hosts(inventory)
    assert all(host.variables.get(name) == value for name, value in original.items())
    (inventory / "group_vars" / GROUP).mkdir()
    (inventory / "group_vars" / GROUP / "zz-bundle.yml").write_text("---\nextra: 1\n")
    (host,) = read_hosts(inventory)
    assert host.get("extra") == 1
    lost = {name for name, value in original.items() if host.variables.get(name) != value}
    assert {"ascend_stack_set", "model_store_name"} <= lost


def test_fetch_refuses_a_directory_beside_the_group_file(tmp_path: Path) -> None:
    inventory = flat_layout(tmp_path)
    target = inventory / "group_vars" / GROUP / "zz-bundle.yml"
    result = runner.invoke(mirror_app, ["fetch", str(tmp_path / "nowhere"), "--bundle",
                                        str(tmp_path / "bundle"), "-i", str(inventory),
                                        "--write-vars", str(target)])
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.split())
    assert f"{GROUP}.yml" in message and "silently stop applying" in message
    assert "Move" in message and "main.yml" in message
    # Refused before anything was read, fetched or written.
    assert not (inventory / "group_vars" / GROUP).exists()
    assert not (tmp_path / "bundle").exists()


def test_push_refuses_a_directory_beside_the_group_file(tmp_path: Path) -> None:
    inventory = flat_layout(tmp_path)
    target = inventory / "group_vars" / GROUP / "zz-image.yml"
    result = runner.invoke(mirror_app, ["push", "--bundle", str(tmp_path / "bundle"),
                                        "--registry", "127.0.0.1:1", "--write-vars",
                                        str(target)])
    assert result.exit_code == 2, result.output
    assert f"{GROUP}.yml" in " ".join(result.output.split())
    assert not (inventory / "group_vars" / GROUP).exists()


@pytest.mark.parametrize("name", [f"{GROUP}.yml", f"{GROUP}.yaml", f"{GROUP}.json"])
def test_a_group_file_beside_the_directory_is_refused(tmp_path: Path, name: str) -> None:
    """The other way round: group_vars/ascend_nodes.y(a)ml beside group_vars/ascend_nodes/
    would itself be ignored."""
    inventory = tmp_path / "inv"
    (inventory / "group_vars" / GROUP).mkdir(parents=True)
    (inventory / "group_vars" / GROUP / "main.yml").write_text("---\na: 1\n")
    with pytest.raises(VarsLayoutError, match="would be ignored"):
        check_vars_path(inventory / "group_vars" / name)
    assert not (inventory / "group_vars" / name).exists()


def test_an_existing_file_of_the_inventory_is_not_replaced(tmp_path: Path) -> None:
    """Writing over the group's own main.yml would drop its variables: refused, the file kept;
    a file this command wrote before is replaced."""
    inventory = tmp_path / "inv"
    main = inventory / "group_vars" / GROUP / "main.yml"
    main.parent.mkdir(parents=True)
    main.write_text("---\na: 1\nb: 2\n")
    with pytest.raises(VarsLayoutError, match="drop the 2 variables"):
        write_image_var(main, IMAGE)
    assert main.read_text() == "---\na: 1\nb: 2\n"
    mine = main.parent / "zz-image.yml"
    write_image_var(mine, IMAGE)
    write_image_var(mine, IMAGE.replace("ab", "cd"))
    assert yaml.safe_load(mine.read_text()) == {"vllm_service_image": IMAGE.replace("ab", "cd")}


def test_a_path_outside_group_vars_is_not_checked_for_layout(tmp_path: Path) -> None:
    (tmp_path / f"{GROUP}.yml").write_text("---\na: 1\n")
    check_vars_path(tmp_path / GROUP / "zz.yml")  # not under group_vars/: nothing to refuse


def test_the_examples_are_found() -> None:
    assert {"local", "prod"} <= set(EXAMPLES)


@pytest.mark.parametrize("example", EXAMPLES)
def test_writing_vars_into_an_example_loses_no_variable(tmp_path: Path, example: str) -> None:
    """A copy of each shipped example inventory, a vars file written where docs/mirror.md writes
    it (group_vars/ascend_nodes/zz-bundle.yml): the variable it writes reaches every host with
    the written value, and every other variable of the example's group files still reaches every
    host with the value it had."""
    inventory = tmp_path / example
    shutil.copytree(ROOT / "inventories" / example, inventory,
                    ignore=shutil.ignore_patterns("prometheus", "*.retry"))
    before = {h.name: h for h in read_hosts(inventory)}
    files = group_files(inventory)
    assert files, f"inventories/{example} has no group_vars file"
    target = inventory / "group_vars" / GROUP / "zz-bundle.yml"
    check_vars_path(target)  # the documented place is accepted for the shipped layout
    write_image_var(target, IMAGE)
    after = {h.name: h for h in read_hosts(inventory)}
    assert set(after) == set(before)
    written = {"vllm_service_image": IMAGE}
    for host, seen in after.items():
        # A group's file reaches the hosts of that group (a router host is no serving node).
        member = {"all", *seen.variables.get("group_names", [])}
        for name, value in written.items():  # the new file wins where it sets a variable
            if GROUP in member:
                assert seen.variables[name] == value, f"{host}: {name} is not the written value"
        for path, variables in files.items():
            if path.relative_to(inventory / "group_vars").parts[0].split(".")[0] not in member:
                continue
            for name in set(variables) - set(written):
                assert seen.has(name), f"{host}: {name} of {path} is lost"
                assert seen.variables[name] == before[host].variables[name], (
                    f"{host}: {name} of {path} changed")
