"""Node descriptions, the simulated PCI tree, and the fact modules that read such a node."""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path

import pytest

from ascend_sim import models, sysfs

# The collection's modules ship untyped (Ansible loads them, not mypy); import them by name.
MODULES = "ansible_collections.ascend_serve.fleet.plugins.modules"
npu_pci_facts = importlib.import_module(f"{MODULES}.npu_pci_facts")
disk_space_facts = importlib.import_module(f"{MODULES}.disk_space_facts")
NPU_CLASS = "0x120000"


def read_tree(root: Path) -> dict[str, dict[str, str]]:
    return {
        d.name: {f.name: f.read_text().strip() for f in d.iterdir()}
        for d in sorted(root.iterdir())
    }


def npu_functions(tree: dict[str, dict[str, str]]) -> dict[str, str]:
    """address -> device id of the Huawei processing accelerators in a tree."""
    return {
        address: files["device"]
        for address, files in tree.items()
        if files["vendor"] == "0x19e5" and files["class"] == NPU_CLASS
    }


# --- models -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "npus", "chips", "name", "hbm"),
    [
        ("atlas800-910", 8, 8, "910A", 32768),
        ("atlas800-a2", 8, 8, "910B1", 65536),
        ("atlas800-a2-32g", 8, 8, "910B4", 32768),
        ("atlas800-a3", 8, 16, "Ascend910", 65536),
        ("atlas300i-duo", 2, 2, "310P3", 0),
    ],
)
def test_make_node_defaults(model: str, npus: int, chips: int, name: str, hbm: int) -> None:
    node = models.make_node(model)

    assert node.npu_count == npus
    assert len(node.chips) == chips
    assert [c.phy_id for c in node.chips] == list(range(chips))
    assert {c.name for c in node.chips} == {name}
    assert {c.hbm_total_mb for c in node.chips} == {hbm}
    assert {c.health for c in node.chips} == {"OK"}
    assert len({c.bus_id for c in node.chips}) == chips


def test_make_node_a3_has_two_dies_per_card_and_power_on_die_0() -> None:
    node = models.make_node("atlas800-a3", 3)

    assert [(c.npu, c.chip, c.phy_id) for c in node.chips] == [
        (n // 2, n % 2, n) for n in range(6)
    ]
    assert [c.power_w is None for c in node.chips] == [False, True] * 3


@pytest.mark.parametrize(("model", "npus"), [("atlas800-a2", 3), ("atlas800-a3", 1)])
def test_make_node_fewer_npus(model: str, npus: int) -> None:
    assert models.make_node(model, npus).npu_count == npus


def test_make_node_rejects_an_unknown_model() -> None:
    with pytest.raises(ValueError, match="unknown server model 'atlas900'"):
        models.make_node("atlas900")


@pytest.mark.parametrize(("model", "npus"), [("atlas800-a2", 9), ("atlas300i-duo", 3),
                                             ("atlas800-a3", 16), ("atlas800-a2", -1)])
def test_make_node_rejects_impossible_npu_counts(model: str, npus: int) -> None:
    with pytest.raises(ValueError, match=f"not {npus}"):
        models.make_node(model, npus)


def test_node_save_load_round_trip(tmp_path: Path) -> None:
    node = models.make_node("atlas800-a3", 2)
    node.chips[1].health = "Critical"
    node.faults = {"installer_crash": {"driver": 2}}
    node.device_net = {"0": {"address": "10.0.0.1"}}
    path = tmp_path / "node.json"

    node.save(path)

    assert models.Node.load(path) == node
    assert json.loads(path.read_text())["chip_type"] == "910C"
    assert not path.with_suffix(".tmp").exists()


# --- sysfs ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "count", "device"),
    [("atlas800-a2", 8, "0xd802"), ("atlas800-a3", 16, "0xd803"), ("atlas800-910", 8, "0xd801"),
     ("atlas300i-duo", 2, "0xd500")],
)
def test_pci_tree_shows_the_npus_among_other_devices(
    tmp_path: Path, model: str, count: int, device: str
) -> None:
    node = models.make_node(model)

    root = sysfs.write_pci_tree(node, tmp_path / "devices")

    tree = read_tree(root)
    npus = npu_functions(tree)
    assert len(npus) == count
    assert set(npus.values()) == {device}
    assert sorted(npus) == sorted(c.bus_id.lower() for c in node.chips)
    others = set(tree) - set(npus)
    assert len(others) == len(sysfs.OTHER_DEVICES)
    # A Huawei NIC and host bridge are there too: vendor alone does not make an NPU.
    assert any(tree[a]["vendor"] == "0x19e5" for a in others)
    assert all(tree[a]["class"] != NPU_CLASS for a in others)
    for files in tree.values():
        assert set(files) >= {"vendor", "device", "class", "numa_node"}


def test_pci_tree_is_rewritten(tmp_path: Path) -> None:
    root = tmp_path / "devices"
    sysfs.write_pci_tree(models.make_node("atlas800-a3"), root)

    sysfs.write_pci_tree(models.make_node("atlas800-a2", 2), root)

    assert len(npu_functions(read_tree(root))) == 2


# --- fact modules -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "family"),
    [("atlas800-a2", "910B"), ("atlas800-a3", "910C"), ("atlas800-910", "910"),
     ("atlas300i-duo", "310P")],
)
def test_npu_pci_facts_finds_exactly_the_npus(tmp_path: Path, model: str, family: str) -> None:
    node = models.make_node(model)
    root = sysfs.write_pci_tree(node, tmp_path / "devices")

    found = npu_pci_facts.scan(str(root))

    assert [f["address"] for f in found] == sorted(c.bus_id.lower() for c in node.chips)
    assert {f["chip_family"] for f in found} == {family}
    assert {f["device"] for f in found} == {node.spec.pci_device}
    assert all(f["numa_node"] in (0, 1) for f in found)


def test_npu_pci_facts_on_a_node_without_npus(tmp_path: Path) -> None:
    root = sysfs.write_pci_tree(models.make_node("atlas800-a2", 0), tmp_path / "devices")

    assert len(list(root.iterdir())) == len(sysfs.OTHER_DEVICES)
    assert npu_pci_facts.scan(str(root)) == []
    assert npu_pci_facts.scan(str(tmp_path / "missing")) == []


def test_disk_space_is_measured_at_the_nearest_existing_parent(tmp_path: Path) -> None:
    target = tmp_path / "usr/local/Ascend/ascend-toolkit"

    result = disk_space_facts.measure(str(target))

    assert result["measured_at"] == str(tmp_path)
    mount = str(result["mount"])
    assert os.path.ismount(mount)
    assert str(tmp_path).startswith(mount)
    st = os.statvfs(tmp_path)
    assert result["total_bytes"] == st.f_blocks * st.f_frsize
    assert isinstance(result["free_bytes"], int)
    assert 0 < result["free_bytes"] <= result["total_bytes"]
    assert not target.exists()


def test_disk_space_of_an_existing_directory(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()

    assert disk_space_facts.measure(str(tmp_path / "a"))["measured_at"] == str(tmp_path / "a")
    assert disk_space_facts.measure(str(tmp_path / "a/../b/c"))["measured_at"] == str(tmp_path)
