"""rdma_facts against the simulator's /sys/class/infiniband and hand-made kernel layouts."""

from __future__ import annotations

import errno
import importlib
from pathlib import Path
from typing import Any

import pytest

from ascend_sim import models, sysfs
from ascend_sim.__main__ import create_node

# The collection's modules ship untyped (Ansible loads them, not mypy); import them by name.
MODULES = "ansible_collections.ascend_serve.fleet.plugins.modules"
rdma_facts = importlib.import_module(f"{MODULES}.rdma_facts")

LINK_LOCAL_0 = "fe80:0000:0000:0000:ba59:9fff:fed4:1a2e"
IPV4_0 = "0000:0000:0000:0000:0000:ffff:c000:020b"  # ::ffff:192.0.2.11
ZERO = "0000:0000:0000:0000:0000:0000:0000:0000"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def _port(
    root: Path,
    device: str,
    port: int,
    *,
    state: str = "4: ACTIVE",
    phys_state: str = "5: LinkUp",
    link_layer: str = "Ethernet",
    rate: str = "25 Gb/sec (1X EDR)",
    gids: list[tuple[str, str | None, str | None]] | None = None,
) -> Path:
    """A port directory as the kernel lays it out; gids are (gid, type, ndev) by index."""
    d = root / device / "ports" / str(port)
    _write(d / "state", state)
    _write(d / "phys_state", phys_state)
    _write(d / "link_layer", link_layer)
    _write(d / "rate", rate)
    for index, (gid, gid_type, ndev) in enumerate(gids or []):
        _write(d / "gids" / str(index), gid)
        if gid_type is not None:
            _write(d / "gid_attrs/types" / str(index), gid_type)
        if ndev is not None:
            _write(d / "gid_attrs/ndevs" / str(index), ndev)
    return d


def _scan(root: Path) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = rdma_facts.scan(str(root))
    return found


# --- the simulator's tree ------------------------------------------------------------------------


def test_simulated_node_tree_is_read_in_full(tmp_path: Path) -> None:
    root = sysfs.write_infiniband_tree(models.make_node("atlas800-a2"), tmp_path / "infiniband")

    devices = _scan(root)

    assert [d["name"] for d in devices] == ["mlx5_0", "mlx5_1"]
    first = devices[0]
    assert {k: v for k, v in first.items() if k != "ports"} == {
        "name": "mlx5_0",
        "node_type": "CA",
        "fw_ver": "16.35.2000",
        "node_guid": "b859:9f03:00d4:1a2e",
        "pci_address": "0000:03:00.0",  # from the dangling device -> ../../../bus/pci/... link
    }
    assert devices[1]["pci_address"] == "0000:03:00.1"
    assert len(first["ports"]) == 1
    port = first["ports"][0]
    assert port == {
        "port": 1,
        "state": "ACTIVE",
        "phys_state": "LinkUp",
        "link_layer": "Ethernet",
        "rate": "100 Gb/sec (4X EDR)",
        "rate_gbps": 100.0,
        "gids": [
            {"index": 0, "gid": LINK_LOCAL_0, "type": "IB/RoCE v1", "roce_version": "v1",
             "ndev": "enp3s0f0np0"},
            {"index": 1, "gid": LINK_LOCAL_0, "type": "RoCE v2", "roce_version": "v2",
             "ndev": "enp3s0f0np0"},
            {"index": 2, "gid": IPV4_0, "type": "IB/RoCE v1", "roce_version": "v1",
             "ndev": "enp3s0f0np0"},
            {"index": 3, "gid": IPV4_0, "type": "RoCE v2", "roce_version": "v2",
             "ndev": "enp3s0f0np0"},
        ],
        "roce_versions": ["v1", "v2"],
        "netdevs": ["enp3s0f0np0"],
    }
    # The tree has zero GID slots after index 3; none of them is reported.
    assert (root / "mlx5_0/ports/1/gids/4").read_text().strip() == ZERO
    assert devices[1]["ports"][0]["netdevs"] == ["enp3s0f1np1"]


def test_simulated_port_down_and_back_up(tmp_path: Path) -> None:
    root = sysfs.write_infiniband_tree(
        models.make_node("atlas800-a3"), tmp_path / "infiniband", down=["mlx5_1"])

    states = [(d["name"], p["state"], p["phys_state"]) for d in _scan(root) for p in d["ports"]]

    assert states == [("mlx5_0", "ACTIVE", "LinkUp"), ("mlx5_1", "DOWN", "Disabled")]
    assert (root / "mlx5_1/ports/1/state").read_text() == "1: DOWN\n"
    sysfs.set_rdma_port_state(root, "mlx5_1", 1, active=True)
    sysfs.set_rdma_port_state(root, "mlx5_0", 1, active=False)
    states = [(d["name"], p["state"], p["phys_state"]) for d in _scan(root) for p in d["ports"]]
    assert states == [("mlx5_0", "DOWN", "Disabled"), ("mlx5_1", "ACTIVE", "LinkUp")]


def test_simulator_rejects_unknown_devices_and_ports(tmp_path: Path) -> None:
    node = models.make_node("atlas800-a2")
    with pytest.raises(ValueError, match="no RDMA device mlx5_9"):
        sysfs.write_infiniband_tree(node, tmp_path / "ib", down=["mlx5_9"])
    root = sysfs.write_infiniband_tree(node, tmp_path / "ib")
    with pytest.raises(ValueError, match="no port 2 on RDMA device mlx5_0"):
        sysfs.set_rdma_port_state(root, "mlx5_0", 2, active=False)


def test_tree_is_rewritten(tmp_path: Path) -> None:
    root = tmp_path / "infiniband"
    node = models.make_node("atlas800-a2")
    sysfs.write_infiniband_tree(node, root, down=["mlx5_0"])
    (root / "rxe0").mkdir()

    sysfs.write_infiniband_tree(node, root)

    assert sorted(p.name for p in root.iterdir()) == ["mlx5_0", "mlx5_1"]
    assert {p["state"] for d in _scan(root) for p in d["ports"]} == {"ACTIVE"}


def test_node_create_writes_the_infiniband_tree(tmp_path: Path) -> None:
    create_node(tmp_path / "node", "atlas800-a2", None, [])

    assert (tmp_path / "node/node.json").is_file()
    assert [d["name"] for d in _scan(tmp_path / "node/infiniband")] == ["mlx5_0", "mlx5_1"]
    assert len(list((tmp_path / "node/sysfs").iterdir())) == 8 + len(sysfs.OTHER_DEVICES)


# --- hand-made trees ------------------------------------------------------------------------------


def test_missing_and_empty_directories_mean_no_devices(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()

    assert _scan(tmp_path / "missing") == []
    assert _scan(tmp_path / "empty") == []


def test_infiniband_link_layer_has_no_roce_versions(tmp_path: Path) -> None:
    root = tmp_path / "infiniband"
    _write(root / "mlx5_2/node_type", "1: CA")
    _write(root / "mlx5_2/fw_ver", "20.39.1002")
    # On InfiniBand ports the kernel still types the GIDs "IB/RoCE v1", and there is no netdev.
    _port(root, "mlx5_2", 1, link_layer="InfiniBand", rate="200 Gb/sec (4X HDR)",
          gids=[("fe80:0000:0000:0000:0c42:a103:0065:7c10", "IB/RoCE v1", None),
                (ZERO, None, None)])

    [device] = _scan(root)

    assert device["node_guid"] is None
    assert device["pci_address"] is None
    [port] = device["ports"]
    assert port["link_layer"] == "InfiniBand"
    assert port["rate_gbps"] == 200.0
    assert port["roce_versions"] == []
    assert port["netdevs"] == []
    assert port["gids"] == [{"index": 0, "gid": "fe80:0000:0000:0000:0c42:a103:0065:7c10",
                             "type": "IB/RoCE v1", "roce_version": None, "ndev": None}]


def test_ports_and_gids_sort_numerically_and_zero_gids_are_skipped(tmp_path: Path) -> None:
    root = tmp_path / "infiniband"
    _write(root / "hns_0/node_type", "1: CA")
    (root / "hns_0/device").parent.mkdir(parents=True, exist_ok=True)
    (root / "hns_0/device").symlink_to(tmp_path / "devices/0000:7D:00.0")
    gids: list[tuple[str, str | None, str | None]] = [(ZERO, None, None)] * 10 + [
        (IPV4_0, "RoCE v2", "enp125s0f0")]
    _port(root, "hns_0", 10, gids=gids)
    _port(root, "hns_0", 2, state="1: DOWN", phys_state="3: Disabled", rate="",
          gids=[(LINK_LOCAL_0.upper(), "IB/RoCE v1", "enp125s0f1")])

    [device] = _scan(root)

    assert device["pci_address"] == "0000:7d:00.0"
    assert [p["port"] for p in device["ports"]] == [2, 10]
    down, up = device["ports"]
    assert (down["state"], down["phys_state"], down["rate"], down["rate_gbps"]) == (
        "DOWN", "Disabled", "", None)
    assert down["gids"][0]["gid"] == LINK_LOCAL_0  # reported in lower case
    assert (down["roce_versions"], down["netdevs"]) == (["v1"], ["enp125s0f1"])
    assert [g["index"] for g in up["gids"]] == [10]
    assert (up["roce_versions"], up["netdevs"]) == (["v2"], ["enp125s0f0"])


def test_unreadable_files_are_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel answers EINVAL for some attributes; a directory stands in for another error."""
    root = tmp_path / "infiniband"
    _write(root / "rxe0/node_type", "1: CA")
    port = _port(root, "rxe0", 1, gids=[
        (LINK_LOCAL_0, "RoCE v2", "eth0"),
        (IPV4_0, "RoCE v2", "eth0"),
        (IPV4_0, "IB/RoCE v1", "eth0"),
    ])
    (port / "gid_attrs/types/1").unlink()
    (port / "gid_attrs/types/1").mkdir()  # reading it raises IsADirectoryError
    (port / "gids/3").mkdir()  # a GID slot that cannot be read is left out
    (root / "stray-file").write_text("not a device\n")
    real_open = open

    def einval_open(path: str, *args: Any, **kwargs: Any) -> Any:
        if path.endswith("gid_attrs/types/2") or path.endswith("/fw_ver"):
            raise OSError(errno.EINVAL, "Invalid argument", path)
        return real_open(path, *args, **kwargs)

    _write(root / "rxe0/fw_ver", "0.0.0")
    monkeypatch.setattr(rdma_facts, "open", einval_open, raising=False)

    [device] = _scan(root)

    assert (device["name"], device["fw_ver"], device["pci_address"]) == ("rxe0", None, None)
    [p] = device["ports"]
    assert [(g["index"], g["type"], g["roce_version"], g["ndev"]) for g in p["gids"]] == [
        (0, "RoCE v2", "v2", "eth0"),
        (1, None, None, "eth0"),
        (2, None, None, "eth0"),
    ]
    assert p["roce_versions"] == ["v2"]
    assert p["netdevs"] == ["eth0"]


def test_a_port_without_files_reports_nulls(tmp_path: Path) -> None:
    (tmp_path / "infiniband/siw0/ports/1").mkdir(parents=True)

    [device] = _scan(tmp_path / "infiniband")

    assert device == {
        "name": "siw0", "node_type": None, "fw_ver": None, "node_guid": None,
        "pci_address": None,
        "ports": [{"port": 1, "state": None, "phys_state": None, "link_layer": None,
                   "rate": None, "rate_gbps": None, "gids": [], "roce_versions": [],
                   "netdevs": []}],
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [("4: ACTIVE", "ACTIVE"), ("5: LinkUp", "LinkUp"), ("1: CA", "CA"), ("ACTIVE", "ACTIVE"),
     ("3: Disabled", "Disabled"), ("7: Phy Test", "Phy Test"), (None, None)],
)
def test_strip_number(text: str | None, expected: str | None) -> None:
    assert rdma_facts.strip_number(text) == expected


@pytest.mark.parametrize(
    ("gid_type", "expected"),
    [("IB/RoCE v1", "v1"), ("RoCE v2", "v2"), ("RoCE v1", "v1"), ("IB", None), (None, None)],
)
def test_roce_version(gid_type: str | None, expected: str | None) -> None:
    assert rdma_facts.roce_version(gid_type) == expected
